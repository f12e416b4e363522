"""Live trace collection (OTLP/HTTP) into canonical trace files."""

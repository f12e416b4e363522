"""faultfinder: which agent, at which step, caused a multi-agent run to fail."""

__version__ = "0.1.0"

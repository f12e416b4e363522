"""An example faultfinder plugin package: one module per kind of component.

``method`` (an attribution method), ``importer`` (a trace format), ``backend`` (a model
backend) and ``api`` (a model wire format for the recording proxy), each declared as an
entry point in ``pyproject.toml``. Nothing is imported here: faultfinder imports each
module only when its component is asked for.
"""

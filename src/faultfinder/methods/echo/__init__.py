"""ECHO (Banerjee et al., "Where Did It All Go Wrong? A Hierarchical Look into Multi-Agent
Error Attribution"): hierarchical context, objective analyst panel, consensus voting.

Importing this package registers the ``echo`` method and its presets (I1–I4, panel6,
llm-context). See docs/methods/echo.md.
"""

from faultfinder.methods.echo.config import PRESETS, EchoConfig
from faultfinder.methods.echo.method import EchoMethod

__all__ = ["PRESETS", "EchoConfig", "EchoMethod"]

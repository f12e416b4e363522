"""Attribution methods. Each lives in its own module and registers itself by name."""

from faultfinder.methods.base import Attribution, Method, MethodConfig, Verdict, run_method
from faultfinder.methods.registry import (
    available,
    create_method,
    get_method_class,
    needs_model,
    register,
)

__all__ = [
    "Attribution",
    "Method",
    "MethodConfig",
    "Verdict",
    "available",
    "create_method",
    "get_method_class",
    "needs_model",
    "register",
    "run_method",
]

"""Matplotlib for `report --plot` and `--reliability-plot`: the `plot` extra, loaded only
when a plot is asked for."""

from __future__ import annotations

from typing import Any

from faultfinder.errors import ConfigError


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the file-only Agg backend; a ConfigError saying what to
    install when matplotlib is not there."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "--plot and --reliability-plot draw with matplotlib, which is not installed: "
            "pip install 'faultfinder[plot]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt

"""Waiting in tests for something another thread or process does."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], seconds: float = 5.0) -> bool:
    """Poll ``condition`` every 50 ms until it is true or ``seconds`` have passed; whether
    it became true."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False

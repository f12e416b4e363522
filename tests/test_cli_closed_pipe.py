"""Output piped into a reader that stops early (``faultfinder report ... | head -1``).

Click turned the broken pipe into exit 1, which in faultfinder means "could not run", so
a ``set -o pipefail`` script saw a failure it could not tell from a missing file. The
command now ends quietly with 141 (128 + SIGPIPE), what a shell reports for any program
stopped that way."""

from __future__ import annotations

import os
import subprocess
import sys


def test_output_into_a_closed_pipe_ends_quietly_with_141() -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before anything is written
    with os.fdopen(write, "wb") as stdout:
        done = subprocess.run(
            [sys.executable, "-m", "faultfinder", "methods"],
            stdout=stdout,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    assert done.returncode == 141, done.stderr.decode()
    assert done.stderr == b""

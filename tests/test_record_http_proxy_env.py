"""A program recorded or replayed with HTTP_PROXY set in the user's environment reaches the
recording proxy on 127.0.0.1 directly.

The openai SDK (httpx) sends every host to the proxy HTTP_PROXY names, loopback included,
unless NO_PROXY names it: the program's calls went to the user's proxy, which cannot reach
this machine's loopback, and the run failed with connection errors (and handed that proxy
the calls, keys and all). ``record`` and ``replay`` now give the program a NO_PROXY that
names the loopback hosts beside the user's own."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import pytest

from faultfinder.loopback import past_http_proxy
from faultfinder.replay.session import SessionOptions, record_run
from faultfinder.testing import FakeOpenAIServer

PROGRAM = """
import openai
client = openai.OpenAI(max_retries=0, timeout=20)
reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
print("FINAL ANSWER:", reply.choices[0].message.content, flush=True)
"""


def _dead_port() -> int:
    """A loopback port nothing listens on: a proxy that refuses every connection."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_program_with_http_proxy_set_reaches_the_recording_proxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{_dead_port()}"
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(variable, dead)
    monkeypatch.setenv("NO_PROXY", "corp.example")
    monkeypatch.delenv("no_proxy", raising=False)
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    with FakeOpenAIServer(reply="42") as upstream:
        outcome = asyncio.run(
            record_run(
                [sys.executable, str(program)],
                upstream.base_url,
                tmp_path / "runs",
                run_id="proxied",
                ground_truth="42",
                options=SessionOptions(echo=False, timeout=60),
            )
        )
    assert outcome.child.exit_code == 0, outcome.child.stderr[-2000:]
    assert len(outcome.trace.steps) == 1


def test_the_users_own_exceptions_are_kept_and_nothing_changes_without_a_proxy() -> None:
    env = {"https_proxy": "http://proxy.corp:3128", "NO_PROXY": "a.corp", "no_proxy": "b.corp"}
    assert past_http_proxy(env) == {
        "NO_PROXY": "a.corp,b.corp,127.0.0.1,localhost,::1",
        "no_proxy": "a.corp,b.corp,127.0.0.1,localhost,::1",
    }
    assert past_http_proxy({"NO_PROXY": "a.corp"}) == {}

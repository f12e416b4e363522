"""`faultfinder proxy` as a user runs it: a process started, used, then stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from faultfinder.testing import FakeOpenAIServer


def start_proxy(upstream: str, out: Path) -> tuple[subprocess.Popen[str], str]:
    """The proxy process and its base URL (read from the line it prints when ready)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "proxy", "--upstream", upstream,
         "--out", str(out), "--run-id", "r1", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "NO_COLOR": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    for line in proc.stderr:
        found = re.search(r"proxy on (\S+) ->", line)
        if found:
            return proc, found.group(1)
    raise AssertionError(f"the proxy stopped before it was ready (exit {proc.wait()})")


def interrupt(proc: subprocess.Popen[str]) -> str:
    """Ctrl-C, then what the proxy printed after it."""
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=30)
    assert proc.returncode == 0, rest
    return rest


def test_ctrl_c_writes_the_trace_of_what_was_recorded(tmp_path: Path) -> None:
    with FakeOpenAIServer(reply="The answer is 4.") as upstream:
        proc, base_url = start_proxy(upstream.base_url, tmp_path)
        try:
            request = urllib.request.Request(
                f"{base_url}/chat/completions",
                data=json.dumps(
                    {"model": "m", "messages": [{"role": "user", "content": "2+2?"}]}
                ).encode(),
                headers={"Content-Type": "application/json", "X-Faultfinder-Agent": "Solver"},
            )
            with urllib.request.urlopen(request, timeout=30) as reply:
                assert json.load(reply)["choices"][0]["message"]["content"] == "The answer is 4."
        finally:
            rest = interrupt(proc)
    trace_path = tmp_path / "r1" / "trace.json"
    assert f"wrote {trace_path} (1 step)" in rest
    trace = json.loads(trace_path.read_text())
    assert [s["agent"] for s in trace["steps"]] == ["Solver"]


def test_ctrl_c_with_nothing_recorded_says_so(tmp_path: Path) -> None:
    proc, _ = start_proxy("http://127.0.0.1:9/v1", tmp_path)
    rest = interrupt(proc)
    assert f"no model call was recorded, so {tmp_path / 'r1'} has no trace.json" in rest
    assert not (tmp_path / "r1" / "trace.json").exists()


@pytest.mark.parametrize("http_proxy", [None, "http://proxy.corp.example:3128"])
def test_it_prints_every_variable_record_gives_the_program(
    tmp_path: Path, http_proxy: str | None
) -> None:
    """The `export` lines are the API variables `record` sets (`child.api_env`), for
    every API the proxy serves: a Claude program reading ANTHROPIC_API_URL first, or an
    OpenAI one reading OPENAI_API_BASE, is pointed at the proxy too; and faultfinder's
    own (`child.run_env`): a tool that stays dry in a replay finds the run directory.
    With an HTTP proxy in the environment, the NO_PROXY `record` gives the program too."""
    from faultfinder.loopback import past_http_proxy
    from faultfinder.replay.child import api_env, run_env

    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    env["NO_COLOR"] = "1"
    if http_proxy:
        env["HTTPS_PROXY"] = http_proxy
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "proxy", "--upstream", "http://127.0.0.1:9/v1",
         "--out", str(tmp_path), "--run-id", "r1", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    base_url, exports = "", []
    for line in proc.stderr:
        found = re.search(r"proxy on (\S+) ->", line)
        base_url = found.group(1) if found else base_url
        if line.strip().startswith("export "):
            exports.append(line.strip())
        if "recording into" in line:
            break
    interrupt(proc)
    root = base_url.removesuffix("/v1")
    given = {**api_env(base_url, root), **run_env(root, tmp_path / "r1"), **past_http_proxy(env)}
    assert exports == [f"export {k}={shlex.quote(v)}" for k, v in given.items()]
    assert {e.partition("=")[0] for e in exports} == {
        "export OPENAI_BASE_URL",
        "export OPENAI_API_BASE",
        "export ANTHROPIC_BASE_URL",
        "export ANTHROPIC_API_URL",
        "export FAULTFINDER_PROXY_URL",
        "export FAULTFINDER_RUN_DIR",
    } | ({"export NO_PROXY", "export no_proxy"} if http_proxy else set())


@pytest.mark.parametrize(
    ("command", "upstream", "reason"),
    [
        ("record", "http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("proxy", "http://[::1", "not a valid URL (Invalid IPv6 URL)"),
        ("record", "http://127.0.0.1:99999999/v1", "not a valid URL (Port out of range"),
        ("record", "https://user:sk-Qz81Lm@:8080/v1", "a URL that names no host"),
    ],
)
def test_an_upstream_that_is_not_a_url_is_refused(
    tmp_path: Path, command: str, upstream: str, reason: str
) -> None:
    """`record`/`proxy --upstream 'http://[::1'` stopped with a ValueError traceback from
    the loopback check; a port out of range started the proxy and answered every call
    with an internal error. Now: a usage error (exit 2) naming the option before anything
    runs, the reason, never the URL."""
    from click.testing import CliRunner

    from faultfinder.cli import main

    program = ["--", sys.executable, "-c", "pass"] if command == "record" else []
    args = [command, "--upstream", upstream, "--out", str(tmp_path / "runs"), *program]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert f"Error: Invalid value for '--upstream': {reason}" in result.output
    assert "sk-Qz81Lm" not in result.output


def test_a_run_directory_naming_an_upstream_that_is_not_a_url_is_refused() -> None:
    """An upstream read from a run directory (--trust-run) is no command-line value: the
    proxy refuses it as it starts, exit 1 with the reason (ConfigError)."""
    from faultfinder.errors import ConfigError
    from faultfinder.replay.proxy_upstream import check_upstream

    with pytest.raises(ConfigError, match=r"the upstream is not a valid URL \(Invalid IPv6"):
        check_upstream("http://[::1")
    with pytest.raises(ConfigError, match="the upstream is a URL that names no host"):
        check_upstream("https://user:sk-Qz81Lm@:8080/v1")

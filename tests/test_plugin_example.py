"""The example plugin package (examples/faultfinder-plugin-example/), installed and driven
through the CLI, so it cannot rot.

The package is built and installed by pip (hatchling, no build isolation, no index:
offline) into a temporary directory; ``faultfinder`` then runs in a fresh process that
sees it, as tests/test_plugins.py runs the doc's single-module examples. Each component
is used by the commands it is for: the method by ``methods`` and ``attribute``, the
importer by ``import``, the backend by ``attribute --model plainchat:...`` against a
loopback stand-in of the made-up PlainChat API, and the model-API adapter by ``record``
and ``replay`` of a program calling that stand-in. No network, no real model.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from test_plugins import DEMO_TRACE, DOC, doc_example, doc_section, faultfinder, pip_install

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "faultfinder-plugin-example"
PACKAGE = EXAMPLE / "faultfinder_plugin_example"
DIST = "faultfinder-plugin-example"
ORIGIN = f"(plugin {DIST} 0.1.0)"

ANSWER = "Agent Name: WebSurfer\nStep Number: 3\nReason for Mistake: it read 2022 as 2023."


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed into a site directory (built from a copy: nothing is
    written into the repository)."""
    base = tmp_path_factory.mktemp("example")
    source = base / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("__pycache__", "build"))
    pip_install(source, base / "site")
    return base / "site"


class PlainChat:
    """A loopback stand-in of the PlainChat API (plainchat.md): every request is kept, and
    answered with ``text``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # the name http.server calls
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                owner.requests.append((self.path, dict(self.headers.items()), body))
                reply = {
                    "id": f"pc-{len(owner.requests)}",
                    "model": body.get("model"),
                    "text": owner.text,
                    "stop": "end",
                    "tokens": {"in": 40, "out": 7},
                }
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def plainchat() -> Iterator[PlainChat]:
    fake = PlainChat(ANSWER)
    thread = threading.Thread(target=fake.server.serve_forever, daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def test_one_module_per_kind_of_plugin_the_doc_lists() -> None:
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    groups = project["entry-points"]
    # Every group docs/plugins.md's table lists has its one component in the example.
    lines = DOC.read_text(encoding="utf-8").splitlines()
    listed = {ln.split("`")[1] for ln in lines if ln.startswith("| `faultfinder.")}
    assert set(groups) == listed
    modules = set()
    for points in groups.values():
        ((_, target),) = points.items()
        module = target.partition(":")[0]
        assert module.startswith("faultfinder_plugin_example.")
        modules.add(module)
        assert (EXAMPLE / (module.replace(".", "/") + ".py")).is_file(), target
    assert len(modules) == len(groups)
    # The doc's walk-through shows these entry points, as declared.
    (shown,) = re.findall(r"```toml\n(.*?)```", doc_section("The example package"), re.S)
    assert tomllib.loads(shown)["project"]["entry-points"] == groups
    # The doc's single-module examples are the package's modules, word for word.
    assert doc_example("A method plugin")[1] == (PACKAGE / "method.py").read_text()
    assert doc_example("An importer plugin")[1] == (PACKAGE / "importer.py").read_text()


def test_the_method_runs_on_the_backend(site: Path, plainchat: PlainChat, tmp_path: Path) -> None:
    listed = faultfinder(site, "methods")
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith("one-question")]
    assert ORIGIN in line
    # --model's help names the kind (help text wraps anywhere: compared without spaces).
    shown = "".join(faultfinder(site, "attribute", "--help").stdout.split())
    assert "plainchat:plainchat:MODEL" + ORIGIN.replace(" ", "") in shown

    args = (
        "attribute", str(DEMO_TRACE), "--method", "one-question", "--model", "plainchat:tiny-1",
        "--base-url", plainchat.url, "--api-key-env", "EXAMPLE_KEY", "--json",
    )  # fmt: skip
    refused = faultfinder(site, *args, "--cache", "none")
    assert refused.returncode == 1 and "No API key for plainchat:tiny-1" in refused.stderr
    assert "EXAMPLE_KEY" in refused.stderr and not plainchat.requests

    cache = tmp_path / "cache.sqlite"
    env = {"EXAMPLE_KEY": "pc-secret-1"}
    run = faultfinder(site, *args, "--cache", str(cache), env=env)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout[run.stdout.index("{") :])
    assert (result["status"], result["agent"], result["step"]) == ("ok", "WebSurfer", 3)
    assert result["model"] == "plainchat:tiny-1"
    assert result["usage"]["prompt_tokens"] == 40 and result["usage"]["completion_tokens"] == 7
    ((path, headers, body),) = plainchat.requests
    assert path == "/v1/plainchat/generate" and headers["x-api-key"] == "pc-secret-1"
    assert body["model"] == "tiny-1" and body["turns"][-1]["role"] == "user"
    assert "WebSurfer" in body["turns"][-1]["text"]

    # The response cache serves the same question again, whatever the backend.
    again = faultfinder(site, *args, "--cache", str(cache), env=env)
    assert again.returncode == 0, again.stderr
    assert len(plainchat.requests) == 1


TRANSCRIPT = "TASK: What is 2 + 3?\nPlanner: Solver, add them.\nSolver: 6.\n"


def test_the_importer_reads_a_transcript(site: Path, tmp_path: Path) -> None:
    source = tmp_path / "run.transcript"
    source.write_text(TRANSCRIPT, encoding="utf-8")
    out = tmp_path / "run.json"
    imported = faultfinder(site, "import", str(source), "--out", str(out))
    assert imported.returncode == 0, imported.stderr
    trace = json.loads(out.read_text())
    assert [s["agent"] for s in trace["steps"]] == ["Planner", "Solver"]
    assert trace["source"]["format"] == "transcript"


CLIENT = """
import json, os, urllib.request
base = os.environ["PLAINCHAT_BASE_URL"]
body = {"model": "tiny-1", "system": "You add numbers.",
        "turns": [{"role": "user", "text": "What is 2 + 3?"}], "max_tokens": 20}
headers = {"content-type": "application/json", "x-api-key": "pc-client-key-7"}
request = urllib.request.Request(base + "/plainchat/generate", json.dumps(body).encode(), headers)
with urllib.request.urlopen(request) as reply:
    print("ANSWER", json.load(reply)["text"])
"""


def test_record_and_replay_speak_the_plugin_api(
    site: Path, plainchat: PlainChat, tmp_path: Path
) -> None:
    shown = "".join(faultfinder(site, "record", "--help").stdout.split())
    assert "installedplugins:plainchat" + ORIGIN.replace(" ", "") in shown

    plainchat.text = "5"
    client = tmp_path / "client.py"
    client.write_text(CLIENT, encoding="utf-8")
    runs = tmp_path / "runs"
    recorded = faultfinder(
        site, "record", "--upstream", plainchat.url, "--out", str(runs), "--run-id", "r1",
        "--", sys.executable, str(client),
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert "ANSWER 5" in recorded.stdout
    ((path, headers, _),) = plainchat.requests
    assert path == "/v1/plainchat/generate" and headers["x-api-key"] == "pc-client-key-7"
    lines = (runs / "r1" / "steps.jsonl").read_text()
    assert "pc-client-key-7" not in lines  # the key reached the upstream, not the run
    call = json.loads(lines.splitlines()[0])
    assert call["api"] == "plainchat"
    trace = json.loads((runs / "r1" / "trace.json").read_text())
    (step,) = trace["steps"]
    assert step["content"] == "5"
    assert step["input_messages"][-1] == {"role": "user", "content": "What is 2 + 3?"}

    # Replayed from the recording alone: the stand-in is not asked again.
    replayed = faultfinder(site, "replay", str(runs / "r1"), "--", sys.executable, str(client))
    assert replayed.returncode == 0, replayed.stderr
    assert "ANSWER 5" in replayed.stdout and len(plainchat.requests) == 1


def test_proxy_prints_the_plugin_api_variables_and_records_its_calls(
    site: Path, plainchat: PlainChat, tmp_path: Path
) -> None:
    """`faultfinder proxy` tells the user every variable `record` sets for the program,
    the plugin API's `client_env` included; a program given those lines is recorded."""
    plainchat.text = "5"
    env = {**os.environ, "NO_COLOR": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    runs = tmp_path / "runs"
    proc = subprocess.Popen(
        [sys.executable, "-m", "faultfinder", "proxy", "--upstream", plainchat.url,
         "--out", str(runs), "--run-id", "p1", "--port", "0"],
        stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
    )  # fmt: skip
    exports: dict[str, str] = {}
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if line.strip().startswith("export "):
                key, _, value = line.strip().removeprefix("export ").partition("=")
                exports[key] = value
            if "recording into" in line:
                break
        else:
            raise AssertionError(f"the proxy stopped before it was ready (exit {proc.wait()})")
        root = exports["ANTHROPIC_BASE_URL"]
        assert exports == {
            "OPENAI_BASE_URL": root + "/v1",
            "OPENAI_API_BASE": root + "/v1",
            "ANTHROPIC_BASE_URL": root,
            "ANTHROPIC_API_URL": root,
            "PLAINCHAT_BASE_URL": root + "/v1",  # the plugin adapter's client_env
            "FAULTFINDER_PROXY_URL": root,
            "FAULTFINDER_RUN_DIR": str(runs.resolve() / "p1"),
        }
        client = tmp_path / "client.py"
        client.write_text(CLIENT, encoding="utf-8")
        done = subprocess.run(
            [sys.executable, str(client)],
            capture_output=True, text=True, env={**os.environ, **exports}, timeout=60,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "ANSWER 5" in done.stdout
    finally:
        proc.send_signal(signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    assert f"wrote {runs / 'p1' / 'trace.json'} (1 step)" in rest
    ((path, _, _),) = plainchat.requests
    assert path == "/v1/plainchat/generate"
    call = json.loads((runs / "p1" / "steps.jsonl").read_text().splitlines()[0])
    assert call["api"] == "plainchat"


def test_the_example_package_passes_the_projects_lint() -> None:
    """The example is code people copy: it meets the same ruff rules as src/ (the test
    command lints src, tests and bench; this covers examples/)."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is in the dev extra")
    for command in ([ruff, "check", str(EXAMPLE)], [ruff, "format", "--check", str(EXAMPLE)]):
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
        assert done.returncode == 0, done.stdout + done.stderr

"""The plugins of docs/plugins.md, installed as real distributions and used by the CLI.

The example method's and the example importer's ``pyproject.toml`` and module are taken
from docs/plugins.md as written, built by pip (hatchling, no build isolation, no index:
offline) and installed into a temporary directory. ``faultfinder`` then runs in a fresh
process with that directory on its path, where ``importlib.metadata`` finds the plugins'
entry points as it finds any installed package's. A plugin that raises on import is
installed the same way: the commands warn, naming it, and go on.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plugins.md"
DEMO_TRACE = ROOT / "src" / "faultfinder" / "data" / "demo_trace.json"
OTLP_FILE = ROOT / "tests" / "fixtures" / "importers" / "otlp" / "genai.json"

_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\s*$", re.M | re.S)


def doc_section(title: str) -> str:
    """The text of the '## title' section of docs/plugins.md."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def doc_example(title: str) -> tuple[str, str]:
    """The one ```toml and the one ```python block of a section, exactly as written."""
    blocks: dict[str, list[str]] = {}
    for match in _FENCE.finditer(doc_section(title)):
        blocks.setdefault(match.group(1), []).append(match.group(2))
    assert len(blocks.get("toml", [])) == 1, f"'{title}' must hold one toml block"
    assert len(blocks.get("python", [])) == 1, f"'{title}' must hold one python block"
    return blocks["toml"][0], blocks["python"][0]


@dataclass
class Example:
    """One example plugin as its pyproject.toml declares it, and where it was installed."""

    name: str
    version: str
    group: str
    points: dict[str, str]
    site: Path


def write_project(root: Path, pyproject: str, module: str, site: Path) -> tuple[Path, Example]:
    """The project directory: its pyproject.toml, and the module its one entry point names."""
    project = tomllib.loads(pyproject)["project"]
    ((group, points),) = project["entry-points"].items()
    ((_, target),) = points.items()
    module_name = target.partition(":")[0]
    root.mkdir(parents=True)
    (root / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    (root / f"{module_name}.py").write_text(module, encoding="utf-8")
    return root, Example(project["name"], project["version"], group, points, site)


def pip_install(project: Path, target: Path) -> None:
    """Build and install ``project`` into ``target`` offline, as a real distribution."""
    pytest.importorskip("hatchling", reason="building the example plugins needs the dev extra")
    command = [
        sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target), str(project),
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def faultfinder(
    site: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``faultfinder ARGS`` in a new process that sees the packages installed in ``site``,
    run in ``site``'s parent directory (what a command writes stays in the test's files),
    with ``env``'s variables added to the environment."""
    return _in_site(site, ["-m", "faultfinder", *args], cwd, env)


def hand_installed(site: Path, dist: str, entry_points: str, modules: dict[str, str]) -> Path:
    """``site`` holding the distribution ``dist`` 0.1.0 as an installer leaves it (its
    dist-info with METADATA and ``entry_points``) and its ``modules`` by file stem: a
    plugin that is installed, with no build."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(entry_points, encoding="utf-8")
    for stem, text in modules.items():
        (site / f"{stem}.py").write_text(text, encoding="utf-8")
    return site


def python(site: Path, code: str) -> subprocess.CompletedProcess[str]:
    """``python -c CODE`` in a new process that sees the packages installed in ``site``,
    run in ``site``'s parent directory."""
    return _in_site(site, ["-c", textwrap.dedent(code)])


def _in_site(
    site: Path, argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), full.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd or site.parent,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Example]:
    """Both examples of docs/plugins.md installed into one site directory."""
    base = tmp_path_factory.mktemp("plugins")
    site = base / "site"
    found: dict[str, Example] = {}
    for key, title in (("method", "A method plugin"), ("importer", "An importer plugin")):
        project, found[key] = write_project(base / key, *doc_example(title), site)
        pip_install(project, site)
    return found


def test_the_doc_examples_declare_what_the_doc_says(
    examples: dict[str, Example],
) -> None:
    method, importer = examples["method"], examples["importer"]
    assert method.group == "faultfinder.methods" and list(method.points) == ["one-question"]
    assert importer.group == "faultfinder.importers" and list(importer.points) == ["transcript"]
    site = method.site
    # Installed as distributions with metadata, not as loose files on the path.
    assert {p.name for p in site.glob("*.dist-info")} == {
        "faultfinder_one_question-0.1.0.dist-info",
        "faultfinder_transcript-0.1.0.dist-info",
    }


def test_methods_lists_the_plugin_method_with_its_origin(
    examples: dict[str, Example],
) -> None:
    site = examples["method"].site
    listed = faultfinder(site, "methods")
    assert listed.returncode == 0, listed.stderr
    lines = {line.split()[0]: line for line in listed.stdout.splitlines() if line.strip()}
    origin = f"(plugin {examples['method'].name} {examples['method'].version})"
    assert origin in lines["one-question"] and "root-cause" in lines["one-question"]
    assert "(plugin" not in lines["all-at-once"]  # built-ins are shown plainly
    assert "warning" not in listed.stderr

    described = faultfinder(site, "methods", "one-question")
    assert described.returncode == 0, described.stderr
    assert "focus" in described.stdout and "What the model is asked to find." in described.stdout
    assert "one-question:root-cause" in described.stdout


def test_attribute_runs_the_plugin_method_on_a_trace(
    examples: dict[str, Example], tmp_path: Path
) -> None:
    site = examples["method"].site
    replies = tmp_path / "replies.json"
    replies.write_text(
        json.dumps(
            [
                "Agent Name: WebSurfer\nStep Number: 3\n"
                "Reason for Mistake: it read the 2022 loans as 2023's."
            ]
        )
    )
    run = faultfinder(
        site, "attribute", str(DEMO_TRACE), "--method", "one-question:root-cause",
        "--model", f"scripted:{replies}", "--cache", "none", "--json",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout[run.stdout.index("{") :])
    assert (result["status"], result["agent"], result["step"]) == ("ok", "WebSurfer", 3)
    assert result["method"] == "one-question:root-cause"
    assert result["prompt_version"] == "one-question-1"
    assert result["config"]["focus"].startswith("the root cause")
    assert result["usage"]["calls"] == 1
    assert "2022 loans" in result["reason"]

    shown = faultfinder(
        site, "attribute", str(DEMO_TRACE), "--method", "one-question",
        "--model", f"scripted:{replies}", "--cache", "none",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "WebSurfer" in shown.stdout


TRANSCRIPT = """TASK: What is 2 + 3?
Planner: Solver, add the numbers.
Solver: 2 + 3 = 6.
    (checked twice)
Planner: FINAL ANSWER: 6
"""


def test_import_reads_the_plugin_format(examples: dict[str, Example], tmp_path: Path) -> None:
    site = examples["importer"].site
    source = tmp_path / "run.transcript"
    source.write_text(TRANSCRIPT, encoding="utf-8")
    out = tmp_path / "run.json"
    imported = faultfinder(site, "import", str(source), "--out", str(out))  # detected
    assert imported.returncode == 0, imported.stderr
    trace = json.loads(out.read_text())
    assert trace["task"] == "What is 2 + 3?"
    assert [s["agent"] for s in trace["steps"]] == ["Planner", "Solver", "Planner"]
    assert trace["steps"][1]["content"] == "2 + 3 = 6.\n(checked twice)"
    assert trace["source"]["format"] == "transcript"

    named = faultfinder(site, "import", str(source), "--format", "transcript")
    assert named.returncode == 0, named.stderr
    assert "run: 3 steps, 2 agents" in named.stdout
    assert "transcript:" in faultfinder(site, "import", "--help").stdout

    # Every command that reads traces reads the format.
    attributed = faultfinder(
        site, "attribute", str(source), "--method", "baseline:first-speaker", "--cache", "none"
    )
    assert attributed.returncode == 0, attributed.stderr
    assert "Planner" in attributed.stdout

    # Bad input is one error naming the file and line, exit 1.
    bad = tmp_path / "bad.transcript"
    bad.write_text("TASK: x\nPlanner: fine\nno colon on this line\n", encoding="utf-8")
    failed = faultfinder(site, "import", str(bad), "--format", "transcript")
    assert failed.returncode == 1
    assert f"{bad}:3" in failed.stderr and "Traceback" not in failed.stderr


def test_the_doc_importer_refuses_bytes_and_directories_in_one_line(
    examples: dict[str, Example], tmp_path: Path
) -> None:
    site = examples["importer"].site
    latin1 = tmp_path / "latin1.transcript"
    latin1.write_bytes(b"TASK: x\nPlanner: caf\xe9\n")
    for args in ((), ("--format", "transcript")):
        failed = faultfinder(site, "import", str(latin1), *args)
        assert failed.returncode == 1, failed.stderr
        assert f"{latin1}:2" in failed.stderr and "not UTF-8" in failed.stderr
        assert "Traceback" not in failed.stderr

    # A file with a byte-order mark and Windows line ends reads as any other.
    crlf = tmp_path / "crlf.transcript"
    crlf.write_bytes(b"\xef\xbb\xbf" + TRANSCRIPT.replace("\n", "\r\n").encode())
    read = faultfinder(site, "import", str(crlf))
    assert read.returncode == 0 and "crlf: 3 steps, 2 agents" in read.stdout, read.stderr

    folder = tmp_path / "runs.transcript"
    folder.mkdir()
    script = tmp_path / "load_folder.py"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from faultfinder.errors import TraceFormatError\n"
        "from faultfinder.traces.importers import get_importer\n"
        "try:\n"
        "    get_importer('transcript').load(Path(sys.argv[1]))\n"
        "except TraceFormatError as exc:\n"
        "    print(exc)\n",
        encoding="utf-8",
    )
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    refused = subprocess.run(
        [sys.executable, str(script), str(folder)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert refused.returncode == 0, refused.stderr
    assert str(folder) in refused.stdout and "directory" in refused.stdout


BROKEN_PYPROJECT = """[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "ff-broken-plugin"
version = "0.0.1"

[project.entry-points."faultfinder.methods"]
broken-method = "ff_broken_plugin:Method"
random = "ff_broken_plugin:Method"

[project.entry-points."faultfinder.importers"]
broken-format = "ff_broken_plugin:Importer"
"""

BROKEN_MODULE = 'raise RuntimeError("the plugin exploded on import")\n'


@pytest.fixture(scope="module")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("broken")
    project = base / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(BROKEN_PYPROJECT, encoding="utf-8")
    (project / "ff_broken_plugin.py").write_text(BROKEN_MODULE, encoding="utf-8")
    pip_install(project, base / "site")
    return base / "site"


def test_a_broken_plugin_is_a_warning_naming_it_not_a_crash(broken_site: Path) -> None:
    listed = faultfinder(broken_site, "methods")
    assert listed.returncode == 0, listed.stderr
    assert "all-at-once" in listed.stdout and "broken-method" not in listed.stdout
    warning = next(line for line in listed.stderr.splitlines() if "broken-method" in line)
    assert "ff-broken-plugin" in warning and "the plugin exploded on import" in warning
    # A plugin may not take a built-in's name: the built-in stays, with a warning.
    assert any("random" in ln and "ff-broken-plugin" in ln for ln in listed.stderr.splitlines())
    assert "Traceback" not in listed.stderr

    # Detection goes on past the broken importer; the warning names it.
    imported = faultfinder(broken_site, "import", str(OTLP_FILE))
    assert imported.returncode == 0, imported.stderr
    assert "broken-format" in imported.stderr and "ff-broken-plugin" in imported.stderr

    # The built-in 'random' is still the built-in.
    floor = faultfinder(
        broken_site, "attribute", str(DEMO_TRACE), "--method", "random", "--cache", "none"
    )
    assert floor.returncode == 0, floor.stderr

    # Asking for the broken one by name is a one-line error (exit 1) naming its package.
    asked = faultfinder(broken_site, "attribute", str(DEMO_TRACE), "--method", "broken-method")
    assert asked.returncode == 1
    assert "ff-broken-plugin" in asked.stderr and "Traceback" not in asked.stderr

"""Plugins that misbehave, installed as real distributions (as tests/test_plugins.py
installs the doc's examples) and run in a fresh process.

One distribution, ``ff-audit-plugin``, declares what the plugin audit found going wrong:
an importer and a model-API adapter whose names sort before the built-ins' and that would
take their files and requests, an importer whose ``detect()`` raises, a method registered
under a name that is not its class's, a backend kind, and a module that raises on import
behind an importer and a model API.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_plugins import DEMO_TRACE, OTLP_FILE, faultfinder, pip_install, python

DIST = "ff-audit-plugin"

PYPROJECT = f"""[build-system]
requires = ["hatchling>=1.24"]
build-backend = "hatchling.build"

[project]
name = "{DIST}"
version = "0.0.1"

[tool.hatch.build.targets.wheel]
include = ["ff_audit_plugin.py", "ff_audit_broken.py", "ff_audit_cloud.py"]

[project.entry-points."faultfinder.importers"]
aaa-greedy = "ff_audit_plugin:Greedy"
aa-crashy = "ff_audit_plugin:Crashy"
brokenfmt = "ff_audit_broken:Importer"

[project.entry-points."faultfinder.apis"]
a-gateway = "ff_audit_plugin:Gateway"
brokenapi = "ff_audit_broken:Adapter"

[project.entry-points."faultfinder.methods"]
misnamed = "ff_audit_plugin:Misnamed"

[project.entry-points."faultfinder.backends"]
zzcloud = "ff_audit_cloud:make_backend"
"""

MODULE = '''
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict
from faultfinder.replay.apis.chat import ChatAdapter
from faultfinder.traces.schema import SourceInfo, Step, Trace


class Greedy:
    """Claims every .json file: it must never be asked before a built-in."""

    name: ClassVar[str] = "aaa-greedy"
    summary: ClassVar[str] = "claims every .json file"

    def detect(self, path: Path) -> bool:
        return path.is_file() and path.suffix == ".json"

    def load(self, path: Path, **options: Any) -> list[Trace]:
        step = Step(index=0, agent="Greedy", content="x")
        source = SourceInfo(format=self.name, path=str(path))
        return [Trace(id="GREEDY-" + path.stem, task="t", steps=[step], source=source)]


class Crashy:
    """detect() has a bug."""

    name: ClassVar[str] = "aa-crashy"
    summary: ClassVar[str] = "detect raises"

    def detect(self, path: Path) -> bool:
        raise KeyError("boom in detect")

    def load(self, path: Path, **options: Any) -> list[Trace]:
        return []


class Gateway(ChatAdapter):
    """Another API served under the path Chat Completions uses."""

    name = "a-gateway"


class Misnamed(MethodBase):
    name: ClassVar[str] = "other-name"
    summary: ClassVar[str] = "registered under another name"
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    needs_model: ClassVar[bool] = False

    async def attribute(self, trace: Trace, llm: Any) -> Verdict:
        return Verdict(agent=trace.steps[0].agent, step=0)
'''

BROKEN = 'raise RuntimeError("the audit plugin exploded on import")\n'

CLOUD = "def make_backend(name, **options):\n    raise NotImplementedError\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("audit")
    project = base / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    (project / "ff_audit_plugin.py").write_text(MODULE, encoding="utf-8")
    (project / "ff_audit_broken.py").write_text(BROKEN, encoding="utf-8")
    (project / "ff_audit_cloud.py").write_text(CLOUD, encoding="utf-8")
    pip_install(project, base / "site")
    return base / "site"


def lines_naming(text: str, word: str) -> list[str]:
    return [line for line in text.splitlines() if word in line]


def assert_one_line_output(stderr: str) -> None:
    """No raw Python warning (file:line: PluginWarning + source line), no traceback."""
    assert "PluginWarning" not in stderr and "Traceback" not in stderr, stderr


def test_built_in_importers_are_asked_before_plugins(site: Path, tmp_path: Path) -> None:
    imported = faultfinder(site, "import", str(OTLP_FILE))  # aaa-greedy claims any .json
    assert imported.returncode == 0, imported.stderr
    assert "GREEDY" not in imported.stdout and "1 trace(s)" in imported.stdout

    listed = python(
        site,
        """
        from faultfinder.traces.importers import importers
        print(" ".join(importers()))
        """,
    )
    assert listed.returncode == 0, listed.stderr
    names = listed.stdout.split()
    assert names[:2] == ["ag2", "generic"] and names[-2:] == ["aa-crashy", "aaa-greedy"]

    # The plugin still reads what no built-in recognises, and what it is named for.
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}', encoding="utf-8")
    assert "GREEDY-other" in faultfinder(site, "import", str(other)).stdout
    named = faultfinder(site, "import", str(OTLP_FILE), "--format", "aaa-greedy")
    assert named.returncode == 0 and "GREEDY-genai" in named.stdout, named.stderr


def test_a_plugin_whose_detect_raises_is_skipped_with_one_warning(
    site: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "runs"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.json").write_text('{"hello": 1}', encoding="utf-8")
    run = faultfinder(site, "import", str(folder))
    assert run.returncode == 0, run.stderr
    # aa-crashy is asked before aaa-greedy: its error skips it, detection goes on.
    assert [ln.split(":")[0] for ln in run.stdout.splitlines()[:3]] == [
        "GREEDY-a",
        "GREEDY-b",
        "GREEDY-c",
    ]
    (warning,) = lines_naming(run.stderr, "aa-crashy")  # once, not once per file
    assert warning.startswith("warning: ") and DIST in warning
    assert "detect()" in warning and "KeyError" in warning and "boom in detect" in warning
    assert_one_line_output(run.stderr)

    # A built-in format is still detected (built-ins are asked before the plugins).
    otlp = faultfinder(site, "import", str(OTLP_FILE))
    assert otlp.returncode == 0 and "aa-crashy" not in otlp.stderr, otlp.stderr


def test_a_plugin_api_adapter_does_not_take_a_built_in_s_requests(site: Path) -> None:
    run = python(
        site,
        """
        import faultfinder.replay.apis as apis
        print(apis.adapter_for("POST", "/v1/chat/completions").name)
        print(" ".join(a.name for a in apis.ADAPTERS))
        """,
    )
    assert run.returncode == 0, run.stderr
    handler, names = run.stdout.splitlines()
    assert handler == "chat"
    assert names.split() == ["chat", "responses", "messages", "a-gateway"]
    assert lines_naming(run.stderr, "brokenapi")  # skipped, with its warning


def test_importing_the_api_adapters_loads_no_plugin(site: Path) -> None:
    run = python(
        site,
        """
        import sys
        import faultfinder.cli.record_cmd, faultfinder.replay.apis, faultfinder.replay.session
        print(sorted(m for m in sys.modules if m.startswith("ff_audit")))
        """,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]" and run.stderr == ""


@pytest.mark.parametrize(
    "args",
    [
        ("import", "--help"),
        ("record", "--help"),
        ("proxy", "--help"),
        ("ui", "--help"),
        ("collect", "--help"),
        ("attribute", "--help"),
        ("import", str(OTLP_FILE)),
        ("methods",),
    ],
)
def test_broken_plugin_warnings_are_single_lines_once(site: Path, args: tuple[str, ...]) -> None:
    run = faultfinder(site, *args)
    assert run.returncode == 0, run.stderr
    assert_one_line_output(run.stderr)
    for name in ("brokenfmt", "brokenapi"):
        shown = lines_naming(run.stderr, name)
        assert len(shown) <= 1, run.stderr
        for line in shown:
            assert line.startswith("warning: ") and DIST in line and "exploded" in line
    if args == ("import", "--help"):  # it lists the formats: the broken one is reported
        assert len(lines_naming(run.stderr, "brokenfmt")) == 1
        assert "aaa-greedy: claims every .json file" in " ".join(run.stdout.split())


def test_record_reports_a_broken_api_plugin_once_in_one_line(site: Path, tmp_path: Path) -> None:
    run = faultfinder(
        site, "record", "--out", str(tmp_path / "recs"), "--upstream", "http://127.0.0.1:9",
        "--", sys.executable, "-c", "pass",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert_one_line_output(run.stderr)
    (line,) = lines_naming(run.stderr, "brokenapi")
    assert line.startswith("warning: ") and DIST in line


def test_naming_a_broken_format_is_one_error_line(site: Path) -> None:
    run = faultfinder(site, "import", str(OTLP_FILE), "--format", "brokenfmt")
    assert run.returncode == 1
    assert_one_line_output(run.stderr)
    (line,) = lines_naming(run.stderr, "brokenfmt")
    assert line.startswith("Error: ") and DIST in line


def test_a_method_registered_under_another_name_is_refused_everywhere(site: Path) -> None:
    listed = faultfinder(site, "methods")
    assert listed.returncode == 0, listed.stderr
    assert "misnamed" not in listed.stdout and "other-name" not in listed.stdout
    (warning,) = lines_naming(listed.stderr, "misnamed")
    assert warning.startswith("warning: ") and DIST in warning and "'other-name'" in warning

    unknown = faultfinder(site, "attribute", str(DEMO_TRACE), "--method", "nope")
    assert unknown.returncode == 1
    error = next(ln for ln in unknown.stderr.splitlines() if "Available:" in ln)
    assert "misnamed" not in error.partition("Available:")[2] and "random" in error

    named = faultfinder(site, "attribute", str(DEMO_TRACE), "--method", "misnamed")
    assert named.returncode == 1
    assert "calls itself 'other-name'" in named.stderr and "Traceback" not in named.stderr

    everywhere = python(
        site,
        """
        from faultfinder.registry import METHODS, methods
        print("misnamed" in methods(), "misnamed" in METHODS.available())
        """,
    )
    assert everywhere.stdout.split() == ["False", "False"], everywhere.stderr


def test_model_help_lists_plugin_backend_kinds_without_importing_them(site: Path) -> None:
    run = python(
        site,
        """
        import sys
        from click.testing import CliRunner
        from faultfinder.cli import main
        result = CliRunner().invoke(main, ["attribute", "--help"])
        print(" ".join(result.output.split()))
        print(sorted(m for m in sys.modules if m.startswith("ff_audit")))
        """,
    )
    assert run.returncode == 0, run.stderr
    shown, imported = run.stdout.splitlines()
    assert f"zzcloud: zzcloud:MODEL (plugin {DIST} 0.0.1)" in shown
    assert "openai: OpenAI-compatible endpoint" in shown
    assert imported == "[]"


def test_top_level_help_imports_no_plugin(site: Path) -> None:
    run = python(
        site,
        """
        import sys
        from click.testing import CliRunner
        from faultfinder.cli import main
        result = CliRunner().invoke(main, ["--help"])
        assert result.exit_code == 0, result.output
        print(sorted(m for m in sys.modules if m.startswith("ff_audit")))
        """,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]" and run.stderr == ""

"""Plugins whose names are wrong, installed by hand as a distribution in ``tmp_path`` (a
``*.dist-info`` with ``entry_points.txt``, as tests/test_plugins_outside.py does) and run
in a fresh process.

An importer whose ``name`` is not its entry point's is refused like a misnamed method or
model API: its traces would carry a ``source.format`` no command knows. A plugin that
declares a built-in's name is ignored with one warning worded like the others, shown only
where that kind of component is listed or that name looked up, never by a command that
uses none of that kind.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from test_plugins import DEMO_TRACE, OTLP_FILE, hand_installed
from test_plugins_outside import command

DIST = "ff-names"

MODULE = """
from pathlib import Path
from typing import Any, ClassVar

from faultfinder.traces.schema import SourceInfo, Step, Trace


class Misnamed:
    name: ClassVar[str] = "not-its-name"
    summary: ClassVar[str] = "reads .names files"

    def detect(self, path: Path) -> bool:
        return path.suffix == ".names"

    def load(self, path: Path, **options: Any) -> list[Trace]:
        source = SourceInfo(format=self.name, path=str(path))
        step = Step(index=0, agent="A", content="x")
        return [Trace(id=path.stem, task="t", steps=[step], source=source)]


Clash = Misnamed
"""

ENTRY_POINTS = """
[faultfinder.importers]
ff-names-format = ff_names:Misnamed
otlp = ff_names:Clash

[faultfinder.methods]
random = ff_names:Clash

[faultfinder.backends]
openai = ff_names:Clash

[faultfinder.apis]
chat = ff_names:Clash
"""


def install(tmp_path: Path) -> Path:
    return hand_installed(tmp_path / "site", DIST, ENTRY_POINTS, {"ff_names": MODULE})


def warnings_of(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if DIST in line]


def test_an_importer_named_otherwise_than_its_entry_point_is_refused(tmp_path: Path) -> None:
    site = install(tmp_path)
    data = tmp_path / "run.names"
    data.write_text("x", encoding="utf-8")
    detected, _ = command(site, "import", str(data))
    assert detected.returncode == 1  # no importer reads it: not read as 'not-its-name'
    (warning,) = [w for w in warnings_of(detected.stderr) if "ff-names-format" in w]
    assert warning.startswith("warning: The trace format 'ff-names-format' from plugin ")
    assert "calls itself 'not-its-name'" in warning and "source format" in warning
    assert "Traceback" not in detected.stderr

    named, _ = command(site, "import", str(data), "--format", "ff-names-format")
    assert named.returncode == 1
    (error,) = [w for w in warnings_of(named.stderr) if "ff-names-format" in w]
    assert error.startswith("Error: ") and "calls itself 'not-its-name'" in error

    listed, _ = command(site, "import", "--help")
    assert "ff-names-format" not in listed.stdout and "not-its-name" not in listed.stdout
    assert len([w for w in warnings_of(listed.stderr) if "ff-names-format" in w]) == 1


def test_a_name_taken_by_a_built_in_is_warned_only_where_that_kind_is_used(
    tmp_path: Path,
) -> None:
    site = install(tmp_path)
    # A command using none of the clashing names, nor listing their kinds: not a word.
    quiet, _ = command(
        site, "attribute", str(DEMO_TRACE), "--method", "baseline", "--cache", "none"
    )
    assert quiet.returncode == 0, quiet.stderr
    assert warnings_of(quiet.stderr) == []
    canonical, _ = command(site, "import", str(DEMO_TRACE))
    assert canonical.returncode == 0 and warnings_of(canonical.stderr) == [], canonical.stderr

    # Listing the methods names the one ignored method, once, worded like the others.
    listed, _ = command(site, "methods")
    assert listed.returncode == 0, listed.stderr
    (line,) = warnings_of(listed.stderr)
    assert line == (
        f"warning: The method 'random' from plugin {DIST} 0.1.0 (ff_names:Clash) is "
        "ignored: the name is taken by the built-in one "
        "(faultfinder.methods.random:RandomMethod). Give it another name in that "
        "package's entry points."
    )

    # Looking the name up says it too; the built-in is what runs.
    used, _ = command(site, "attribute", str(DEMO_TRACE), "--method", "random", "--cache", "none")
    assert used.returncode == 0, used.stderr
    (line,) = warnings_of(used.stderr)
    assert "method 'random'" in line

    # Detection asks every importer: the ignored 'otlp' is named, once.
    detected, _ = command(site, "import", str(OTLP_FILE))
    assert detected.returncode == 0, detected.stderr
    clashes = [w for w in warnings_of(detected.stderr) if "'otlp'" in w]
    assert len(clashes) == 1 and clashes[0].startswith("warning: The trace format 'otlp'")


def test_api_upstream_help_says_plugin_apis_are_accepted() -> None:
    from faultfinder.cli import main

    for name in ("record", "proxy"):
        shown = " ".join(CliRunner().invoke(main, [name, "--help"]).output.split())
        assert "(chat, responses, messages; or the name of a model API an installed plugin" in (
            shown
        ), shown

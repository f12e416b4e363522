"""Plugins that are not what their entry-point group says: an importer without ``load``
or ``summary``, a model-API adapter without the members the proxy calls. Each is refused
when it is loaded, as a method plugin that is not a method class is: one warning naming
its package where that kind is listed or detected, an error when it is named, and never
a traceback halfway through a detection, a help text or a recording.

The plugins are installed by hand as a distribution in ``tmp_path`` (a ``*.dist-info``
with ``entry_points.txt``, as tests/test_plugins_names.py does) and run in a fresh
process. The checks themselves, in this process, are in tests/test_plugin_contracts.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

from test_plugins import faultfinder, hand_installed

DIST = "ff-contracts"

MODULE = """
from pathlib import Path
from typing import Any, ClassVar


class NoLoad:  # detects its files, but cannot read them
    name: ClassVar[str] = "ff-no-load"
    summary: ClassVar[str] = "reads .contract files (not really)"

    def detect(self, path: Path) -> bool:
        return path.suffix == ".contract"


class NoSummary:  # reads nothing, and has no line for --format's help
    name: ClassVar[str] = "ff-no-summary"

    def detect(self, path: Path) -> bool:
        return False

    def load(self, path: Path, **options: Any) -> list[Any]:
        return []


class NeedsRoot:  # a complete importer that faultfinder cannot make: it wants a root
    name: ClassVar[str] = "ff-needs-root"
    summary: ClassVar[str] = "reads .rooted files under a root"

    def __init__(self, root: Path) -> None:
        self.root = root

    def detect(self, path: Path) -> bool:
        return path.suffix == ".rooted"

    def load(self, path: Path, **options: Any) -> list[Any]:
        return []


class Partial:  # takes its requests, but cannot point a program at the proxy
    name = "ff-partial"

    def handles(self, method: str, path: str) -> bool:
        return path.endswith("/ff-partial")
"""

ENTRY_POINTS = """
[faultfinder.importers]
ff-no-load = ff_contracts:NoLoad
ff-no-summary = ff_contracts:NoSummary
ff-needs-root = ff_contracts:NeedsRoot

[faultfinder.apis]
ff-partial = ff_contracts:Partial
"""


def install(tmp_path: Path) -> Path:
    return hand_installed(tmp_path / "site", DIST, ENTRY_POINTS, {"ff_contracts": MODULE})


def lines_naming(stderr: str, name: str) -> list[str]:
    return [line for line in stderr.splitlines() if f"'{name}'" in line]


def test_an_importer_without_load_is_refused_not_half_used(tmp_path: Path) -> None:
    site = install(tmp_path)
    data = tmp_path / "run.contract"
    data.write_text("x", encoding="utf-8")

    detected = faultfinder(site, "import", str(data))
    assert detected.returncode == 1  # no importer reads it: it is not detected, then failed
    (warning,) = lines_naming(detected.stderr, "ff-no-load")
    assert warning.startswith(
        f"warning: The trace format 'ff-no-load' from plugin {DIST} 0.1.0 (ff_contracts:NoLoad)"
        " is not a trace importer: it lacks load ("
    ), warning
    assert "faultfinder.traces.importers.Importer" in warning
    assert "Traceback" not in detected.stderr and "AttributeError" not in detected.stderr

    named = faultfinder(site, "import", str(data), "--format", "ff-no-load")
    assert named.returncode == 1
    (error,) = lines_naming(named.stderr, "ff-no-load")
    assert error.startswith("Error: ") and "is not a trace importer: it lacks load" in error
    assert "Fix or remove that package." in error


def test_an_importer_without_summary_leaves_the_help_working(tmp_path: Path) -> None:
    site = install(tmp_path)
    shown = faultfinder(site, "import", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "ff-no-summary" not in shown.stdout and "ff-no-load" not in shown.stdout
    (warning,) = lines_naming(shown.stderr, "ff-no-summary")
    assert warning.startswith("warning: ") and DIST in warning
    assert "is not a trace importer: it lacks summary" in warning
    assert "Traceback" not in shown.stderr


def test_an_importer_whose_constructor_wants_arguments_is_refused(tmp_path: Path) -> None:
    # faultfinder makes importers (and adapters) with no arguments: one that needs some
    # is refused by name when loaded, not met with a TypeError from inside a detection.
    site = install(tmp_path)
    data = tmp_path / "run.rooted"
    data.write_text("x", encoding="utf-8")
    named = faultfinder(site, "import", str(data), "--format", "ff-needs-root")
    assert named.returncode == 1
    (error,) = lines_naming(named.stderr, "ff-needs-root")
    assert error.startswith("Error: "), error
    assert "is not a trace importer: its constructor requires root, and it is made" in error
    assert "Traceback" not in named.stderr and "TypeError" not in named.stderr


def test_an_adapter_without_the_proxys_members_is_refused(tmp_path: Path) -> None:
    site = install(tmp_path)
    recorded = faultfinder(
        site, "record", "--upstream", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "runs"),
        "--quiet", "--", sys.executable, "-c", "pass",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    assert "Traceback" not in recorded.stderr and "AttributeError" not in recorded.stderr
    (warning,) = lines_naming(recorded.stderr, "ff-partial")
    assert warning.startswith(
        f"warning: The model API 'ff-partial' from plugin {DIST} 0.1.0 (ff_contracts:Partial)"
        " is not a model-API adapter: it lacks is_stream, canonical_request,"
    ), warning
    assert "client_env, auth_headers (" in warning and "WireAdapter" in warning

    shown = faultfinder(site, "proxy", "--help")
    assert shown.returncode == 0 and "ff-partial" not in shown.stderr  # listed, not loaded

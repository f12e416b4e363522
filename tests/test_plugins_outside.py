"""Plugins as a third-party author writes them, seen from outside the repository.

Each test builds a small installed distribution by hand in ``tmp_path`` (a
``*.dist-info`` directory with ``METADATA`` and ``entry_points.txt`` beside the plugin's
modules: what ``importlib.metadata`` finds of any installed package) and runs faultfinder
in a fresh process with that directory on its path. Two things are checked: that reading
results imports only the methods they name, never every installed plugin (a plugin's
heavy import is not paid, nor its breakage shown, by commands that do not use it); and
that a model-API adapter whose ``name`` is not its entry point's is refused, as a method
whose ``name`` differs is, since replays look recorded calls' adapters up by that name.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from test_plugins import DEMO_TRACE, hand_installed, python

DIST = "ff-outside"

FLOOR = """
from typing import Any, ClassVar

from faultfinder.judging.method import MethodBase, MethodConfig, Verdict


class LastSpeaker(MethodBase):
    name: ClassVar[str] = "ff-last-speaker"
    summary: ClassVar[str] = "The last step's agent and step (a floor)"
    Config: ClassVar[type[MethodConfig]] = MethodConfig
    needs_model: ClassVar[bool] = False
    floor: ClassVar[bool] = True

    async def attribute(self, trace: Any, llm: Any) -> Verdict:
        last = trace.steps[-1]
        return Verdict(agent=last.agent, step=last.index)
"""

HEAVY = 'raise RuntimeError("ff-outside heavy method was imported")\n'

ADAPTERS = """
from faultfinder.replay.apis import AdapterBase
from faultfinder.replay.apis.chat import ChatAdapter


class Right(ChatAdapter):
    name = "ff-right"
    path = "/ff-right/chat"


class CalledChat(ChatAdapter):  # a gateway's copy of Chat that kept Chat's name
    path = "/ff-gateway/chat"


class Unnamed(ChatAdapter):  # a whole adapter that left its name as AdapterBase's, ''
    name = AdapterBase.name
    path = "/ff-unnamed"
"""

ENTRY_POINTS = """
[faultfinder.methods]
ff-last-speaker = ff_outside_floor:LastSpeaker
ff-heavy = ff_outside_heavy:Heavy

[faultfinder.apis]
ff-right = ff_outside_apis:Right
ff-gateway = ff_outside_apis:CalledChat
ff-unnamed = ff_outside_apis:Unnamed
"""


def install(tmp_path: Path) -> Path:
    """The distribution ``ff-outside`` installed by hand into ``tmp_path/site``."""
    modules = {"ff_outside_floor": FLOOR, "ff_outside_heavy": HEAVY, "ff_outside_apis": ADAPTERS}
    return hand_installed(tmp_path / "site", DIST, ENTRY_POINTS, modules)


def command(site: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``faultfinder ARGS`` in a fresh process, and the ``ff_outside`` modules it imported."""
    done = python(
        site,
        f"""
        import sys
        from faultfinder.cli import main
        try:
            main({list(args)!r})
        finally:
            loaded = sorted(m for m in sys.modules if m.startswith("ff_outside"))
            print("LOADED", " ".join(loaded), file=sys.stderr)
        """,
    )
    marks = [line for line in done.stderr.splitlines() if line.startswith("LOADED")]
    assert marks, done.stderr
    return done, marks[-1].split()[1:]


def test_eval_and_report_import_only_the_methods_they_name(tmp_path: Path) -> None:
    site = install(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(DEMO_TRACE, traces / "demo.json")
    rows = tmp_path / "rows.jsonl"
    ran, loaded = command(
        site, "eval", str(traces), "--method", "random", "--out", str(rows), "--no-progress"
    )
    assert ran.returncode == 0, ran.stderr
    assert loaded == [], ran.stderr  # no plugin method is needed to run and report `random`
    assert "ff-heavy" not in ran.stderr and DIST not in ran.stderr
    shown, loaded = command(site, "report", str(rows))
    assert shown.returncode == 0, shown.stderr
    assert loaded == [] and DIST not in shown.stderr, shown.stderr
    assert "Floors (no model; listed last in each subset): random." in shown.stdout


def test_report_still_knows_a_plugin_floor_it_names(tmp_path: Path) -> None:
    site = install(tmp_path)
    traces = tmp_path / "traces"
    traces.mkdir()
    shutil.copy(DEMO_TRACE, traces / "demo.json")
    rows = tmp_path / "rows.jsonl"
    ran, _ = command(
        site, "eval", str(traces), "--method", "ff-last-speaker,random", "--out", str(rows),
        "--no-progress",
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    shown, loaded = command(site, "report", str(rows), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    floors = {r["method"] for r in json.loads(shown.stdout) if r["floor"]}
    assert floors == {"ff-last-speaker", "random"}
    assert loaded == ["ff_outside_floor"]  # the method the rows name, not the broken one
    assert "ff-heavy" not in shown.stderr


def test_an_api_adapter_named_otherwise_than_its_entry_point_is_refused(tmp_path: Path) -> None:
    site = install(tmp_path)
    done = python(
        site,
        """
        import faultfinder.replay.apis as apis
        print(" ".join(a.name for a in apis.ADAPTERS))
        for path in ("/v1/ff-right/chat", "/v1/ff-gateway/chat", "/v1/ff-unnamed"):
            adapter = apis.adapter_for("POST", path)
            print(path, adapter.name if adapter is not None else None)
        """,
    )
    assert done.returncode == 0, done.stderr
    names, *paths = done.stdout.splitlines()
    # Recorded calls carry the adapter's name and replays read them with the adapter of
    # that name: one called 'chat' would have its calls read as Chat Completions.
    assert names.split() == ["chat", "responses", "messages", "ff-right"]
    assert paths == [
        "/v1/ff-right/chat ff-right",
        "/v1/ff-gateway/chat None",
        "/v1/ff-unnamed None",
    ]
    warnings = [line for line in done.stderr.splitlines() if DIST in line]
    assert len(warnings) == 2, done.stderr
    for entry, own in (("ff-gateway", "'chat'"), ("ff-unnamed", "''")):
        (line,) = [w for w in warnings if f"'{entry}'" in w]
        assert line.startswith("warning: ") or "PluginWarning" in line, line
        assert f"calls itself {own}" in line


RETURNS = """
from typing import Any


class _Reads:
    summary = "one line"

    def detect(self, path: Any) -> bool:
        return str(path).endswith(".ff-wrong")


class AsDict(_Reads):  # one trace's fields, not a list of traces
    name = "ff-as-dict"

    def load(self, path: Any, **options: Any) -> Any:
        return {"id": "run", "steps": []}


class AsDicts(_Reads):  # a list, of dicts not traces
    name = "ff-as-dicts"

    def load(self, path: Any, **options: Any) -> Any:
        return [{"id": "run", "steps": []}]


class Half:  # a name and a model, and nothing a call needs
    def __init__(self, name: str) -> None:
        self.name = name
        self.model = name


def make_half(model: str, **options: Any) -> Half:
    return Half(f"ff-half:{model}")


class Text(Half):  # every member, and a reply's text where its Completion should be
    is_real = False
    supports_tools = False

    def identity(self) -> dict[str, str]:
        return {"backend": self.name}

    def count_tokens(self, text: str) -> int:
        return len(text)

    async def complete(self, request: Any) -> str:
        return "Agent Name: Orchestrator\\nStep Number: 0\\nReason for Mistake: -"


def make_text(model: str, **options: Any) -> Text:
    return Text(f"ff-text:{model}")
"""

RETURNS_POINTS = """
[faultfinder.importers]
ff-as-dict = ff_outside_returns:AsDict
ff-as-dicts = ff_outside_returns:AsDicts

[faultfinder.backends]
ff-half = ff_outside_returns:make_half
ff-text = ff_outside_returns:make_text
"""


def test_an_importer_that_returns_no_traces_is_one_error_naming_it(tmp_path: Path) -> None:
    site = hand_installed(
        tmp_path / "site", "ff-returns", RETURNS_POINTS, {"ff_outside_returns": RETURNS}
    )
    run = tmp_path / "run.ff-wrong"
    run.write_text("anything\n", encoding="utf-8")
    for name, returned in (("ff-as-dict", "a dict"), ("ff-as-dicts", "a list holding a dict")):
        args = ["import", "--format", name, str(run)]
        done = python(site, f"from faultfinder.cli import main; main({args!r})")
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert done.stderr.strip() == (
            f"Error: The trace format '{name}' from plugin ff-returns 0.1.0 "
            f"(ff_outside_returns:{'AsDict' if name == 'ff-as-dict' else 'AsDicts'}) returned "
            f"{returned} from its load() of {run}, not a list of traces "
            "(faultfinder.traces.schema.Trace). Fix or remove that package."
        )


def test_a_backend_factory_that_builds_no_backend_is_refused_before_any_case(
    tmp_path: Path,
) -> None:
    site = hand_installed(
        tmp_path / "site", "ff-returns", RETURNS_POINTS, {"ff_outside_returns": RETURNS}
    )
    args = ["attribute", str(DEMO_TRACE), "--method", "all-at-once", "--model", "ff-half:m"]
    done = python(site, f"from faultfinder.cli import main; main({args!r})")
    # Not a case that errored (4) with "'Half' object has no attribute 'identity'", which
    # every case of an eval would repeat and --resume retry: the command cannot run (1).
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.strip() == (
        "Error: The model backend 'ff-half' from plugin ff-returns 0.1.0 "
        "(ff_outside_returns:make_half) built for --model ff-half:m an object that is a "
        "Half, not a model backend: it lacks is_real, supports_tools, identity, complete, "
        "count_tokens (a backend follows faultfinder.llm.base.Backend). Fix or remove that "
        "package."
    )


def test_a_backend_that_answers_with_no_completion_is_the_case_error_naming_it(
    tmp_path: Path,
) -> None:
    site = hand_installed(
        tmp_path / "site", "ff-returns", RETURNS_POINTS, {"ff_outside_returns": RETURNS}
    )
    args = ["attribute", str(DEMO_TRACE), "--method", "all-at-once", "--model", "ff-text:m"]
    done = python(site, f"from faultfinder.cli import main; main({args!r} + ['--cache', 'none'])")
    # A model that fails is the case's error (docs/exit-codes.md: 4), its reason naming
    # the plugin, not "AttributeError: 'str' object has no attribute 'text'".
    assert done.returncode == 4, done.stdout + done.stderr
    assert (
        "error:      The model backend 'ff-text' from plugin ff-returns 0.1.0 "
        "(ff_outside_returns:make_text) returned a str from complete(), not a Completion "
        "(faultfinder.llm.base.Completion). Fix or remove that package.\n"
    ) in done.stdout, done.stdout


ASTRAY_POINTS = """
[faultfinder.method]
ff-typo = ff_outside_floor:LastSpeaker

[faultfinder.executors]
ff-exec = ff_outside_floor:LastSpeaker
"""


def test_an_entry_point_in_a_group_faultfinder_does_not_read_is_named_where_listed(
    tmp_path: Path,
) -> None:
    site = hand_installed(
        tmp_path / "site", "ff-astray", ASTRAY_POINTS, {"ff_outside_floor": FLOOR}
    )
    listed = python(site, "from faultfinder.cli import main; main(['methods'])")
    assert listed.returncode == 0, listed.stderr
    assert "random" in listed.stdout and "ff-typo" not in listed.stdout
    groups = "faultfinder.methods, faultfinder.importers, faultfinder.backends, faultfinder.apis"
    assert listed.stderr.splitlines() == [
        "warning: The entry point 'ff-exec' from plugin ff-astray 0.1.0 "
        "(ff_outside_floor:LastSpeaker) is ignored: faultfinder reads no group "
        f"'faultfinder.executors', only {groups}. Fix that package.",
        "warning: The entry point 'ff-typo' from plugin ff-astray 0.1.0 "
        "(ff_outside_floor:LastSpeaker) is ignored: faultfinder reads no group "
        f"'faultfinder.method', only {groups}. Did you mean 'faultfinder.methods'? Fix "
        "that package.",
    ]
    # A command that lists nothing says nothing of it.
    helped = python(site, "from faultfinder.cli import main; main(['--help'])")
    assert helped.returncode == 0 and helped.stderr == "", helped.stderr

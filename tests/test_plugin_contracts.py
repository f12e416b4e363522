"""The plugin contract, in this process: what a backend factory is given, which floors the
report computes, how far the UI's walk looks into files, what a method, an importer and a
model-API adapter class must have, and the replay names docs/replay.md imports. The same
defects through the real CLI and a real installed distribution are in
tests/test_plugin_defects.py (an importer or an adapter that lacks a member:
tests/test_plugins_interfaces.py)."""

from __future__ import annotations

import os
import re
import shutil
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError, FaultfinderWarning
from faultfinder.eval.floors import FLOORS, floor_labels, floor_rows
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict, method_problem
from faultfinder.llm.base import ChatRequest, Completion, approx_token_count
from faultfinder.llm.registry import make_backend
from faultfinder.registry import APIS, BACKENDS, IMPORTERS, METHODS
from faultfinder.replay.apis.base import ADAPTER_CALLS, WireAdapter, adapter_problem
from faultfinder.traces.importers.base import importer_problem
from faultfinder.traces.io import read_text, split_lines
from faultfinder.traces.schema import SourceInfo, Step, Trace
from faultfinder.ui import catalog as ui_catalog
from faultfinder.ui import scan as ui_scan

DEMO_TRACE = Path(__file__).resolve().parent.parent / "src/faultfinder/data/demo_trace.json"


# -- what a backend factory is given -------------------------------------------------------


class _Backend:
    is_real = False
    supports_tools = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.model = name.partition(":")[2]

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name}

    async def complete(self, request: ChatRequest) -> Completion:
        return Completion(text="")

    def count_tokens(self, text: str) -> int:
        return approx_token_count(text)


@pytest.fixture
def spy() -> Iterator[list[dict[str, Any]]]:
    """A backend kind 'spy' registered in this process; what each call of its factory got."""
    calls: list[dict[str, Any]] = []

    def factory(name: str, **options: Any) -> _Backend:
        calls.append(options)
        return _Backend(f"spy:{name}")

    BACKENDS.add("spy", factory)
    try:
        yield calls
    finally:
        BACKENDS.remove("spy")


def test_a_factory_gets_api_key_env_only_when_the_user_names_one(
    spy: list[dict[str, Any]],
) -> None:
    make_backend("spy:m")
    make_backend("spy:m", api_key_env="MY_KEY")
    assert "api_key_env" not in spy[0]
    assert spy[1]["api_key_env"] == "MY_KEY"


def test_the_cli_names_no_key_variable_unless_asked(spy: list[dict[str, Any]]) -> None:
    args = ["attribute", str(DEMO_TRACE), "--method", "all-at-once", "--cache", "none"]
    CliRunner().invoke(main, [*args, "--model", "spy:m"])
    CliRunner().invoke(main, [*args, "--model", "spy:m", "--api-key-env", "MY_KEY"])
    assert [call.get("api_key_env") for call in spy] == [None, "MY_KEY"]


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-0123456789")
    monkeypatch.setenv("GATEWAY_KEY", "sk-gateway-0123456789")


@pytest.mark.usefixtures("keys")
@pytest.mark.parametrize(
    ("spec", "own"),
    [("openai:gpt-4o", "sk-openai-0123456789"), ("anthropic:claude-x", "sk-ant-0123456789")],
)
def test_each_built_in_backend_reads_its_own_key_unless_another_is_named(
    spec: str, own: str
) -> None:
    assert make_backend(spec)._api_key == own  # type: ignore[attr-defined]
    assert make_backend(spec, api_key_env=None)._api_key == own  # type: ignore[attr-defined]
    named = make_backend(spec, api_key_env="GATEWAY_KEY")
    assert named._api_key == "sk-gateway-0123456789"  # type: ignore[attr-defined]


def test_anthropic_without_its_key_never_takes_the_openai_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-0123456789")
    run = CliRunner().invoke(
        main,
        ["attribute", str(DEMO_TRACE), "--method", "all-at-once", "--model", "anthropic:x"],
    )
    assert run.exit_code == 1 and "ANTHROPIC_API_KEY" in run.output, run.output


def test_a_factory_error_names_the_plugin_without_a_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MYCLOUD_API_KEY", "mc-secret-value-0123456789")

    def factory(name: str, **options: Any) -> _Backend:
        raise RuntimeError(f"key {os.environ['MYCLOUD_API_KEY']} refused")

    BACKENDS.add("failing", factory)
    try:
        with pytest.raises(ConfigError) as caught:
            make_backend("failing:m")
    finally:
        BACKENDS.remove("failing")
    message = str(caught.value)
    assert "'failing' from in-process" in message and "RuntimeError" in message
    assert "mc-secret-value-0123456789" not in message


def test_a_plugin_backend_must_be_named_by_its_spec() -> None:
    BACKENDS.add("vague", lambda name, **options: _Backend("vague"))
    try:
        with pytest.raises(ConfigError, match="calls the backend it built for --model vague:a"):
            make_backend("vague:a")
    finally:
        BACKENDS.remove("vague")


# -- floors --------------------------------------------------------------------------------


def test_the_built_in_floors_are_the_documented_ones() -> None:
    assert floor_labels() == list(FLOORS)


class _LastConfig(MethodConfig):
    offset: int = 0
    """Steps before the last one."""


class _LastSpeaker(MethodBase):
    name: ClassVar[str] = "test-last"
    summary: ClassVar[str] = "the last step's speaker"
    Config: ClassVar[type[MethodConfig]] = _LastConfig
    presets: ClassVar[dict[str, dict[str, Any]]] = {"zero": {}, "one": {"offset": 1}}
    needs_model: ClassVar[bool] = False
    floor: ClassVar[bool] = True

    async def attribute(self, trace: Trace, llm: Any) -> Verdict:
        assert isinstance(self.config, _LastConfig)
        step = trace.steps[-1 - self.config.offset]
        return Verdict(agent=step.agent, step=step.index)


class _JudgeFloor(_LastSpeaker):
    name: ClassVar[str] = "test-judged"
    needs_model: ClassVar[bool] = True


def test_registered_floors_are_computed_without_a_model() -> None:
    METHODS.add("test-last", _LastSpeaker)
    METHODS.add("test-judged", _JudgeFloor)
    try:
        with pytest.warns(FaultfinderWarning, match="floor 'test-judged' calls a model"):
            labels = floor_labels()
        trace = Trace.model_validate_json(DEMO_TRACE.read_text(encoding="utf-8"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FaultfinderWarning)
            rows = floor_rows([trace], skip=FLOORS, random_runs=3)
    finally:
        METHODS.remove("test-last")
        METHODS.remove("test-judged")
    # The plain name has the configuration of the preset 'zero': listed once, as the preset.
    assert labels == [*FLOORS, "test-last:zero", "test-last:one"]
    assert [(r.method, r.run, r.model, r.step) for r in rows] == [
        ("test-last:zero", 0, "none", 9),
        ("test-last:one", 0, "none", 8),
    ]


# -- the UI's walk -------------------------------------------------------------------------


class _Lines:
    """'.lines' files: 'TASK: ...', then 'Agent: message' lines."""

    name: ClassVar[str] = "test-lines"
    summary: ClassVar[str] = "'.lines' files"

    def detect(self, path: Path) -> bool:
        return path.is_file() and path.suffix == ".lines"

    def load(self, path: Path, **options: Any) -> list[Trace]:
        lines = split_lines(read_text(path))
        steps = [
            Step(index=i, agent=line.partition(":")[0], content=line.partition(":")[2])
            for i, line in enumerate(lines[1:])
            if line.strip()
        ]
        source = SourceInfo(format=self.name, path=str(path))
        return [Trace(id=path.stem, task=lines[0], steps=steps, source=source)]


@pytest.fixture
def lines_format() -> Iterator[None]:
    IMPORTERS.add("test-lines", _Lines)
    try:
        yield
    finally:
        IMPORTERS.remove("test-lines")


@pytest.mark.usefixtures("lines_format")
def test_the_ui_walk_looks_into_a_bounded_number_of_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk takes a folder's files in reverse name order: the .lines file comes last.
    (tmp_path / "a.lines").write_text("TASK: t\nPlanner: go\n", encoding="utf-8")
    for name in ("x1.txt", "x2.txt"):
        (tmp_path / name).write_text("notes\n", encoding="utf-8")
    shutil.copy(DEMO_TRACE, tmp_path / "b.json")
    found = ui_scan.build_catalog([tmp_path])
    assert sorted(t.trace.id for t in found.traces.values()) == ["a", "demo-riverton-library-loans"]
    assert not found.problems

    monkeypatch.setattr(ui_scan, "MAX_SNIFFED", 2)
    bounded = ui_scan.build_catalog([tmp_path])
    # Files with a trace suffix are still read; no third file is looked into.
    assert [t.trace.id for t in bounded.traces.values()] == ["demo-riverton-library-loans"]
    (problem,) = bounded.problems
    assert "looked into 2 files without a trace suffix" in problem.reason


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_the_ui_walk_never_opens_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    shutil.copy(DEMO_TRACE, tmp_path / "demo.json")
    result: list[ui_catalog.Catalog] = []
    worker = threading.Thread(
        target=lambda: result.append(ui_scan.build_catalog([tmp_path])), daemon=True
    )
    worker.start()
    worker.join(timeout=60)
    if worker.is_alive():  # blocked opening the FIFO: release it, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the walk opened a FIFO")
    assert len(result[0].traces) == 1


# -- what a method class must have ---------------------------------------------------------


def test_a_class_that_is_not_a_method_says_what_it_lacks() -> None:
    class NameOnly:
        name = "name-only"

    class WrongConfig(_LastSpeaker):
        Config: ClassVar[Any] = dict
        floor: ClassVar[Any] = "yes"

    problem = method_problem(NameOnly)
    assert problem is not None and problem.startswith("is not a method: it lacks summary, ")
    problem = method_problem(WrongConfig)
    assert problem is not None
    assert "Config is not a MethodConfig subclass" in problem
    assert "floor is not True or False" in problem
    assert method_problem(_LastSpeaker) is None
    assert method_problem(len) == "is not a method: it is a builtin_function_or_method, not a class"


def test_every_built_in_method_is_a_method() -> None:
    for name in METHODS.names():
        assert method_problem(METHODS.get(name)) is None, name


# -- what an importer class and a model-API adapter class must have -----------------------


def test_every_built_in_importer_and_adapter_passes_the_checks() -> None:
    for name in IMPORTERS.names():
        if IMPORTERS.origin(name) == "built-in":
            assert importer_problem(IMPORTERS.get(name)) is None, name
    for name in APIS.names():
        if APIS.origin(name) == "built-in":
            assert adapter_problem(APIS.get(name)) is None, name


def test_the_adapter_check_asks_for_every_member_replay_md_names() -> None:
    # docs/replay.md, "Adding an API", lists the contract's members; the check asks for
    # each one the protocol declares, so neither can leave one out unnoticed.
    text = (Path(__file__).resolve().parent.parent / "docs" / "replay.md").read_text()
    (listed,) = re.findall(r"whose docstring is the contract: (.*?); its `name`", text, re.S)
    assert re.findall(r"`(\w+)`", listed) == list(ADAPTER_CALLS)
    assert set(ADAPTER_CALLS) == {
        n for n in dir(WireAdapter) if not n.startswith("_") and callable(getattr(WireAdapter, n))
    }


@pytest.mark.parametrize(
    ("value", "phrase"),
    [
        (len, "is not a trace importer: it is a builtin_function_or_method, not a class"),
        (
            type("T", (), {"name": 1, "summary": "s", "detect": None, "load": print}),
            "is not a trace importer: name is not a string; detect is not callable (",
        ),
    ],
)
def test_the_importer_check_says_what_is_wrong(value: object, phrase: str) -> None:
    problem = importer_problem(value)
    assert problem is not None and problem.startswith(phrase), problem


def test_the_adapter_check_says_what_is_wrong() -> None:
    from faultfinder.replay.apis.chat import ChatAdapter

    broken = type("B", (ChatAdapter,), {"client_env": "http://x", "name": None})
    problem = adapter_problem(broken)
    assert problem is not None
    assert problem.startswith(
        "is not a model-API adapter: name is not a string; client_env is not callable ("
    ), problem
    assert adapter_problem(ChatAdapter()) == (
        "is not a model-API adapter: it is a ChatAdapter, not a class"
    )


# -- the replay API ------------------------------------------------------------------------


def test_the_replay_api_of_the_docs_imports_from_faultfinder_replay() -> None:
    import faultfinder.replay as replay
    from faultfinder.replay.recorder import load_calls

    assert replay.load_calls is load_calls and "load_calls" in replay.__all__
    doc = (Path(__file__).resolve().parent.parent / "docs" / "replay.md").read_text()
    api = doc[doc.index("## Python API") :].split("\n## ")[0]
    for name in ("RecordingProxy", "ProxyConfig", "RunStore", "ReplayPlan", "load_calls"):
        assert f"`{name}(" in api or f"{name}(" in api
        assert name in replay.__all__, name

import asyncio
from pathlib import Path
from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError, UnknownNameError
from faultfinder.judging.method import MethodBase, MethodConfig, Verdict, run_method
from faultfinder.llm import LLM, ScriptedBackend
from faultfinder.registry import METHODS, create_method
from faultfinder.traces.loader import load_trace
from faultfinder.traces.schema import Trace

FIXTURE = Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json"


def test_unknown_method_lists_the_available_ones() -> None:
    with pytest.raises(UnknownNameError) as info:
        create_method("no-such-method")
    assert "random" in str(info.value)


def test_bad_option_names_the_option() -> None:
    with pytest.raises(ConfigError, match="seeed"):
        create_method("random", seeed=3)


def test_random_is_reproducible_and_varies_with_seed_and_run() -> None:
    trace = load_trace(FIXTURE)
    llm = LLM(ScriptedBackend([]))

    def draw(**cfg: Any) -> tuple[str | None, int | None]:
        result = asyncio.run(run_method(create_method("random", **cfg), trace, llm))
        return result.agent, result.step

    assert draw(seed=1) == draw(seed=1)
    draws = {draw(seed=s, run=r) for s in range(10) for r in range(3)}
    assert len(draws) > 3
    assert all(agent in trace.agent_names() and 0 <= step < 5 for agent, step in draws)


class _Cfg(MethodConfig):
    PROMPT_VERSION: ClassVar[str] = "t1"
    answer_step: int = 0
    """Step the fake method answers."""


class _FakeMethod(MethodBase):
    name: ClassVar[str] = "test-fake"
    summary: ClassVar[str] = "test double"
    Config: ClassVar[type[MethodConfig]] = _Cfg
    presets: ClassVar[dict[str, dict[str, Any]]] = {"late": {"answer_step": 99}}

    async def attribute(self, trace: Trace, llm: LLM) -> Verdict:
        reply = await llm.chat("which step?", purpose="ask")
        assert isinstance(self.config, _Cfg)
        step = self.config.answer_step
        speaker = trace.steps[step].agent if step < len(trace.steps) else trace.steps[0].agent
        return Verdict(agent=speaker, step=step, reason=reply.text)


def test_run_method_records_provenance_usage_and_raw_replies() -> None:
    trace = load_trace(FIXTURE)
    llm = LLM(ScriptedBackend(["because"]))
    result = asyncio.run(run_method(create_method("test-fake", answer_step=2), trace, llm))
    assert result.method == "test-fake" and result.prompt_version == "t1"
    assert result.config["answer_step"] == 2 and result.model == "scripted"
    assert result.usage.calls == 1 and result.usage.total_tokens > 0
    assert [c.reply for c in result.calls] == ["because"]
    assert result.status == "ok" and result.step == 2


def test_out_of_range_step_becomes_unparsed_not_clamped() -> None:
    trace = load_trace(FIXTURE)
    llm = LLM(ScriptedBackend(["x"]))
    result = asyncio.run(run_method(create_method("test-fake:late"), trace, llm, label="fake:late"))
    assert result.method == "fake:late"
    assert result.step is None and result.status == "unparsed"
    assert result.details["out_of_range_step"] == 99


def test_backend_failure_is_recorded_as_error() -> None:
    trace = load_trace(FIXTURE)
    llm = LLM(ScriptedBackend([]))  # runs out at once
    result = asyncio.run(run_method(create_method("test-fake"), trace, llm))
    assert result.status == "error" and "ran out of replies" in (result.error or "")
    assert result.agent is None


def test_cli_methods_lists_registered_methods() -> None:
    out = CliRunner().invoke(main, ["methods"])
    assert out.exit_code == 0
    assert "random" in out.output


def test_cli_attribute_random_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["attribute", str(FIXTURE), "--method", "random", "--model", "scripted:x.json"]
    out = runner.invoke(main, [*args, "--cache", "none", "--json"])
    # random calls no model: the (missing) scripted file is never opened, and a note says so.
    assert out.exit_code == 0, out.output
    assert '"method": "random"' in out.output and '"model": "none"' in out.output
    assert "--model scripted:x.json is not used" in out.output
    # A method that needs the model: the missing file is a clear error, no traceback.
    out = runner.invoke(main, [*args[:3], "all-at-once", *args[4:], "--cache", "none"])
    assert out.exit_code == 1 and "not found" in out.output


def test_judging_on_the_embedded_model_says_it_cannot_judge(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from faultfinder.cli.common import EMBEDDED_NOTE, llm_spec

    base = {
        "base_url": None,
        "api_key_env": "OPENAI_API_KEY",
        "cache_path": "none",
        "concurrency": 1,
        "max_tokens": None,
        "max_calls": None,
    }
    llm_spec(model="local", **base)
    assert EMBEDDED_NOTE in capsys.readouterr().err
    # Another GGUF, a model that only serves (serve-local), or no model called: no note.
    llm_spec(model="local:/models/qwen2.5-7b.gguf", **base)
    llm_spec(model="local", judging=False, **base)
    llm_spec(model="local", needs_model=False, **base)
    llm_spec(model="openai:gpt-4o", **base)
    assert EMBEDDED_NOTE not in capsys.readouterr().err


def test_cli_malformed_trace_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": "1", "id": "x", "task": "t", "steps": [{"index": 0}]}')
    out = CliRunner().invoke(main, ["attribute", str(bad), "--method", "random"])
    assert out.exit_code == 1
    assert "bad.json" in out.output and "steps[0].agent" in out.output


def setup_module() -> None:
    METHODS.add("test-fake", _FakeMethod)


def teardown_module() -> None:
    METHODS.remove("test-fake")


def test_paper_presets_of_chief_and_agentic_set_the_papers_observability() -> None:
    from faultfinder.registry import create_method

    agentic = create_method("agentic:paper").config
    chief = create_method("chief:paper").config
    assert agentic.observability == "full"  # TraceElephant's Static setting
    assert chief.observability == "outputs" and getattr(chief, "modules", None) == "full"

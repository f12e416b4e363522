"""A base URL read from the environment (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) that
is no http(s) URL with a host is refused once, before any case runs: exit 2 naming the
variable, never its value (it may hold a password). Before, every case ended errored
("Invalid IPv6 URL", an ExceptionGroup) and the command exited 4."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import EnvironmentValueError
from faultfinder.llm import base, make_backend
from faultfinder.testing import FakeOpenAIServer

DEMO = str(Path(__file__).parent.parent / "src" / "faultfinder" / "data" / "demo_trace.json")
SECRET = "s3cretPw"
BAD = [f"http://user:{SECRET}", f"http://user:{SECRET}@[::1", f"ftp://user:{SECRET}@host"]


@pytest.mark.parametrize("url", BAD)
def test_attribute_refuses_a_bad_openai_base_url_variable_up_front(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    result = CliRunner().invoke(
        main, ["attribute", DEMO, "--method", "all-at-once", "--model", "openai:gpt-4o",
               "--cache", "none", "--no-save"],
    )  # fmt: skip
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.output
    assert "Error: OPENAI_BASE_URL is " in result.output and "status:" not in result.output
    assert SECRET not in result.output


def test_eval_refuses_a_bad_anthropic_base_url_variable_before_any_case(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", BAD[1])
    out = tmp_path / "rows.jsonl"
    result = CliRunner().invoke(
        main, ["eval", DEMO, "--include-unlabelled", "--method", "all-at-once", "--model",
               "anthropic:claude-test", "--cache", "none", "--out", str(out), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "ANTHROPIC_BASE_URL is not a valid URL (Invalid IPv6 URL)" in result.output
    assert SECRET not in result.output and not out.exists()


def test_the_python_api_refuses_it_when_the_backend_is_made() -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OPENAI_BASE_URL", BAD[0])
        with pytest.raises(EnvironmentValueError, match="OPENAI_BASE_URL") as caught:
            make_backend("openai:gpt-4o", api_key="sk-test")
    assert SECRET not in str(caught.value)


def test_base_url_overrides_a_bad_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", BAD[1])
    answer = "Agent Name: WebSurfer\nStep Number: 3\nReason for Mistake: r"
    with FakeOpenAIServer(answer) as upstream:
        result = CliRunner().invoke(
            main, ["attribute", DEMO, "--method", "all-at-once", "--model", "openai:gpt-4o",
                   "--base-url", upstream.base_url, "--cache", "none", "--no-save"],
        )  # fmt: skip
    assert result.exit_code == 0, result.output

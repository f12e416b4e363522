"""Backend specs without a name: one check, one message shape, from the API and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.errors import ConfigError
from faultfinder.llm.registry import make_backend, require_name

TINY = str(Path(__file__).parent / "fixtures" / "core" / "tiny_trace.json")
SHAPE = r"Name a model: --model {kind}:MODEL \(e\.g\. {kind}:\S+\)\."


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_kind_without_a_model_name_says_how_to_write_one(kind: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_backend(f"{kind}:")
    assert re.fullmatch(SHAPE.format(kind=kind), str(caught.value)), str(caught.value)


def test_a_scripted_model_without_a_file_says_how_to_name_one() -> None:
    with pytest.raises(ConfigError, match=r"^Name a replies file: --model scripted:FILE "):
        make_backend("scripted:")


def test_require_name_passes_a_name_through_and_shapes_a_plugins_message() -> None:
    assert require_name("big-1", "mycloud", example="big-1") == "big-1"
    with pytest.raises(ConfigError) as caught:
        require_name("", "mycloud", example="big-1")
    assert str(caught.value) == "Name a model: --model mycloud:MODEL (e.g. mycloud:big-1)."


def test_the_cli_prints_the_message_and_exits_1() -> None:
    result = CliRunner().invoke(
        main, ["attribute", TINY, "--model", "scripted:", "--cache", "none"]
    )
    assert result.exit_code == 1, result.output
    expected = "Name a replies file: --model scripted:FILE (e.g. scripted:replies.json)."
    assert expected in result.output

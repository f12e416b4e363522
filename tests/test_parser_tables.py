"""Every parser against its table of real-looking replies (tests/parser_tables/)."""

from __future__ import annotations

import pytest

from faultfinder.judging.answers import (
    Roster,
    match_agent,
    parse_agent_step_reason,
    parse_yes_no,
)
from faultfinder.llm.client import ParseError
from faultfinder.methods.whowhen.common import parse_half, parse_judgement
from parser_tables import agent_step, agents, halves, yes_no

ROSTER = Roster(agents.NAMES, agents.ALIASES)


def _ids(rows: list[tuple[str, object, str]]) -> list[str]:
    return [f"{i}-{note}" for i, (_, _, note) in enumerate(rows)]


@pytest.mark.parametrize("table", [agents.ROWS, yes_no.ROWS, agent_step.ROWS, halves.ROWS])
def test_tables_are_large_enough_and_cover_unreadable_replies(table: list) -> None:
    assert len(table) >= 60
    assert sum(1 for _, expected, _ in table if expected is None) >= 10
    assert len({reply for reply, _, _ in table}) == len(table), "duplicate replies"


@pytest.mark.parametrize(("reply", "expected", "note"), agents.ROWS, ids=_ids(agents.ROWS))
def test_match_agent_table(reply: str, expected: str | None, note: str) -> None:
    if expected is None:
        with pytest.raises(ParseError):
            match_agent(reply, ROSTER)
    else:
        assert match_agent(reply, ROSTER) == expected


@pytest.mark.parametrize(("reply", "expected", "note"), yes_no.ROWS, ids=_ids(yes_no.ROWS))
def test_parse_yes_no_table(reply: str, expected: bool | None, note: str) -> None:
    if expected is None:
        with pytest.raises(ParseError):
            parse_yes_no(reply)
        with pytest.raises(ParseError):
            parse_judgement(reply)
    else:
        assert parse_yes_no(reply) is expected
        assert parse_judgement(reply).erroneous is expected


@pytest.mark.parametrize(("reply", "expected", "note"), agent_step.ROWS, ids=_ids(agent_step.ROWS))
def test_parse_agent_step_reason_table(
    reply: str, expected: tuple[str, int] | None, note: str
) -> None:
    if expected is None:
        with pytest.raises(ParseError):
            parse_agent_step_reason(reply, ROSTER)
    else:
        answer = parse_agent_step_reason(reply, ROSTER)
        assert (answer.agent, answer.step) == expected


@pytest.mark.parametrize(("reply", "expected", "note"), halves.ROWS, ids=_ids(halves.ROWS))
def test_parse_half_table(reply: str, expected: str | None, note: str) -> None:
    if expected is None:
        with pytest.raises(ParseError):
            parse_half(reply)
    else:
        assert parse_half(reply) == expected

"""`eval` against an endpoint that refuses the run's setup (a wrong key, a key without
access, a model it does not know): the batch stops at the first refusal with exit 1, the
rows already answered stay, and `--resume` finishes once the setup is fixed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from faultfinder.cli import main
from faultfinder.eval.rows import read_rows
from faultfinder.llm import base
from faultfinder.testing.fake_openai import FakeOpenAIServer, ReplyError

FIXTURE = Path(__file__).parent / "fixtures" / "eval" / "traces.jsonl"
LABELLED = 5
"""Traces of the fixture with a gold label: the cases of one method and one run."""


class Endpoint:
    """Answers the first ``good`` calls, then refuses every call with ``status`` until
    ``fixed``; counts what it answered and what it refused."""

    def __init__(self, status: int, message: str, good: int) -> None:
        self.status, self.message, self.good = status, message, good
        self.fixed = False
        self.answered = 0
        self.refused = 0

    def __call__(self, body: dict[str, Any]) -> str:
        if not self.fixed and self.answered >= self.good:
            self.refused += 1
            raise ReplyError(self.status, self.message)
        self.answered += 1
        prompt = str(body["messages"])
        agent = "Planner" if "Planner says" in prompt else "Orchestrator"
        return f"Agent Name: {agent}\nStep Number: 0\nReason: it started there"


def _eval(out: Path, base_url: str, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        ["eval", str(FIXTURE), "--method", "all-at-once", "--model", "openai:m",
         "--base-url", base_url, "--cache", "none", "--no-progress", "--parallel-cases", "1",
         "--out", str(out), *extra],
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "message", "hint"),
    [
        (401, "Incorrect API key provided", "Check the API key"),
        (404, "The model `m` does not exist", "Check the model name ('m')"),
    ],
)
def test_a_refused_setup_stops_the_batch_and_resume_finishes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int, message: str, hint: str
) -> None:
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)  # a loopback fake, not a model
    out = tmp_path / "results.jsonl"
    endpoint = Endpoint(status, message, good=2)
    with FakeOpenAIServer(endpoint) as upstream:
        stopped = _eval(out, upstream.base_url)
        # Exit 1, as for a missing key: the command could not run as configured, and a
        # script that reruns on 4 (an endpoint that kept failing) must not loop on it.
        assert stopped.exit_code == 1, stopped.output
        assert endpoint.refused == 1  # one refused call, not one per case
        assert message in stopped.output and hint in stopped.output
        assert f"2 of {LABELLED} cases have a row in {out}" in stopped.output
        assert "--resume" in stopped.output
        kept = read_rows(out)
        assert [row.status for row in kept] == ["ok", "ok"]

        endpoint.fixed = True
        resumed = _eval(out, upstream.base_url, "--resume")
        assert resumed.exit_code == 0, resumed.output
        assert endpoint.answered == LABELLED  # the two kept rows were not asked again
    rows = read_rows(out)
    assert len({row.key for row in rows}) == len(rows) == LABELLED
    assert {row.status for row in rows} == {"ok"}


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "Unsupported parameter: 'seed'"),
        # OpenRouter's moderation: one request's content, which a failed agent's trace can
        # trip; stopping there would stop there again on every --resume.
        (403, "Your input was flagged for harassment"),
    ],
)
def test_a_refusal_of_one_request_still_gives_an_error_row_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int, message: str
) -> None:
    """A 400 (this request's parameters) or a 403 (this request's content, or the key's
    access: one cannot tell) gets its case an error row, and the batch goes on."""
    monkeypatch.setattr(base, "ALLOW_MODEL_REQUESTS", True)
    out = tmp_path / "results.jsonl"
    endpoint = Endpoint(status, message, good=2)
    with FakeOpenAIServer(endpoint) as upstream:
        result = _eval(out, upstream.base_url)
    assert result.exit_code == 4, result.output
    statuses = sorted(row.status for row in read_rows(out))
    assert statuses == ["error"] * (LABELLED - 2) + ["ok"] * 2

"""The redactor on the collector's hot path: a string repeated across a trace (a conversation
resent with every model call) is scrubbed once, without scrubbing less."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from faultfinder import redact
from faultfinder.redact import REDACTED, Redactor

KEY = "sk-" + "a1B2" * 8


class Counting:
    """A key pattern that counts the strings it is run on."""

    def __init__(self, pattern: re.Pattern[str], calls: list[str]) -> None:
        self.pattern, self.calls = pattern, calls

    def sub(self, repl: str, value: str) -> str:
        self.calls.append(value)
        return self.pattern.sub(repl, value)


def test_a_repeated_string_is_scrubbed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    counting = tuple(Counting(p, calls) for p in redact.KEY_PATTERNS)
    monkeypatch.setattr(redact, "KEY_PATTERNS", counting)
    message = f"Use {KEY} at https://u:hunter22@example.com/x?api_key=abcdefgh now."
    history: list[dict[str, Any]] = [{"role": "user", "content": message}]
    history += [{"role": "assistant", "content": "plain words"}] * 200
    steps = [{"messages": history[: i + 1], "note": f"step {i}"} for i in range(200)]
    out = Redactor().data(steps)
    text = json.dumps(out)
    assert KEY not in text and "hunter22" not in text and "abcdefgh" not in text
    assert out[0]["messages"][0]["content"] == (
        f"Use {REDACTED} at https://{REDACTED}@example.com/x?api_key={REDACTED} now."
    )
    assert out[199]["note"] == "step 199" and out[199]["messages"][1]["content"] == "plain words"
    # the key patterns ran once per pattern on the one string that may hold a key
    assert len(calls) == len(counting)


def test_a_secret_learned_later_is_scrubbed_from_a_string_seen_before() -> None:
    redactor = Redactor()
    line = "the password is correct-horse-battery"
    assert redactor.text(line) == line
    redactor.learn_data({"password": "correct-horse-battery"})
    assert redactor.text(line) == f"the password is {REDACTED}"
    # a secret taught by a URL inside the very call is used by the next call
    url = "see https://example.com/?token=zzzzzzzz1 and zzzzzzzz1"
    assert redactor.text(url) == f"see https://example.com/?token={REDACTED} and {REDACTED}"
    assert redactor.text("again zzzzzzzz1") == f"again {REDACTED}"


def test_the_memo_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redact, "MEMO_CHARS", 1000)
    redactor = Redactor()
    for i in range(500):
        assert redactor.text(f"line {i} " + "x" * 40) == f"line {i} " + "x" * 40
    assert sum(len(k) for k in redactor._texts) <= 1000
    assert redactor.text("y" * 5000 + " " + KEY) == "y" * 5000 + " " + REDACTED
    assert "y" * 5000 + " " + KEY not in redactor._texts

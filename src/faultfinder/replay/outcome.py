"""A run's final answer, whether it matches the reference, and whether the program failed.

A program states its answer by printing a line ``FINAL ANSWER: ...`` (the last such line
counts). Matching is exact after normalisation: numbers compare as numbers (thousands
separators, a currency sign or one unit word ignored), other answers compare after
lower-casing and removing punctuation, articles and extra spaces.

A run whose program failed (a non-zero exit status, killed by a signal, or stopped by the
timeout) is never a success, whatever answer it printed before failing
(:func:`program_failure`); a replay that faultfinder stopped because its live window was
used up did not fail.
"""

from __future__ import annotations

import re
import string

# Matched from its own line (not from each blank line above it), the answer ending at its
# last non-blank character: long runs of blank lines or spaces cost linear time.
FINAL_ANSWER = re.compile(
    r"^[^\S\n]*+FINAL ANSWER\s*+:\s*+((?:.*\S)?)\s*$", re.IGNORECASE | re.MULTILINE
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def final_answer_from_output(text: str) -> str | None:
    """The last ``FINAL ANSWER:`` line of a program's output, if any."""
    found = FINAL_ANSWER.findall(text)
    return found[-1] if found else None


def parse_number(text: str) -> float | None:
    """``text`` as a number when it is one (commas, a currency sign or a unit allowed)."""
    stripped = text.strip().strip("$€£%").strip()
    candidates = _NUMBER.findall(stripped)
    if len(candidates) != 1:
        return None
    rest = stripped.replace(candidates[0], "", 1).strip()
    if len(rest.split()) > 1:
        return None
    try:
        return float(candidates[0].replace(",", ""))
    except ValueError:
        return None


def normalise_text(text: str) -> str:
    lowered = text.lower()
    lowered = "".join(ch for ch in lowered if ch not in string.punctuation)
    lowered = _ARTICLES.sub(" ", lowered)
    return " ".join(lowered.split())


def answers_match(answer: str | None, reference: str) -> bool:
    """Exact match after normalisation: two numbers compare as numbers (thousands
    separators, a currency sign or one unit word ignored), anything else as normalised
    text. An answer that merely contains the reference (or ends with its number) does
    not match."""
    if answer is None:
        return False
    expected, got = parse_number(reference), parse_number(answer)
    if expected is not None and got is not None:
        return abs(got - expected) <= 1e-6 * max(1.0, abs(expected))
    return normalise_text(answer) == normalise_text(reference)


def program_failure(
    exit_code: int | None, *, killed: bool = False, timed_out: bool = False
) -> str | None:
    """Why the recorded (or replayed) program failed, or None when it did not: 'program
    exited 3', 'program killed by signal 9', 'program timed out'. A program stopped by
    faultfinder without a timeout (the replay's live window used up) did not fail, and
    one that never ran (``exit_code`` None) says nothing."""
    if timed_out:
        return "program timed out"
    if exit_code is None or exit_code == 0 or killed:
        return None
    if exit_code < 0:
        return f"program killed by signal {-exit_code}"
    return f"program exited {exit_code}"

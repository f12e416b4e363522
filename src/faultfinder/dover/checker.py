"""Success checkers: did a run (or a replay) solve its task?

A checker gets the run's final answer and its reference answer and says pass, fail, or
cannot tell (``None``). Two exist:

- :class:`ExactChecker` (the default): exact match after normalisation
  (:func:`faultfinder.replay.outcome.answers_match`); without a reference it cannot tell;
- :class:`CommandChecker`: a command **the user gives on the command line**
  (``--check 'python judge.py'``). It is run once per answer, without a shell, with a JSON
  object on standard input::

      {"final_answer": "...", "reference": "..." or null, "task": "...", "run_dir": "..."}

  and decides by its standard output's first word, else by its exit status:
  ``pass``/``fail`` (any case) on the first line of stdout win; otherwise exit status 0
  is pass, 1 is fail; anything else (another status, a crash, a timeout) is "cannot
  tell", with the reason kept.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Protocol

from faultfinder.errors import ConfigError
from faultfinder.replay.outcome import answers_match
from faultfinder.traces.schema import Trace

_VERDICT_WORD = re.compile(r"(pass|fail)\b")


@dataclass(frozen=True)
class CheckResult:
    """A checker's answer."""

    passed: bool | None
    """True: solved; False: not solved; None: the checker cannot tell."""
    detail: str = ""
    """Why (the reason when it cannot tell, or the command's output)."""


class Checker(Protocol):
    """Judges a final answer against the reference."""

    name: str
    """Shown in rows and reports."""

    def check(
        self, answer: str | None, reference: str | None, *, task: str = "", run_dir: str = ""
    ) -> CheckResult:
        """Pass, fail, or cannot tell."""
        ...


class ExactChecker:
    """Exact match after normalisation; cannot tell without a reference."""

    name = "exact"

    def check(
        self, answer: str | None, reference: str | None, *, task: str = "", run_dir: str = ""
    ) -> CheckResult:
        if reference is None:
            return CheckResult(None, "no reference answer")
        if answer is None:
            return CheckResult(False, "the run stated no final answer")
        return CheckResult(answers_match(answer, reference))


class CommandChecker:
    """A user-given command judges the answer (protocol in the module docstring)."""

    def __init__(self, command: str, timeout: float = 120.0) -> None:
        self.argv = shlex.split(command)
        if not self.argv:
            raise ConfigError("--check: the command is empty")
        self.name = f"command:{command}"
        self.timeout = timeout

    def check(
        self, answer: str | None, reference: str | None, *, task: str = "", run_dir: str = ""
    ) -> CheckResult:
        payload = json.dumps(
            {"final_answer": answer, "reference": reference, "task": task, "run_dir": run_dir}
        )
        try:
            done = subprocess.run(
                self.argv,
                input=payload,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return CheckResult(None, f"checker did not run: {exc}")
        first = (done.stdout.strip().splitlines() or [""])[0].strip().lower()
        word = _VERDICT_WORD.match(first)
        if word:
            return CheckResult(word.group(1) == "pass", done.stdout.strip()[:500])
        if done.returncode in (0, 1):
            return CheckResult(done.returncode == 0, done.stdout.strip()[:500])
        return CheckResult(None, f"checker exited {done.returncode}: {done.stderr.strip()[-300:]}")


def check_recorded(checker: Checker, trace: Trace, run_dir: str = "") -> CheckResult:
    """Did the recorded run solve its task? Not when its program failed (exited
    non-zero, was killed, timed out: the trace's ``program_failure``), whatever answer it
    printed first; otherwise the checker decides."""
    failure = trace.metadata.get("program_failure")
    if failure:
        return CheckResult(False, f"the recorded program failed ({failure})")
    return checker.check(trace.final_answer, trace.ground_truth, task=trace.task, run_dir=run_dir)


def make_checker(command: str | None) -> Checker:
    """The checker for ``--check`` (None: the exact-match default)."""
    return CommandChecker(command) if command else ExactChecker()

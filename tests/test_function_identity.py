"""A `function:` model's cache identity: the same in every process (Ray workers share cache
entries), different once the function's body changes (an edited function is never served
its predecessor's answers from the response or CHIEF stage cache)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from faultfinder.llm.doubles import FunctionBackend, ScriptedBackend, function_identity

JUDGE = """\
def judge(request):
    if "x" in {"alpha", "beta", "gamma", "delta"}:
        return "Agent Name: A\\nStep Number: %d\\nReason for Mistake: r"
    return "none"
"""


def identity_in_a_new_process(folder: Path, seed: str) -> str:
    code = (
        "import judge_mod; from faultfinder.llm.doubles import function_identity; "
        "print(function_identity(judge_mod.judge))"
    )
    # no .pyc: a file rewritten within the same second at the same size would be read stale
    env = {"PYTHONPATH": str(folder), "PYTHONHASHSEED": seed, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_same_function_has_one_identity_in_every_process(tmp_path: Path) -> None:
    (tmp_path / "judge_mod.py").write_text(JUDGE % 3, encoding="utf-8")
    seen = {identity_in_a_new_process(tmp_path, seed) for seed in ("1", "2", "3")}
    assert len(seen) == 1
    (only,) = seen
    assert only.startswith("judge_mod:judge@")


def test_an_edited_function_is_another_identity(tmp_path: Path) -> None:
    (tmp_path / "judge_mod.py").write_text(JUDGE % 3, encoding="utf-8")
    before = identity_in_a_new_process(tmp_path, "0")
    (tmp_path / "judge_mod.py").write_text(JUDGE % 4, encoding="utf-8")
    after = identity_in_a_new_process(tmp_path, "0")
    assert before != after
    # moved down the file, body unchanged: the same identity (lines are not its identity)
    (tmp_path / "judge_mod.py").write_text("\n\n" + JUDGE % 4, encoding="utf-8")
    assert identity_in_a_new_process(tmp_path, "0") == after


def test_a_closure_is_known_by_its_object() -> None:
    def local(request: object) -> str:
        return "x"

    assert function_identity(local) == function_identity(local)
    assert function_identity(local).startswith("local:")
    backend = FunctionBackend(local)
    assert backend.identity()["fn"] == function_identity(local)


def _closure(answer: str) -> Callable[[object], str]:
    def reply(request: object) -> str:
        return answer

    return reply


def test_closures_made_one_after_another_never_share_an_identity() -> None:
    # Each closure is freed before the next is made, so CPython hands the next one the
    # same address: keyed by id(), later test doubles read earlier ones' cache entries.
    seen = []
    for number in range(50):
        fn = _closure(str(number))
        seen.append(FunctionBackend(fn).identity()["fn"])
        del fn
    scripted = []
    for _ in range(50):
        backend = ScriptedBackend(["x"])
        scripted.append(str(backend.identity()))
        del backend
    assert len(set(seen)) == 50 and len(set(scripted)) == 50

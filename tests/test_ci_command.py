"""CI runs the README's test command verbatim, and that command checks lint, format and
types before the tests (docs: README "Quickstart" and "Development")."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    """The commands of the README's Quickstart, in order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme[readme.index("## Quickstart") :]
    quickstart = quickstart[: quickstart.index("\n## ", 1)]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", quickstart, re.S)]


def test_the_quickstart_has_two_commands_and_ci_runs_the_second_verbatim() -> None:
    commands = readme_commands()
    assert len(commands) == 2
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == commands[1]


def test_the_test_command_checks_lint_format_and_types_before_pytest() -> None:
    steps = [step.strip() for step in readme_commands()[1].split("&&")]
    checks = [
        "ruff check src tests bench",
        "ruff format --check src tests bench",
        "mypy --strict src",
    ]
    assert steps[-1] == "pytest"
    assert steps[-1 - len(checks) : -1] == checks


def test_mypy_is_strict_and_every_marker_is_registered() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert config["tool"]["mypy"]["strict"] is True
    registered = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    used = set()
    for path in (ROOT / "tests").glob("*.py"):
        used |= set(re.findall(r"pytest\.mark\.([a-z_]+)", path.read_text(encoding="utf-8")))
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    assert used - builtin <= registered, sorted(used - builtin - registered)
    assert "frameworks_env" in registered

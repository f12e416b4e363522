"""``python -m faultfinder.demo_team [options] "task"`` (or ``--task-id ID``)."""

from __future__ import annotations

import argparse
import os
import sys

from faultfinder.demo_team.tasks import TASKS, find_task
from faultfinder.demo_team.team import TeamConfig, main_run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m faultfinder.demo_team",
        description="Run the demo team on a task against OPENAI_BASE_URL.",
    )
    parser.add_argument("task", nargs="?", help="The task text (or a demo task id).")
    parser.add_argument("--task-id", help="Run a demo task by id (see --list-tasks).")
    parser.add_argument("--list-tasks", action="store_true", help="List demo tasks and exit.")
    parser.add_argument("--stream", action="store_true", help="Stream every model reply.")
    parser.add_argument("--model", default=os.environ.get("FAULTFINDER_DEMO_MODEL", "demo"))
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-rounds", type=int, default=8)
    parser.add_argument(
        "--identity",
        choices=["header", "path", "none"],
        default="header",
        help="How agents name themselves to a recording proxy.",
    )
    parser.add_argument("--quiet", action="store_true", help="Print only the final answer.")
    args = parser.parse_args(argv)
    if args.list_tasks:
        for task in TASKS:
            print(f"{task.id:<18} answer={task.answer:<8} {task.text}")
        return 0
    text = args.task
    if args.task_id:
        found = find_task(args.task_id)
        if found is None:
            parser.error(f"unknown --task-id {args.task_id!r}; see --list-tasks")
        text = found.text
    elif text and find_task(text) is not None:
        text = find_task(text).text  # type: ignore[union-attr]
    if not text:
        parser.error("give a task (or --task-id)")
    config = TeamConfig(
        model=args.model,
        temperature=args.temperature,
        stream=args.stream,
        max_rounds=args.max_rounds,
        identity=args.identity,
        verbose=not args.quiet,
    )
    return main_run(text, config)


if __name__ == "__main__":
    sys.exit(main())

"""Cost per case: tokens and model calls per method and subset, with a real model.

Runs each method on the first ``--limit`` traces of each Who&When subset through the eval
harness (results are resumable: rerun with ``--resume`` after an interruption) and prints
prompt / completion tokens, calls and wall time per case. The response cache is off by
default so calls and wall time are real; token counts are the same either way.

    python bench/tokens.py --model local --limit 5 --out bench-tokens.jsonl

The embedded model is slow on a shared CPU: expect minutes per case for the multi-call
methods on Hand-Crafted logs. ``--methods`` narrows the set.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

from _shared import WHO_AND_WHEN_DATA

from faultfinder.cli.common import build_llm
from faultfinder.errors import ModelNotAvailableError
from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.rows import EvalRow, latest_by_key, read_rows
from faultfinder.eval.runner import EvalOptions, run_eval
from faultfinder.registry import methods

DEFAULT_DATA = WHO_AND_WHEN_DATA
NOT_MEASURED = {"random"}  # makes no model call


def table(rows: list[EvalRow]) -> str:
    groups: dict[tuple[str, str], list[EvalRow]] = defaultdict(list)
    for row in rows:
        groups[(row.subset, row.method)].append(row)
    header = (
        f"{'subset':<20} {'method':<16} {'cases':>5} {'prompt tok':>11} {'compl. tok':>10} "
        f"{'calls':>7} {'s/case':>8} {'unparsed':>8} {'errors':>6}"
    )
    lines = [header, "-" * len(header)]
    for (subset, method), items in sorted(groups.items()):
        n = len(items)
        lines.append(
            f"{subset:<20} {method:<16} {n:>5} "
            f"{sum(r.usage.prompt_tokens for r in items) / n:>11.0f} "
            f"{sum(r.usage.completion_tokens for r in items) / n:>10.0f} "
            f"{sum(r.usage.calls + r.usage.cached_calls for r in items) / n:>7.1f} "
            f"{sum(r.wall_time_s for r in items) / n:>8.1f} "
            f"{sum(r.status == 'unparsed' for r in items):>8} "
            f"{sum(r.status in ('error', 'budget-exceeded') for r in items):>6}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--model", default="local", help="model spec (default: local)")
    parser.add_argument("--base-url", default=None)
    parser.add_argument(
        "--api-key-env", default=None, help="variable holding the key (default: the backend's)"
    )
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated method specs (default: every registered method but random)",
    )
    parser.add_argument("--limit", type=int, default=None, help="traces per subset")
    parser.add_argument("--subset", action="append", default=[], help="only this subset")
    parser.add_argument("--out", type=Path, default=Path("bench-tokens.jsonl"))
    parser.add_argument("--resume", action="store_true", help="continue --out")
    parser.add_argument("--force", action="store_true", help="overwrite --out")
    parser.add_argument("--concurrency", type=int, default=1, help="cases and calls at once")
    parser.add_argument("--cache", default="none", help="response cache file or 'none'")
    parser.add_argument(
        "--report-only", action="store_true", help="print the table of --out without running"
    )
    args = parser.parse_args()

    if not args.report_only:
        specs = (
            [s for s in args.methods.split(",") if s]
            if args.methods
            else [m for m in methods() if m not in NOT_MEASURED]
        )
        traces = load_dataset(args.data, DatasetOptions(subsets=args.subset, limit=args.limit))
        try:
            llm = build_llm(
                model=args.model,
                base_url=args.base_url,
                api_key_env=args.api_key_env,
                cache_path=args.cache,
                concurrency=args.concurrency,
                max_tokens=None,
                max_calls=None,
            )
        except ModelNotAvailableError as exc:  # no key, no extra: say so, not a traceback
            raise SystemExit(f"tokens.py: {exc}") from None
        print(f"{len(traces)} traces × {len(specs)} methods with {llm.name}", file=sys.stderr)
        outcome = asyncio.run(
            run_eval(
                traces,
                plan_methods(specs),
                llm,
                args.out,
                EvalOptions(concurrency=args.concurrency, resume=args.resume, force=args.force),
            )
        )
        rows = outcome.rows
    else:
        rows = list(latest_by_key(read_rows(args.out)).values())
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

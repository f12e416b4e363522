"""Proof by oracle on all of Who&When: every method with a judge that knows the label.

A perfect judge (``faultfinder.testing.oracle``) answers each method's question from the
trace's gold label, in that method's format; a wrong judge answers with another agent and
one of its steps. A method that reads answers correctly must then score 100% agent and
step on every case whose labelled agent speaks at the labelled step, and 0 with the wrong
judge. The cases whose label is not consistent (the labelled agent does not speak at the
labelled step) are reported separately, with the field each method recovers under the one
agent/step rule (docs/eval.md).

    python bench/oracle.py [DATA] [--no-readme]

DATA defaults to ../shared/data/who-and-when beside the repository (bench/_shared.py). The
measured figures are printed and written into bench/README.md between the
``oracle:begin`` / ``oracle:end`` markers (unless --no-readme). Exit status 1 when a
method misses 100% on a consistent case or scores above 0 with the wrong judge (a trace
with a single speaker excepted, where no other agent exists to name).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from _shared import WHO_AND_WHEN_DATA

from faultfinder.testing.oracle import ORACLE_METHODS, OracleRow, label_consistent, run_oracle
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = WHO_AND_WHEN_DATA
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- oracle:begin -->", "<!-- oracle:end -->"


def pct(hits: int, total: int) -> str:
    return f"{100 * hits / total:.1f}" if total else "-"


def subset(trace_id: str) -> str:
    return trace_id.split("/", 1)[0]


def table(rows: list[OracleRow], consistent: bool | None) -> list[str]:
    """Accuracy per subset and method (``consistent`` None: all cases)."""
    groups: dict[tuple[str, str], list[OracleRow]] = defaultdict(list)
    for r in rows:
        if consistent is None or r.consistent == consistent:
            groups[(subset(r.trace_id), r.method)].append(r)
    lines = ["| subset | method | cases | agent % | step % |", "|---|---|---|---|---|"]
    for (sub, method), rs in sorted(groups.items()):
        agent = sum(r.agent_correct for r in rs)
        step = sum(r.step_correct for r in rs)
        lines.append(
            f"| {sub} | {method} | {len(rs)} | {pct(agent, len(rs))} | {pct(step, len(rs))} |"
        )
    return lines


def odd_table(rows: list[OracleRow], traces: dict[str, Trace]) -> list[str]:
    odd = sorted(
        {r.trace_id for r in rows if not r.consistent},
        key=lambda t: (subset(t), int(t.split("/")[1])),
    )
    head = "| case | gold (agent @ step; speaker there) | " + " | ".join(ORACLE_METHODS) + " |"
    lines = [head, "|---|---|" + "---|" * len(ORACLE_METHODS)]
    for trace_id in odd:
        trace = traces[trace_id]
        label = trace.label
        assert label is not None and label.step is not None
        cells = []
        for method in ORACLE_METHODS:
            r = next(x for x in rows if x.trace_id == trace_id and x.method == method)
            got = [
                name for name, ok in (("agent", r.agent_correct), ("step", r.step_correct)) if ok
            ]
            cells.append(" + ".join(got) or "neither")
        speaker = trace.steps[label.step].agent
        lines.append(
            f"| {trace_id} | {label.agent} @ {label.step}; {speaker} | " + " | ".join(cells) + " |"
        )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    traces = [t for t in load_traces(args.data) if t.label is not None]
    by_id = {t.id: t for t in traces}
    started = time.perf_counter()
    perfect = asyncio.run(run_oracle(traces))
    wrong = asyncio.run(run_oracle(traces, wrong=True))
    elapsed = time.perf_counter() - started
    n_consistent = sum(1 for t in traces if label_consistent(t))
    single = {t.id for t in traces if len(t.agent_names()) == 1}
    wrong_hits = [r for r in wrong if r.agent_correct or r.step_correct]
    unexplained = [r for r in wrong_hits if r.trace_id not in single or r.step_correct]
    misses = [r for r in perfect if r.consistent and not (r.agent_correct and r.step_correct)]

    lines = [
        f"Measured {datetime.now(UTC).date().isoformat()}. "
        f"{len(traces)} labelled cases ({n_consistent} with the labelled agent speaking at the "
        f"labelled step), methods: {', '.join(ORACLE_METHODS)} (default configurations). "
        f"Both judges over all cases took {elapsed:.0f} s.",
        "",
        "Perfect judge, consistent labels:",
        "",
        *table(perfect, True),
        "",
        "Perfect judge, the cases whose labelled agent does not speak at the labelled step "
        "(field(s) each method recovers):",
        "",
        *odd_table(perfect, by_id),
        "",
        "Wrong judge, all cases:",
        "",
        *table(wrong, None),
        "",
        f"Wrong judge rows scoring anything: {len(wrong_hits)}"
        + (
            f" (all on single-speaker traces {', '.join(sorted({r.trace_id for r in wrong_hits}))},"
            " "
            "whose only speaker is the labelled agent, so no other agent exists to name)"
            if wrong_hits and not unexplained
            else ""
        )
        + ".",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_readme:
        readme = README.read_text(encoding="utf-8")
        if BEGIN in readme and END in readme:
            head, rest = readme.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            README.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}", encoding="utf-8")
            print(f"\nwritten into {README.relative_to(ROOT)}", file=sys.stderr)
        else:
            print(f"\n{README.name} has no {BEGIN} section; not written", file=sys.stderr)
    if misses or unexplained:
        print(
            f"FAIL: {len(misses)} perfect-judge misses, {len(unexplained)} wrong-judge hits",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

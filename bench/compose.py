"""Accuracy against tokens for ``compose`` on Who&When, with the perfect judge as verifier.

The perfect judge (``faultfinder.testing.oracle``) names the gold step whenever it may:
``compose`` only accepts one of its k shortlisted steps, so its step accuracy is the
shortlist's recall@k (minus the cases whose labelled agent does not speak at the labelled
step, which the agent/step rule marks unparsed), and the curve is measurable offline.
The shortlist weights of each trace come from the cross-validation fold that did not see
it (``bench/shortlist.py``'s protocol). Tokens are the judge's prompt + completion as the
test backend counts them (about 4 characters a token, marked estimated); the whole-log
all-at-once and step-by-step judges are the reference points. Rows with ``judge
step-by-step`` run Who&When's step-by-step judge over the shortlisted steps only (the
oracle answers Yes at the gold step), so their tokens show what a many-call judge costs
on the abbreviated view.

    python bench/compose.py [DATA] [--no-readme]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from _readme import write_section

from faultfinder.eval.datasets import load_dataset, subset_of
from faultfinder.eval.metrics import step_correct
from faultfinder.judging.method import run_method
from faultfinder.llm.client import LLM
from faultfinder.registry import create_method
from faultfinder.shortlist import conformal
from faultfinder.shortlist.train import build_table, cross_validate
from faultfinder.testing.oracle import perfect_judge
from faultfinder.traces.schema import Trace

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "who-and-when"
README = ROOT / "bench" / "README.md"
BEGIN, END = "<!-- compose:begin -->", "<!-- compose:end -->"
GROUPS = ("position", "agent", "errors")
POINTS: list[tuple[str, dict[str, object]]] = [
    ("compose k=1", {"top_k": 1}),
    ("compose k=2", {"top_k": 2}),
    ("compose k=3", {"top_k": 3}),
    ("compose k=5", {"top_k": 5}),
    ("compose k=8", {"top_k": 8}),
    ("compose k=5, budget 2000", {"top_k": 5, "budget_tokens": 2000}),
    ("compose k=5, budget 4000", {"top_k": 5, "budget_tokens": 4000}),
    ("compose k=3, judge step-by-step", {"top_k": 3, "judge": "step-by-step"}),
    ("compose k=5, judge step-by-step", {"top_k": 5, "judge": "step-by-step"}),
    (
        "compose k=5, judge step-by-step, budget 4000",
        {"top_k": 5, "judge": "step-by-step", "budget_tokens": 4000},
    ),
]
"""Points of the curve. ``budget_tokens`` is the per-case budget (``--budget-tokens``):
prompt plus reply of every call of the case; compose lowers k to fit it."""
REFERENCES = ("all-at-once", "step-by-step")
"""Whole-log judges the points are compared with (tokens relative to the first)."""


async def run_point(
    traces: list[Trace], spec: str, settings: dict[str, object], fold_files: dict[str, str]
) -> list[tuple[str, bool, int, str]]:
    """(subset, step correct, tokens, status) per trace."""
    out = []
    for trace in traces:
        options = dict(settings)
        if spec == "compose":
            options["model_path"] = fold_files[trace.id]
        method = create_method(spec, **options)
        result = await run_method(method, trace, LLM(perfect_judge(trace)), label=spec)
        assert trace.label is not None
        out.append(
            (
                subset_of(trace),
                step_correct(result.step, trace.label),
                result.usage.total_tokens,
                result.status,
            )
        )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--no-readme", action="store_true", help="print only")
    args = parser.parse_args()
    traces = load_dataset(args.data)
    started = time.perf_counter()
    table = build_table(traces, GROUPS)
    cv = cross_validate(table, GROUPS)
    recall = {
        k: {
            t.id: any(s in conformal.ranking(p)[:k] for s in t.label.acceptable_steps)  # type: ignore[union-attr]
            for t, p in zip(traces, cv.probs, strict=True)
        }
        for k in (1, 2, 3, 5, 8)
    }
    subsets = sorted({subset_of(t) for t in traces})
    lines = [
        "| subset | method | step accuracy % | shortlist recall@k % | tokens/case | "
        "tokens vs all-at-once | unparsed | budget-exceeded |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        fold_files: dict[str, str] = {}
        for fold, model in enumerate(cv.models):
            path = Path(tmp) / f"fold{fold}.json"
            path.write_text(json.dumps(model.to_json()), encoding="utf-8")
            for t, f in zip(traces, cv.folds, strict=True):
                if f == fold:
                    fold_files[t.id] = str(path)
        whole = {spec: asyncio.run(run_point(traces, spec, {}, fold_files)) for spec in REFERENCES}
        results = {
            name: asyncio.run(run_point(traces, "compose", s, fold_files)) for name, s in POINTS
        }
    for subset in subsets:
        base = [r for r in whole[REFERENCES[0]] if r[0] == subset]
        base_tokens = sum(r[2] for r in base) / len(base)
        for spec in REFERENCES:
            rs = [r for r in whole[spec] if r[0] == subset]
            lines.append(row(subset, f"{spec} (whole log)", rs, None, base_tokens))
        for name, settings in POINTS:
            rs = [r for r in results[name] if r[0] == subset]
            k = int(settings["top_k"])  # type: ignore[call-overload]
            rec = None
            if "budget_tokens" not in settings:
                members = [t for t in traces if subset_of(t) == subset]
                rec = 100 * sum(recall[k][t.id] for t in members) / len(members)
            lines.append(row(subset, name, rs, rec, base_tokens))
    elapsed = time.perf_counter() - started
    text = "\n".join(
        [
            f"{len(traces)} labelled traces; perfect judge; shortlist weights from the fold "
            f"that did not see each trace; {elapsed:.0f} s in all. Tokens estimated by the "
            "test backend (about 4 characters a token).",
            "",
            *lines,
        ]
    )
    print(text)
    if not args.no_readme:
        write_readme(text)
    return 0


def row(
    subset: str,
    name: str,
    rs: list[tuple[str, bool, int, str]],
    recall: float | None,
    base_tokens: float,
) -> str:
    n = len(rs)
    acc = 100 * sum(r[1] for r in rs) / n
    tokens = sum(r[2] for r in rs) / n
    unparsed = sum(r[3] == "unparsed" for r in rs)
    over = sum(r[3] == "budget-exceeded" for r in rs)
    rec = "-" if recall is None else f"{recall:.1f}"
    return (
        f"| {subset} | {name} | {acc:.1f} | {rec} | {tokens:.0f} | "
        f"{100 * tokens / base_tokens:.0f}% | {unparsed} | {over} |"
    )


def write_readme(text: str) -> None:
    heading = (
        "\n## Budgeted composition (`bench/compose.py`)\n\n"
        "Reproduce: `python bench/compose.py`.\n\n"
    )
    write_section(README, BEGIN, END, text, heading)


if __name__ == "__main__":
    sys.exit(main())

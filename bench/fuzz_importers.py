"""Fuzz the trace readers: crashes and silent misreads over many damaged inputs.

Run from the repository root:

    python bench/fuzz_importers.py            # --inputs 12000 --seed 0

Each input is a test-fixture trace damaged in one way (see faultfinder.testing.fuzz);
the script prints, per reader and per kind of damage, how many inputs were read cleanly,
refused with a TraceFormatError, crashed, or were misread, then the first examples of
each crash and misread. Exits 1 when any input crashed or was misread.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

from faultfinder.testing.fuzz import SPAN_TARGETS, TARGETS, fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--inputs", type=int, default=12_000, help="damaged inputs to read")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--examples", type=int, default=10, help="examples shown per verdict")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    started = time.perf_counter()
    targets = TARGETS + SPAN_TARGETS
    outcomes = fuzz(targets, args.inputs, seed=args.seed, repo=repo)
    elapsed = time.perf_counter() - started

    verdicts = Counter(o.verdict for o in outcomes)
    print(
        f"inputs: {len(outcomes)}  readers: {len(targets)}  seed: {args.seed}  "
        f"time: {elapsed:.1f} s"
    )
    print(
        f"crashes: {verdicts['crash']}  misreads: {verdicts['misread']}  "
        f"refused: {verdicts['error']}  read: {verdicts['ok']}"
    )
    print()
    print(f"{'reader':48} {'inputs':>7} {'read':>6} {'refused':>8} {'crash':>6} {'misread':>8}")
    for label in dict.fromkeys(o.target for o in outcomes):
        mine = Counter(o.verdict for o in outcomes if o.target == label)
        print(
            f"{label:48} {sum(mine.values()):7} {mine['ok']:6} {mine['error']:8} "
            f"{mine['crash']:6} {mine['misread']:8}"
        )
    print()
    kinds = Counter(o.mutation.split(" ")[0] for o in outcomes)
    print("damage kinds: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for verdict in ("crash", "misread"):
        bad = [o for o in outcomes if o.verdict == verdict]
        for o in bad[: args.examples]:
            print(f"{verdict}: {o.target} [{o.mutation}] {o.detail}")
    return 1 if verdicts["crash"] or verdicts["misread"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""How import time grows with the size of the input, for every importer.

    python bench/import_scale.py                 # add --write for bench/README.md
    python bench/import_scale.py --only ag2 --base 200

Each input is a real fixture (tests/fixtures/, or the Langfuse export in the shared
data's trace-samples/ when present, found by bench/_shared.py) repeated into ONE trace:
every copy gets fresh
span, observation, run and call ids (derived from the original id and the copy's number, in
the original's shape: hex, base64, UUID) and times shifted past the copy before it, so the
importer links and orders every copy as it would one long run. ``--base`` copies make 1x;
1x, 4x and 16x are timed, each import in a fresh process (`load_traces`, with the format
named: detection is not timed). ``otlp-nested`` makes each OTLP copy's root span a child of
the copy before's, so its spans hang off a chain as deep as the copies are many;
``otlp-agent-chain`` hangs each copy of CrewAI's agents-only run under the copy before's
first agent, so agent spans with no model call under them nest as deep;
``otlp-one-step-tools`` repeats one tool span of the fixture, so one step collects a result
per copy. Printed:
steps and seconds at each size, and the ratio 16x / 4x, which is about 4 when time grows
linearly and about 16 when it grows with the square.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _readme import write_section
from _shared import shared_dir

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SAMPLES = shared_dir() / "data" / "trace-samples"
README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- import-scale:begin -->", "<!-- import-scale:end -->"
HEADING = "\n## Import time against input size — `bench/import_scale.py`\n\n"
FACTORS = (1, 4, 16)
SHIFT_S = 3600  # each copy starts an hour after the one before it

ID_KEYS = frozenset(
    ("spanId", "parentSpanId", "span_id", "parent_span_id", "parent_id", "context.span_id",
     "id", "parentObservationId", "parent_run_id", "tool_call_id", "invocation_id")
)  # fmt: skip


def fresh(value: Any, copy: int) -> Any:
    """``value`` (an id) made unique to ``copy``, in its own shape."""
    if copy == 0 or not isinstance(value, str) or value in ("", "None"):
        return value
    digest = hashlib.blake2b(f"{value}/{copy}".encode(), digest_size=32).digest()
    if re.fullmatch(r"[0-9a-f]+", value) and len(value) % 2 == 0:
        return digest.hex()[: len(value)]
    try:
        raw = base64.b64decode(value, validate=True)
        if base64.b64encode(raw).decode() == value and raw:
            return base64.b64encode(digest[: len(raw)]).decode()
    except ValueError:
        pass
    try:
        uuid.UUID(value)
        return str(uuid.UUID(bytes=digest[:16]))
    except ValueError:
        return f"{value}-{copy}"


def shifted(value: Any, copy: int) -> Any:
    """A time moved ``copy`` hours later, written as it was (ISO text, or nanoseconds or
    milliseconds since the epoch)."""
    if copy == 0:
        return value
    if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
        number = int(value)
        scale = 10**9 if number > 10**17 else 10**6 if number > 10**14 else 10**3
        out = number + copy * SHIFT_S * scale
        return str(out) if isinstance(value, str) else out
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
        later = moment + datetime.timedelta(seconds=copy * SHIFT_S)
        text = later.isoformat()
        return text.replace("+00:00", "Z") if value.endswith("Z") else text
    return value


TIME_KEYS = re.compile(r"(?i)(start|end)_?time(_unix_nano|UnixNano)?$|^timestamp$|Time$")


def renewed(node: Any, copy: int) -> Any:
    """A deep copy of ``node`` with every id renewed and every time shifted for ``copy``."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key in ID_KEYS and not isinstance(value, dict | list):
                out[key] = fresh(value, copy)
            elif TIME_KEYS.search(key) and not isinstance(value, dict | list):
                out[key] = shifted(value, copy)
            else:
                out[key] = renewed(value, copy)
        return out
    if isinstance(node, list):
        return [renewed(v, copy) for v in node]
    return node


def _otlp_spans(source: Path) -> tuple[list[Any], list[Any]]:
    """An OTLP/JSON-lines file's documents, and every span in them in order."""
    docs = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    spans = [
        span
        for doc in docs
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    return docs, spans


def _otlp(source: Path, copies: int, target: Path) -> Path:
    """OTLP/JSON lines: every span of every line repeated inside the first line's scope."""
    docs, spans = _otlp_spans(source)
    with target.open("w") as out:
        for copy in range(copies):
            doc = json.loads(json.dumps(docs[0]))
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = renewed(spans, copy)
            out.write(json.dumps(doc) + "\n")
    return target


def _otlp_nested(source: Path, copies: int, target: Path) -> Path:
    """As :func:`_otlp`, but each copy's root span is a child of the copy before's root, so
    the copies make a chain as deep as they are many (a run that calls itself again)."""
    _otlp(source, copies, target)
    docs = [json.loads(line) for line in target.read_text().splitlines()]
    spans = [doc["resourceSpans"][0]["scopeSpans"][0]["spans"] for doc in docs]
    roots = [[s for s in copy if not s.get("parentSpanId")] for copy in spans]
    for copy in range(1, len(docs)):
        for root in roots[copy]:
            root["parentSpanId"] = roots[copy - 1][0]["spanId"]
    target.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    return target


def _otlp_one_step_tools(source: Path, copies: int, target: Path) -> Path:
    """The fixture once, its first tool span repeated ``copies`` times (fresh span ids, the
    same parent and times): every repeat is attached to the one step that asked for the
    tool, which collects as many results as there are copies."""
    docs, spans = _otlp_spans(source)
    tool = next(s for s in spans if any(a["key"].endswith("tool.name") for a in s["attributes"]))
    for copy in range(1, copies):
        spans.append({**tool, "spanId": fresh(tool["spanId"], copy)})
    doc = json.loads(json.dumps(docs[0]))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"] = spans
    target.write_text(json.dumps(doc) + "\n")
    return target


def _otlp_agent_chain(source: Path, copies: int, target: Path) -> Path:
    """As :func:`_otlp`, but each copy's root span is a child of the copy before's first
    span with an input and an output under its root (a crew whose agent runs the next
    crew), so agent spans with no model call under them nest as deep as the copies."""
    _otlp(source, copies, target)
    docs = [json.loads(line) for line in target.read_text().splitlines()]
    spans = [doc["resourceSpans"][0]["scopeSpans"][0]["spans"] for doc in docs]
    io = {"input.value", "output.value"}
    for copy in range(1, len(docs)):
        outer = next(
            s
            for s in spans[copy - 1]
            if s.get("parentSpanId") and io <= {a["key"] for a in s["attributes"]}
        )
        for root in (s for s in spans[copy] if not s.get("parentSpanId")):
            root["parentSpanId"] = outer["spanId"]
    target.write_text("".join(json.dumps(doc) + "\n" for doc in docs))
    return target


def _lines(source: Path, copies: int, target: Path) -> Path:
    """JSON lines repeated (Phoenix's spans, a generic chat)."""
    records = [json.loads(line) for line in source.read_text().splitlines() if line.strip()]
    with target.open("w") as out:
        for copy in range(copies):
            for record in renewed(records, copy):
                out.write(json.dumps(record) + "\n")
    return target


def _langfuse(source: Path, copies: int, target: Path) -> Path:
    doc = json.loads(source.read_text())
    field = "observations" if "observations" in doc else "data"
    doc[field] = [o for copy in range(copies) for o in renewed(doc[field], copy)]
    target.write_text(json.dumps(doc))
    return target


def _langsmith(source: Path, copies: int, target: Path) -> Path:
    root = json.loads(source.read_text())
    children = root.get("child_runs") or []
    root = dict(root)
    root["child_runs"] = [c for copy in range(copies) for c in renewed(children, copy)]
    target.write_text(json.dumps(root))
    return target


def _mlflow(source: Path, copies: int, target: Path) -> Path:
    doc = json.loads(source.read_text())
    spans = doc["data"]["spans"]
    roots = [s for s in spans if not s.get("parent_span_id")]
    rest = [s for s in spans if s.get("parent_span_id")]
    doc["data"]["spans"] = roots + [s for copy in range(copies) for s in renewed(rest, copy)]
    target.write_text(json.dumps(doc))
    return target


def _whoandwhen(source: Path, copies: int, target: Path) -> Path:
    doc = json.loads(source.read_text())
    doc["history"] = doc["history"] * copies
    target.write_text(json.dumps(doc))
    return target


def _traceelephant(source: Path, copies: int, target: Path) -> Path:
    records = json.loads((source / "step_records.json").read_text())
    target.mkdir(parents=True, exist_ok=True)
    (target / "trace_metadata.json").write_text((source / "trace_metadata.json").read_text())
    out = []
    for copy in range(copies):
        for record in records:
            out.append({**renewed(record, copy), "step_id": len(out) + 1})
    (target / "step_records.json").write_text(json.dumps(out))
    return target


def _ag2(source: Path, copies: int, target: Path) -> Path:
    """The group chat's file log: its events, calls and completions repeated, call ids
    and invocation ids renewed, times shifted (also inside each event's JSON state)."""
    lines = source.read_text().splitlines()
    first = next(n for n, line in enumerate(lines) if '"event_name"' in line)
    stamp = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+")
    out = list(lines[:first])
    for copy in range(copies):
        later = datetime.timedelta(seconds=copy * SHIFT_S)

        def move(match: re.Match[str], later: datetime.timedelta = later) -> str:
            moment = datetime.datetime.strptime(match.group(0), "%Y-%m-%d %H:%M:%S.%f")
            return (moment + later).strftime("%Y-%m-%d %H:%M:%S.%f")

        for line in lines[first:]:
            line = stamp.sub(move, line).replace("call_g1", f"call_g1c{copy}")
            out.append(re.sub(r'("invocation_id": "[0-9a-f-]+)"', rf'\1-{copy}"', line))
    target.write_text("\n".join(out) + "\n")
    return target


Scaler = Callable[[Path, int, Path], Path]
CASES: dict[str, tuple[str, Path, Scaler, str, int]] = {
    # name: (format, fixture, scaler, suffix of the written input, copies at 1x)
    "ag2": ("ag2", FIXTURES / "otel" / "ag2-groupchat.runtime.log", _ag2, ".log", 100),
    "otlp": ("otlp", FIXTURES / "otel" / "traceloop-team.otlp.jsonl", _otlp, ".jsonl", 300),
    "otlp-nested": ("otlp", FIXTURES / "otel" / "traceloop-team.otlp.jsonl", _otlp_nested,
                    ".jsonl", 300),
    "otlp-one-step-tools": ("otlp", FIXTURES / "otel" / "traceloop-team.otlp.jsonl",
                            _otlp_one_step_tools, ".jsonl", 300),
    "otlp-agent-chain": ("otlp", FIXTURES / "otel" / "crewai-agents-only.otlp.jsonl",
                         _otlp_agent_chain, ".jsonl", 100),
    "phoenix": ("phoenix", FIXTURES / "importers" / "phoenix" / "spans.jsonl", _lines,
                ".jsonl", 500),
    "langfuse": ("langfuse", SAMPLES / "langfuse" / "crewai-2025-07-11.trace.json",
                 _langfuse, ".json", 300),
    "langsmith": ("langsmith", FIXTURES / "otel" / "langsmith-team.runs.json", _langsmith,
                  ".json", 300),
    "mlflow": ("mlflow", FIXTURES / "otel" / "mlflow-team.trace.json", _mlflow, ".json", 300),
    "whoandwhen": ("who-and-when", FIXTURES / "importers" / "whoandwhen" / "Hand-Crafted" /
                   "1.json", _whoandwhen, ".json", 300),
    "traceelephant": ("traceelephant", FIXTURES / "importers" / "traceelephant" /
                      "captain-runs-gaia" / "task_7", _traceelephant, "", 300),
    "generic": ("generic", FIXTURES / "importers" / "generic" / "chat.jsonl", _lines,
                ".jsonl", 2000),
}  # fmt: skip

TIME_ONE = """
import json, sys, time
from faultfinder.traces.loader import load_traces
start = time.perf_counter()
traces = load_traces(sys.argv[1], format=sys.argv[2])
took = time.perf_counter() - start
print(json.dumps([sum(len(t.steps) for t in traces), took]))
"""


def timed(path: Path, fmt: str) -> tuple[int, float]:
    """Steps imported from ``path`` and the seconds the import took, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", TIME_ONE, str(path), fmt],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    steps, took = json.loads(done.stdout)
    return int(steps), float(took)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", choices=sorted(CASES), help="one importer")
    parser.add_argument("--base", type=int, help="copies at 1x (default: per importer)")
    parser.add_argument("--write", action="store_true", help="write the table into README.md")
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    lines = [
        f"Measured {datetime.date.today().isoformat()} at commit {commit or 'unknown'}, one "
        "import per fresh process, 2 shared cores. Steps and seconds at 1x, 4x and 16x "
        "copies of the fixture in one trace; the last column is 16x / 4x (4 = linear):",
        "",
        "| importer | copies at 1x | steps 1x | s 1x | s 4x | steps 16x | s 16x | 16x/4x |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or list(CASES):
            fmt, source, scale, suffix, base = CASES[name]
            if not source.exists():
                print(f"{name}: {source} not found, skipped", file=sys.stderr)
                continue
            base = args.base or base
            got = []
            for factor in FACTORS:
                target = Path(tmp) / f"{name}-{factor}{suffix}"
                got.append(timed(scale(source, base * factor, target), fmt))
            ratio = got[2][1] / got[1][1] if got[1][1] else float("nan")
            lines.append(
                f"| {name} | {base} | {got[0][0]:,} | {got[0][1]:.2f} | {got[1][1]:.2f} "
                f"| {got[2][0]:,} | {got[2][1]:.2f} | {ratio:.1f} |"
            )
            print(lines[-1], flush=True)
    text = "\n".join(lines)
    print(text)
    if args.write:
        write_section(README, BEGIN, END, text, HEADING)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Mutation fuzzing of the trace readers: every input gives a clear error or a correct trace.

Each :class:`FuzzTarget` names a reader (an importer's ``--format``, or ``faultfinder`` for
canonical files) and a seed input that it reads cleanly. :func:`fuzz` copies the seed,
damages one of its JSON files in one way (:data:`MUTATIONS`), reads the copy and judges the
outcome against what that damage must cause:

* **crash** — anything but a TraceFormatError escaped (or a trace that cannot be written
  and read back);
* **misread** — the reader accepted damage it had to report: a renamed key that it maps
  (``mistake_agent`` → ``mistake_agnet``) or a value of another type (a number where text
  belongs) read without an error or a warning and without keeping the value verbatim;
  NaN, huge numbers, duplicate keys, invalid UTF-8 or deep nesting accepted; a line
  separator (U+2028...) or a harmless re-encoding (CRLF, BOM, key order) changing the trace;
* **error** / **ok** — the reader did what it had to.

Adding a reader to the fuzzer is one line in :data:`TARGETS`. Seeds are paths relative to
the repository root (test fixtures), so the fuzzer runs from a checkout.
"""

from __future__ import annotations

import json
import random
import shutil
import string
import tempfile
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from faultfinder.errors import TraceFormatError, TraceFormatWarning
from faultfinder.traces.importers._common import is_credential_key
from faultfinder.traces.io import MAX_NESTING, trace_from_dict
from faultfinder.traces.loader import load_traces
from faultfinder.traces.schema import Trace


@dataclass(frozen=True)
class FuzzTarget:
    """A reader and a seed input it reads cleanly."""

    format: str
    """Importer name (``--format``), or 'faultfinder' for canonical trace files."""
    seed: str
    """Seed file or directory, relative to the repository root."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Importer options (``--map``) the seed needs."""

    @property
    def label(self) -> str:
        return f"{self.format}:{'/'.join(Path(self.seed).parts[-2:])}"


_FIX = "tests/fixtures"
TARGETS: list[FuzzTarget] = [
    FuzzTarget("who-and-when", f"{_FIX}/importers/whoandwhen/Algorithm-Generated/1.json"),
    FuzzTarget("who-and-when", f"{_FIX}/importers/whoandwhen/Hand-Crafted/1.json"),
    FuzzTarget("generic", f"{_FIX}/importers/generic/chat.jsonl"),
    FuzzTarget(
        "generic",
        f"{_FIX}/importers/generic/wrapped.json",
        {
            "messages_key": "turns",
            "agent_field": "speaker",
            "role_field": "speaker",
            "content_field": "text",
            "step_base": "1",
        },
    ),
    FuzzTarget("traceelephant", f"{_FIX}/importers/traceelephant/captain-runs-gaia/task_7"),
    FuzzTarget("traceelephant", f"{_FIX}/importers/traceelephant/magentic-runs-old/task_3"),
    FuzzTarget("faultfinder", f"{_FIX}/core/tiny_trace.json"),
    FuzzTarget("faultfinder", f"{_FIX}/eval/traces.jsonl"),
]
"""Readers under test. New importers add one line here."""

SPAN_TARGETS: list[FuzzTarget] = [
    FuzzTarget("otlp", f"{_FIX}/importers/otlp/genai.json"),
    FuzzTarget("otlp", f"{_FIX}/otel/openai-agents-openinference.otlp.jsonl"),
    FuzzTarget("langfuse", f"{_FIX}/importers/langfuse/observations-page.json"),
    FuzzTarget("phoenix", f"{_FIX}/importers/phoenix/rest-spans.json"),
    FuzzTarget("phoenix", f"{_FIX}/importers/phoenix/spans.jsonl"),
    FuzzTarget("ag2", f"{_FIX}/importers/ag2/runtime.jsonl"),
]
"""Readers of tracing formats (OTLP, Langfuse, Phoenix, AG2 logs). They must never crash;
their misreads are counted but not yet zero: span attributes and payload fields they do not
map (an attribute key with a typo, a damaged key inside a free-form message) are dropped
rather than kept verbatim, which the judge counts as a misread."""

Verdict = Literal["ok", "error", "crash", "misread"]
Expect = Literal["error", "flag", "same", "any"]
"""What a mutation must cause: an error; an error or a warning unless the value is kept
verbatim; the same traces as the seed; anything but a crash."""


@dataclass
class Mutation:
    """One damaged input and what reading it must do."""

    name: str
    files: dict[str, bytes]
    expect: Expect
    keep: Any = None
    """For 'flag': the new value, accepted silently only if it appears verbatim."""
    char: str | None = None
    """For 'same' with an inserted character: it must survive into the trace."""


@dataclass
class Outcome:
    target: str
    mutation: str
    verdict: Verdict
    detail: str = ""


# Distinctive values, so a verbatim search cannot find them by chance.
_VALUES: list[Any] = [918273, 918.273, "fz918273", ["fz918273"], {"fz": 918273}, True, None]
_RAW_TOKENS = ["NaN", "Infinity", "-Infinity", "1e999", "9" * 25, "-" + "7" * 5000]
_SEPARATORS = ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c"]
_SENTINEL = "\u0000fz-token\u0000"


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, (*path, i))


def _set(doc: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = new
    return doc


def _rename(doc: Any, path: tuple[Any, ...], new_key: str) -> None:
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    items = list(parent.items())
    parent.clear()
    for k, v in items:
        parent[new_key if k == path[-1] else k] = v


def _typo(key: str, rng: random.Random) -> str:
    if len(key) >= 3 and rng.random() < 0.5:
        i = rng.randrange(len(key) - 1)
        swapped = key[:i] + key[i + 1] + key[i] + key[i + 2 :]
        if swapped != key:
            return swapped
    if len(key) >= 4 and rng.random() < 0.5:
        i = rng.randrange(len(key))
        return key[:i] + key[i + 1 :]
    i = rng.randrange(len(key) + 1)
    return key[:i] + rng.choice(string.ascii_lowercase) + key[i:]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__


class _Doc:
    """One JSON file of the seed: a single value, or JSONL lines."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.name = name
        self.jsonl = name.endswith(".jsonl")
        text = raw.decode("utf-8")
        if self.jsonl:
            self.values = [json.loads(line) for line in text.split("\n") if line.strip()]
        else:
            self.values = [json.loads(text)]

    def dump(self, values: list[Any], *, ascii_only: bool = False) -> bytes:
        if self.jsonl:
            lines = [json.dumps(v, ensure_ascii=ascii_only) for v in values]
            return ("\n".join(lines) + "\n").encode("utf-8")
        return json.dumps(values[0], ensure_ascii=ascii_only, indent=1).encode("utf-8")


def _copy_values(doc: _Doc) -> list[Any]:
    return json.loads(json.dumps(doc.values))


def mutate(files: dict[str, bytes], rng: random.Random) -> Mutation:
    """Damage one JSON file of ``files`` in one randomly chosen way."""
    names = sorted(n for n in files if n.endswith((".json", ".jsonl")))
    name = rng.choice(names)
    doc = _Doc(name, files[name])
    kind = rng.choice(list(MUTATIONS))
    mutation = MUTATIONS[kind](doc, files[name], rng)
    if mutation is None:  # not applicable to this file: fall back to a key rename
        mutation = _m_rename(doc, files[name], rng) or Mutation("noop", {}, "same")
    out = dict(files)
    out.update(mutation.files)
    mutation.files = out
    return mutation


def _where(doc: _Doc, line: int, path: tuple[Any, ...]) -> str:
    place = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return f"{doc.name}{f':{line + 1}' if doc.jsonl else ''}{place}"


def _pick_line(doc: _Doc, rng: random.Random) -> tuple[list[Any], int]:
    values = _copy_values(doc)
    return values, rng.randrange(len(values))


def _m_rename(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    keys = [(p, v) for p, v in _nodes(values[line]) if p and isinstance(p[-1], str)]
    if not keys:
        return None
    path, _ = rng.choice(keys)
    new_key = _typo(path[-1], rng)
    parent = values[line]
    for part in path[:-1]:
        parent = parent[part]
    if new_key in parent:
        return None
    _rename(values[line], path, new_key)
    secret = is_credential_key(path[-1]) or is_credential_key(new_key)
    return Mutation(
        f"rename {_where(doc, line, path)} -> {new_key!r}",
        {doc.name: doc.dump(values)},
        "any" if secret else "flag",
        keep=new_key,
    )


def _m_retype(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    nodes = [(p, v) for p, v in _nodes(values[line]) if p]
    if not nodes:
        return None
    path, old = rng.choice(nodes)
    choices = [v for v in _VALUES if _json_type(v) != _json_type(old)]
    new = rng.choice(choices)
    values[line] = _set(values[line], path, new)
    # Credentials are dropped on purpose, so their values cannot be kept.
    secret = any(isinstance(p, str) and is_credential_key(p) for p in path)
    expect: Expect = "any" if new is None or secret else "flag"
    return Mutation(
        f"retype {_where(doc, line, path)} {_json_type(old)}->{_json_type(new)}",
        {doc.name: doc.dump(values)},
        expect,
        keep=(path[-1], new),
    )


def _m_token(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    nodes = [p for p, v in _nodes(values[line]) if p and not isinstance(v, dict | list)]
    if not nodes:
        return None
    values[line] = _set(values[line], rng.choice(nodes), _SENTINEL)
    token = rng.choice(_RAW_TOKENS)
    text = doc.dump(values).decode("utf-8").replace(json.dumps(_SENTINEL), token, 1)
    return Mutation(f"token {token[:8]}", {doc.name: text.encode("utf-8")}, "error")


def _m_nesting(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    nodes = [p for p, _ in _nodes(values[line]) if p]
    if not nodes:
        return None
    depth = rng.choice([MAX_NESTING + 1, 2 * MAX_NESTING, 900, 5000, 200_000])
    values[line] = _set(values[line], rng.choice(nodes), _SENTINEL)
    text = doc.dump(values).decode("utf-8")
    text = text.replace(json.dumps(_SENTINEL), "[" * depth + "]" * depth, 1)
    return Mutation(f"nesting {depth}", {doc.name: text.encode("utf-8")}, "error")


def _m_duplicate(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    objects = [p for p, v in _nodes(values[line]) if isinstance(v, dict) and v]
    if not objects:
        return None
    path = rng.choice(objects)
    target = values[line]
    for part in path:
        target = target[part]
    key = rng.choice(list(target))
    target[_SENTINEL] = "fz918273"
    text = doc.dump(values).decode("utf-8").replace(json.dumps(_SENTINEL), json.dumps(key), 1)
    return Mutation(f"duplicate {key!r}", {doc.name: text.encode("utf-8")}, "error")


def _m_separator(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    values, line = _pick_line(doc, rng)
    strings = [
        (p, v)
        for p, v in _nodes(values[line])
        if p and isinstance(v, str) and len(v) >= 2 and not v.lstrip().startswith("ChatCompl")
    ]
    if not strings:
        return None
    path, old = rng.choice(strings)
    if any(isinstance(p, str) and is_credential_key(p) for p in path):
        return None
    char = rng.choice(_SEPARATORS)
    at = rng.randrange(1, len(old))
    values[line] = _set(values[line], path, old[:at] + char + old[at:])
    return Mutation(
        f"separator U+{ord(char):04X} in {_where(doc, line, path)}",
        {doc.name: doc.dump(values)},
        "same",
        char=char,
        keep=(path[-1], old[:at] + char + old[at:]),
    )


def _m_repr(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    """Damage the inside of a ``ChatCompletion(...)`` repr string (read by a parser)."""
    values, line = _pick_line(doc, rng)
    reprs = [
        (p, v)
        for p, v in _nodes(values[line])
        if p and isinstance(v, str) and v.lstrip().startswith("ChatCompl")
    ]
    if not reprs:
        return None
    path, old = rng.choice(reprs)
    at = rng.randrange(len(old))
    new = rng.choice(
        [
            old[:at] + old[at + 1 :],
            old[:at] + rng.choice("()[]{},='\"\\=.:") + old[at:],
            old[:at] + "(" * rng.choice([50, 300, 5000]) + old[at:],
            old[:at] + "=" + "9" * 5000 + old[at:],
            old[:at],
        ]
    )
    values[line] = _set(values[line], path, new)
    return Mutation(f"repr {_where(doc, line, path)}", {doc.name: doc.dump(values)}, "any")


def _m_bytes(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    at = rng.randrange(len(raw) + 1)
    bad = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80", b"\xf0\x9f"])
    return Mutation("invalid utf-8", {doc.name: raw[:at] + bad + raw[at:]}, "error")


def _m_truncate(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    return Mutation("truncate", {doc.name: raw[: rng.randrange(len(raw))]}, "any")


def _m_damage_line(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    if not doc.jsonl or len(doc.values) < 2:
        return None
    lines = doc.dump(doc.values).decode("utf-8").split("\n")
    n = rng.randrange(1, len(doc.values))
    cut = rng.randrange(1, max(2, len(lines[n])))
    lines[n] = lines[n][:cut] + rng.choice(["", "}", "]", ",", '{"x":'])
    try:  # a cut that still leaves valid JSON is a different message, not damage
        json.loads(lines[n])
        expect: Expect = "any"
    except ValueError:
        expect = "error"
    return Mutation("damage later line", {doc.name: "\n".join(lines).encode("utf-8")}, expect)


def _m_reencode(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    style = rng.choice(["crlf", "bom", "ascii", "reorder", "compact"])
    values = _copy_values(doc)
    if style == "crlf":
        data = raw.replace(b"\n", b"\r\n")
    elif style == "bom":
        data = b"\xef\xbb\xbf" + raw
    elif style == "ascii":
        data = doc.dump(values, ascii_only=True)
    elif style == "reorder":
        for _, node in _nodes(values):
            if isinstance(node, dict):
                items = list(node.items())
                rng.shuffle(items)
                node.clear()
                node.update(items)
        data = doc.dump(values)
    else:
        data = doc.dump(values).replace(b"\n ", b"\n")
    return Mutation(f"re-encode {style}", {doc.name: data}, "same")


def _m_empty(doc: _Doc, raw: bytes, rng: random.Random) -> Mutation | None:
    return Mutation("empty file", {doc.name: rng.choice([b"", b"\n", b"  \n\n"])}, "error")


MUTATIONS: dict[str, Callable[[_Doc, bytes, random.Random], Mutation | None]] = {
    "rename": _m_rename,
    "retype": _m_retype,
    "token": _m_token,
    "nesting": _m_nesting,
    "duplicate": _m_duplicate,
    "separator": _m_separator,
    "repr": _m_repr,
    "bytes": _m_bytes,
    "truncate": _m_truncate,
    "damage-line": _m_damage_line,
    "reencode": _m_reencode,
    "empty": _m_empty,
}
"""Kinds of damage, chosen uniformly per input."""


def _free_form(trace: dict[str, Any]) -> list[Any]:
    """Parts of a dumped trace that keep source data verbatim."""
    parts: list[Any] = [trace.get("metadata"), trace.get("task")]
    for step in trace.get("steps", []):
        parts += [step.get("metadata"), step.get("request"), step.get("input_messages")]
        parts += [step.get("content"), step.get("role"), step.get("source_id")]
        parts += [step.get("tool_calls"), step.get("tool_results")]
    parts += [agent.get("config") for agent in trace.get("agents", [])]
    parts.append({agent["name"]: agent.get("system_prompt") for agent in trace.get("agents", [])})
    return parts


def _deep(value: Any) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """Nodes of ``value``, also inside strings that hold JSON text (tool arguments)."""
    for path, node in _nodes(value):
        yield path, node
        if isinstance(node, str) and node[:1] in ("{", "["):
            try:
                inner = json.loads(node)
            except ValueError:
                continue
            yield from _nodes(inner, path)


def _contains(haystack: Any, key: Any, value: Any) -> bool:
    """True when ``value`` (same JSON type) sits anywhere in ``haystack`` — under ``key``
    for booleans, which are too common to count as found on their own."""
    wanted = json.dumps(value, sort_keys=True)
    for path, node in _deep(haystack):
        if isinstance(value, bool) and (not path or path[-1] != key):
            continue
        if _json_type(node) == _json_type(value) and json.dumps(node, sort_keys=True) == wanted:
            return True
        structure = isinstance(value, dict | list) and isinstance(node, str)
        if structure and node == json.dumps(value, ensure_ascii=False):
            return True
    return False


def _has_key(haystack: Any, key: str) -> bool:
    return any(p and p[-1] == key for p, _ in _deep(haystack))


@dataclass
class _Read:
    traces: list[Trace] | None
    warnings: set[str]
    error: str | None = None
    crash: str | None = None


def _read(target: FuzzTarget, where: Path) -> _Read:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            traces = load_traces(where, format=target.format, **dict(target.options))
            for trace in traces:  # what a writer writes, a reader must read back
                again = trace_from_dict(json.loads(trace.model_dump_json()), "<round trip>")
                if again != trace:
                    return _Read(None, set(), crash="trace changed on write + read back")
        except TraceFormatError as exc:
            return _Read(None, set(), error=str(exc))
        except Exception as exc:  # the point of the fuzzer: any other exception is a crash
            return _Read(None, set(), crash=f"{type(exc).__name__}: {str(exc)[:120]}")
    messages = {str(w.message) for w in caught if issubclass(w.category, TraceFormatWarning)}
    return _Read(traces, messages)


def _dumps(traces: list[Trace]) -> list[dict[str, Any]]:
    # The roster's order follows key order in some sources, which JSON does not fix.
    dumped = [t.model_dump(mode="json", exclude={"source": {"path"}}) for t in traces]
    for d in dumped:
        d["agents"] = sorted(d["agents"], key=lambda a: json.dumps(a, sort_keys=True))
    return dumped


def judge(mutation: Mutation, read: _Read, baseline: _Read) -> tuple[Verdict, str]:
    """The verdict for one read of one damaged input."""
    if read.crash is not None:
        return "crash", read.crash
    if read.traces is None:
        if mutation.expect == "same" and mutation.char is None:
            return "misread", f"harmless re-encoding refused: {read.error}"
        if mutation.char is not None and "'(json)'" in (read.error or ""):
            # The JSON was valid: a reader that calls it broken cut a line at the separator.
            return "misread", f"U+{ord(mutation.char):04X} broke the JSON: {read.error}"
        return "error", read.error or ""
    assert baseline.traces is not None
    dumped = _dumps(read.traces)
    new_warnings = read.warnings - baseline.warnings
    if mutation.expect == "error":
        return "misread", "accepted input it had to refuse"
    if mutation.expect == "same":
        if mutation.char is None:
            same = dumped == _dumps(baseline.traces) and not new_warnings
            return ("ok", "") if same else ("misread", "re-encoding changed the traces")
        strings = (v for _, v in _deep(dumped) if isinstance(v, str))
        if not any(mutation.char in v for v in strings):
            return "misread", f"U+{ord(mutation.char):04X} lost"
        return "ok", ""
    if mutation.expect == "flag" and not new_warnings:
        if isinstance(mutation.keep, str):  # a renamed key must be kept as it is
            found = any(_has_key(part, mutation.keep) for d in dumped for part in _free_form(d))
        else:
            key, value = mutation.keep
            found = any(_contains(part, key, value) for d in dumped for part in _free_form(d))
        if not found:
            return "misread", "damage accepted silently and not kept verbatim"
    return "ok", ""


def _write(files: Mapping[str, bytes], root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def seed_files(target: FuzzTarget, repo: Path) -> tuple[dict[str, bytes], str]:
    """The seed's files (relative name → bytes) and the name to read."""
    seed = repo / target.seed
    if seed.is_dir():
        files = {str(p.relative_to(seed)): p.read_bytes() for p in seed.rglob("*") if p.is_file()}
        return files, "."
    return {seed.name: seed.read_bytes()}, seed.name


def fuzz(
    targets: list[FuzzTarget], n: int, *, seed: int = 0, repo: Path | None = None
) -> list[Outcome]:
    """Read ``n`` damaged inputs spread over ``targets``; one Outcome each."""
    repo = repo or Path.cwd()
    rng = random.Random(seed)
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="ff-fuzz-") as tmp:
        for t_index, target in enumerate(targets):
            files, entry = seed_files(target, repo)
            root = Path(tmp) / f"t{t_index}" / Path(target.seed).name
            _write(files, root)
            where = root / entry if entry != "." else root
            baseline = _read(target, where)
            if baseline.traces is None:
                raise RuntimeError(f"seed {target.seed} does not read: {baseline}")
            share = n // len(targets) + (1 if t_index < n % len(targets) else 0)
            for _ in range(share):
                mutation = mutate(files, rng)
                _write(mutation.files, root)
                verdict, detail = judge(mutation, _read(target, where), baseline)
                outcomes.append(Outcome(target.label, mutation.name, verdict, detail))
    return outcomes

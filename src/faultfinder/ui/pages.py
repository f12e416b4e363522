"""Context for each page: plain values gathered from the catalog for the templates."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultfinder.errors import FaultfinderError
from faultfinder.replay.outcome import answers_match
from faultfinder.replay.recorder import META_FILE, read_meta
from faultfinder.replay.trust import stored_command_note
from faultfinder.shown import clip_name, safe
from faultfinder.traces.schema import Step, ToolCall
from faultfinder.ui import eval_view, graph_svg, replay_view, trace_view
from faultfinder.ui.catalog import (
    Catalog,
    DoverEntry,
    EvalEntry,
    GraphEntry,
    Problem,
    ReplayEntry,
    TraceEntry,
    unread,
)
from faultfinder.ui.names import shown_name

FILTERS = ("q", "kind", "source", "outcome", "attributed")


@dataclass
class IndexRow:
    key: str
    trace_id: str
    task: str
    kind: str
    source: str
    outcome: str
    steps: int
    agents: int
    answers: int
    path: str


def index(catalog: Catalog, query: dict[str, str]) -> dict[str, Any]:
    """Every trace with its filters; the other artefacts in their own lists. Linear in
    what the catalog holds: a trace's answers are counted by one look-up in the index by
    trace id."""
    chosen = {name: query.get(name, "").strip() for name in FILTERS}
    rows: list[IndexRow] = []
    for entry in list(catalog.traces.values()):  # a snapshot: jobs add traces meanwhile
        t = entry.trace
        rows.append(
            IndexRow(
                key=entry.key,
                trace_id=t.id,
                task=" ".join(t.task.split())[:160],
                kind=entry.kind,
                source=t.source.format,
                outcome=entry.outcome,
                steps=len(t.steps),
                agents=len(t.agent_names()),
                answers=len(catalog.answer_positions(t.id)),
                path=str(entry.path),
            )
        )
    # A filter's choices are names as shown, clipped: a long one stays a short query.
    options = {
        "kind": sorted({r.kind for r in rows}),
        "source": sorted({clip_name(r.source) for r in rows}),
        "outcome": sorted({clip_name(r.outcome) for r in rows}),
        "attributed": ["yes", "no"],
    }
    shown = [r for r in rows if _keep(r, chosen)]
    shown.sort(key=lambda r: (r.source, r.trace_id))
    return {
        "rows": shown,
        "total": len(rows),
        "chosen": chosen,
        "options": options,
        "graphs": sorted(list(catalog.graphs.values()), key=lambda g: str(g.path)),
        "evals": sorted(list(catalog.evals.values()), key=lambda e: str(e.path)),
        "dovers": sorted(list(catalog.dovers.values()), key=lambda d: str(d.path)),
        "replays": sorted(list(catalog.replays.values()), key=lambda r: str(r.branch_dir)),
        "answer_files": sorted(
            {
                str(a.path)
                for a in catalog.attributions
                if a.origin in ("attribution", "ui", "saved")
            }
        ),
        # Reasons are error messages: machine paths in them are cut to what shown() gives.
        "problems": [Problem(p.path, catalog.roots.scrub(p.reason)) for p in catalog.problems],
    }


def _keep(row: IndexRow, chosen: dict[str, str]) -> bool:
    q = chosen["q"].casefold()
    if q and q not in row.trace_id.casefold() and q not in row.task.casefold():
        return False
    for name in ("kind", "source", "outcome"):
        if chosen[name] and clip_name(getattr(row, name)) != chosen[name]:
            return False
    if chosen["attributed"] == "yes" and not row.answers:
        return False
    return not (chosen["attributed"] == "no" and row.answers)


def trace(catalog: Catalog, entry: TraceEntry, selected: int | None) -> dict[str, Any]:
    t = entry.trace
    positions = catalog.answer_positions(t.id)
    answers = trace_view.answer_rows(t, [catalog.attributions[i] for i in positions])
    for row, position in zip(answers, positions, strict=True):
        row.index = position
    if selected is None or all(r.index != selected for r in answers):
        selected = answers[0].index if answers else None
    chosen = next((r for r in answers if r.index == selected), None)
    marks = trace_view.marks_for(t, answers, selected)
    return {
        "entry": entry,
        "source_file": source_file(catalog, entry),
        "trace": t,
        "rows": trace_view.step_rows(t),
        "timeline": trace_view.timeline(t, marks),
        "marks": marks,
        "answers": answers,
        "chosen": chosen,
        "agreements": trace_view.agreements(answers),
        "echo": trace_view.echo_votes(chosen.details) if chosen else [],
        "chief": trace_view.chief_path(chosen.details) if chosen else None,
        "graphs": catalog.graphs_for(t.id),
        "replays": catalog.replays_of(entry.key),
        "branches": branch_tree(catalog, entry.key),
        "suggestions": suggested_edits(catalog, t.id) if entry.run_dir is not None else [],
        "recorded_command": recorded_command(entry.run_dir) if entry.run_dir else "",
        "lane_height": trace_view.LANE_HEIGHT,
        "lane_chars": trace_view.LANE_CHARS,
        "step_width": trace_view.step_width(len(t.steps)),
    }


def source_file(catalog: Catalog, entry: TraceEntry) -> Path | None:
    """The file the trace page links as its source (``/raw`` serves it): the case's own
    file; None for a trace read from a whole directory (a TraceElephant run), which
    ``/raw`` never serves."""
    real = catalog.roots.contains(entry.path)
    return entry.path if real is not None and real.is_file() else None


def input_messages(step: Step) -> list[dict[str, str]]:
    """A step's input messages as plain text for the page's script (shown via textContent,
    past the templates: so the names are clipped and every text's direction and control
    characters escaped here, as the templates do)."""
    out: list[dict[str, str]] = []
    for message in step.input_messages or []:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False, indent=1)
        extra = {k: v for k, v in message.items() if k not in ("role", "content", "name")}
        if extra:
            content += "\n" + json.dumps(extra, ensure_ascii=False, indent=1)
        out.append(
            {
                "role": shown_name(message.get("role", "")),
                "name": shown_name(message.get("name", "")),
                "content": safe(content),
            }
        )
    return out


def trace_key_of(catalog: Catalog, trace_id: str) -> str | None:
    found = catalog.traces_with_id(trace_id)
    return found[0].key if found else None


def graph(catalog: Catalog, entry: GraphEntry) -> dict[str, Any]:
    g = entry.graph
    return {
        "entry": entry,
        "graph": g,
        "layout": graph_svg.layout(g),
        "fits": {
            "node": graph_svg.NODE_CHARS,
            "title": graph_svg.TITLE_CHARS,
            "loop": graph_svg.LOOP_CHARS,
        },
        "trace_key": trace_key_of(catalog, g.trace_id),
    }


def replay(catalog: Catalog, entry: ReplayEntry) -> dict[str, Any]:
    original = catalog.traces[entry.original_key] if entry.original_key else None
    branch = catalog.traces[entry.trace_key] if entry.trace_key else None
    pairs = (
        replay_view.pair_steps(original.trace, branch.trace)
        if original is not None and branch is not None
        else []
    )
    edit = (entry.report.edit if entry.report else None) or (entry.meta.replay or {}).get("edit")
    reference = entry.meta.ground_truth
    answer = branch.trace.final_answer if branch else None
    original_answer = original.trace.final_answer if original else None
    compare = {
        "original": {
            "answer": original_answer,
            "success": answers_match(original_answer, reference)
            if original_answer is not None and reference
            else None,
            "steps": len(original.trace.steps) if original else 0,
        },
        "branch": {
            "answer": answer,
            "success": answers_match(answer, reference)
            if answer is not None and reference
            else None,
            "steps": len(branch.trace.steps) if branch else 0,
            "live_calls": entry.report.live_calls if entry.report else None,
            "tokens": replay_view.live_tokens(branch.trace) if branch else 0,
            "unreported": replay_view.unreported_live_steps(branch.trace) if branch else 0,
        },
    }
    return {
        "compare": compare,
        "reference": reference,
        "entry": entry,
        "original": original,
        "branch": branch,
        "pairs": pairs,
        "at": entry.report.at if entry.report else (entry.meta.replay or {}).get("at"),
        "first_difference": replay_view.first_difference(pairs),
        "diff_limit": replay_view.DIFF_LIMIT,
        "page_diff_chars": replay_view.PAGE_DIFF_CHARS,
        "edit": json.dumps(edit, ensure_ascii=False, indent=1) if edit else "",
        "report": entry.report,
        "answer": answer,
        "success": (answers_match(answer, reference) if answer is not None and reference else None),
        "dover": _dover_rows_for_branch(catalog, entry),
    }


def _dover_rows_for_branch(catalog: Catalog, entry: ReplayEntry) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for d in list(catalog.dovers.values()):
        for row in d.rows:
            for rep in row.repeats:
                if rep.branch and rep.branch.rstrip("/").endswith(entry.branch_dir.name):
                    out.append({"file": d, "row": row, "repeat": rep})
    return out


def dover(catalog: Catalog, entry: DoverEntry) -> dict[str, Any]:
    trials = []
    replays = {r.branch_dir.name: r.key for r in list(catalog.replays.values())}
    budget = replay_view.DiffBudget()
    for row in entry.rows:
        diff, compared = (
            budget.diff(row.intervention.original, row.intervention.replacement)
            if row.intervention
            else ([], True)
        )
        longest = (
            max(len(row.intervention.original), len(row.intervention.replacement))
            if row.intervention
            else 0
        )
        found = catalog.traces_with_id(row.trace_id)
        reference = found[0].trace.metadata.get("reference_steps") if found else None
        trials.append(
            {
                "row": row,
                "reference_steps": reference if isinstance(reference, list) else [],
                "trace_key": trace_key_of(catalog, row.trace_id),
                "diff": diff,
                "diff_compared": compared,
                "diff_cut": longest > replay_view.DIFF_LIMIT,
                "replays": [
                    (rep, replays.get(rep.branch.rstrip("/").split("/")[-1])) for rep in row.repeats
                ],
            }
        )
    return {
        "entry": entry,
        "trials": trials,
        "diff_limit": replay_view.DIFF_LIMIT,
        "page_diff_chars": replay_view.PAGE_DIFF_CHARS,
    }


def evaluation(catalog: Catalog, entry: EvalEntry) -> dict[str, Any]:
    reports, notes = eval_view.subset_reports(entry.rows)
    answer_ids = {id(a.row): i for i, a in enumerate(catalog.attributions) if a.row is not None}
    keys = {r.trace_id: k for r in entry.rows if (k := trace_key_of(catalog, r.trace_id))}
    columns, cases = eval_view.case_rows(entry.rows, answer_ids, keys)
    return {
        "entry": entry,
        "reports": reports,
        "notes": notes,
        "headers": eval_view.HEADERS,
        "plot": eval_view.PLOT,
        "columns": columns,
        "cases": cases,
    }


@dataclass
class BranchNode:
    """A replay branch in the tree of a recording (its children replayed it in turn)."""

    entry: ReplayEntry
    trace_key: str | None
    at: int | None
    edit: str
    answer: str | None
    success: bool | None
    live_calls: int
    children: list[BranchNode]


MAX_TREE_DEPTH = 32


def branch_tree(catalog: Catalog, trace_key: str, depth: int = 0) -> list[BranchNode]:
    """The branches made from ``trace_key`` and, under each, those made from it."""
    if depth >= MAX_TREE_DEPTH:
        return []
    nodes: list[BranchNode] = []
    for r in sorted(catalog.replays_of(trace_key), key=lambda r: r.branch_dir.name):
        branch = catalog.traces.get(r.trace_key) if r.trace_key else None
        answer = branch.trace.final_answer if branch else None
        reference = r.meta.ground_truth
        replay_opts = r.meta.replay or {}
        edit = (r.report.edit if r.report else None) or replay_opts.get("edit")
        at = r.report.at if r.report else replay_opts.get("at")
        nodes.append(
            BranchNode(
                entry=r,
                trace_key=r.trace_key,
                at=at if isinstance(at, int) else None,
                edit=replay_view.edit_summary(edit),
                answer=answer,
                success=answers_match(answer, reference) if answer and reference else None,
                live_calls=r.report.live_calls if r.report else 0,
                children=branch_tree(catalog, r.trace_key, depth + 1) if r.trace_key else [],
            )
        )
    return nodes


def call_label(call: ToolCall | dict[str, Any]) -> str:
    """A tool call as the edit panel lists it: ``name(arguments)``, its name clipped as
    names are and its arguments at 300 characters, escaped as the templates escape."""
    name, arguments = (
        (call.name, call.arguments)
        if isinstance(call, ToolCall)
        else (call.get("name"), call.get("arguments"))
    )
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"{shown_name(name)}({safe(clip_name(arguments, 300))})"


def suggested_edits(catalog: Catalog, trace_id: str) -> list[dict[str, Any]]:
    """DoVer's interventions on this trace, each a one-click edit of its step: its text
    and the tool calls it serves with it (a handoff step's calls, kept)."""
    out: list[dict[str, Any]] = []
    for d in list(catalog.dovers.values()):
        for row in d.rows:
            iv = row.intervention
            if row.trace_id != trace_id or iv is None or row.hypothesis.method == "edit":
                continue  # (rows of verify-edit and the UI are given edits, not suggestions)
            calls = [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "label": call_label(c)}
                for c in iv.tool_calls
            ]
            out.append(
                {
                    "step": iv.step,
                    "agent": iv.agent,
                    "replacement": iv.replacement,
                    # ASCII JSON for the button's data-text: the text itself, where a plain
                    # attribute would carry it as shown (controls escaped, so "use this
                    # edit" would replay another text than DoVer's)
                    "text_json": json.dumps(iv.replacement),
                    "tool_calls": calls,
                    # ASCII JSON for the button's data-calls (autoescaped, never marked safe)
                    "calls_json": json.dumps(calls),
                    "verdict": row.verdict or "-",
                    "hypothesis_agent": row.hypothesis.agent,
                    "hypothesis_step": row.hypothesis.step,
                    "method": row.hypothesis.method,
                    "trial": row.trial.index,
                    "file": d,
                }
            )
    return out


def recorded_command(run_dir: Path) -> str:
    """The command a run directory says it recorded, quoted for reference (never run)."""
    reason = unread(run_dir / META_FILE) if (run_dir / META_FILE).exists() else None
    if reason is not None:  # a named pipe would hold the page's thread for good
        return f"the recording's meta.json: {reason}"
    try:
        return stored_command_note(read_meta(run_dir))
    except (FaultfinderError, OSError, ValueError):
        return "the recording's meta.json could not be read"

"""Aggregating DoVer rows: trial success rate, progress made, verdict distribution
(DoVer Tables 2 and 3), and how many failed runs were recovered."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from faultfinder.dover.models import DoverRow, RepeatResult
from faultfinder.dover.verdict import TrialSuccess, trial_success
from faultfinder.errors import ConfigError
from faultfinder.llm import json_text
from faultfinder.traces.io import split_lines
from faultfinder.usage import Usage

VERDICTS = (
    "validated",
    "partially_validated",
    "refuted",
    "inconclusive",
    "not_applied",
    "unverifiable",
)


class DoverSummary(BaseModel):
    """Figures over a set of DoVer rows."""

    runs: int = 0
    """Distinct recordings debugged."""
    trials: int = 0
    """Trials (rows)."""
    intervened_trials: int = 0
    """Trials that got an intervention."""
    replays: int = 0
    """Replays run (intervened trials x repeats)."""
    failed_replays: int = 0
    """Of ``replays``, those that are no evidence either way: the replayed program failed
    on its own or the replay could not run (counted neither as successes nor failures)."""
    trial_success_rate: float | None = None
    """Successful replays / replays judged against a reference, pooled over the rows (DoVer
    Table 2; :func:`~faultfinder.dover.verdict.trial_success`): ``failed_replays`` are in
    neither count. It is the flip rate, since only failed runs are debugged."""
    trial_success_rate_ci: tuple[float, float] | None = None
    """95% Wilson score interval of the trial success rate."""
    judged_replays: int = 0
    """The trial success rate's denominator: replays that are evidence, got the edit and
    whose success the checker could tell."""
    already_succeeded: int = 0
    """Recordings that already passed the success check (reported, not debugged)."""
    progress_made: float | None = None
    """Mean milestone progress over intervened trials with milestones (Table 2)."""
    verdicts: dict[str, int] = Field(default_factory=dict)
    """Verdict counts over intervened trials (Table 3)."""
    runs_recovered: int = 0
    """Recordings with at least one successful replay."""
    originally_failed_runs: int = 0
    """Recordings whose original answer did not match the reference."""
    no_hypothesis: int = 0
    no_intervention: int = 0
    errors: int = 0
    leaked_answers: int = 0
    """Interventions whose text contains the reference answer."""
    usage: Usage = Field(default_factory=Usage)
    """DoVer's own tokens (shared run-level calls counted once per run)."""


OTHER_ROWS = {
    "dynamic-check": "a `check` result (check --out), which `check` summarises itself",
}
"""Rows of other commands that may be given to ``debug-report`` by mistake."""


def read_rows(paths: Iterable[str | Path]) -> list[DoverRow]:
    """The DoVer rows of these JSONL files (``debug`` and ``verify-edit`` write them).

    A file that holds none, is not UTF-8 text, or has a line that is not a DoVer row is
    refused with one line naming the file (and the line, and why): an empty or wrong
    file never passes for a set of trials that all went well."""
    rows: list[DoverRow] = []
    for path in paths:
        try:
            text = Path(path).read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"{path}: not UTF-8 text (byte {exc.start}), so not DoVer result rows "
                "(JSON lines written by faultfinder debug or verify-edit)"
            ) from None
        except OSError as exc:
            raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from None
        found = 0
        for number, line in enumerate(split_lines(text.lstrip("\ufeff")), start=1):
            if not line.strip():
                continue
            rows.append(_row(path, number, line))
            found += 1
        if not found:
            raise ConfigError(
                f"{path}: empty: it holds no DoVer rows (faultfinder debug or verify-edit "
                "writes them)"
            )
    return rows


def _row(path: str | Path, number: int, line: str) -> DoverRow:
    where = f"{path}:{number}"
    try:
        data = json_text.loads(line)
    except json_text.JSONTextError as exc:
        raise ConfigError(f"{where}: not a DoVer row: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: not a DoVer row: a JSON {_json_type(data)}, not an object")
    kind = data.get("kind")
    if kind != "dover":
        other = OTHER_ROWS.get(str(kind))
        what = f"it is {other}" if other else f"its kind is {kind!r}, not 'dover'"
        raise ConfigError(f"{where}: not a DoVer row: {what}")
    try:
        return DoverRow.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(row)"
        raise ConfigError(f"{where}: not a DoVer row: field '{field}': {first['msg']}") from None


def _json_type(value: object) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number"


def aggregate(rows: Sequence[DoverRow]) -> DoverSummary:
    summary = DoverSummary(trials=len(rows))
    runs = {r.run_dir for r in rows}
    summary.runs = len(runs)
    judged = successes = 0
    progress: list[float] = []
    verdicts: Counter[str] = Counter()
    recovered: set[str] = set()
    failed: set[str] = set()
    usage = Usage()
    shared_seen: set[str] = set()
    for row in rows:
        usage = usage + row.usage
        if row.run_dir not in shared_seen:
            usage = usage + row.shared_usage
            shared_seen.add(row.run_dir)
        if row.original_success is False:
            failed.add(row.run_dir)
        summary.no_hypothesis += row.status == "no-hypothesis"
        summary.no_intervention += row.status == "no-intervention"
        summary.errors += row.status == "error"
        summary.already_succeeded += row.status == "already-succeeded"
        if row.intervention is None:
            continue
        summary.intervened_trials += 1
        summary.leaked_answers += row.intervention.leaks_answer
        summary.replays += len(row.repeats)
        # Recomputed from the replays, not read from the row: a row written before failed
        # replays were set apart may still rate one a success.
        rate = trial_success(row.repeats)
        summary.failed_replays += rate.failed_replays
        judged += rate.judged
        successes += rate.successes
        if rate.successes:
            recovered.add(row.run_dir)
        if row.progress_made is not None:
            progress.append(row.progress_made)
        if row.verdict:
            verdicts[row.verdict] += 1
    pooled = TrialSuccess(successes=successes, judged=judged, failed_replays=0)
    summary.trial_success_rate = pooled.rate
    summary.trial_success_rate_ci = pooled.interval
    summary.judged_replays = judged
    summary.progress_made = sum(progress) / len(progress) if progress else None
    summary.verdicts = {name: verdicts.get(name, 0) for name in VERDICTS}
    summary.runs_recovered = len(recovered & failed) if failed else len(recovered)
    summary.originally_failed_runs = len(failed)
    summary.usage = usage
    return summary


def rate_basis(judged: int, failed: int) -> str:
    """What a trial success rate was computed over: ' over 2 replays judged (1 failed
    replay left out)'."""
    if not judged and not failed:
        return ""
    text = f" over {judged} replay{'s' if judged != 1 else ''} judged"
    if failed:
        text += f" ({failed} failed replay{'s' if failed != 1 else ''} left out)"
    return text


def format_rate(repeats: Sequence[RepeatResult]) -> str:
    """One trial's success rate for a verdict line: 'trial success rate 100% (95% CI
    34%-100%) over 2 replays judged (1 failed replay left out)'; '' when none was judged."""
    rate = trial_success(repeats)
    if rate.rate is None or rate.interval is None:
        return ""
    low, high = rate.interval
    return f"trial success rate {rate.rate:.0%} (95% CI {low:.0%}-{high:.0%})" + rate_basis(
        rate.judged, rate.failed_replays
    )


def format_summary(summary: DoverSummary) -> str:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{value:.1%}"

    total = summary.intervened_trials or 1
    progress = "-" if summary.progress_made is None else f"{summary.progress_made:+.1%}"
    lines = [
        f"runs debugged:       {summary.runs} ({summary.originally_failed_runs} failed originally, "
        f"{summary.runs_recovered} recovered by an intervention)",
        f"trials:              {summary.trials} ({summary.intervened_trials} intervened, "
        f"{summary.no_hypothesis} without hypothesis, {summary.no_intervention} without "
        f"intervention, {summary.errors} errors)",
        f"replays:             {summary.replays}"
        + (
            f" ({summary.failed_replays} failed on their own or could not run: no evidence "
            "either way)"
            if summary.failed_replays
            else ""
        ),
        f"already succeeded:   {summary.already_succeeded} runs (not debugged)",
        f"trial success rate:  {pct(summary.trial_success_rate)}"
        + (
            f" (95% CI {pct(summary.trial_success_rate_ci[0])}-"
            f"{pct(summary.trial_success_rate_ci[1])})"
            if summary.trial_success_rate_ci
            else ""
        )
        + rate_basis(summary.judged_replays, summary.failed_replays),
        f"progress made:       {progress}",
        "verdicts:            "
        + ", ".join(
            f"{name} {count} ({count / total:.0%})" for name, count in summary.verdicts.items()
        ),
        # Tokens count the cache's answers too (Usage.cached_calls), so name those calls,
        # as `attribute` does: a rerun that hits the cache shows why it made fewer calls.
        f"DoVer model usage:   {summary.usage.calls} call{'' if summary.usage.calls == 1 else 's'}"
        f" ({summary.usage.cached_calls} cached), {summary.usage.total_tokens} tokens",
    ]
    if summary.leaked_answers:
        lines.append(
            f"warning:             {summary.leaked_answers} interventions contain "
            "the reference answer"
        )
    return "\n".join(lines)

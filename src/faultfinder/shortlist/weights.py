"""A weights file: which shortlist model answers for which trace.

Two formats are read:

* ``faultfinder-shortlist/1``: one model (``model.py``). Its ``trained_on.hashes`` list
  the traces it saw; a result on one of them is flagged as contaminated.
* ``faultfinder-shortlist/2`` (what ``bench/shortlist.py --ship`` writes): a *deploy*
  model for traces outside the training data, and one *held-out* model per
  cross-validation fold. Fold ``f``'s model was trained on neither fold ``f`` nor its
  calibration fold ``(f + 1) mod k``, and its conformal thresholds come from the
  calibration fold's scores under that same model. ``fold_of`` maps the content hash of
  every training trace to its fold, so a training trace is always answered by the one
  model that neither trained nor calibrated on it: results on Who&When are out-of-sample
  by construction. ``sketches`` holds a content sketch of every training trace
  (``neardup.py``), so a near-copy (one trailing space, an edited step, a cut log,
  another release of the benchmark) is found too: any trace at least ``neardup.FLOOR``
  similar to a training trace goes to a held-out model that trained on none of the
  training traces that could be its original (``neardup.rivals``), or, when no model
  excludes them all, is flagged as contaminated.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from faultfinder.errors import ConfigError
from faultfinder.llm import json_text
from faultfinder.shortlist import neardup
from faultfinder.shortlist.model import (
    FORMAT,
    SHIPPED,
    ShortlistModel,
    check_features,
    trace_hash,
)
from faultfinder.shortlist.shift import ShiftReference
from faultfinder.traces.schema import Trace

FORMAT_V2 = "faultfinder-shortlist/2"
CALIBRATED_ON = "step_sets_calibrated_on"
"""Provenance key ``faultfinder calibrate`` writes: the source, the trace count and the
content hashes of the traces that calibrated the step sets."""
_MODEL_FIELDS = ("mean", "scale", "coef", "intercept", "conformal")


def source_parts(source: str) -> tuple[str, str]:
    """A result's ``step_set_source`` read back: (weights file, model), whatever note
    follows in parentheses: 'shipped:fold-3' -> ('shipped', 'fold-3'); 'mine.json:deploy
    (calibrated on my-team)' -> ('mine.json', 'deploy')."""
    weights, _, model = source.split(" (", 1)[0].rpartition(":")
    return weights, model


@dataclass(frozen=True)
class Chosen:
    """The model that answers for one trace, and where it comes from."""

    model: ShortlistModel
    source: str
    """'deploy', 'fold-N' (the held-out model of the trace's fold) or 'single' (a format-1
    file), prefixed with the file: 'shipped:fold-3'."""
    contaminated: bool = False
    """The model was trained on this trace or on a near-copy of it, or may have been: the
    trace is similar to training traces of folds that every model trained on some of."""
    near_copy: float | None = None
    """Estimated similarity to the most similar training trace, when the trace may be a
    near-copy of one (``neardup.FLOOR`` or more) but is not byte-identical to it."""


@dataclass
class Weights:
    """Every model of a weights file and the rule choosing one per trace."""

    deploy: ShortlistModel
    """Answers for traces outside the training data (or every trace, format 1)."""
    folds: list[ShortlistModel] = field(default_factory=list)
    """Held-out model of each fold (format 2)."""
    fold_of: dict[str, int] = field(default_factory=dict)
    """Training trace content hash -> fold (format 2)."""
    name: str = "shipped"
    """How results name the file: 'shipped' or the file's name."""
    trained_on: dict[str, Any] = field(default_factory=dict)
    """Provenance of the whole file: dataset, trace count, folds, seed."""
    sketches: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Training trace content hash -> content sketch (``neardup.py``), format 2."""
    shift: ShiftReference | None = None
    """The calibration traces' shape and the threshold past which a trace is too unlike
    them for a step set to claim its level (``shift.py``); None: no claim is checked."""
    default_source: str | None = None
    """The source a trace that names none is taken to be of, for its step-set thresholds
    (set by ``faultfinder calibrate``, ``calibrate.py``); None: such a trace is of a source
    never trained on."""

    def shift_score(self, trace: Trace) -> float | None:
        """How unlike the calibration traces ``trace`` is (None without a reference). A
        training trace is compared with the other folds' traces only."""
        if self.shift is None or not trace.steps:
            return None
        return self.shift.score(trace, self.fold_of.get(trace_hash(trace)), self._source(trace))

    def shift_threshold(self, trace: Trace) -> float | None:
        """The shift score past which ``trace``'s set withdraws its claim (None without a
        reference): its source's own when the reference has one."""
        return None if self.shift is None else self.shift.threshold_for(self._source(trace))

    def _source(self, trace: Trace) -> str | None:
        return trace.source.subset or self.default_source

    def calibrated_on(self, trace: Trace) -> bool:
        """True when ``faultfinder calibrate`` fitted this file's step-set thresholds on
        ``trace`` (by content hash): the trace's own set then proves nothing about its
        coverage, so its level is not claimed (``sets.py``)."""
        record = self.trained_on.get(CALIBRATED_ON)
        hashes = record.get("hashes") if isinstance(record, dict) else None
        return isinstance(hashes, list) and trace_hash(trace) in hashes

    @property
    def groups(self) -> list[str]:
        return self.deploy.groups

    @property
    def trained_sources(self) -> list[str]:
        """The sources the file's models trained on, as its provenance lists them."""
        sources = self.trained_on.get("sources")
        return sorted(sources) if isinstance(sources, dict) else []

    def choose(self, trace: Trace) -> Chosen:
        """The model for ``trace``: its fold's held-out model when the trace was in the
        training data; when it is at least ``neardup.FLOOR`` similar to training traces,
        a held-out model that trained on none of those that could be its original (that
        of the nearest one's fold first), or the deploy model flagged as contaminated when
        none qualifies; else the deploy model."""
        if not self.folds:
            seen = self.deploy.seen(trace)
            return Chosen(self.deploy, f"{self.name}:single", contaminated=seen)
        fold = self.fold_of.get(trace_hash(trace))
        if fold is not None:
            return Chosen(self.folds[fold], f"{self.name}:fold-{fold}")
        if not self.sketches:
            return Chosen(self.deploy, f"{self.name}:deploy")
        found = neardup.matches(neardup.shingle_hashes(trace), self.sketches)
        if not found:
            return Chosen(self.deploy, f"{self.name}:deploy")
        similarity = round(found[0].similarity, 3)
        candidates = neardup.rivals(found)
        if all(m.key in self.fold_of for m in candidates):
            hit = {self.fold_of[m.key] for m in candidates}
            # The held-out model of the nearest trace's fold first, then any other that
            # trained on none of the folds holding a possible original.
            order = [self.fold_of[candidates[0].key], *range(len(self.folds))]
            for f in order:
                if not hit & set(_trained_folds(self.folds[f], f, len(self.folds))):
                    return Chosen(self.folds[f], f"{self.name}:fold-{f}", near_copy=similarity)
        return Chosen(self.deploy, f"{self.name}:deploy", contaminated=True, near_copy=similarity)

    def to_json(self) -> dict[str, Any]:
        """The format-2 file (compact: one line per model in ``dumps``)."""
        return {
            "format": FORMAT_V2,
            "groups": self.groups,
            "features": self.deploy.names,
            "trained_on": self.trained_on,
            "deploy": _model_fields(self.deploy),
            "folds": [_model_fields(m) for m in self.folds],
            "fold_of": dict(sorted(self.fold_of.items())),
            "sketches": {h: neardup.encode(sk) for h, sk in sorted(self.sketches.items())},
            **({"shift": self.shift.to_json()} if self.shift is not None else {}),
            **({"default_source": self.default_source} if self.default_source else {}),
        }

    def dumps(self) -> str:
        """The file's text: readable, but each model's numbers on one line."""
        data = self.to_json()
        lines = ["{"]
        items = list(data.items())
        for n, (key, value) in enumerate(items):
            comma = "," if n < len(items) - 1 else ""
            if key == "folds":
                inner = ",\n".join("  " + json.dumps(m) for m in value)
                lines.append(f' "folds": [\n{inner}\n ]{comma}')
            elif key in ("fold_of", "sketches"):
                inner = ",\n".join(f"  {json.dumps(h)}: {json.dumps(f)}" for h, f in value.items())
                lines.append(f" {json.dumps(key)}: {{\n{inner}\n }}{comma}")
            else:
                lines.append(f" {json.dumps(key)}: {json.dumps(value)}{comma}")
        lines.append("}")
        return "\n".join(lines) + "\n"


def _trained_folds(model: ShortlistModel, fold: int, k: int) -> list[int]:
    """The folds a held-out model trained on (every fold but its own when not recorded)."""
    folds = model.trained_on.get("trained_on_folds")
    if isinstance(folds, list):
        return [int(f) for f in folds]
    return [f for f in range(k) if f != fold]


def _model_fields(model: ShortlistModel) -> dict[str, Any]:
    data = model.to_json()
    out = {k: data[k] for k in _MODEL_FIELDS}
    out.update(model.trained_on)  # per-model provenance (folds trained and calibrated on)
    return out


def from_json(data: dict[str, Any], where: str, name: str) -> Weights:
    """A weights file of either format."""
    fmt = data.get("format")
    if fmt == FORMAT:
        single = ShortlistModel.from_json(data, where)
        return Weights(single, name=name, trained_on=single.trained_on)
    if fmt != FORMAT_V2:
        raise ConfigError(f"{where}: field 'format' is {fmt!r}, not {FORMAT_V2!r} (or {FORMAT!r})")
    try:
        groups = list(data["groups"])
        trained_on = dict(data.get("trained_on", {}))
        if "features" in data:  # one list for every model of the file
            check_features(data["features"], groups, where)

        def model(part: dict[str, Any], label: str) -> ShortlistModel:
            fields = {k: part[k] for k in _MODEL_FIELDS if k in part}
            extra = {k: v for k, v in part.items() if k not in _MODEL_FIELDS}
            return ShortlistModel.from_json(
                {"format": FORMAT, "groups": groups, **fields, "trained_on": extra},
                f"{where}: {label}",
            )

        deploy = model(data["deploy"], "deploy")
        folds = [model(m, f"folds[{i}]") for i, m in enumerate(data.get("folds", []))]
        fold_of = {str(h): int(f) for h, f in data.get("fold_of", {}).items()}
        sketches = {str(h): neardup.decode(v) for h, v in data.get("sketches", {}).items()}
        shift = ShiftReference.from_json(data["shift"]) if "shift" in data else None
        default_source = data.get("default_source")
        if default_source is not None and not isinstance(default_source, str):
            raise ValueError(f"field 'default_source' is {default_source!r}, not a string")
    except KeyError as exc:
        raise ConfigError(f"{where}: missing field {exc.args[0]!r}") from None
    except (TypeError, ValueError, AttributeError, binascii.Error) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    bad = sorted({f for f in fold_of.values() if not 0 <= f < len(folds)})
    if bad:
        raise ConfigError(f"{where}: 'fold_of' names fold(s) {bad}; the file has {len(folds)}")
    return Weights(deploy, folds, fold_of, name, trained_on, sketches, shift, default_source)


def load_weights(path: str | Path | None = None) -> Weights:
    """The weights file at ``path``, or the shipped one."""
    if path is None:
        return shipped_weights()
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"shortlist model file not found: {file}")
    return _parse(file.read_text(encoding="utf-8"), str(file), file.name)


@lru_cache(maxsize=1)
def shipped_weights() -> Weights:
    """The weights shipped in this package (read once per process)."""
    text = resources.files("faultfinder.shortlist").joinpath(SHIPPED).read_text("utf-8")
    return _parse(text, f"faultfinder/shortlist/{SHIPPED}", "shipped")


def _parse(text: str, where: str, name: str) -> Weights:
    try:
        data = json_text.loads(text)
    except json_text.JSONTextError as exc:
        raise ConfigError(f"{where}: not a shortlist weights file: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: not a JSON object")
    return from_json(data, where, name)

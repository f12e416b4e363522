"""Offline step shortlist: per-step features, a small learned ranker applied without
scikit-learn, token surprisal from the embedded model, and split-conformal step sets.

See docs/methods/shortlist.md.
"""

from faultfinder.shortlist.features import GROUPS, feature_names, trace_features
from faultfinder.shortlist.model import ShortlistModel, load_model, softmax, trace_hash

__all__ = [
    "GROUPS",
    "ShortlistModel",
    "feature_names",
    "load_model",
    "softmax",
    "trace_features",
    "trace_hash",
]

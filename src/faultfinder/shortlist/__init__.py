"""Offline step shortlist: per-step features, a small learned ranker applied without
scikit-learn, token surprisal from the embedded model, and split-conformal step sets.

See docs/methods/shortlist.md.
"""

from faultfinder.shortlist.features import GROUPS, feature_names, trace_features
from faultfinder.shortlist.model import ShortlistModel, softmax, trace_hash
from faultfinder.shortlist.weights import Weights, load_weights

__all__ = [
    "GROUPS",
    "ShortlistModel",
    "Weights",
    "feature_names",
    "load_weights",
    "softmax",
    "trace_features",
    "trace_hash",
]

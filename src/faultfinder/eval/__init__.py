"""The evaluation harness: datasets, a resumable runner, metrics and reports."""

from faultfinder.eval.cases import plan_methods
from faultfinder.eval.datasets import DatasetOptions, load_dataset
from faultfinder.eval.metrics import TOLERANCES, aggregate, score
from faultfinder.eval.report import plot_tolerance, render, summarise
from faultfinder.eval.rows import EvalRow, read_result_files, read_rows
from faultfinder.eval.runner import EvalOptions, EvalOutcome, run_eval

__all__ = [
    "TOLERANCES",
    "DatasetOptions",
    "EvalOptions",
    "EvalOutcome",
    "EvalRow",
    "aggregate",
    "load_dataset",
    "plan_methods",
    "plot_tolerance",
    "read_result_files",
    "read_rows",
    "render",
    "run_eval",
    "score",
    "summarise",
]

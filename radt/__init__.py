"""radT: experiment tracking for deep-learning training on shared GPUs, on MLflow."""

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use (below): `radt COMMAND` and `radt --help` need none
    from radt import run
    from radt.analysis.figures import summarize_samples
    from radt.analysis.frontier import frontier
    from radt.analysis.load import load, load_wide
    from radt.analysis.phases import phases
    from radt.analysis.report import report
    from radt.analysis.summary import loader_summary, repeats, repeats_summary, summary
    from radt.autologging import autolog
    from radt.listener import Listener, PolledListener, RunContext, Sample, SampleBatch
    from radt.run import log_metric, log_metrics
    from radt.run_api import Run, log_epoch, log_examples, phase, start_window, step

_PUBLIC = {
    "run": "radt.run",
    "summarize_samples": "radt.analysis.figures",
    "frontier": "radt.analysis.frontier",
    "load": "radt.analysis.load",
    "load_wide": "radt.analysis.load",
    "phases": "radt.analysis.phases",
    "report": "radt.analysis.report",
    "loader_summary": "radt.analysis.summary",
    "repeats": "radt.analysis.summary",
    "repeats_summary": "radt.analysis.summary",
    "summary": "radt.analysis.summary",
    "autolog": "radt.autologging",
    "Listener": "radt.listener",
    "PolledListener": "radt.listener",
    "RunContext": "radt.listener",
    "Sample": "radt.listener",
    "SampleBatch": "radt.listener",
    "log_metric": "radt.run",
    "log_metrics": "radt.run",
    "Run": "radt.run_api",
    "log_epoch": "radt.run_api",
    "log_examples": "radt.run_api",
    "phase": "radt.run_api",
    "start_window": "radt.run_api",
    "step": "radt.run_api",
}
"""The public API, each name from its module, imported on first use (numpy, the analysis and
the run API cost the command line ~0.5 s of CPU that launching a command does not need)."""


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'radt' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if module == f"radt.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})


__version__ = "0.3.0.dev0"

logging.getLogger("radt").addHandler(logging.NullHandler())  # a notebook gets no lines

__all__ = [
    "Listener",
    "PolledListener",
    "Run",
    "RunContext",
    "Sample",
    "SampleBatch",
    "__version__",
    "autolog",
    "frontier",
    "load",
    "load_wide",
    "loader_summary",
    "log_epoch",
    "log_examples",
    "log_metric",
    "log_metrics",
    "phase",
    "phases",
    "repeats",
    "report",
    "repeats_summary",
    "run",
    "start_window",
    "step",
    "summarize_samples",
    "summary",
]

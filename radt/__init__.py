"""radT: experiment tracking for deep-learning training on shared GPUs, on MLflow."""

import importlib
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported on first use (below): `radt COMMAND` and `radt --help` need none
    from radt import run
    from radt.analysis.frontier import frontier
    from radt.analysis.load import load, load_wide
    from radt.analysis.phases import phases
    from radt.analysis.report import report
    from radt.analysis.summary import loader_summary, repeats, repeats_summary, summary
    from radt.analysis.windows import summarize_samples
    from radt.autologging import autolog
    from radt.listener import Listener, PolledListener, RunContext, Sample, SampleBatch
    from radt.run import log_metric, log_metrics
    from radt.run_api import Run, log_epoch, log_examples, phase, start_window, step

_PUBLIC = {
    "run": ".run",
    "summarize_samples": ".analysis.windows",
    "frontier": ".analysis.frontier",
    "load": ".analysis.load",
    "load_wide": ".analysis.load",
    "phases": ".analysis.phases",
    "report": ".analysis.report",
    "loader_summary": ".analysis.summary",
    "repeats": ".analysis.summary",
    "repeats_summary": ".analysis.summary",
    "summary": ".analysis.summary",
    "autolog": ".autologging",
    "Listener": ".listener",
    "PolledListener": ".listener",
    "RunContext": ".listener",
    "Sample": ".listener",
    "SampleBatch": ".listener",
    "log_metric": ".run",
    "log_metrics": ".run",
    "Run": ".run_api",
    "log_epoch": ".run_api",
    "log_examples": ".run_api",
    "phase": ".run_api",
    "start_window": ".run_api",
    "step": ".run_api",
}
"""The public API, each name from its module, imported on first use (numpy, the analysis and
the run API cost the command line ~0.5 s of CPU that launching a command does not need)."""


def __getattr__(name: str):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'radt' has no attribute {name!r}")
    imported = importlib.import_module(module, __name__)
    value = imported if module == f".{name}" else getattr(imported, name)
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

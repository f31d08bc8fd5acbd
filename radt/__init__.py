"""radT: experiment tracking for deep-learning training on shared GPUs, on MLflow."""

import logging

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

"""radT: experiment tracking for deep-learning training on shared GPUs, on MLflow."""

from radt.listener import Listener, PolledListener, RunContext, Sample
from radt.load import load, load_wide
from radt.run_api import Run, log_epoch, log_examples
from radt.summary import summarize_samples, summary

__version__ = "0.3.0.dev0"

__all__ = [
    "Listener",
    "PolledListener",
    "Run",
    "RunContext",
    "Sample",
    "__version__",
    "load",
    "load_wide",
    "log_epoch",
    "log_examples",
    "summarize_samples",
    "summary",
]

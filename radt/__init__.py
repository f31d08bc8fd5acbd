"""radT: experiment tracking for deep-learning training on shared GPUs, on MLflow."""

from radt.listener import Listener, PolledListener, RunContext, Sample

__version__ = "0.3.0.dev0"

__all__ = ["Listener", "PolledListener", "RunContext", "Sample", "__version__"]

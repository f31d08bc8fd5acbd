"""Run a training script in-process under MLflow's own system-metrics monitor.

``python benchmarks/_mlflow_sysmetrics.py SCRIPT [ARGS...]``: enables
``mlflow.enable_system_metrics_logging()``, opens a run, and runs SCRIPT as
``__main__`` inside it (runpy), which is how MLflow's system metrics are meant
to be used: the sampler is a thread inside the training process. The sampling
interval comes from ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL`` (MLflow's
default is 10 s; overhead.py sets 1 s).
"""

from __future__ import annotations

import runpy
import sys

import mlflow


def main() -> None:
    script, *args = sys.argv[1:]
    sys.argv = [script, *args]
    mlflow.enable_system_metrics_logging()
    with mlflow.start_run():
        runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()

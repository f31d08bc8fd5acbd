"""Metric ingest into a SQLite MLflow store: radT's recorder path vs per-sample MLflow calls.

    python benchmarks/ingest.py                      # defaults: ~3-4 min on 2 cores
    python benchmarks/ingest.py --samples 5000 --repeats 5

The workload is one listener with ``--keys`` metric keys (default 20) sampled
at 10 Hz for ``--samples`` instants (default 1,000: 20,000 points, 100 s of
sampling). Every method starts from a fresh SQLite store and a fresh run, and
counts the rows that landed in the store's ``metrics`` table afterwards.

Methods:
- ``log_metric``: ``mlflow.log_metric`` once per point (``--slow-samples``
  instants only, default 100, as it is slow);
- ``log_metrics``: ``mlflow.log_metrics`` once per sampling instant with all
  keys, the per-sample call of radT 0.2.30's listeners when they run without its
  queue (and of many hand-written monitors);
- ``radt-0.2.30-logger``: radT 0.2.30's own batching path, run in its virtualenv
  (``benchmarks/.venv-radt0230``): one dict per point through a
  ``multiprocessing.Queue`` to its ``_MLFlowLogger`` process, which sends
  ``store.log_batch`` requests of 1,000;
- ``radt-spool``: radT's full-rate truth alone: ``SpoolWriter.append`` of one
  second of samples at a time (``--keys`` x 10), as the recorder does every second;
- ``radt-spool+artifact``: the same plus what the end of a run does with it:
  compaction into ``samples.parquet`` and ``log_artifact`` (every sample in MLflow);
- ``radt-batchwriter``: every point sent as an MLflow metric: ``Decimator`` with
  window 0 (one point per sample) and ``BatchWriter`` (``log_batch`` of 1,000);
- ``radt-recorder-w0``: the whole ``Recorder`` (spool + decimator + writer), window
  0: every sample spooled *and* sent as a metric, from the first ``emit`` until
  ``close`` returns;
- ``radt-recorder-w1``: the whole ``Recorder`` as radT runs it by default
  (window 1 s): every sample spooled, one mean point per key per second sent.
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    OLD_VENV,
    Disturbance,
    Priority,
    arguments,
    chosen,
    median,
    results,
    scratch,
    sqlite_store,
    undisturbed,
)

HZ = 10.0


@dataclass
class Outcome:
    seconds: float
    points: int  # samples handled
    rows: int  # rows in the metrics table afterwards
    other_cores: float = 0.0


@dataclass
class Method:
    name: str
    label: str
    run: Callable[[Path, int, int], Outcome]
    slow: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    error: str | None = None


def keys_of(n: int) -> list[str]:
    return [f"bench/dev{k // 5}/quantity{k % 5}_unit" for k in range(n)]


def instants(samples: int) -> list[float]:
    """Timestamps of ``samples`` instants at 10 Hz, ending now."""
    end = time.time()
    return [end - (samples - i) / HZ for i in range(samples)]


def metric_rows(db: Path, run_id: str) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT COUNT(*) FROM metrics WHERE run_uuid = ?", (run_id,)).fetchone()[
            0
        ]


def new_store(folder: Path) -> tuple[str, Path]:
    return sqlite_store(folder), folder / "mlflow.db"


def new_run(uri: str, folder: Path):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("ingest", artifact_location=(folder / "artifacts").as_uri())
    return client, client.create_run(exp).info.run_id


# --- the methods ---------------------------------------------------------------


def fluent(per_point: bool) -> Callable[[Path, int, int], Outcome]:
    def run(folder: Path, keys: int, samples: int) -> Outcome:
        import mlflow

        uri, db = new_store(folder)
        client, run_id = new_run(uri, folder)
        mlflow.set_tracking_uri(uri)
        names = keys_of(keys)
        stamps = instants(samples)
        with mlflow.start_run(run_id=run_id):
            began = time.perf_counter()
            for i, ts in enumerate(stamps):
                ms = round(ts * 1000)
                if per_point:
                    for k, name in enumerate(names):
                        mlflow.log_metric(name, float(i + k), step=i, timestamp=ms)
                else:
                    mlflow.log_metrics(
                        {name: float(i + k) for k, name in enumerate(names)}, step=i, timestamp=ms
                    )
            seconds = time.perf_counter() - began
        return Outcome(seconds, keys * samples, metric_rows(db, run_id))

    return run


OLD_LOGGER = r"""
import multiprocessing, sys, time
import mlflow
from radt.run.benchmark import _MLFlowLogger
uri, run_id, keys, samples = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
mlflow.set_tracking_uri(uri)
names = [f"bench/dev{k // 5}/quantity{k % 5}_unit" for k in range(keys)]
end = time.time()
queue = multiprocessing.Queue()
logger = _MLFlowLogger(run_id, queue)
began = time.perf_counter()
# What a 0.2.30 listener does for each sample: one dict per key into the queue.
for i in range(samples):
    ts = int((end - (samples - i) / 10.0) * 1000)
    for k, name in enumerate(names):
        queue.put({"key": name, "value": float(i + k), "timestamp": ts, "step": i})
logger.start()
logger.terminate(timeout=600)
print(time.perf_counter() - began)
"""


def old_logger(folder: Path, keys: int, samples: int) -> Outcome:
    py = OLD_VENV / "bin" / "python"
    if not py.exists():
        raise FileNotFoundError(f"{py} not found; run `bash benchmarks/setup_radt0230.sh`")
    uri, db = new_store(folder)
    _, run_id = new_run(uri, folder)
    done = subprocess.run(
        [str(py), "-I", "-c", OLD_LOGGER, uri, run_id, str(keys), str(samples)],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=1200,
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.strip().splitlines()[-1])
    seconds = float(done.stdout.strip().splitlines()[-1])
    return Outcome(seconds, keys * samples, metric_rows(db, run_id))


def sample_batches(keys: int, samples: int):
    """Per instant: the list of samples a polled listener hands to ``emit``."""
    from radt.listener import Sample

    names = keys_of(keys)
    return [
        [Sample(ts, name, float(i + k)) for k, name in enumerate(names)]
        for i, ts in enumerate(instants(samples))
    ]


def spool(with_artifact: bool) -> Callable[[Path, int, int], Outcome]:
    def run(folder: Path, keys: int, samples: int) -> Outcome:
        from radt.record.compact import compact
        from radt.record.spool import SpoolWriter

        uri, db = new_store(folder)
        client, run_id = new_run(uri, folder)
        batches = sample_batches(keys, samples)
        per_second = int(HZ)
        writer = SpoolWriter(folder / "spool")
        began = time.perf_counter()
        for first in range(0, len(batches), per_second):
            writer.append([s for batch in batches[first : first + per_second] for s in batch])
        writer.close()
        if with_artifact:
            target = folder / "samples.parquet"
            compact(folder / "spool", target)
            client.log_artifact(run_id, str(target), "radt")
        seconds = time.perf_counter() - began
        return Outcome(seconds, keys * samples, metric_rows(db, run_id))

    return run


def batchwriter(folder: Path, keys: int, samples: int) -> Outcome:
    from radt.record.decimate import Decimator
    from radt.record.writer import BatchWriter

    uri, db = new_store(folder)
    client, run_id = new_run(uri, folder)
    batches = sample_batches(keys, samples)
    decimator = Decimator(0.0, batches[0][0].timestamp)
    writer = BatchWriter(client, run_id, lambda m: print(m, file=sys.stderr))
    began = time.perf_counter()
    writer.start()
    for batch in batches:
        writer.put(decimator.add(batch))
    writer.put(decimator.flush())
    unsent = writer.close(600)
    seconds = time.perf_counter() - began
    if unsent:
        raise RuntimeError(f"{unsent} points unsent")
    return Outcome(seconds, keys * samples, metric_rows(db, run_id))


def recorder(window_s: float) -> Callable[[Path, int, int], Outcome]:
    def run(folder: Path, keys: int, samples: int) -> Outcome:
        from radt.record.decimate import Decimator
        from radt.record.recorder import Recorder
        from radt.record.spool import SpoolWriter
        from radt.record.writer import BatchWriter

        uri, db = new_store(folder)
        client, run_id = new_run(uri, folder)
        batches = sample_batches(keys, samples)

        def warn(message: str) -> None:
            print(message, file=sys.stderr)

        rec = Recorder(
            SpoolWriter(folder / "spool"),
            BatchWriter(client, run_id, warn),
            Decimator(window_s, batches[0][0].timestamp),
            warn,
        )
        began = time.perf_counter()
        rec.start()
        for batch in batches:
            rec.emit(batch)
        unsent = rec.close(600)
        seconds = time.perf_counter() - began
        if unsent:
            raise RuntimeError(f"{unsent} points unsent")
        if rec.spool.rows != keys * samples:
            raise RuntimeError(f"spooled {rec.spool.rows} of {keys * samples}")
        return Outcome(seconds, keys * samples, metric_rows(db, run_id))

    return run


METHODS = [
    Method("log_metric", "`mlflow.log_metric` per point", fluent(per_point=True), slow=True),
    Method("log_metrics", "`mlflow.log_metrics` per sample (all keys)", fluent(per_point=False)),
    Method("radt-0.2.30-logger", "radT 0.2.30 queue + `_MLFlowLogger` (log_batch)", old_logger),
    Method("radt-spool", "radT spool only (Arrow IPC, 1 s per append)", spool(False)),
    Method(
        "radt-spool+artifact",
        "radT spool + compact + `samples.parquet` artifact",
        spool(True),
    ),
    Method("radt-batchwriter", "radT Decimator(0) + BatchWriter, every point", batchwriter),
    Method("radt-recorder-w0", "radT Recorder, window 0 (spool + every point)", recorder(0.0)),
    Method("radt-recorder-w1", "radT Recorder, window 1 s (default)", recorder(1.0)),
]
BASELINE = "log_metrics"


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--keys", type=int, default=20, help="metric keys (default 20)")
    parser.add_argument("--samples", type=int, default=1000, help="instants at 10 Hz (1000)")
    parser.add_argument(
        "--slow-samples", type=int, default=100, help="instants for log_metric (100)"
    )
    parser.add_argument("--repeats", type=int, default=3, help="default 3")
    parser.add_argument(
        "--methods", default=",".join(m.name for m in METHODS), help="comma-separated subset"
    )
    args = parser.parse_args()
    wanted = chosen(parser, args.methods, [m.name for m in METHODS])
    methods = [m for m in METHODS if m.name in wanted]

    with Priority(args.nice) as priority, scratch("ingest", args.keep) as root:
        print(f"workspace: {root}; {priority.how}", file=sys.stderr)
        for round_no in range(args.repeats):
            for method in methods:
                if not method.error:
                    measure_one(args, round_no, method, root / f"{method.name}-{round_no}")
    print()
    print(report(args, methods, priority.how))
    return 0


def measure_one(args: argparse.Namespace, round_no: int, method: Method, folder: Path) -> None:
    """One run of ``method`` into a fresh store (again while disturbed, with --quiet)."""
    samples = args.slow_samples if method.slow else args.samples

    def run() -> Outcome:
        shutil.rmtree(folder, ignore_errors=True)
        with Disturbance() as dist:
            outcome = method.run(folder, args.keys, samples)
        outcome.other_cores = dist.other_cores()
        return outcome

    try:
        outcome = undisturbed(args, run)
    except Exception as exc:  # report and go on with the other methods
        method.error = f"{type(exc).__name__}: {exc}"
        print(f"{method.name}: FAILED {method.error}", file=sys.stderr)
        return
    method.outcomes.append(outcome)
    shutil.rmtree(folder, ignore_errors=True)
    print(
        f"round {round_no + 1}/{args.repeats} {method.name:20s} "
        f"{outcome.points / outcome.seconds:10,.0f} points/s "
        f"({outcome.points} in {outcome.seconds:.2f} s, {outcome.rows} metric rows, "
        f"others {outcome.other_cores:.2f} cores)",
        file=sys.stderr,
        flush=True,
    )


def report(args: argparse.Namespace, methods: list[Method], how: str) -> str:
    """The results table and the notes above it."""
    rates = {
        m.name: median([o.points / o.seconds for o in m.outcomes]) for m in methods if m.outcomes
    }
    base = rates.get(BASELINE)
    single = rates.get("log_metric")
    rows = []
    for m in methods:
        if not m.outcomes:
            rows.append([m.label, "–", "–", "–", "failed", "–", "–", m.error or ""])
            continue
        o = m.outcomes[0]
        rate = rates[m.name]
        rows.append(
            [
                m.label,
                f"{o.points:,}",
                f"{o.rows:,}",
                f"{median([x.seconds for x in m.outcomes]):.2f}",
                f"{rate:,.0f}",
                f"{rate / base:.1f}×" if base else "–",
                f"{rate / single:.0f}×" if single else "–",
                f"{max(x.other_cores for x in m.outcomes):.2f}",
            ]
        )
    notes = (
        f"{args.keys} keys sampled at 10 Hz; {args.samples} instants "
        f"({args.keys * args.samples:,} points) per method, {args.slow_samples} for log_metric; "
        f"median of {args.repeats} runs, each into a fresh SQLite store; {how}; "
        "'others' = cores used by other processes during a run (max)."
    )
    columns = [
        "method",
        "points",
        "metric rows in MLflow",
        "seconds",
        "points/s",
        "vs log_metrics",
        "vs log_metric",
        "others (max cores)",
    ]
    return results("Metric ingest into SQLite", notes, columns, rows)


if __name__ == "__main__":
    sys.exit(main())

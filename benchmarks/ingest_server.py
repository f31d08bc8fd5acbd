"""Sustained ingest into a team's server: PostgreSQL behind ``mlflow server --workers 1``.

    python benchmarks/ingest_server.py                    # ~5 min on 2 cores
    python benchmarks/ingest_server.py --seconds 120 --runs 8 --hz 10

The server is the one docs/deployment.md describes, started here on loopback:
a fresh PostgreSQL cluster (``tests/postgres.py``, durable: fsync on) and
``mlflow server --backend-store-uri postgresql+psycopg2://… --workers 1``.

Conditions, each into its own experiment of the same server:

- ``radt window 1 s`` (radT's default): ``radt --interval 0.1 plan.csv`` with one
  workload of ``--runs`` naive rows, each a command that sleeps ``--seconds``;
  every run records ``counter`` and ``top`` at ``--hz``, the workload run
  records ``nvml`` (the fake pynvml of tests/fakes, an H100) and ``iostat``.
  Every sample is spooled; MLflow gets one mean point per key per second.
- ``radt full rate``: the same with ``--window 0.01``: every sample is also sent
  to MLflow as a metric point, through the same batched writer.
- ``log_metrics per sample`` (radT 0.2.30's way): ``--runs`` processes, one per
  run, each calling ``mlflow.log_metrics`` once per sampling instant with as
  many keys as a radT run records per instant (the workload run's keys shared
  out), at ``--hz``, for ``--seconds``; a call that takes longer than the
  interval makes the next sample late, as a listener blocked on a pipe does.

Reported: samples per second taken (spooled) and points per second that reached
MLflow's ``metrics`` table (counted in PostgreSQL), the end-to-end lag from a
sample's timestamp to the moment ``get_metric_history`` first shows it (polled
every 0.25 s while the runs go on, for one key of run A and one of the workload
run), how long radT needed after the commands ended to finish every run, and,
for the per-sample calls, how far behind schedule they fell.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import (
    REPO,
    Disturbance,
    Priority,
    arguments,
    base_env,
    chosen,
    header,
    python_bin,
    table,
    wait_quiet,
    workspace,
)
from mlflow_server import MlflowServer
from postgres import PostgresServer, missing_reason

PLUGINS = REPO / "tests" / "plugins"
FAKE_PYNVML = REPO / "tests" / "fakes" / "pynvml"
NVML_SCENARIO = REPO / "tests" / "fixtures" / "nvml_h100.json"
CHILD_KEY = "system/counter/seq/n"
PARENT_KEY = "system/nvml/gpu0/power_w"

JOB = """
import sys, time
time.sleep(float(sys.argv[1]))
print("job done", time.time(), flush=True)
"""

# One run of the per-sample baseline: log_metrics once per instant, on schedule or late.
PER_SAMPLE = """
import json, sys, time
import mlflow
run_id, keys, hz, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
names = [f"system/bench/k{i:02d}/value" for i in range(keys)]
mlflow.start_run(run_id=run_id)
began = time.time()
due = int(seconds * hz)
lags, done = [], 0
for i in range(due):
    scheduled = began + i / hz
    now = time.time()
    if now >= began + seconds:
        break
    if now < scheduled:
        time.sleep(scheduled - now)
    mlflow.log_metrics({name: float(i) for name in names}, step=i, timestamp=int(scheduled * 1000))
    lags.append(time.time() - scheduled)
    done += 1
ended = time.time()
result = {"due": due, "done": done, "lags": lags, "began": began, "ended": ended}
print("RESULT", json.dumps(result))
"""


# ------------------------------------------------------------------------ measuring


class LagProbe:
    """Polls ``get_metric_history`` of one key and notes when each point first shows."""

    def __init__(self, client, find_run, key: str, period_s: float = 0.25) -> None:
        self.client = client
        self.find_run = find_run
        self.key = key
        self.period_s = period_s
        self.lags: list[float] = []
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> LagProbe:
        self._thread.start()
        return self

    def stop(self) -> list[float]:
        self._stop.set()
        self._thread.join()
        return self.lags

    def _loop(self) -> None:
        run_id = None
        while not self._stop.wait(self.period_s):
            try:
                run_id = run_id or self.find_run()
                if run_id is None:
                    continue
                history = self.client.get_metric_history(run_id, self.key)
            except Exception:
                continue
            now = time.time()
            for point in history:
                if point.step not in self._seen:
                    self._seen.add(point.step)
                    self.lags.append(now - point.timestamp / 1000)


def experiment_runs(client, name: str) -> list:
    experiment = client.get_experiment_by_name(name)
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


def run_finder(client, experiment: str, parent: bool):
    def find() -> str | None:
        for run in experiment_runs(client, experiment):
            is_parent = "mlflow.parentRunId" not in run.data.tags
            if parent and is_parent:
                return run.info.run_id
            if not parent and run.data.tags.get("radt.letter") == "A":
                return run.info.run_id
        return None

    return find


def points_in_store(postgres: PostgresServer, experiment_id: str) -> int:
    """Rows of ``system/…`` keys in MLflow's metrics table for the experiment's runs."""
    rows = postgres.sql(
        "SELECT count(*) FROM metrics m JOIN runs r ON m.run_uuid = r.run_uuid "
        "WHERE r.experiment_id = %s AND m.key LIKE 'system/%%'",
        (int(experiment_id),),
    )
    return int(rows[0][0])


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def lag_text(lags: list[float]) -> str:
    if not lags:
        return "–"
    return f"{statistics.median(lags):.1f} / {percentile(lags, 0.95):.1f} / {max(lags):.1f}"


# ------------------------------------------------------------------------ conditions


def run_radt(args, server, postgres, window: float | None, label: str) -> dict:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    folder = workspace("ingest-server")
    (folder / "job.py").write_text(JOB)
    experiment = f"ingest-{label.replace(' ', '-')}-{os.getpid()}-{time.time_ns() % 10**6}"
    listeners = "counter+top+iostat+nvml"
    rows = "".join(
        f"{experiment}, load, , , -, naive, job.py, {listeners}, {args.seconds:g}, \n"
        for _ in range(args.runs)
    )
    plan = folder / "plan.csv"
    plan.write_text(
        "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, Env\n"
        + rows
    )
    env = base_env(folder, server.uri)
    env.update(
        PYTHONPATH=os.pathsep.join([str(PLUGINS), str(FAKE_PYNVML), env.get("PYTHONPATH", "")]),
        FAKE_PYNVML_SCENARIO=str(NVML_SCENARIO),
    )
    argv = [python_bin(), "-m", "radt", "--interval", f"{1 / args.hz:g}", str(plan)]
    if window is not None:
        argv[3:3] = ["--window", f"{window:g}"]
    client = server.client()
    probes = [
        LagProbe(client, run_finder(client, experiment, parent=False), CHILD_KEY).start(),
        LagProbe(client, run_finder(client, experiment, parent=True), PARENT_KEY).start(),
    ]
    job_ends: list[float] = []
    with Disturbance() as disturbance:
        started = time.time()
        process = subprocess.Popen(
            argv, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True)
        reader.start()
        for line in process.stdout:
            match = re.search(r"job done (\S+)", line)
            if match:
                job_ends.append(float(match[1]))
        process.wait()
        ended = time.time()
        reader.join()
    lags = [probe.stop() for probe in probes]
    if process.returncode != 0:
        raise SystemExit(f"radT failed ({process.returncode}):\n{''.join(stderr)}")
    samples, first, last, keys = 0, float("inf"), 0.0, {}
    runs = experiment_runs(client, experiment)
    dest = Path(tempfile.mkdtemp(prefix="radt-bench-dl-"))
    for run in runs:
        local = client.download_artifacts(run.info.run_id, "radt/samples.parquet", str(dest))
        table_ = pq.read_table(local)
        samples += table_.num_rows
        stamps = pc.cast(table_["timestamp"], pa.int64())
        first = min(first, pc.min(stamps).as_py() / 1e6)
        last = max(last, pc.max(stamps).as_py() / 1e6)
        for key in set(table_["key"].cast(pa.string()).to_pylist()):
            keys.setdefault(key.split("/", 1)[0], set()).add(key)
        Path(local).unlink()
    span = last - first
    points = points_in_store(postgres, runs[0].info.experiment_id)
    warnings = [line.strip() for line in stderr if "not answering" in line or "sync" in line]
    return {
        "label": label,
        "runs": len(runs),
        "samples": samples,
        "span_s": span,
        "samples_per_s": samples / span,
        "points": points,
        "points_per_s": points / span,
        "keys": {name: len(found) for name, found in sorted(keys.items())},
        "lag_child": lags[0],
        "lag_parent": lags[1],
        "finish_s": ended - max(job_ends) if job_ends else float("nan"),
        "wall_s": ended - started,
        "other_cores": disturbance.other_cores(),
        "warnings": warnings,
    }


def run_per_sample(args, server, postgres, keys_per_run: int) -> dict:
    client = server.client()
    experiment = f"ingest-per-sample-{os.getpid()}-{time.time_ns() % 10**6}"
    experiment_id = client.create_experiment(experiment)
    run_ids = [client.create_run(experiment_id).info.run_id for _ in range(args.runs)]
    env = base_env(workspace("ingest-per-sample"), server.uri)
    script = [python_bin(), "-c", PER_SAMPLE]
    with Disturbance() as disturbance:
        started = time.time()
        workers = [
            subprocess.Popen(
                [*script, run_id, str(keys_per_run), f"{args.hz:g}", f"{args.seconds:g}"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for run_id in run_ids
        ]
        results = []
        for worker in workers:
            out, err = worker.communicate()
            if worker.returncode != 0:
                raise SystemExit(f"per-sample worker failed:\n{err}")
            line = next(x for x in out.splitlines() if x.startswith("RESULT "))
            results.append(json.loads(line[len("RESULT ") :]))
        ended = time.time()
    for run_id in run_ids:
        client.set_terminated(run_id)
    due = sum(r["due"] for r in results)
    done = sum(r["done"] for r in results)
    span = max(r["ended"] for r in results) - min(r["began"] for r in results)
    lags = [lag for r in results for lag in r["lags"]]
    behind = [r["lags"][-1] if r["lags"] else float("nan") for r in results]
    points = points_in_store(postgres, experiment_id)
    return {
        "label": "log_metrics per sample",
        "runs": args.runs,
        "keys_per_run": keys_per_run,
        "samples": done * keys_per_run,
        "due": due * keys_per_run,
        "span_s": span,
        "samples_per_s": done * keys_per_run / span,
        "points": points,
        "points_per_s": points / span,
        "lags": lags,
        "behind_at_end_s": max(behind),
        "left_behind": (due - done) * keys_per_run,
        "wall_s": ended - started,
        "other_cores": disturbance.other_cores(),
    }


# ------------------------------------------------------------------------ main


def main() -> None:
    parser = arguments(__doc__, keep=False)
    parser.add_argument("--runs", type=int, default=8, help="collocated runs (default 8)")
    parser.add_argument("--hz", type=float, default=10.0, help="sampling rate (default 10)")
    parser.add_argument("--seconds", type=float, default=60.0, help="command length (60)")
    parser.add_argument(
        "--skip", default="", help="conditions to leave out: full-rate, per-sample (comma list)"
    )
    args = parser.parse_args()
    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    skip = set(chosen(parser, args.skip, ("full-rate", "per-sample")))
    print(header("Sustained ingest into a PostgreSQL-backed mlflow server"))
    priority = Priority(args.nice).__enter__()
    postgres = PostgresServer(durable=True)
    server = MlflowServer(workspace("ingest-server-store"), database=postgres)
    results = []
    try:
        postgres.start()
        server.start()
        print(
            f"- server: mlflow server --workers 1 on PostgreSQL "
            f"{postgres.sql('SHOW server_version')[0][0]} (fsync on), {priority.how}"
        )
        conditions = [("radt window 1 s", None)]
        if "full-rate" not in skip:
            conditions.append(("radt full rate", 0.01))
        for label, window in conditions:
            if args.quiet:
                wait_quiet(args.max_other, max_wait_s=args.max_wait)
            results.append(run_radt(args, server, postgres, window, label))
            print(f"  {label}: done", file=sys.stderr, flush=True)
        if "per-sample" not in skip:
            first = results[0]
            per_instant = first["samples"] / first["span_s"] / args.hz
            keys_per_run = max(1, round(per_instant / args.runs))
            if args.quiet:
                wait_quiet(args.max_other, max_wait_s=args.max_wait)
            results.append(run_per_sample(args, server, postgres, keys_per_run))
            print("  per-sample: done", file=sys.stderr, flush=True)
    finally:
        server.stop()
        postgres.cleanup()
        priority.__exit__()
    report(args, results)


def report(args, results: list[dict]) -> None:
    radt = [r for r in results if r["label"].startswith("radt")]
    if radt:
        keys = ", ".join(f"{name} {count}" for name, count in radt[0]["keys"].items())
        print(
            f"\n{args.runs} runs x {args.hz:g} Hz for {args.seconds:g} s; "
            f"keys recorded per listener (all runs together): {keys}\n"
        )
    rows = []
    for r in results:
        if r["label"].startswith("radt"):
            lag = f"{lag_text(r['lag_child'])} (run) · {lag_text(r['lag_parent'])} (workload)"
            note = f"finished every run {r['finish_s']:.1f} s after the commands"
            if r["warnings"]:
                note += f"; {len(r['warnings'])} warnings"
        else:
            lag = lag_text(r["lags"])
            note = (
                f"{r['keys_per_run']} keys per call; {r['behind_at_end_s']:.1f} s behind at the "
                f"end, {r['left_behind']:,} of {r['due']:,} samples never sent"
            )
        rows.append(
            [
                r["label"],
                f"{r['samples_per_s']:,.0f}",
                f"{r['points_per_s']:,.0f}",
                f"{r['points']:,}",
                lag,
                f"{r['other_cores']:.2f}",
                note,
            ]
        )
    print(
        table(
            [
                "condition",
                "samples/s taken",
                "points/s into MLflow",
                "points",
                "lag s (median / p95 / max)",
                "other cores",
                "notes",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()

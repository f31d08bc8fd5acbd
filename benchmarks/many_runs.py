"""Looks at an experiment of 1,000 runs on an MLflow server backed by PostgreSQL, before and after
stored window figures.

    python benchmarks/many_runs.py --before /work/venvs/mainbench/bin/python
    python benchmarks/many_runs.py --runs 200 --before ... --rounds 2

A real PostgreSQL and a real ``mlflow server`` (tests/postgres.py, tests/mlflow_server.py,
``--workers 1``) hold the experiment. Its runs are recorded by radT's own recorder and closing
steps (tests/test_windows.py's ``Study``: samples handed to the recorder, then the run closed
through ``radt.record.finalize``, which computes and stores the figures): one lone run and
one workload of two collocated runs, 60 s each at 10 samples a second. Those are copied, with
their tags, params, headline metrics and artifacts, into ``--runs`` runs (a quarter lone runs,
the rest workloads of three runs, in 50 Jobs: 5 repeats of each baseline) through MLflow's
batch calls on a pool of threads; a copy's ``radt.figures`` tag names its own run ids.

Each code version (``--before``: a Python whose ``radt`` is the code before, e.g. a venv
with main installed; ``--after``: this checkout's) measures in a process of its own, with
an empty radT cache:

- ``radt.summary (first look)``: ``radt.summary(experiment)`` with an empty sample cache
  (the code before downloads every run's samples artifact then);
- ``radt.summary``: the same call again (the code before reads its cache);
- ``radt runs``: the command, start to exit: cold (``RADT_WARM=0``, a new process: imports
  included) and through the warm launcher (started and ready before the rounds);
- ``Runs page``: the Runs page's callback data: ``Store.summary`` and ``grid_rows``;
- ``Compare page (100 workloads)``: the Compare page's callback for 100 ticked workloads:
  ``Store.summary``, ``focus``, ``normalise`` and its seven charts.

The median of ``--rounds`` is shown (the first look once), wall time and the CPU time of the
looking process (``radt runs``: of the command's process; the server's own is not counted);
ratio = before / after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import arguments, median, results, scratch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
EXPERIMENT = "many-runs"
THREADS = 8
JOBS = 50
"""Distinct Jobs (tag ``radt.job``): 5 repeats of each lone run and 5 workloads of each."""

MEASURE = r"""
import json, subprocess, sys, time
from pathlib import Path
uri, experiment, rounds, radt_bin = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
import radt.analysis.summary as summary_module
from radt.analysis.summary import summary
from radt.frontend.data import Store
from radt.frontend.pages import compare
from radt.frontend.pages.runs import grid_rows

import resource
cpu = {}
def used():
    mine = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + kids.ru_utime + kids.ru_stime

def timed(what, name=None):
    began, began_cpu = time.perf_counter(), used()
    value = what()
    if name:
        cpu.setdefault(name, []).append(used() - began_cpu)
    return time.perf_counter() - began, value

read = []
prepare = summary_module.prepare
def spy(client, runs, *args, **kwargs):
    read.extend(runs)
    return prepare(client, runs, *args, **kwargs)
summary_module.prepare = spy
out = {"summary_first": [timed(lambda: summary(experiment, tracking_uri=uri), "summary_first")[0]]}
out["samples_read"] = len(read)
out["summary"], out["runs"], out["runs_page"], out["compare"] = [], [], [], []
out["runs_warm"] = []
import os, signal
command = [radt_bin, "runs", "-e", experiment, "--tracking-uri", uri]
path = None
try:
    from radt import warm  # the code before may have none: its radt runs is then cold too
    path = warm.socket_path()
    warm.start(path)
    deadline = time.time() + 300
    while not (path.exists() and warm.server_pid(path)) and time.time() < deadline:
        time.sleep(0.2)  # ready before the rounds, as after a first command
except ImportError:
    pass
for _ in range(rounds):
    seconds, frame = timed(lambda: summary(experiment, tracking_uri=uri), "summary")
    out["summary"].append(seconds)
    out["runs"].append(timed(lambda: subprocess.run(
        command, check=True, capture_output=True, env={**os.environ, "RADT_WARM": "0"}),
        "runs")[0])
    out["runs_warm"].append(timed(lambda: subprocess.run(
        command, check=True, capture_output=True), "runs_warm")[0])
    page = timed(lambda: grid_rows(Store(uri).summary(experiment)), "runs_page")
    out["runs_page"].append(page[0])
    workloads = frame[frame["level"] == "provider"]["run_id"].tolist()[:100]
    def charts():
        shown = compare.normalise(compare.focus(Store(uri).summary(experiment), workloads))
        return [
            compare.efficiency_figure(shown),
            compare.throughput_energy_figure(shown),
            compare.slowdown_figure(shown),
            compare.utilisation_figure(shown),
            compare.frontier_figure(compare.frontier_table(shown), normalised=False),
            compare.client_energy_figure(shown),
            compare.cpu_figure(shown),
        ]
    out["compare"].append(timed(charts, "compare")[0])
if path is not None and warm.server_pid(path):
    os.kill(warm.server_pid(path), signal.SIGTERM)
out["cpu"] = cpu
out["rows"] = len(frame)
out["providers"] = int((frame["level"] == "provider").sum())
print(json.dumps(out))
"""


def record_templates(client, uri: str) -> list[list]:
    """A lone run and a workload of two, recorded and closed by radT; returns the families
    (each: its MLflow runs, the workload's first)."""
    from test_windows import COMMAND, Study, gpu, script

    s = Study(client, uri, experiment="templates")
    lone = s.lone(
        "alone",
        gpu(0.2, 60.0, 200.0, 7777.7) + script(2.0, 60.0, 250.0, epochs=(4.0, 30.0, 60.0)),
        (0.0, 60.0),
        radt__command=COMMAND,
    )
    pair, kids = s.workload(
        "pair",
        gpu(0.0, 60.0, 300.0, 123.4),
        60.0,
        [
            (COMMAND, script(2.0, 58.0, 100.0, epochs=(8.0, 30.0, 58.0)), (0.0, 58.5)),
            (f"{COMMAND} --seed 1", script(3.0, 55.0, 50.0, epochs=(7.0, 30.0, 55.0)), (0.0, 55.5)),
        ],
    )
    return [[client.get_run(lone)], [client.get_run(i) for i in (pair, *kids)]]


def copy_family(
    client, experiment_id: str, family: list, folders: dict[str, Path], job: str
) -> None:
    """One copy of a family of runs (its Job ``job``): tags, params, latest metrics,
    artifacts, status."""
    from mlflow.entities import Metric, Param, RunTag

    new: dict[str, str] = {}
    for run in family:  # the workload first: its runs name it as their parent
        tags = {k: v for k, v in run.data.tags.items() if k != "radt.figures"}
        tags["radt.job"] = job
        parent = tags.get("mlflow.parentRunId")
        if parent in new:
            tags["mlflow.parentRunId"] = new[parent]
        made = client.create_run(
            experiment_id, start_time=run.info.start_time, tags=tags, run_name=run.info.run_name
        )
        new[run.info.run_id] = made.info.run_id
    for run in family:
        run_id = new[run.info.run_id]
        figures = run.data.tags.get("radt.figures", "")
        for old, now in new.items():
            figures = figures.replace(old, now)
        client.log_batch(
            run_id,
            metrics=[Metric(k, v, run.info.end_time, 0) for k, v in run.data.metrics.items()],
            params=[Param(k, v) for k, v in run.data.params.items()],
            tags=[RunTag("radt.figures", figures)] if figures else [],
        )
        client.log_artifacts(run_id, str(folders[run.info.run_id]))
        client.set_terminated(run_id, run.info.status, end_time=run.info.end_time)


def build(uri: str, runs: int, folder: Path) -> None:
    """The experiment of ``runs`` runs, copied from the recorded templates."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    lone, workload = record_templates(client, uri)
    folders = {}
    for run in [*lone, *workload]:
        target = folder / "artifacts" / run.info.run_id
        target.mkdir(parents=True)
        client.download_artifacts(run.info.run_id, "", str(target))
        folders[run.info.run_id] = target
    experiment_id = client.create_experiment(EXPERIMENT)
    singles = runs // 4
    families = [lone] * singles + [workload] * ((runs - singles) // len(workload))
    began = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        copies = [
            pool.submit(copy_family, client, experiment_id, family, folders, f"job-{i % JOBS}")
            for i, family in enumerate(families)
        ]
        for copy in copies:
            copy.result()
    made = sum(len(f) for f in families)
    print(f"made {made} runs in {time.perf_counter() - began:.0f} s", file=sys.stderr)


def measure(python: str, uri: str, rounds: int, home: Path, env: dict) -> dict:
    """One code version's timings, in a process of its own with an empty radT home."""
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    radt_bin = str(Path(python).with_name("radt"))
    done = subprocess.run(
        [python, "-c", MEASURE, uri, EXPERIMENT, str(rounds), radt_bin],
        env={**env, "RADT_HOME": str(home)},
        cwd=home,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--runs", type=int, default=1000, help="runs in the experiment")
    parser.add_argument("--rounds", type=int, default=1, help="looks per version (after the first)")
    parser.add_argument("--before", help="a Python whose radt is the code before")
    parser.add_argument("--after", default=sys.executable, help="a Python with this checkout")
    args = parser.parse_args()
    from mlflow_server import MlflowServer
    from postgres import PostgresServer

    with scratch("radt-many-runs-", keep=args.keep) as folder:
        database = PostgresServer(durable=True).start()
        server = MlflowServer(folder / "server", database=database).start()
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_"))}
            env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true")
            os.environ["RADT_HOME"] = str(folder / "build-home")
            build(server.uri, args.runs, folder)
            versions = {"after": args.after}
            if args.before:
                versions = {"before": args.before, **versions}
            found = {
                name: measure(python, server.uri, args.rounds, folder / name, env)
                for name, python in versions.items()
            }
        finally:
            server.stop()
            database.stop()
            database.cleanup()
    rows = []
    labels = {
        "summary_first": "radt.summary (first look)",
        "summary": "radt.summary",
        "runs": "radt runs, cold",
        "runs_warm": "radt runs, warm launcher",
        "runs_page": "Runs page",
        "compare": "Compare page (100 workloads)",
    }
    for key, label in labels.items():
        row = [label]
        for part in (found, {name: f["cpu"] for name, f in found.items()}):
            after = median(part["after"][key])
            before = median(part["before"][key]) if "before" in part else float("nan")
            row += [f"{before:.2f}", f"{after:.2f}", f"{before / after:.1f}×"]
        rows.append(row)
    shape = found["after"]
    read = {name: found[name]["samples_read"] for name in found}
    notes = (
        f"{shape['rows']} summary rows ({shape['providers']} workloads) on an MLflow server "
        f"(--workers 1) backed by PostgreSQL; seconds, median of {args.rounds} "
        f"(the first look once). Runs whose samples a look read: {read}."
    )
    columns = ["look", "before (s)", "after (s)", "ratio", "CPU before (s)", "CPU after", "ratio"]
    print(results("Many runs", notes, columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Slurm dispatch: from sbatch to radT's first sample on the node, and a study's makespan.

    python benchmarks/slurm_dispatch.py                       # ~3 min on 2 cores
    python benchmarks/slurm_dispatch.py --repeats 10 --workloads 8 --seconds 10

Starts the tests' real single-node Slurm (``tests/slurmcluster.py``: munged,
slurmctld, slurmd, ``--gpus`` fake GPUs as GRES) and measures two things.

**Dispatch overhead** (``--repeats`` rounds, one after the other): ``sbatch --wrap
"python -m radt -l top --interval 0.1 sleeper.py 2"`` from the moment sbatch is called
to the timestamp of the run's first sample (its full-rate samples, as ``radt.load`` reads
them; MLflow's first point is a window's mean, stamped up to a window later), split into
sbatch → job start (``scontrol``'s ``StartTime``, whole seconds), → run created and → first
sample. Each round runs one job per store, interleaved: the SQLite store, and with
``--server`` an ``mlflow server`` (SQLite behind it) through radT's light path
(``radt.restclient``: the run made over REST, MLflow imported once the command runs) and
through MLflow's client (``RADT_LIGHT=0``, radT before the light path), side by side.

**Makespan**: a plan of ``--workloads`` workloads (each ``sleeper.py --seconds S`` on
``Devices`` 0, so each job asks for ``gpu:1``) run with ``radt plan.csv --slurm``, from
invoking radT to its exit, against ``N/K ×`` the workload's own time: the same
workload run locally by ``radt one.csv`` (its mean over ``--repeats`` rounds), K being
``--gpus``, for each store as the dispatch. The machine's CPUs also bound how many jobs run at
once (one CPU a job). Beside them, **bare Slurm**: the same N commands without radT, one
``sbatch --array`` of ``python sleeper.py`` with ``gpu:1`` a task, from sbatch until squeue
no longer lists the array (looked at every 0.1 s), against N/K × the bare command's own time.
Its ratio is what Slurm alone costs a study of such workloads; radT's makespan over bare
Slurm's is what radT adds to it.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

from _common import arguments, base_env, median, python_bin, results, scratch, spread, sqlite_store
from slurmcluster import SlurmCluster

SLEEPER = """\
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=2)
time.sleep(parser.parse_args().seconds)
"""
COLUMNS = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params\n"


def first_sample_s(client, run_id: str) -> float | None:
    """The time (s since the epoch) of the run's first sample, read from its full-rate samples
    (``radt.load``). Not its first MLflow metric point: a point is a window's mean, stamped
    with the window's latest sample, up to ``--window`` (1 s) after the first."""
    from radt import load

    frame = load(runs=[run_id], include_workload=False, tracking_uri=client.tracking_uri)
    if frame.empty or frame.attrs["radt.source"].get(run_id) != "artifact":
        return None
    return frame["timestamp"].min().timestamp()


def dispatch_round(folder: Path, env: dict[str, str], client) -> tuple[float, float, float]:
    """(sbatch → job start, → run created, → first sample) in seconds, for one job."""
    env = {**env, "MLFLOW_TRACKING_URI": client.tracking_uri}
    before = {r.info.run_id for r in client.search_runs(["0"])}
    radt = f"{python_bin()} -m radt -l top --interval 0.1 sleeper.py --seconds 2"
    called = time.time()
    done = subprocess.run(
        ["sbatch", "--parsable", "-o", "dispatch-%j.out", "--wrap", radt],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    job = done.stdout.strip()
    while True:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job], env=env, capture_output=True, text=True
        ).stdout.strip()
        if not queued:
            break
        time.sleep(0.2)
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", job], env=env, capture_output=True, text=True
    ).stdout
    start = datetime.fromisoformat(re.search(r"StartTime=(\S+)", shown)[1]).timestamp()
    (run,) = [r for r in client.search_runs(["0"]) if r.info.run_id not in before]
    first = first_sample_s(client, run.info.run_id)
    return start - called, run.info.start_time / 1000 - called, (first or float("nan")) - called


def wall_s(argv: list[str], folder: Path, env: dict[str, str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--repeats", type=int, default=5, help="dispatch rounds (default 5)")
    parser.add_argument("--workloads", type=int, default=8, help="N (default 8)")
    parser.add_argument("--gpus", type=int, default=2, help="K fake GPUs (default 2)")
    parser.add_argument("--seconds", type=float, default=10, help="each workload's sleep")
    parser.add_argument(
        "--server", action="store_true", help="also dispatch to an mlflow server, light and not"
    )
    parser.add_argument("--no-makespan", action="store_true", help="measure the dispatch only")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(scratch("slurm", keep=args.keep))
        slurm = stack.enter_context(SlurmCluster(gpus=args.gpus))
        uri = sqlite_store(folder / "store")
        env = {**base_env(folder, uri), **slurm.client_env()}
        env = {k: v for k, v in env.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}
        (folder / "sleeper.py").write_text(SLEEPER)
        from mlflow.tracking import MlflowClient

        stores = {"SQLite store": (MlflowClient(uri), {})}
        if args.server:
            from mlflow_server import MlflowServer

            server = stack.enter_context(MlflowServer(folder / "server"))
            on_server = MlflowClient(server.uri)
            stores["mlflow server, light path"] = (on_server, {"RADT_LIGHT": "1"})
            stores["mlflow server, RADT_LIGHT=0"] = (on_server, {"RADT_LIGHT": "0"})
        dispatched: dict[str, list[tuple[float, float, float]]] = {name: [] for name in stores}
        for _ in range(args.repeats):
            for name, (client, extra) in stores.items():
                dispatched[name].append(dispatch_round(folder, {**env, **extra}, client))
        if args.no_makespan:
            print(dispatch_table(args, dispatched))
            return 0
        spans = {
            name: makespan(
                folder, {**env, "MLFLOW_TRACKING_URI": client.tracking_uri, **extra}, args
            )
            for name, (client, extra) in stores.items()
        }
        bare_own, bare_span = bare_makespan(folder, env, args)
    rows = dispatch_rows(dispatched)
    bare_ideal = args.workloads / args.gpus * median(bare_own)
    rows += [
        ["bare command's own time (s)", f"{median(bare_own):.1f}", spread(bare_own, ".1f")],
        ["bare Slurm: makespan (s)", f"{bare_span:.1f}", "–"],
        ["bare Slurm: makespan / (N/K × bare own)", f"{bare_span / bare_ideal:.2f}", "–"],
    ]
    for store, (own, span) in spans.items():
        ideal = args.workloads / args.gpus * median(own)
        rows += [
            [
                f"{store}: workload's own time under radT (s)",
                f"{median(own):.1f}",
                spread(own, ".1f"),
            ],
            [
                f"{store}: N/K × own time (s), N={args.workloads}, K={args.gpus}",
                f"{ideal:.1f}",
                "–",
            ],
            [f"{store}: makespan with --slurm (s)", f"{span:.1f}", "–"],
            [f"{store}: makespan / (N/K × own)", f"{span / ideal:.2f}", "–"],
            [f"{store}: makespan / bare Slurm's", f"{span / bare_span:.2f}", "–"],
        ]
    notes = (
        f"{dispatch_notes(args)} Makespan, per store: N={args.workloads} workloads of "
        f"`sleep {args.seconds:g}` on K={args.gpus} fake GPUs, `radt plan.csv --slurm` from "
        "start to exit, against N/K × the same workload's own time under `radt one.csv` "
        f"(median of {args.repeats}); bare Slurm: the same commands without radT, one "
        "`sbatch --array`, from sbatch until squeue no longer lists it."
    )
    print(results("Slurm dispatch and makespan", notes, ["figure", "median", "range"], rows))
    return 0


def makespan(folder: Path, env: dict[str, str], args) -> tuple[list[float], float]:
    """(the workload's own times under ``radt one.csv``, the plan's makespan with --slurm)."""
    row = f"bench, w{{i}}, , , 0, none, sleeper.py, none, --seconds {args.seconds:g}\n"
    radt = [python_bin(), "-m", "radt"]
    own = []
    for _ in range(args.repeats):
        (folder / "one.csv").write_text(COLUMNS + row.format(i=0))
        own.append(wall_s([*radt, "one.csv"], folder, env))
    plan = COLUMNS + "".join(row.format(i=i) for i in range(args.workloads))
    (folder / "plan.csv").write_text(plan)
    return own, wall_s([*radt, "plan.csv", "--slurm"], folder, env)


def bare_makespan(folder: Path, env: dict[str, str], args) -> tuple[list[float], float]:
    """(the bare command's own times, the makespan of the same N commands as one sbatch
    array without radT, ``gpu:1`` a task, from sbatch until squeue no longer lists it)."""
    command = [python_bin(), "sleeper.py", "--seconds", f"{args.seconds:g}"]
    own = [wall_s(command, folder, env) for _ in range(args.repeats)]
    started = time.monotonic()
    array = subprocess.run(
        [
            "sbatch",
            "--parsable",
            f"--array=0-{args.workloads - 1}",
            "--gres=gpu:1",
            "-o",
            "bare-%A_%a.out",
            "--wrap",
            " ".join(command),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    while subprocess.run(
        ["squeue", "-h", "-j", array], env=env, capture_output=True, text=True
    ).stdout.strip():
        time.sleep(0.1)
    return own, time.monotonic() - started


def dispatch_notes(args) -> str:
    return (
        f"Dispatch: {args.repeats} rounds, each one job per store one after the other "
        "(median, min–max)."
    )


def dispatch_rows(dispatched: dict[str, list[tuple[float, float, float]]]) -> list[list[str]]:
    """Three rows per store (→ job start, → run created, → first sample), then, with a
    server, the light path's first sample against ``RADT_LIGHT=0``'s as a ratio."""
    rows = []
    for store, rounds in dispatched.items():
        pieces = zip(*rounds, strict=True)
        names = ("sbatch → job start (s)", "sbatch → run created (s)", "sbatch → first sample (s)")
        for name, values in zip(names, pieces, strict=True):
            rows.append([f"{store}: {name}", f"{median(values):.2f}", spread(values, ".2f")])
    light, heavy = (
        dispatched.get("mlflow server, light path"),
        dispatched.get("mlflow server, RADT_LIGHT=0"),
    )
    if light and heavy:
        ratio = median([r[2] for r in heavy]) / median([r[2] for r in light])
        rows.append(["first sample, RADT_LIGHT=0 / light path", f"{ratio:.2f}", "–"])
    return rows


def dispatch_table(args, dispatched) -> str:
    return results(
        "Slurm dispatch",
        dispatch_notes(args),
        ["figure", "median", "range"],
        dispatch_rows(dispatched),
    )


if __name__ == "__main__":
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    sys.exit(main())

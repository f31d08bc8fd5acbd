"""``radt report`` on a study of 36 workloads × 3 repeats: how long the report takes.

    python benchmarks/report.py
    python benchmarks/report.py --rounds 3 --keep

A lone run and a workload of two collocated runs are recorded and closed by radT's own
recorder and closing steps (tests/test_windows.py's ``Study``, as ``benchmarks/many_runs.py``
does), then cloned, with their stored figures (``radt.figures``, its run ids renamed), into a
local SQLite store: 12 Jobs × 3 configurations (alone at full power, naive x2 at full power,
naive x2 at 250 W) = 36 workloads, 3 repeats each (108 families, 252 runs). Each round, in a
process of its own with an empty radT cache:

- ``radt.report (data, first look)``: ``radt.report(experiment)``: the summary, repeats,
  frontier, phases, findings and what to run, with imports and an empty radT cache (the phases
  probe each run's artifacts once, and remember the runs without any);
- ``radt.report (data, again)``: the same call again in the same process;
- ``HTML page``: ``Report.html`` (plotly's script inline, the charts);
- ``Markdown + SVG charts``: ``Report.write("report.md")`` (kaleido exports the charts through
  the local Chromium: its start dominates);
- ``radt report`` (command): the whole command, start to exit, writing the HTML: cold
  (``RADT_WARM=0``: what the first command pays) and through the warm launcher (started and
  ready before it, as for every command after a first).

Wall and CPU seconds of the measuring process (its children included), median of ``--rounds``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _common import arguments, median, results, scratch

EXPERIMENT = "report-study"
JOBS = 12
REPEATS = 3
SETTINGS = (("lone", None), ("pair", None), ("pair", "250"))
"""The configurations of each Job: alone, naive x2 at full power, naive x2 at 250 W."""

MEASURE = r"""
import json, os, resource, subprocess, sys, time
uri, experiment, folder, radt_bin = sys.argv[1:5]
def used():
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
out = {}
def timed(name, what):
    began, cpu = time.perf_counter(), used()
    value = what()
    out[name] = [time.perf_counter() - began, used() - cpu]
    return value
import radt
made = timed("data", lambda: radt.report(experiment, tracking_uri=uri))
made = timed("again", lambda: radt.report(experiment, tracking_uri=uri))
timed("html", lambda: made.html)
written = timed("md", lambda: made.write(os.path.join(folder, "report.md")))
command = [radt_bin, "report", "-e", experiment, "--tracking-uri", uri, "-o",
           os.path.join(folder, "report.html")]
timed("command", lambda: subprocess.run(
    command, check=True, capture_output=True, env={**os.environ, "RADT_WARM": "0"}))
import signal
from radt import warm
path = warm.socket_path()
warm.start(path)  # as a first command does; ready before the measured one
deadline = time.time() + 300
while not (path.exists() and warm.server_pid(path)) and time.time() < deadline:
    time.sleep(0.2)  # the socket is made once its imports are done
timed("command_warm", lambda: subprocess.run(command, check=True, capture_output=True))
if warm.server_pid(path):
    os.kill(warm.server_pid(path), signal.SIGTERM)
out["findings"] = len(made.findings)
out["rows"] = len(made.summary)
out["images"] = sum(1 for p in written if str(p).endswith(".svg"))
print(json.dumps(out))
"""


def copy_family(client, experiment_id: str, family: list, job: str, power: str | None) -> None:
    """One clone of a family (its Job ``job``, power limit ``power``): tags, params, headline
    metrics and the stored figures with the clone's run ids, its status."""
    from mlflow.entities import Metric, Param, RunTag

    new: dict[str, str] = {}
    for run in family:  # the workload first: its runs name it as their parent
        tags = {k: v for k, v in run.data.tags.items() if k != "radt.figures"}
        tags["radt.job"] = job
        if power:
            tags["radt.power_limit_w"] = power
        if tags.get("mlflow.parentRunId") in new:
            tags["mlflow.parentRunId"] = new[tags["mlflow.parentRunId"]]
        made = client.create_run(
            experiment_id, start_time=run.info.start_time, tags=tags, run_name=run.info.run_name
        )
        new[run.info.run_id] = made.info.run_id
    for run in family:
        figures = run.data.tags.get("radt.figures", "")
        for old, now in new.items():
            figures = figures.replace(old, now)
        client.log_batch(
            new[run.info.run_id],
            metrics=[Metric(k, v, run.info.end_time, 0) for k, v in run.data.metrics.items()],
            params=[Param(k, v) for k, v in run.data.params.items()],
            tags=[RunTag("radt.figures", figures)] if figures else [],
        )
        client.set_terminated(new[run.info.run_id], run.info.status, end_time=run.info.end_time)


def build(uri: str) -> int:
    """The study: templates recorded by radT, cloned into 36 workloads × 3 repeats."""
    from many_runs import record_templates
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    lone, workload = record_templates(client, uri)
    experiment_id = client.create_experiment(EXPERIMENT)
    made = 0
    for job in range(JOBS):
        for kind, power in SETTINGS:
            family = lone if kind == "lone" else workload
            for _ in range(REPEATS):
                copy_family(client, experiment_id, family, f"job-{job}", power)
                made += len(family)
    return made


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--rounds", type=int, default=1, help="rounds (each a fresh process)")
    args = parser.parse_args()
    with scratch("radt-report-", keep=args.keep) as folder:
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        os.environ["RADT_HOME"] = str(folder / "build-home")
        began = time.perf_counter()
        runs = build(uri)
        print(f"made {runs} runs in {time.perf_counter() - began:.0f} s", file=sys.stderr)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_"))}
        env.update(MLFLOW_DISABLE_TELEMETRY="true", DO_NOT_TRACK="true")
        rounds, loads = [], []
        for i in range(args.rounds):
            home = folder / f"home-{i}"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            loads.append(os.getloadavg()[0])
            done = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    MEASURE,
                    uri,
                    EXPERIMENT,
                    str(home),
                    str(Path(sys.executable).with_name("radt")),
                ],
                env={**env, "RADT_HOME": str(home)},
                cwd=home,
                check=True,
                capture_output=True,
                text=True,
            )
            rounds.append(json.loads(done.stdout.strip().splitlines()[-1]))
            loads.append(os.getloadavg()[0])
    labels = {
        "data": "radt.report (data, first look)",
        "again": "radt.report (data, again)",
        "html": "HTML page",
        "md": "Markdown + SVG charts",
        "command": "radt report (command), cold",
        "command_warm": "radt report (command), warm launcher",
    }
    rows = [
        [
            label,
            f"{median([r[key][0] for r in rounds]):.2f}",
            f"{median([r[key][1] for r in rounds]):.2f}",
        ]
        for key, label in labels.items()
    ]
    last = rounds[-1]
    notes = (
        f"{runs} runs ({last['rows']} summary rows), {last['findings']} findings, "
        f"{last['images']} SVG charts; local SQLite store; median of {args.rounds} "
        f"round(s); 1-minute load average during the rounds {min(loads):.1f}–{max(loads):.1f} "
        f"on {os.cpu_count()} cores."
    )
    print(results("radt report", notes, ["step", "wall (s)", "CPU (s)"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

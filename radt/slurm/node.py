"""On the node: run the one workload of a plan that this Slurm array task stands for (or, for a
study of ``nodes: N``, this node's part of it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from radt.errors import RadtError
from radt.launch.launcher import open_store
from radt.launch.registry import discover
from radt.plans.model import Workload
from radt.plans.read import read_plan
from radt.plans.runner import PlanOptions, _report, check_plan, run_workloads
from radt.slurm.jobenv import job_gpus
from radt.tags import RADT_STUDY


def within_job(workload: Workload, gpus: list[str]) -> None:
    """Make the workload's device indices name the job's own GPUs (index i: the i-th GPU
    Slurm gave the job), so two jobs on ``Devices`` 0 run on two different GPUs."""
    if not gpus:
        return
    for row in workload.rows:
        row.devices = [
            gpus[int(d)] if d.isdigit() and int(d) < len(gpus) else d for d in row.devices
        ]


def run_task(tasks_path: Path, options: PlanOptions) -> int:
    """Run the workload of ``$SLURM_ARRAY_TASK_ID`` in the task list ``tasks_path``."""
    try:
        tasks = json.loads(Path(tasks_path).read_text())
        label = tasks["workloads"][int(os.environ["SLURM_ARRAY_TASK_ID"])]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise RadtError(
            f"--slurm-task {tasks_path}: not a task of this job array ({exc})"
        ) from None
    plan = read_plan(Path(tasks["plan"]))
    workload = next((w for w in plan.workloads if w.label == label), None)
    if workload is None:
        raise RadtError(f"{plan.path} has no workload {label} any more")
    within_job(workload, job_gpus())
    nodes = int(tasks.get("nodes") or 1)
    if nodes > 1:
        _exec_node(workload, nodes, tasks, options)
    options = replace(
        options,
        path=plan.path,
        parent_run_id=tasks.get("parent_run_id") or options.parent_run_id,
        tags={**options.tags, **tasks.get("tags", {})},
    )
    found = discover(options.listener_options)
    problems = check_plan(plan, [workload], options, found)  # this node's GPUs, tools, rights
    if problems:
        raise RadtError(_report(plan.path, problems).replace("\n", "; "))
    store = open_store(options.tracking_uri, light=True)
    return run_workloads(plan, [workload], options, found, store)


def _exec_node(workload: Workload, nodes: int, tasks: dict, options: PlanOptions) -> None:
    """Become this node's radT of a multi-node workload (radt.plans.multinode): the group,
    rank and node come from this Slurm step; torchrun meets on the step's first node at a port
    derived from the job id."""
    from radt.plans.multinode import node_argv, node_env

    environ = os.environ
    rank = int(environ.get("SLURM_PROCID") or 0)
    tags = tasks.get("tags", {})
    argv = node_argv(
        workload,
        tags.get(RADT_STUDY, ""),
        tasks.get("parent_run_id") or options.parent_run_id,
        interval_s=options.interval_s,
    )
    env = node_env(environ, nodes, rank, _first_host(environ), _master_port(environ))
    if options.tracking_uri:
        env["MLFLOW_TRACKING_URI"] = options.tracking_uri
    os.execve(sys.executable, argv, env)


def _master_port(environ) -> int:
    """The rendezvous port of a multi-node workload: 20000 to 39999, from the Slurm job id."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or "0"
    return 20000 + int(job) % 20000 if job.isdigit() else 29500


def _first_host(environ) -> str:
    """The step's first node (rank 0's host), as ``scontrol show hostnames`` expands it."""
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
    try:
        done = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=30,
        )
        hosts = done.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        hosts = []
    if not hosts:
        raise RadtError(f"cannot find the first node of {nodelist!r} with scontrol show hostnames")
    return hosts[0]

"""On the node: run the one workload of a plan that this Slurm array task stands for."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from radt.errors import RadtError
from radt.launch.launcher import open_store
from radt.launch.registry import discover
from radt.plans.model import Workload
from radt.plans.read import read_plan
from radt.plans.runner import PlanOptions, _report, check_plan, run_workloads
from radt.slurm.jobenv import job_gpus


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
    return run_workloads(plan, [workload], options, found, open_store(options.tracking_uri))

"""What a process inside a Slurm job knows of its job: the ``radt.slurm.*`` tags and its GPUs."""

from __future__ import annotations

import os
from collections.abc import Mapping

from radt.tags import (
    RADT_SLURM_ARRAY_JOB_ID,
    RADT_SLURM_ARRAY_TASK_ID,
    RADT_SLURM_ATTEMPT,
    RADT_SLURM_GPUS,
    RADT_SLURM_JOB_ID,
    RADT_SLURM_NODE,
    RADT_SLURM_PARTITION,
)

# Tag name -> the Slurm output environment variables it is read from (first one set wins).
TAG_VARIABLES = {
    RADT_SLURM_JOB_ID: ("SLURM_JOB_ID", "SLURM_JOBID"),
    RADT_SLURM_ARRAY_JOB_ID: ("SLURM_ARRAY_JOB_ID",),
    RADT_SLURM_ARRAY_TASK_ID: ("SLURM_ARRAY_TASK_ID",),
    RADT_SLURM_NODE: ("SLURMD_NODENAME",),
    RADT_SLURM_PARTITION: ("SLURM_JOB_PARTITION",),
    RADT_SLURM_GPUS: ("SLURM_JOB_GPUS", "SLURM_STEP_GPUS", "CUDA_VISIBLE_DEVICES"),
}


def in_job(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs inside a Slurm job (``SLURM_JOB_ID`` is set)."""
    environ = os.environ if environ is None else environ
    return bool(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))


def job_tags(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``radt.slurm.*`` tags of a run inside a Slurm job; empty outside one.

    A tag whose variable Slurm did not set (no array, no GPUs) is left out.
    """
    environ = os.environ if environ is None else environ
    if not in_job(environ):
        return {}
    tags = {}
    for tag, names in TAG_VARIABLES.items():
        value = next((environ[name] for name in names if environ.get(name)), None)
        if value is not None:
            tags[tag] = value
    restarts = environ.get("SLURM_RESTART_COUNT", "")
    if restarts.isdigit():  # set once Slurm requeued the job: this run is a later attempt
        tags[RADT_SLURM_ATTEMPT] = str(int(restarts) + 1)
    return tags


def job_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs a Slurm job was given, as CUDA names them: ``CUDA_VISIBLE_DEVICES``,
    else ``SLURM_JOB_GPUS`` inside a job; empty when neither says."""
    environ = os.environ if environ is None else environ
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None and in_job(environ):
        visible = environ.get("SLURM_JOB_GPUS") or environ.get("SLURM_STEP_GPUS")
    return [d.strip() for d in (visible or "").split(",") if d.strip()]

"""A study workload that spans several nodes (``nodes: N``): one distributed training, run as
one radT per node, which together make one job run (:mod:`radt.launch.group`) nested under the
study run.

Each node's radT runs the workload's one row as a lone command with the group's variables:
``RADT_NODES``, ``RADT_NODE_RANK`` and ``RADT_NODE``, and torchrun's own environment for its
flags (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``), so a
``file: torchrun --nproc-per-node 2 train.py`` needs no node flags. Under Slurm each node is one
task of the workload's ``srun`` and the group, rank and node come from Slurm
(:mod:`radt.slurm.node`); without Slurm, :func:`run_here` starts the N "nodes" on this host, for
testing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Mapping

from radt.errors import RadtError
from radt.plans import columns
from radt.plans.model import FAILED, Workload
from radt.tags import MLFLOW_PARENT_RUN_ID, RADT_STUDY, RADT_WORKLOAD, tag_filter

log = logging.getLogger(__name__)

LOCAL_ADDR = "127.0.0.1"


def node_argv(
    workload: Workload,
    study: str,
    parent_run_id: str | None,
    *,
    interval_s: float | None = None,
    radt: list[str] | None = None,
) -> list[str]:
    """The radT command one node runs for ``workload`` (its only row), its job run nested under
    ``parent_run_id``."""
    (row,) = workload.trainings
    argv = [*(radt or [sys.executable, "-m", "radt"]), "-e", workload.experiment]
    if row.listeners:
        argv += ["-l", row.listeners]
    if row.devices:
        argv += ["-d", "+".join(row.devices)]
    if interval_s is not None:
        argv += ["--interval", f"{interval_s:g}"]
    argv += columns.radt_flags(row.values)
    tags = {RADT_STUDY: study, RADT_WORKLOAD: workload.name}
    if parent_run_id:
        tags[MLFLOW_PARENT_RUN_ID] = parent_run_id
    for key, value in tags.items():
        argv += ["-t", f"{key}={value}"]
    return [*argv, "--", *row.command]


def node_env(
    base: Mapping[str, str], nodes: int, rank: int, master_addr: str, master_port: int
) -> dict[str, str]:
    """The environment of node ``rank``'s radT: the group's count and rank, and torchrun's."""
    return {
        **base,
        "RADT_NODES": str(nodes),
        "RADT_NODE_RANK": str(rank),
        "PET_NNODES": str(nodes),
        "PET_NODE_RANK": str(rank),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(master_port),
    }


def free_port() -> int:
    """A TCP port on this host that nothing listens on now (the local job's rendezvous)."""
    with socket.socket() as s:
        s.bind((LOCAL_ADDR, 0))
        return s.getsockname()[1]


def run_here(
    workload: Workload,
    nodes: int,
    study: str,
    parent_run_id: str,
    client,
    uri: str,
    experiment_id: str,
    *,
    interval_s: float | None = None,
) -> tuple[str, str, bool]:
    """Run ``workload`` as ``nodes`` radT "nodes" on this host (``RADT_NODE`` = node0, node1,
    …); return the job run's status and id, and whether Ctrl-C stopped it (passed on to the
    nodes, whose records are complete when this returns). For testing a multi-node study:
    the nodes share this host's GPUs. The nodes have a session of their own, so a signal reaches
    them once, from here, whether this radT runs in the terminal's process group or was forked
    by the warm launcher (outside it)."""
    group = f"{study}-{workload.name}-{uuid.uuid4().hex[:8]}"
    base = {**os.environ, "MLFLOW_TRACKING_URI": uri, "RADT_GROUP": group}
    port = free_port()
    argv = node_argv(workload, study, parent_run_id, interval_s=interval_s)
    log.info(f"workload {workload.label}: one training on {nodes} local nodes (group {group})")
    processes: list[subprocess.Popen] = []
    interrupted = False
    try:
        for rank in range(nodes):
            env = node_env(base, nodes, rank, LOCAL_ADDR, port)
            env["RADT_NODE"] = f"node{rank}"
            try:
                processes.append(subprocess.Popen(argv, env=env, start_new_session=True))
            except OSError as exc:
                raise RadtError(f"cannot start radT for node {rank}: {exc.strerror}") from None
        for process in processes:
            process.wait()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM / SIGHUP (the plan runner's interrupt)
        interrupted = True
        for process in processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGINT)
    finally:
        for process in processes:  # wait for their records
            if process.poll() is None:
                process.wait()
    codes = [process.returncode for process in processes]
    job = _job_run(client, experiment_id, group)
    if job is None:
        log.warning(f"workload {workload.label}: no job run of group {group} (exit codes {codes})")
        return FAILED, "", interrupted
    job = client.get_run(job.info.run_id)
    return job.info.status, job.info.run_id, interrupted


def _job_run(client, experiment_id: str, group: str):
    from radt.launch.group import GROUP_TAG, JOB_ROLE, ROLE_TAG

    found = client.search_runs(
        [experiment_id],
        filter_string=f"{tag_filter(GROUP_TAG, group)} and {tag_filter(ROLE_TAG, JOB_ROLE)}",
    )
    return found[0] if found else None

"""A distributed training as one record: which group, node and node rank this radT is, the job
run (the parent) that the node of rank 0 creates and the other nodes join, and its end.

A group is named by ``--group`` / ``RADT_GROUP``; without either, inside a Slurm step of more
than one task by its job and step id, and under ``torchrun`` by its ``--rdzv-id``. The node name
is ``RADT_NODE``, else Slurm's node name (with ``-<task id>`` when the step runs several radT
tasks on one node), else the host's; the node rank is ``RADT_NODE_RANK``,
else torchrun's ``--node-rank``, else Slurm's (``SLURM_NODEID``, or ``SLURM_PROCID`` when a step
runs several radT tasks on one node).

Only the node of rank 0 creates the job run, so there is exactly one whatever the start order;
the others search the experiment for a RUNNING job run of the group that holds no node run of
their rank yet (a job run of an earlier training under the same name is passed over), for at
most ``RADT_GROUP_WAIT_S`` seconds. They search beside their command (:class:`Joining`), which
starts at once, and link their node run to the job run when they find it; their node run ends
only after that. Every node, once its own run has ended, ends the job run
when every node it expects has ended: FINISHED when all finished, else FAILED naming the nodes
that did not. Ending it twice writes the same.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from radt.errors import RadtError, UsageError
from radt.slurm.jobenv import job_tags
from radt.tags import (
    JOB_ROLE,
    MLFLOW_PARENT_RUN_ID,
    NODE_ROLE,
    RADT_EXIT_CODE,
    RADT_GROUP,
    RADT_GROUP_NODES,
    RADT_GROUP_ROLE,
    RADT_LISTENERS,
    RADT_NODE,
    RADT_NODE_RANK,
    RADT_NOTE,
    RADT_SIGNAL,
    RADT_SLURM_GPUS,
    RADT_SLURM_NODE,
    RADT_STOP_REASON,
    tag_filter,
)
from radt.tracking import store_error

log = logging.getLogger(__name__)

GROUP_TAG = RADT_GROUP
ROLE_TAG = RADT_GROUP_ROLE
NODES_TAG = RADT_GROUP_NODES
NODE_TAG = RADT_NODE
NODE_RANK_TAG = RADT_NODE_RANK
NOTE_TAG = RADT_NOTE
WAIT_S = 120.0
"""How long a node of rank > 0 waits for the job run by default (``RADT_GROUP_WAIT_S``)."""
POLL_S = 0.5
"""The longest pause between two looks for the job run (the first looks come sooner:
:func:`pause_s`)."""
FIRST_POLL_S = 0.05
GIVE_UP_S = 10.0
"""How long a node stopped by a signal still waits for the look for its job run under way."""
REMIND_S = 30.0
"""How often the node that ends last repeats that it still waits for a rank (it says so once
when it starts waiting)."""
_NAME = re.compile(r"^[A-Za-z0-9_.:@+/-]{1,250}$")
_NODE_SLURM_TAGS = (RADT_SLURM_NODE, RADT_SLURM_GPUS)
"""Slurm tags of one node, left to the node runs."""
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class Group:
    """This radT's place in a distributed training."""

    name: str
    node: str
    node_rank: int
    nodes: int | None
    """How many nodes the training has, when the command or Slurm says."""

    def tags(self) -> dict[str, str]:
        """The tags of this node's run."""
        return {
            GROUP_TAG: self.name,
            ROLE_TAG: NODE_ROLE,
            NODE_TAG: self.node,
            NODE_RANK_TAG: str(self.node_rank),
        }


def torchrun_args(command: Sequence[str]) -> dict[str, str]:
    """torchrun's own flags in ``command`` (``torchrun …`` or ``python -m torch.distributed.run
    …``), names with ``_`` as ``-``: ``{"rdzv-id": "7", "nnodes": "2"}``; empty otherwise."""
    if not command:
        return {}
    args: list[str]
    if Path(command[0]).name == "torchrun":
        args = list(command[1:])
    elif "-m" in command[:-1] and command[command.index("-m") + 1] in _TORCHRUN_MODULES:
        args = list(command[command.index("-m") + 2 :])
    else:
        return {}
    found: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        name, has_value, value = args[i].lstrip("-").partition("=")
        name = name.replace("_", "-")
        if not has_value and i + 1 < len(args) and not args[i + 1].startswith("-"):
            value = args[i + 1]
            i += 1
        found[name] = value
        i += 1
    return found


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _slurm_step(environ: Mapping[str, str]) -> tuple[str, int, int] | None:
    """``(job.step, tasks, nodes)`` inside a Slurm step of more than one task, else None."""
    job = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    step = environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID")
    tasks = _int(environ.get("SLURM_STEP_NUM_TASKS") or environ.get("SLURM_NTASKS")) or 1
    nodes = _int(environ.get("SLURM_STEP_NUM_NODES") or environ.get("SLURM_NNODES")) or 1
    if not job or step is None or tasks < 2:
        return None
    return f"slurm-{job}.{step}", tasks, nodes


def resolve(
    explicit: str | None, command: Sequence[str], environ: Mapping[str, str] | None = None
) -> Group | None:
    """This radT's group, or None when it runs a training of its own.

    Raises UsageError for a group name or node rank that cannot be used.
    """
    environ = os.environ if environ is None else environ
    torch = torchrun_args(command)
    slurm = _slurm_step(environ)
    name = explicit or environ.get("RADT_GROUP") or (slurm[0] if slurm else None)
    name = name or torch.get("rdzv-id") or None
    if name is None:
        return None
    if not _NAME.match(name):
        raise UsageError(
            f"group {name!r} cannot be used: give up to 250 letters, digits and _ . : @ + / -"
        )
    rank_text = environ.get("RADT_NODE_RANK") or torch.get("node-rank")
    one_per_node = not slurm or slurm[1] == slurm[2]
    if rank_text is None and slurm:
        rank_text = environ.get("SLURM_NODEID" if one_per_node else "SLURM_PROCID")
    rank = _int(rank_text) if rank_text is not None else 0
    if rank is None or rank < 0:
        raise UsageError(
            f"node rank {rank_text!r} is not a whole number ≥ 0 (set RADT_NODE_RANK or --node-rank)"
        )
    nnodes = torch.get("nnodes", "")
    nodes = _int(environ.get("RADT_NODES")) or _int(nnodes.rpartition(":")[2])
    if nodes is None and slurm:
        nodes = slurm[1]
    node = environ.get("SLURMD_NODENAME") or socket.gethostname()
    if not one_per_node:  # several radT tasks of the step on one host: each its own node
        node = f"{node}-{environ.get('SLURM_PROCID', rank)}"
    node = environ.get("RADT_NODE") or node
    return Group(name, node, rank, nodes)


def group_wait_s(environ: Mapping[str, str] | None = None) -> float:
    """How long a node waits for its group (``RADT_GROUP_WAIT_S``, default 120 s): for the
    job run to appear, and the node that ends last for the nodes that never joined.

    Raises UsageError for a value that is not a number of seconds ≥ 0.
    """
    text = (os.environ if environ is None else environ).get("RADT_GROUP_WAIT_S") or ""
    try:
        wait_s = float(text) if text else WAIT_S
    except ValueError:
        wait_s = -1.0
    if not wait_s >= 0:
        raise UsageError(f"RADT_GROUP_WAIT_S={text!r} is not a number of seconds ≥ 0")
    return wait_s


def _job_filter(name: str) -> str:
    return (
        f"{tag_filter(GROUP_TAG, name)} and {tag_filter(ROLE_TAG, JOB_ROLE)} "
        "and attributes.status = 'RUNNING'"
    )


def node_runs(client, experiment_id: str, job_run_id: str) -> list:
    """The node runs of the job run ``job_run_id``."""
    return client.search_runs(
        [experiment_id],
        filter_string=f"{tag_filter(MLFLOW_PARENT_RUN_ID, job_run_id)} "
        f"and {tag_filter(ROLE_TAG, NODE_ROLE)}",
    )


def create_job_run(
    client, uri: str, experiment_id: str, group: Group, tags: Mapping[str, str], run_name: str
) -> str:
    """Create the group's job run (the node of rank 0 does); return its id."""
    slurm = {k: v for k, v in job_tags().items() if k not in _NODE_SLURM_TAGS}
    job_tags_ = {
        **slurm,
        **{k: v for k, v in tags.items() if not k.startswith(RADT_LISTENERS)},
        GROUP_TAG: group.name,
        ROLE_TAG: JOB_ROLE,
    }
    if group.nodes is not None:
        job_tags_[NODES_TAG] = str(group.nodes)
    try:
        return client.create_run(experiment_id, tags=job_tags_, run_name=run_name).info.run_id
    except Exception as exc:
        raise store_error(uri, exc, "create the job run") from exc


def pause_s(looks: int, longest_s: float = POLL_S) -> float:
    """The pause after the ``looks``-th look (from 0) for something another node makes:
    ``FIRST_POLL_S``, doubling up to ``longest_s``, so that what comes at once is seen at once
    and a long wait asks the store twice a second at most."""
    return min(longest_s, FIRST_POLL_S * 2 ** min(looks, 16))


def find_job_run(
    client,
    uri: str,
    experiment_id: str,
    group: Group,
    wait_s: float | None = None,
    stop: threading.Event | None = None,
) -> str:
    """The job run this node joins: the newest RUNNING one of the group with no node of this
    rank; waits up to ``wait_s`` (``RADT_GROUP_WAIT_S``) for it, then raises RadtError.

    ``stop``, once set, ends the wait after the look under way (RadtError saying so)."""
    if wait_s is None:
        wait_s = group_wait_s()
    stop = stop or threading.Event()
    deadline = time.monotonic() + wait_s
    looks = 0
    while True:
        try:
            candidates = client.search_runs(
                [experiment_id], filter_string=_job_filter(group.name), order_by=["start_time DESC"]
            )
            for run in candidates:
                ranks = {
                    r.data.tags.get(NODE_RANK_TAG)
                    for r in node_runs(client, experiment_id, run.info.run_id)
                }
                if str(group.node_rank) not in ranks:
                    return run.info.run_id
        except Exception as exc:
            raise store_error(uri, exc, "look for the job run") from exc
        if stop.is_set():
            raise RadtError(
                f"node {group.node} (rank {group.node_rank}) stopped looking for the job run of "
                f"group {group.name} when radT was stopped, and had found none"
            )
        if time.monotonic() >= deadline:
            raise RadtError(
                f"node {group.node} (rank {group.node_rank}) found no running job run of group "
                f"{group.name} within {wait_s:g} s; start the node of rank 0 too, with the same "
                "--group (or RADT_GROUP) and experiment, or raise RADT_GROUP_WAIT_S"
            )
        stop.wait(min(pause_s(looks), max(deadline - time.monotonic(), 0.0)))
        looks += 1


class Joining:
    """A node of rank > 0 looking for its job run while its command already runs.

    :meth:`start` begins the search in a thread (:func:`find_job_run`); when the job run is
    found, ``link`` is called with its id at once (the node run's parent tag is set then, so the
    other nodes count this node while it runs). :meth:`finish`, before the node run ends, waits
    for the search and returns the job run's id, or None with the reason in :attr:`error`.
    """

    def __init__(self, client, uri: str, experiment_id: str, group: Group, wait_s: float) -> None:
        self._find = lambda stop: find_job_run(client, uri, experiment_id, group, wait_s, stop)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._finished = False
        self._thread: threading.Thread | None = None
        self.job_run_id: str | None = None
        self.error: Exception | None = None

    def start(self, link) -> None:
        """Look for the job run in the background; ``link(job_run_id)`` once it is found."""

        def look() -> None:
            try:
                found = self._find(self._stop)
            except Exception as exc:
                self.error = exc
                return
            with self._lock:
                if not self._finished:
                    self.job_run_id = found
                    link(found)

        self._thread = threading.Thread(target=look, name="radt-join", daemon=True)
        self._thread.start()

    def finish(self, give_up: bool = False) -> str | None:
        """Wait for the search (to its end at ``RADT_GROUP_WAIT_S``, or, with ``give_up``, only
        for the look under way); the job run's id, or None (:attr:`error` says why)."""
        if self._thread is not None:
            if give_up:
                self._stop.set()
            self._thread.join(timeout=GIVE_UP_S if give_up else None)
        with self._lock:
            self._finished = True
            if self.job_run_id is None and self.error is None:
                self.error = RadtError("the look for the job run did not end in time")
            return self.job_run_id


def end_job_run(
    client, experiment_id: str, job_run_id: str, expected: int | None, wait_s: float = 0.0
) -> str | None:
    """End the job run once every node it expects has ended; return its status, or None while
    a node still runs. Best effort: a store that refuses leaves it to the next node.

    When the group's node count is known (``expected``, else the job run's tag) and a rank has
    no node run yet, waits up to ``wait_s`` for it to appear (it then ends the job run itself),
    saying so once and then every ``REMIND_S`` seconds; past that, or on Ctrl-C, the job run
    ends FAILED naming each rank that never joined.
    """
    deadline = time.monotonic() + wait_s
    said_at: float | None = None
    looks = 0
    try:
        while True:
            job = client.get_run(job_run_id)
            if job.info.status != "RUNNING":
                return job.info.status  # another node ended it
            nodes = node_runs(client, experiment_id, job_run_id)
            if any(n.info.status in ("RUNNING", "SCHEDULED") for n in nodes):
                return None
            if expected is None:
                expected = _int(job.data.tags.get(NODES_TAG))
            missing = _missing_ranks(nodes, expected)
            if not missing or time.monotonic() >= deadline:
                break
            now = time.monotonic()
            if said_at is None or now - said_at >= REMIND_S:
                ranks = ", ".join(map(str, missing))
                left_s = round(deadline - now)
                if said_at is None:
                    log.info(
                        "job run %s: waiting up to %d s for node rank %s, which has not joined",
                        job_run_id,
                        left_s,
                        ranks,
                    )
                else:
                    log.info(
                        "job run %s: still waiting for node rank %s (%d s left)",
                        job_run_id,
                        ranks,
                        left_s,
                    )
                said_at = now
            try:
                time.sleep(min(pause_s(looks, POLL_S * 4), max(deadline - time.monotonic(), 0.0)))
                looks += 1
            except KeyboardInterrupt:
                deadline = 0.0
        bad = sorted(
            (n for n in nodes if n.info.status != "FINISHED"), key=lambda n: n.info.end_time or 0
        )
        status = "FAILED" if bad or missing else "FINISHED"
        named = [f"{n.data.tags.get(NODE_TAG, n.info.run_id)} {why(n)}" for n in bad]
        named += [f"rank {rank} never joined" for rank in missing]
        if named:
            client.set_tag(job_run_id, NOTE_TAG, f"node {'; '.join(named)}"[:5000])
        try:
            from radt.analysis.distributed import store_job_figures

            store_job_figures(client, job_run_id, nodes)
        except Exception as exc:  # the job run still ends; its figures are then missing
            log.warning("job run %s: figures not stored (%s)", job_run_id, exc)
        end_ms = max((n.info.end_time or 0) for n in nodes) or None
        client.set_terminated(job_run_id, status, end_time=end_ms)
        return status
    except Exception as exc:
        log.warning("could not end job run %s: %s", job_run_id, exc)
        return None


def _missing_ranks(nodes: Sequence, expected: int | None) -> list[int]:
    """The node ranks below ``expected`` that have no node run; none when the count is
    unknown."""
    if not expected or len(nodes) >= expected:
        return []
    present = {_int(n.data.tags.get(NODE_RANK_TAG)) for n in nodes}
    return [rank for rank in range(expected) if rank not in present]


def why(run) -> str:
    """How a node run ended, in words: ``KILLED (radT received SIGTERM)``, ``FAILED (exit
    code 1)``."""
    tags = run.data.tags
    reason = tags.get(RADT_STOP_REASON) or tags.get(NOTE_TAG)
    if not reason and tags.get(RADT_SIGNAL):
        reason = tags[RADT_SIGNAL]
    if not reason and tags.get(RADT_EXIT_CODE):
        reason = f"exit code {tags[RADT_EXIT_CODE]}"
    return f"{run.info.status} ({reason})" if reason else run.info.status

"""``radt sync``: finish runs whose upload an outage or a crash interrupted."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from radt.record.finalize import Summarize, finish
from radt.record.runfolder import STATE_FILE, DamagedState, RunFolder, RunState, find_folders
from radt.record.spool import CHUNK_GLOB
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    NODE_ROLE,
    RADT_GROUP,
    RADT_GROUP_ROLE,
    RADT_STOP_REASON,
)
from radt.tracking import connect, move_credentials, prepare_process_env, sqlite_path, store_label

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

log = logging.getLogger(__name__)

EndJob = Callable[["MlflowClient", str, str, "int | None"], "str | None"]
"""Ends a distributed training's job run when its last node run has ended: ``(client,
experiment id, job run id, expected node count)`` → the job run's status, or None while a node
still runs (:func:`radt.launch.group.end_job_run`). Its caller hands it in, as it does
``summarize``: recording is below launching and imports none of it."""

ORPHAN_NOTE = "radT stopped before the run ended (killed or crashed); finished by `radt sync`"


def launcher_alive(state: RunState) -> bool:
    """Whether the radT process that owns the run still runs (not a reused pid)."""
    try:
        process = psutil.Process(state.pid)
        return process.create_time() <= state.started_s + 1 and process.status() != "zombie"
    except psutil.Error:
        return False


def adopt_orphan(folder: RunFolder, state: RunState) -> None:
    """Mark a run whose radT died as FAILED, ended at its last spooled sample."""
    chunks = list(folder.spool.glob(CHUNK_GLOB))
    state.status = "FAILED"
    state.note = ORPHAN_NOTE
    state.ended_s = max((c.stat().st_mtime for c in chunks), default=time.time())
    state.tags[RADT_STOP_REASON] = "radT was killed"
    folder.save(state)


def sync(root: Path, summarize: Summarize, end_job: EndJob) -> int:
    """Upload every unfinished run under ``root``; 0 when all are complete in MLflow.

    ``summarize`` computes each run's summary figures (:func:`radt.record.finalize.finish`);
    ``end_job`` ends the job run of a distributed training whose last node run this finished.
    A folder another radT process holds (its own radT, or another ``radt sync``) is
    skipped; a damaged one is reported in one line and skipped, and the others go on.
    """
    folders = find_folders(root)
    if not folders:
        log.info(f"nothing to sync in {root}")
        return 0
    prepare_process_env()
    incomplete = 0
    for folder in folders:
        if not folder.lock():
            log.info(_busy(folder))
            continue
        try:
            incomplete += not _sync_one(folder, summarize, end_job)
        finally:
            folder.unlock()
    return 1 if incomplete else 0


def _busy(folder: RunFolder) -> str:
    """Why a folder whose lock another process holds is skipped."""
    try:
        state = folder.load()
    except (OSError, DamagedState):
        state = None
    if state is not None and state.status == "RUNNING" and launcher_alive(state):
        return f"run {state.run_id} is still being recorded (radT pid {state.pid}); skipped"
    return (
        f"run {folder.path.name} is being finished by another radT process "
        "(its own radT or another `radt sync`); skipped"
    )


def _sync_one(folder: RunFolder, summarize: Summarize, end_job: EndJob) -> bool:
    """Finish one run whose folder's lock is held; True when nothing is left to do."""
    try:
        state = folder.load()
    except FileNotFoundError:
        return True  # finished by whoever held the lock before
    except (OSError, DamagedState) as exc:
        log.info(f"run folder {folder.path.name}: {exc}; skipped — delete the folder, or repair it")
        return False
    if state.status == "RUNNING" and state.host != socket.gethostname():
        log.info(
            f"run {state.run_id} is being recorded on {state.host}; "
            f"run `radt sync` there to finish it (skipped)"
        )
        return True
    if state.status == "RUNNING":
        if launcher_alive(state):
            log.info(f"run {state.run_id} is still being recorded (radT pid {state.pid}); skipped")
            return True
        adopt_orphan(folder, state)
        log.info(f"run {state.run_id}: its radT is gone; marking it FAILED")
    database = sqlite_path(state.tracking_uri)
    if database is not None and not database.exists():  # connecting would make it anew, empty
        log.info(
            f"run {state.run_id}: its store {database} no longer exists; put the file back and "
            f"run `radt sync` again, or drop the run with `radt sync --forget {state.run_id}`"
        )
        return False
    try:
        client = connect(_with_credentials(state.tracking_uri))
    except Exception as exc:
        log.info(f"run {state.run_id}: {exc}")
        return False
    missing = _missing_from_store(client, state)
    if missing:
        log.info(
            f"run {state.run_id} {missing} in its store {store_label(state.tracking_uri)}; "
            f"nothing there can finish it: `radt sync --forget {state.run_id}` drops its folder "
            f"{folder.path}"
        )
        return False
    if finish(client, folder, log.warning, state, summarize=summarize):
        log.info(f"run {state.run_id} synced ({state.status})")
        _end_job(client, state, end_job)
        return True
    return False


def _end_job(client, state: RunState, end_job: EndJob) -> None:
    """A node run of a distributed training, now finished: its job run ends if it was the
    last node (``end_job``)."""
    try:
        tags = client.get_run(state.run_id).data.tags
    except Exception:
        return
    job_run_id = tags.get(MLFLOW_PARENT_RUN_ID)
    if tags.get(RADT_GROUP_ROLE) == NODE_ROLE and job_run_id:
        status = end_job(client, state.experiment_id, job_run_id, None)
        if status:
            log.info(f"job run {job_run_id} of group {tags.get(RADT_GROUP)} {status}")


def _with_credentials(uri: str) -> str:
    """The recorded URI (radT keeps none with a password); when MLFLOW_TRACKING_URI names
    the same store with credentials, they move to the variables its client reads."""
    given, credentials = move_credentials(os.environ.get("MLFLOW_TRACKING_URI", ""))
    if credentials and given == uri:
        os.environ.update(credentials)
    return uri


def _missing_from_store(client, state: RunState) -> str | None:
    """Why the store can no longer take the run (gone, or deleted), else None; an error
    reaching the store is left to the steps that follow (they say what to do)."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST, ErrorCode

    try:
        run = client.get_run(state.run_id)
    except MlflowException as exc:
        if exc.error_code == ErrorCode.Name(RESOURCE_DOES_NOT_EXIST):
            return "is not"
        return None
    except Exception:
        return None
    return "was deleted" if run.info.lifecycle_stage == "deleted" else None


def waiting(root: Path) -> list[str]:
    """One line per run folder under ``root``: the run, its status, the steps still to do,
    the store they go to, and the folder (``radt sync --list``)."""
    lines = []
    for folder in find_folders(root):
        try:
            state = folder.load()
        except (OSError, DamagedState) as exc:
            lines.append(f"{folder.path.name}  damaged: {exc}")
            continue
        status = state.status
        if status == "RUNNING" and launcher_alive(state):
            status = f"RUNNING (being recorded, radT pid {state.pid})"
        steps = ", ".join(state.pending) or "none"
        lines.append(
            f"{state.run_id}  {status}  to do: {steps}  "
            f"to {store_label(state.tracking_uri)}  ({folder.path})"
        )
    return lines


def forget(root: Path, run_id: str) -> int:
    """Delete the folder of run ``run_id`` under ``root`` without sending what is left;
    0 when dropped. A folder another radT process holds is left alone."""
    folder = RunFolder(root / run_id)
    if not run_id or "/" in run_id or not (folder.path / STATE_FILE).exists():
        log.info(f"no run folder {run_id!r} in {root}; `radt sync --list` shows them")
        return 1
    if not folder.lock():
        log.info(f"run {run_id} is being recorded or synced by another radT process; not dropped")
        return 1
    try:
        state = folder.load()
        left = ", ".join(state.pending) or "nothing"
    except (OSError, DamagedState):
        left = "what the damaged folder held"
    folder.remove()
    log.info(f"dropped the folder of run {run_id} ({folder.path}); not sent: {left}")
    return 0

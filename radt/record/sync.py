"""``radt sync``: finish runs whose upload an outage or a crash interrupted."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import psutil

from radt.record.finalize import finish
from radt.record.runfolder import DamagedState, RunFolder, RunState, find_folders
from radt.record.spool import CHUNK_GLOB
from radt.tracking import connect, move_credentials, prepare_process_env

ORPHAN_NOTE = "radT stopped before the run ended (killed or crashed); finished by `radt sync`"


def _say(message: str) -> None:
    print(f"radt: {message}", file=sys.stderr, flush=True)


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
    state.tags["radt.stop_reason"] = "radT was killed"
    folder.save(state)


def sync(root: Path) -> int:
    """Upload every unfinished run under ``root``; 0 when all are complete in MLflow.

    A folder another radT process holds (its own radT, or another ``radt sync``) is
    skipped; a damaged one is reported in one line and skipped, and the others go on.
    """
    folders = find_folders(root)
    if not folders:
        _say(f"nothing to sync in {root}")
        return 0
    prepare_process_env()
    incomplete = 0
    for folder in folders:
        if not folder.lock():
            _say(_busy(folder))
            continue
        try:
            incomplete += not _sync_one(folder)
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


def _sync_one(folder: RunFolder) -> bool:
    """Finish one run whose folder's lock is held; True when nothing is left to do."""
    try:
        state = folder.load()
    except FileNotFoundError:
        return True  # finished by whoever held the lock before
    except (OSError, DamagedState) as exc:
        _say(f"run folder {folder.path.name}: {exc}; skipped — delete the folder, or repair it")
        return False
    if state.status == "RUNNING" and state.host != socket.gethostname():
        _say(
            f"run {state.run_id} is being recorded on {state.host}; "
            f"run `radt sync` there to finish it (skipped)"
        )
        return True
    if state.status == "RUNNING":
        if launcher_alive(state):
            _say(f"run {state.run_id} is still being recorded (radT pid {state.pid}); skipped")
            return True
        adopt_orphan(folder, state)
        _say(f"run {state.run_id}: its radT is gone; marking it FAILED")
    try:
        client = connect(_with_credentials(state.tracking_uri))
    except Exception as exc:
        _say(f"run {state.run_id}: {exc}")
        return False
    if finish(client, folder, _say, state):
        _say(f"run {state.run_id} synced ({state.status})")
        return True
    return False


def _with_credentials(uri: str) -> str:
    """The recorded URI (radT keeps none with a password); when MLFLOW_TRACKING_URI names
    the same store with credentials, they move to the variables its client reads."""
    given, credentials = move_credentials(os.environ.get("MLFLOW_TRACKING_URI", ""))
    if credentials and given == uri:
        os.environ.update(credentials)
    return uri

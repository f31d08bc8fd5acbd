"""``radt sync``: finish runs whose upload an outage or a crash interrupted."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import psutil

from radt.record.finalize import finish
from radt.record.runfolder import RunFolder, RunState, find_folders
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
    """Upload every unfinished run under ``root``; 0 when all are complete in MLflow."""
    folders = find_folders(root)
    if not folders:
        _say(f"nothing to sync in {root}")
        return 0
    prepare_process_env()
    incomplete = 0
    for folder in folders:
        state = folder.load()
        if state.status == "RUNNING" and state.host != socket.gethostname():
            _say(
                f"run {state.run_id} is being recorded on {state.host}; "
                f"run `radt sync` there to finish it (skipped)"
            )
            continue
        if state.status == "RUNNING":
            if launcher_alive(state):
                _say(f"run {state.run_id} is still being recorded (radT pid {state.pid}); skipped")
                continue
            adopt_orphan(folder, state)
            _say(f"run {state.run_id}: its radT is gone; marking it FAILED")
        try:
            client = connect(_with_credentials(state.tracking_uri))
        except Exception as exc:
            _say(f"run {state.run_id}: {exc}")
            incomplete += 1
            continue
        if finish(client, folder, _say):
            _say(f"run {state.run_id} synced ({state.status})")
        else:
            incomplete += 1
    return 1 if incomplete else 0


def _with_credentials(uri: str) -> str:
    """The recorded URI (radT keeps none with a password); when MLFLOW_TRACKING_URI names
    the same store with credentials, they move to the variables its client reads."""
    given, credentials = move_credentials(os.environ.get("MLFLOW_TRACKING_URI", ""))
    if credentials and given == uri:
        os.environ.update(credentials)
    return uri

"""The run's local working folder: spool, output log and a small state file.

The folder outlives radT when the tracking server cannot be reached or radT
is killed; ``radt sync`` reads the state file to finish the job.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from radt.errors import RadtError

STATE_FILE = "run.json"
LOCK_FILE = ".lock"

# The steps that remain before a run is complete in MLflow, in order.
STEPS = ("metrics", "samples", "summary", "artifacts", "status")


def radt_home() -> Path:
    """Root of radT's local folders: ``$RADT_HOME``, else ``~/.radt``."""
    return Path(os.environ.get("RADT_HOME") or Path.home() / ".radt")


def runs_root() -> Path:
    """Where run folders live."""
    return radt_home() / "runs"


class DamagedState(ValueError):
    """A run folder's state file that cannot be read as a run's state."""


DISK_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a local write that failed for want of room (a full disk, a
    quota, a file-size limit), which waiting or freeing space mends."""
    return isinstance(exc, OSError) and exc.errno in DISK_FULL


def check_runs_root() -> Path:
    """Make sure run folders can be created under :func:`runs_root`; return it.

    Raises RadtError (one line, what to do) when ``RADT_HOME`` is a file, read-only or
    otherwise unusable, so that no MLflow run is created that radT could not record.
    """
    root = runs_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".probe-"):
            pass
    except OSError as exc:
        raise RadtError(
            f"cannot keep run folders in {root} ({exc.strerror or exc}); "
            "set RADT_HOME to a writable folder (default ~/.radt)"
        ) from exc
    return root


@dataclass
class RunState:
    """What ``radt sync`` needs to finish a run it did not start."""

    run_id: str
    experiment_id: str
    tracking_uri: str
    pid: int
    started_s: float
    window_s: float
    status: str = "RUNNING"
    exit_code: int | None = None
    ended_s: float | None = None
    note: str | None = None
    pending: list[str] = field(default_factory=lambda: list(STEPS))
    tags: dict[str, str] = field(default_factory=dict)
    host: str = field(default_factory=socket.gethostname)
    """Where radT recorded it: only ``radt sync`` on that host can tell whether it still runs."""


class RunFolder:
    """A run's folder under :func:`runs_root` and its state file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.unsaved = False
        """Whether a save failed (a full disk) and was reported."""
        self._lock_fd: int | None = None

    @classmethod
    def create(cls, state: RunState, lock: bool = False) -> RunFolder:
        """Make the folder of a new run and write its first state; with ``lock``, hold the
        folder's lock from before the state exists (the radT that records the run)."""
        folder = cls(runs_root() / state.run_id)
        folder.path.mkdir(parents=True, exist_ok=True)
        if lock:
            folder.lock()
        folder.save(state)
        return folder

    def lock(self) -> bool:
        """Take the folder's lock if no other radT process holds it; True when held.

        The radT recording a run holds it until the run is complete; ``radt sync``
        holds it while finishing one, so two of them never work on one folder.
        """
        if self._lock_fd is not None:
            return True
        try:
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # the folder is gone: finished by its holder
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        """Let go of the folder's lock (closing its descriptor)."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def spool(self) -> Path:
        """The folder of spool chunks."""
        return self.path / "spool"

    @property
    def output_log(self) -> Path:
        """The captured stdout and stderr of the command."""
        return self.path / "output.log"

    @property
    def attachments(self) -> Path:
        """Files to upload as artifacts, laid out as under the run's artifact root."""
        return self.path / "artifacts"

    def load(self) -> RunState:
        """Read the state file. Raises DamagedState when it is not a run's state."""
        path = self.path / STATE_FILE
        try:
            fields = json.loads(path.read_text())
            return RunState(**fields)
        except (ValueError, TypeError) as exc:  # bad JSON or UTF-8, missing or unknown fields
            detail = " ".join(str(exc).split())[:120]
            raise DamagedState(f"{path} is damaged ({detail})") from exc

    def save(self, state: RunState) -> None:
        """Write the state file atomically: a temp file of this writer's own (concurrent
        writers never share one), then a rename. Raises OSError (a full disk)."""
        fd, tmp = tempfile.mkstemp(dir=self.path, prefix=f".{STATE_FILE}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(asdict(state), indent=1))
            os.replace(tmp, self.path / STATE_FILE)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self) -> None:
        """Delete the folder once everything is in MLflow (then let go of its lock)."""
        shutil.rmtree(self.path, ignore_errors=True)
        self.unlock()


def find_folders(root: Path) -> list[RunFolder]:
    """Run folders at ``root`` itself or directly below it."""
    if (root / STATE_FILE).exists():
        return [RunFolder(root)]
    if not root.is_dir():
        return []
    return [RunFolder(p) for p in sorted(root.iterdir()) if (p / STATE_FILE).exists()]

"""The run's local working folder: spool, output log and a small state file.

The folder outlives radT when the tracking server cannot be reached or radT
is killed; ``radt sync`` reads the state file to finish the job.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from radt.errors import RadtError

STATE_FILE = "run.json"

# The steps that remain before a run is complete in MLflow, in order.
STEPS = ("metrics", "samples", "summary", "artifacts", "status")


def radt_home() -> Path:
    """Root of radT's local folders: ``$RADT_HOME``, else ``~/.radt``."""
    return Path(os.environ.get("RADT_HOME") or Path.home() / ".radt")


def runs_root() -> Path:
    """Where run folders live."""
    return radt_home() / "runs"


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

    @classmethod
    def create(cls, state: RunState) -> RunFolder:
        """Make the folder of a new run and write its first state."""
        folder = cls(runs_root() / state.run_id)
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.save(state)
        return folder

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
        """Read the state file."""
        return RunState(**json.loads((self.path / STATE_FILE).read_text()))

    def save(self, state: RunState) -> None:
        """Write the state file atomically (temp file, then rename)."""
        tmp = self.path / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(state), indent=1))
        os.replace(tmp, self.path / STATE_FILE)

    def remove(self) -> None:
        """Delete the folder once everything is in MLflow."""
        shutil.rmtree(self.path, ignore_errors=True)


def find_folders(root: Path) -> list[RunFolder]:
    """Run folders at ``root`` itself or directly below it."""
    if (root / STATE_FILE).exists():
        return [RunFolder(root)]
    if not root.is_dir():
        return []
    return [RunFolder(p) for p in sorted(root.iterdir()) if (p / STATE_FILE).exists()]

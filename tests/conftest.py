"""Shared fixtures: a real SQLite MLflow store per test, radT run as a real process."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "tests" / "plugins"
FAKES = REPO / "tests" / "fakes"
FIXTURES = REPO / "tests" / "fixtures"

# The radT this session runs starts its warm launchers (radt/warm.py) under a runtime folder of
# its own, so that they are this session's (its radT code, its PYTHONPATH), and ends them when
# it ends; each pytest-xdist worker is a session with its own.
RUNTIME = Path(tempfile.mkdtemp(prefix="radt-tests-runtime-"))
os.environ["XDG_RUNTIME_DIR"] = str(RUNTIME)

# The stand-ins of tests/fakes are Python scripts (`#!/usr/bin/env python3`), run thousands of
# times: `python3` on PATH is this interpreter's base Python itself, the one a version manager's
# shim would pick after its own start (pyenv's shim costs about 0.2 s a call).
_PYTHON3 = RUNTIME / "bin" / "python3"
_PYTHON3.parent.mkdir()
_PYTHON3.symlink_to(
    Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
)
os.environ["PATH"] = f"{_PYTHON3.parent}{os.pathsep}{os.environ['PATH']}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Name a failure the moment it happens (the summary comes only at the end of a long run,
    and not at all from a run cut short)."""
    if report.failed and "PYTEST_XDIST_WORKER" not in os.environ:  # once, by the controller
        sys.stderr.write(f"\nFAILED {report.nodeid} ({report.when})\n")
        sys.stderr.flush()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """End the warm launchers this session's radT started, and remove their folder."""
    from radt import warm

    for lock in (RUNTIME / "radt").glob("warm-*.lock"):
        pid = warm.server_pid(lock)
        with contextlib.suppress(OSError, TypeError):
            if b"radt.warm" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)
    shutil.rmtree(RUNTIME, ignore_errors=True)


@pytest.fixture(scope="session")
def template_db(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, made once (creating the tables takes seconds)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


def sqlite_store(root: Path, template_db: Path, patch: pytest.MonkeyPatch):
    """A fresh SQLite store (a copy of the template) in ``root``, with RADT_HOME
    ``root/home`` and MLFLOW_TRACKING_URI unset until ``patch`` undoes it; ``(client, uri)``."""
    from mlflow.tracking import MlflowClient

    shutil.copy(template_db, root / "mlflow.db")
    patch.setenv("RADT_HOME", str(root / "home"))
    patch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    return MlflowClient(uri), uri


@pytest.fixture
def store(tmp_path, template_db, monkeypatch):
    """A fresh SQLite store and radT home in the test's folder; returns ``(client, uri)``."""
    return sqlite_store(tmp_path, template_db, monkeypatch)


def default_signals() -> None:
    """In a child before exec: the stop signals at their defaults, as for a command started
    in the foreground of a terminal, whatever this suite inherited (a suite started with
    `cmd &` ignores SIGINT, one under `nohup` SIGHUP)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@dataclass
class Workspace:
    """A folder with its own MLflow store and radT home, and a way to run radT in it."""

    root: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def uri(self) -> str:
        return self.env["MLFLOW_TRACKING_URI"]

    @property
    def home(self) -> Path:
        return Path(self.env["RADT_HOME"])

    def argv(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "radt", *args]

    def run(
        self, args: list[str], timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess:
        """Run radT to completion, capturing its output."""
        return subprocess.run(
            self.argv(args),
            cwd=self.root,
            env=self.env if env is None else env,
            capture_output=True,
            text=True,
            timeout=timeout,
            preexec_fn=default_signals,
        )

    def start(self, args: list[str]) -> subprocess.Popen:
        """Start radT and return at once (for signal tests)."""
        return subprocess.Popen(
            self.argv(args),
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_signals,
        )

    def script(self, name: str, body: str) -> Path:
        """Write a Python script into the workspace."""
        path = self.root / name
        path.write_text(body)
        return path

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.uri)

    def runs(self, experiment: str = "Default"):
        client = self.client()
        exp = client.get_experiment_by_name(experiment)
        return [] if exp is None else client.search_runs([exp.experiment_id])

    def only_run(self, experiment: str = "Default"):
        runs = self.runs(experiment)
        assert len(runs) == 1, f"expected one run, found {len(runs)}"
        return runs[0]


def new_workspace(
    base: Path,
    template_db: Path,
    drop: tuple[str, ...] = ("MLFLOW_", "RADT_"),
    plugins: bool = True,
) -> Workspace:
    """A folder ``base/ws`` with a copy of the empty store (its default experiment's
    artifacts beside it) and a radT home ``base/radt-home``; the outside's variables that
    start with ``drop`` are left out, and the test plugin listeners are installed unless
    ``plugins`` is false (they include listeners that are on by default)."""
    root = base / "ws"
    root.mkdir(parents=True)
    shutil.copy(template_db, root / "mlflow.db")
    with sqlite3.connect(root / "mlflow.db") as db:  # the template's artifacts pointed elsewhere
        db.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
            (str(root / "mlruns" / "0"),),
        )
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    if plugins:
        path = os.pathsep.join([str(PLUGINS), env.get("PYTHONPATH", "")])
        env["PYTHONPATH"] = path.rstrip(os.pathsep)
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{root / 'mlflow.db'}",
        RADT_HOME=str(base / "radt-home"),
        MLFLOW_DISABLE_TELEMETRY="true",
        PYTHONUNBUFFERED="1",
    )
    return Workspace(root, env)


@pytest.fixture
def workspace(tmp_path, template_db) -> Workspace:
    """A fresh store and radT home; the test plugin listeners are installed."""
    return new_workspace(tmp_path, template_db)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.05):
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (and is not a zombie)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class KeptPoints:
    """A :class:`radt.record.writer.BatchWriter`'s interface that keeps the points it is handed
    and sends nothing (the recorder's other side, in tests of the recorder alone)."""

    def __init__(self) -> None:
        self.points: list = []

    def start(self) -> None:
        pass

    def put(self, points) -> None:
        self.points.extend(points)

    def close(self, timeout_s: float) -> int:
        return 0


def kill_quietly(pid: int) -> None:
    """SIGKILL a process that a failed test may have left behind."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- listeners


class Recorded:
    """A RunContext whose samples, warnings, attached files and tags are kept for the test.

    Its ``emit`` is thread-safe, as the recorder's is: a streamed listener emits from
    its reader thread while the test reads.
    """

    def __init__(
        self,
        tmp_path: Path,
        options: dict[str, str] | None = None,
        *,
        interval_s: float | None = 0.1,
        devices=(),
    ) -> None:
        from radt.listener import RunContext

        self.samples: list = []
        self.warnings: list[str] = []
        self.attached: list[tuple[str, str]] = []
        self.tags: dict[str, str] = {}
        self._lock = threading.Lock()
        workdir = tmp_path / "listeners"
        workdir.mkdir(parents=True, exist_ok=True)
        self.context = RunContext(
            run_id="run",
            pid=os.getpid(),
            workdir=workdir,
            emit=self._emit,
            interval_s=interval_s,
            devices=tuple(devices),
            warn=self.warnings.append,
            attach=lambda path, folder: self.attached.append((Path(path).name, folder)),
            set_tag=self.tags.__setitem__,
            options=dict(options or {}),
        )

    def _emit(self, samples) -> None:
        with self._lock:
            self.samples.extend(samples)

    @property
    def values(self) -> dict[str, float]:
        """The last value of each key."""
        with self._lock:
            return {s.key: s.value for s in self.samples}

    def series(self, key: str) -> list[float]:
        """The values of ``key`` in time order."""
        with self._lock:
            return [s.value for s in sorted(self.samples) if s.key == key]

    def key_set(self) -> set[str]:
        with self._lock:
            return {s.key for s in self.samples}


@pytest.fixture
def radt_lines():
    """radT's log records printed as the command line prints them ("radt: ..." on stderr),
    for a test that calls the library in this process; the logging set-up is restored after."""
    from radt.console import install_lines

    logger = logging.getLogger("radt")
    saved = logger.handlers[:], logger.level, logger.propagate
    install_lines()
    yield
    logger.handlers[:], logger.level, logger.propagate = saved


@pytest.fixture
def clean_env(monkeypatch):
    """No FAKE_* settings and no CUDA_VISIBLE_DEVICES leak in from the outside."""
    for name in list(os.environ):
        if name.startswith("FAKE_") or name == "CUDA_VISIBLE_DEVICES":
            monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture
def fakes_on_path(clean_env):
    """The fake NVIDIA tools of tests/fakes first on PATH, no FAKE_* settings."""
    clean_env.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    return clean_env


def path_without_nvidia_tools() -> str:
    """PATH without any folder that holds nvidia-smi or dcgmi (real or fake)."""
    return os.pathsep.join(
        folder
        for folder in os.environ["PATH"].split(os.pathsep)
        if folder
        and not (Path(folder) / "nvidia-smi").exists()
        and not (Path(folder) / "dcgmi").exists()
    )


CLUSTER_MARKERS = ("slurm", "postgres")
"""Markers of tests that start a cluster (Slurm's daemons, a PostgreSQL server): under
``make test``'s pytest-xdist workers all the tests of one such marker run on one worker, one
after another, whatever file they are in."""

LONGEST_FIRST = (
    "slurm",
    "tests/test_ui_browser.py",
    "tests/test_multinode.py",
    "tests/test_study.py",
    "tests/test_truth.py",
    "tests/test_gpu_check.py",
    "tests/test_workload.py",
    "tests/test_doctor.py",
    "postgres",
    "tests/test_shared_loader.py",
    "tests/test_autolog.py",
)
"""The groups that take longest, longest first (seconds each summed over its tests in a full
run): handed to the workers first, so that no long group starts last and runs alone."""


def xdist_group(item: pytest.Item) -> str:
    """The worker group of a test: its own ``xdist_group``, its cluster marker, or its file."""
    own = item.get_closest_marker("xdist_group")
    if own:
        return str(own.args[0] if own.args else own.kwargs.get("name", "default"))
    cluster = next((m for m in CLUSTER_MARKERS if item.get_closest_marker(m)), None)
    return cluster or item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (``make test``): a test file's tests stay on one worker (its
    module-scoped fixtures are made once), and the tests of each cluster marker run on one
    worker, so two Slurm clusters (whose rendezvous ports derive from job ids that both number
    from 1) or two PostgreSQL servers never run at once. A test's own ``xdist_group`` wins. The
    longest groups come first (:data:`LONGEST_FIRST`; ``make test`` keeps this order with
    ``--no-loadscope-reorder``)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    rank = {group: i for i, group in enumerate(LONGEST_FIRST)}
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
    items.sort(key=lambda item: rank.get(xdist_group(item), len(rank)))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail loudly where pytest-xdist did not take the groups (it marks each test's id with its
    group; pytest-xdist 3.8 cannot under pytest 9.2, whose test ids it no longer sets): every
    file's module fixtures would be made on each worker and two Slurm clusters would run at once."""
    if not (os.environ.get("PYTEST_XDIST_WORKER") and session.config.getvalue("loadgroup")):
        return
    if session.items and "@" not in session.items[0].nodeid:
        raise pytest.UsageError(
            "pytest-xdist did not group the tests (--dist loadgroup): install the versions "
            "pyproject.toml's test extra names (pip install -e '.[test]')"
        )

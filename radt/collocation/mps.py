"""MPS: one private control daemon per GPU, always quit afterwards.

**Daemon per GPU.** ``nvidia-cuda-mps-control -d`` is started with
``CUDA_MPS_PIPE_DIRECTORY=/tmp/radt-mpsN-XXXXXXXX`` (a new folder of its own),
``CUDA_MPS_LOG_DIRECTORY=<workdir>/mps-gpuN/log`` and ``CUDA_VISIBLE_DEVICES``
set to the GPU's **UUID**; each run gets the same three variables (plus
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` when the plan sets one). UUIDs rather
than indices because the MPS server renumbers the devices it sees: a client
of a daemon started for GPU 1 that also says ``CUDA_VISIBLE_DEVICES=1`` finds
no device (NVIDIA's MPS documentation recommends UUIDs for exactly this). The
daemon's Unix sockets live in the pipe directory and a socket's address holds
107 bytes, so the pipe directory is always a short one under /tmp (under
``TMPDIR`` where /tmp cannot be written), whatever the workdir; one longer than
:data:`PIPE_PATH_MAX` characters is refused in one line. Teardown
sends ``quit``, waits for the daemon process to end, and removes the pipe
directory; the log directory (``control.log``, ``server.log``) stays under
``workdir`` for the record.

**Detecting a daemon that already runs** (checked before anything starts):

1. the pipe directory radT's runs would use by default (radT's own
   ``CUDA_MPS_PIPE_DIRECTORY``, else ``/tmp/nvidia-mps``): if it exists, it is
   asked ``get_server_list``; an answer means a daemon runs there. Its pid
   comes from ``nvidia-cuda-mps-control.pid`` in that directory;
2. every process named ``nvidia-cuda-mps-control`` started with ``-d``/``-f``
   (psutil), whatever its pipe directory.

A daemon covers the GPUs its ``CUDA_VISIBLE_DEVICES`` names (read from
``/proc/<pid>/environ``); when that cannot be read, or is unset, it covers
every GPU. An ``mps`` row is refused on a GPU any daemon covers; ``naive``
and ``mig`` rows are refused on a GPU covered by the daemon of (1), since
their CUDA processes would connect to it and run under MPS unawares.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from radt.collocation import nvsmi
from radt.collocation.common import Slot, SlotRequest
from radt.collocation.teardown import Teardown
from radt.errors import RadtError
from radt.tags import Mode

CONTROL = nvsmi.MPS_CONTROL
DEFAULT_PIPE = "/tmp/nvidia-mps"
PID_FILE = "nvidia-cuda-mps-control.pid"
PIPE_PATH_MAX = 80  # sockets live in the pipe directory; sun_path holds 107 bytes
QUIT_WAIT_S = 10.0
NOT_RUNNING = "Cannot find MPS control daemon process"


@dataclass
class Daemon:
    """An MPS control daemon found on this machine."""

    pid: int | None
    pipe: str | None
    devices: set[int] | None  # GPU indices it serves; None: every GPU
    default_pipe: bool  # radT's runs would connect to it

    def covers(self, index: int) -> bool:
        return self.devices is None or index in self.devices

    def describe(self) -> str:
        parts = []
        if self.pid is not None:
            parts.append(f"pid {self.pid}")
        if self.pipe:
            parts.append(f"pipe directory {self.pipe}")
        return ", ".join(parts) or "unknown"

    def stop_hint(self) -> str:
        pipe = self.pipe or DEFAULT_PIPE
        return f"`echo quit | CUDA_MPS_PIPE_DIRECTORY={pipe} nvidia-cuda-mps-control`"


def default_pipe() -> str:
    return os.environ.get("CUDA_MPS_PIPE_DIRECTORY") or DEFAULT_PIPE


def running_daemons(gpus: list[nvsmi.GpuListing]) -> list[Daemon]:
    """The MPS control daemons that run now (see the module docstring)."""
    found: list[Daemon] = []
    pipe = default_pipe()
    if Path(pipe).is_dir() and nvsmi.available(CONTROL):
        result = nvsmi.run([CONTROL], stdin="get_server_list\n", env=_env(pipe), timeout=10.0)
        if result.ok:
            pid = _pid_in(Path(pipe))
            found.append(Daemon(pid, pipe, _scope(_environ(pid), gpus), True))
    known = {d.pid for d in found if d.pid is not None}
    for proc in psutil.process_iter(["pid", "name", "cmdline"]):
        info = proc.info
        cmdline = info.get("cmdline") or []
        if info.get("name") != CONTROL or not ({"-d", "-f"} & set(cmdline[1:])):
            continue
        if info["pid"] in known:
            continue
        environ = _environ(info["pid"])
        their_pipe = (environ or {}).get("CUDA_MPS_PIPE_DIRECTORY") or (
            DEFAULT_PIPE if environ is not None else None
        )
        same = their_pipe is not None and _same_path(their_pipe, pipe)
        found.append(Daemon(info["pid"], their_pipe, _scope(environ, gpus), same))
    return found


def check_gpu(
    gpu: nvsmi.GpuListing,
    requests: list[SlotRequest],
    daemons: list[Daemon],
    where: Callable[[list[int]], str],
) -> list[str]:
    """Problems of the rows on one GPU caused by MPS daemons that already run."""
    problems = []
    mps_lines = [r.line for r in requests if r.mode == Mode.MPS]
    other = [r for r in requests if r.mode in (Mode.NAIVE, Mode.MIG)]
    for daemon in daemons:
        if not daemon.covers(gpu.index):
            continue
        if mps_lines:
            problems.append(
                f"{where(mps_lines)}: an MPS control daemon already runs for GPU {gpu.index} "
                f"({daemon.describe()}); radT starts a private one per GPU and will not share "
                f"the GPU with another. Stop it first (as its owner: {daemon.stop_hint()}) "
                "or choose another GPU"
            )
        elif other and daemon.default_pipe:
            mode = "/".join(sorted({r.mode for r in other}))
            problems.append(
                f"{where([r.line for r in other])}: an MPS control daemon answers at "
                f"{daemon.pipe or DEFAULT_PIPE} ({daemon.describe()}), so {mode} runs on "
                f"GPU {gpu.index} would run under MPS; stop it first ({daemon.stop_hint()})"
            )
    return problems


def setup_gpu(
    gpu: nvsmi.GpuListing,
    requests: list[SlotRequest],
    workdir: Path,
    teardown: Teardown,
    where: Callable[[list[int]], str],
) -> tuple[dict[str, str], str]:
    """Start the GPU's private daemon; return the runs' MPS environment and a note."""
    n = gpu.index
    base = Path(workdir) / f"mps-gpu{n}"
    log = base / "log"
    log.mkdir(parents=True, exist_ok=True)
    lines = [r.line for r in requests]
    pipe = short_pipe_directory(n, where(lines))
    teardown.add(f"remove the MPS pipe directory {pipe}", lambda: shutil.rmtree(pipe))
    env = {
        "CUDA_VISIBLE_DEVICES": gpu.uuid,
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe),
        "CUDA_MPS_LOG_DIRECTORY": str(log.absolute()),
    }
    result = nvsmi.run([CONTROL, "-d"], env=nvsmi.env_with(**env), critical=True)
    if result.ok:
        teardown.add(f"stop the MPS control daemon of GPU {n} ({pipe})", lambda: stop(pipe, env))
    result.reraise()
    if not result.ok:
        raise RadtError(
            f"{where(lines)}: starting the MPS control daemon for GPU {n} failed: "
            f"{result.summary()}"
        )
    _wait_for_answer(pipe, env, where(lines), n)
    note = (
        f"GPU {n}: {gpu.name} ({gpu.uuid})\n"
        f"  control daemon: CUDA_VISIBLE_DEVICES={gpu.uuid} nvidia-cuda-mps-control -d "
        f"(pid {_pid_in(pipe) or '?'})\n"
        f"  CUDA_MPS_PIPE_DIRECTORY={pipe}\n"
        f"  CUDA_MPS_LOG_DIRECTORY={log.absolute()}\n"
    )
    for r in requests:
        pct = "default" if r.mps_thread_pct is None else f"{r.mps_thread_pct} %"
        note += f"  line {r.line} ({r.letter}): active thread percentage {pct}\n"
    return env, note


def short_pipe_directory(n: int, where: str) -> Path:
    """A new pipe directory for GPU ``n``'s daemon, short enough for its sockets:
    ``/tmp/radt-mps<n>-XXXXXXXX`` (under ``TMPDIR`` where /tmp cannot be written).

    Raises RadtError, in one line, when that folder's path is longer than
    :data:`PIPE_PATH_MAX` characters (a long ``TMPDIR``) or cannot be made.
    """
    parent = "/tmp" if os.access("/tmp", os.W_OK) else tempfile.gettempdir()
    try:
        pipe = Path(tempfile.mkdtemp(prefix=f"radt-mps{n}-", dir=parent)).absolute()
    except OSError as exc:
        raise RadtError(
            f"{where}: cannot make the MPS pipe directory for GPU {n} in {parent} "
            f"({exc.strerror or exc}); make /tmp writable, or set TMPDIR to a writable folder"
        ) from exc
    if len(str(pipe)) > PIPE_PATH_MAX:
        shutil.rmtree(pipe, ignore_errors=True)
        raise RadtError(
            f"{where}: the MPS pipe directory {pipe} is {len(str(pipe))} characters long, too "
            f"long for the daemon's sockets (at most {PIPE_PATH_MAX}); make /tmp writable, or "
            "set TMPDIR to a short folder"
        )
    return pipe


def _wait_for_answer(pipe: Path, env: dict[str, str], where: str, n: int) -> None:
    """``-d`` returns before the daemon listens: wait until it answers (up to 10 s)."""
    deadline = time.monotonic() + 10.0
    while True:
        result = nvsmi.run([CONTROL], stdin="get_server_list\n", env=nvsmi.env_with(**env))
        if result.ok:
            return
        if time.monotonic() > deadline:
            raise RadtError(
                f"{where}: the MPS control daemon for GPU {n} does not answer at {pipe}: "
                f"{result.summary()} (see {env['CUDA_MPS_LOG_DIRECTORY']}/control.log)"
            )
        time.sleep(0.2)


def stop(pipe: Path, env: dict[str, str]) -> None:
    """``echo quit | nvidia-cuda-mps-control`` and wait for the daemon to end.

    A daemon that is gone already (it answers "Cannot find MPS control daemon
    process") counts as stopped.
    """
    pid = _pid_in(pipe)
    result = nvsmi.run([CONTROL], stdin="quit\n", env=nvsmi.env_with(**env))
    if not result.ok:
        if NOT_RUNNING in result.output:
            return
        raise RadtError(f"`echo quit | nvidia-cuda-mps-control` failed: {result.summary()}")
    if pid is None:
        return
    deadline = time.monotonic() + QUIT_WAIT_S
    while _is_daemon(pid):
        if time.monotonic() > deadline:
            raise RadtError(
                f"the MPS control daemon (pid {pid}) still runs {QUIT_WAIT_S:g} s after quit"
            )
        time.sleep(0.1)


def server_list(slot: Slot) -> str:
    """``echo get_server_list | nvidia-cuda-mps-control`` for an MPS slot: server pids.

    Right after the runs start the list may still be empty: a server starts
    when the first client initialises CUDA. Raises RadtError when it fails.
    """
    pipe = slot.env.get("CUDA_MPS_PIPE_DIRECTORY")
    if not pipe:
        raise RadtError("not an MPS slot: it has no CUDA_MPS_PIPE_DIRECTORY")
    env = {k: v for k, v in slot.env.items() if k.startswith("CUDA_")}
    result = nvsmi.run([CONTROL], stdin="get_server_list\n", env=nvsmi.env_with(**env))
    if not result.ok:
        raise RadtError(f"get_server_list at {pipe} failed: {result.summary()}")
    return result.output


def after_start(slots: list[Slot]) -> dict[str, str]:
    """Artifacts to write once the runs started: each MPS daemon's server list."""
    artifacts: dict[str, str] = {}
    seen: set[str] = set()
    for slot in slots:
        pipe = slot.env.get("CUDA_MPS_PIPE_DIRECTORY")
        if not pipe or pipe in seen:
            continue
        seen.add(pipe)
        gpu = slot.devices[0] if slot.devices else "?"
        try:
            text = server_list(slot)
            body = text if text.strip() else "(no MPS server yet)\n"
        except RadtError as exc:
            body = f"failed: {exc}\n"
        artifacts[f"mps_servers_gpu{gpu}.txt"] = (
            f"$ echo get_server_list | CUDA_MPS_PIPE_DIRECTORY={pipe} "
            f"nvidia-cuda-mps-control\n{body}"
        )
    return artifacts


# --------------------------------------------------------------------------- helpers


def _env(pipe: str) -> dict[str, str]:
    return nvsmi.env_with(CUDA_MPS_PIPE_DIRECTORY=pipe)


def _pid_in(pipe: Path) -> int | None:
    try:
        text = (Path(pipe) / PID_FILE).read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _is_daemon(pid: int) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.name() == CONTROL and proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def _environ(pid: int | None) -> dict[str, str] | None:
    if pid is None:
        return None
    try:
        proc = psutil.Process(pid)
        if proc.name() != CONTROL:
            return None
        return proc.environ()
    except (psutil.Error, OSError):
        return None


def _scope(environ: dict[str, str] | None, gpus: list[nvsmi.GpuListing]) -> set[int] | None:
    """GPU indices a daemon's CUDA_VISIBLE_DEVICES names; None: every GPU (or unknown)."""
    if environ is None or "CUDA_VISIBLE_DEVICES" not in environ:
        return None
    indices: set[int] = set()
    for entry in environ["CUDA_VISIBLE_DEVICES"].split(","):
        entry = entry.strip()
        if entry.isdigit():
            indices.add(int(entry))
        elif entry:
            indices |= {g.index for g in gpus if g.uuid.lower().startswith(entry.lower())}
    return indices


def _same_path(a: str, b: str) -> bool:
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return a == b

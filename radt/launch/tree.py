"""Every process a command starts, so that none outlives the run: a cgroup, or a watched tree.

A command's descendants can leave its process group and session (a daemon double-forks,
calls ``setsid`` and points its stdio at ``/dev/null``), so ending the process group is not
enough. radT keeps track of them in one of two ways, chosen per command:

- ``cgroup``: where radT may create a cgroup (v2) below its own, the command starts inside a
  cgroup of its own; whatever it starts stays there, however it detaches.
- ``watch``: elsewhere, radT becomes a child subreaper (Linux), so that orphans of the command
  are re-parented to radT rather than to init, and it watches the tree: every process seen
  below the command, remembered as (pid, create time), and every orphan that carries the
  run's ``RADT_RUN_ID`` in its environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import time
from pathlib import Path

import psutil

WATCH_EVERY_S = 1.0
_PR_SET_CHILD_SUBREAPER = 36
_numbers = itertools.count(1)
_subreaper = False


def cgroup_base() -> Path | None:
    """radT's own cgroup (v2) folder, when it can hold cgroups of radT's making; else None."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    own = next((line[3:] for line in lines if line.startswith("0::")), None)
    mount = next((line.split()[4] for line in mounts if " - cgroup2 " in line), None)
    if own is None or mount is None:
        return None
    base = Path(mount) / own.lstrip("/")
    if not (base / "cgroup.procs").exists() or not _may_create(base, own):
        return None
    return base


def _may_create(base: Path, own: str) -> bool:
    """Whether radT may make cgroups below ``base``: it was delegated to this user (systemd
    hands a user's own cgroups over, or marks them with a ``delegate`` attribute), or it is
    the root of a cgroup namespace (a container radT runs in)."""
    if not os.access(base, os.W_OK):
        return False
    if os.geteuid() != 0 or own == "/":
        return True
    for attribute in ("trusted.delegate", "user.delegate"):
        with contextlib.suppress(OSError, AttributeError):
            os.getxattr(base, attribute)
            return True
    return False


def _become_subreaper() -> None:
    global _subreaper
    if _subreaper:
        return
    _subreaper = True
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class ProcessTree:
    """The processes of one command. ``way`` says how they are found (``cgroup``, ``watch``)."""

    def __init__(self, run_id: str | None) -> None:
        self.run_id = run_id
        self.root: int | None = None
        self.cgroup: Path | None = None
        self.way = "watch"
        self._seen: dict[int, psutil.Process] = {}
        self._watched = 0.0
        base = cgroup_base()
        if base is not None:
            _remove_stale(base)
            folder = base / f"radt-{os.getpid()}-{next(_numbers)}"
            with contextlib.suppress(OSError):
                folder.mkdir()
                self.cgroup, self.way = folder, "cgroup"
        if self.cgroup is None:
            _become_subreaper()

    def before_exec(self) -> None:
        """In the command's process, between fork and exec: join the command's cgroup."""
        if self.cgroup is not None:
            try:
                with open(self.cgroup / "cgroup.procs", "w") as procs:
                    procs.write("0")
            except OSError:
                pass  # started() notices and watches instead

    def started(self, pid: int) -> None:
        """Note the command's pid (radT's side, after it started)."""
        self.root = pid
        if self.cgroup is not None and pid not in self._cgroup_pids():
            self._drop_cgroup()
            self.way = "watch"
            _become_subreaper()
        self.watch(force=True)

    def watch(self, force: bool = False) -> None:
        """Remember the processes below the command (at most once a second; watch way only)."""
        if self.way != "watch" or self.root is None:
            return
        now = time.monotonic()
        if not force and now - self._watched < WATCH_EVERY_S:
            return
        self._watched = now
        for process in self._scan():
            self._seen.setdefault(process.pid, process)

    def leftovers(self) -> list[psutil.Process]:
        """The command's processes still running, the command itself excepted."""
        if self.way == "cgroup":
            found = [_process(pid) for pid in self._cgroup_pids()]
        else:
            found = [*self._seen.values(), *self._scan()]
        alive: dict[int, psutil.Process] = {}
        for process in found:
            if process is None or process.pid in (self.root, os.getpid()):
                continue
            with contextlib.suppress(psutil.Error):
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.setdefault(process.pid, process)
        return list(alive.values())

    def kill_all(self) -> None:
        """SIGKILL whatever is left, including what was started since :meth:`leftovers`."""
        if self.cgroup is not None and (self.cgroup / "cgroup.kill").exists():
            with contextlib.suppress(OSError), open(self.cgroup / "cgroup.kill", "w") as kill:
                kill.write("1")
        for process in self.leftovers():
            with contextlib.suppress(psutil.Error):
                process.kill()

    def close(self, processes: list[psutil.Process]) -> None:
        """Reap the ended ``processes`` that were re-parented to radT; remove the cgroup."""
        for process in processes:
            with contextlib.suppress(ChildProcessError, OSError):
                if _parent(process) == os.getpid():
                    os.waitpid(process.pid, os.WNOHANG)
        self._drop_cgroup()

    def _scan(self) -> list[psutil.Process]:
        found: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(self.root)
            found += root.children(recursive=True)
        if self.run_id:
            with contextlib.suppress(psutil.Error):
                for orphan in psutil.Process().children():
                    if orphan.pid != self.root and self._carries_run_id(orphan):
                        found.append(orphan)
                        with contextlib.suppress(psutil.Error):
                            found += orphan.children(recursive=True)
        return found

    def _carries_run_id(self, process: psutil.Process) -> bool:
        try:
            return process.environ().get("RADT_RUN_ID") == self.run_id
        except (psutil.Error, OSError):
            return False

    def _cgroup_pids(self) -> list[int]:
        pids: list[int] = []
        if self.cgroup is None:
            return pids
        for procs in self.cgroup.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids += [int(pid) for pid in procs.read_text().split()]
        return pids

    def _drop_cgroup(self) -> None:
        folder, self.cgroup = self.cgroup, None
        if folder is None:
            return
        deadline = time.monotonic() + 2.0
        while True:
            try:
                for sub in sorted(folder.rglob("*"), reverse=True):
                    if sub.is_dir():
                        sub.rmdir()
                folder.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:  # not empty yet: the killed are still exiting
                if time.monotonic() > deadline:
                    return
                time.sleep(0.02)


def describe(processes: list[psutil.Process], most: int = 5) -> str:
    """``python3 (pid 12), sleep (pid 13) and 2 more``."""
    names = []
    for process in processes[:most]:
        try:
            names.append(f"{process.name()} (pid {process.pid})")
        except psutil.Error:
            names.append(f"pid {process.pid}")
    more = len(processes) - most
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _parent(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


def _remove_stale(base: Path) -> None:
    """Remove empty cgroups that a radT which has since died left under ``base``."""
    with contextlib.suppress(OSError):
        for folder in base.glob("radt-*-*"):
            pid = folder.name.split("-")[1]
            if pid.isdigit() and not psutil.pid_exists(int(pid)):
                with contextlib.suppress(OSError):
                    folder.rmdir()

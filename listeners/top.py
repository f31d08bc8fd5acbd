"""``top``: CPU, memory, threads and I/O of the run's process tree, and of the host.

Process CPU is measured on the tree as a whole: the CPU seconds of every live
member, including what each has collected from children it reaped. A child
that ends between two polls thus still counts (its time moves to its parent),
and a process born between two polls counts from its first instant. I/O bytes
are summed the same way (Linux adds a reaped child's I/O to its parent's).

Finding the tree's members walks the whole process table, so the member list
is refreshed once a second (``TREE_REFRESH_S``) rather than at every poll; a
process found late brings its whole CPU time with it, so totals stay exact.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import psutil

from radt.listener import (
    HOST_CPU,
    TRUE_WORDS,
    Option,
    PolledListener,
    RunContext,
    Sample,
    samples_from,
)

from ._rates import MIB, MIN_WINDOW_S, rate

TREE_REFRESH_S = 1.0


@dataclass
class _Tree:
    """Totals over the process tree at one instant."""

    procs: int = 0
    rss_b: float = 0.0
    threads: int = 0
    cpu_s: float = 0.0
    read_b: float | None = 0.0
    write_b: float | None = 0.0


def busy_pct(before: Any, after: Any) -> float | None:
    """Return the busy share of CPU time between two ``psutil.cpu_times()``, in percent.

    Idle and I/O wait are not busy; guest time is already in user time (as in
    psutil and htop). None when no time passed.
    """
    total = sum(after) - sum(before)
    for spent in ("guest", "guest_nice"):
        total -= getattr(after, spent, 0.0) - getattr(before, spent, 0.0)
    idle = sum(getattr(after, f, 0.0) - getattr(before, f, 0.0) for f in ("idle", "iowait"))
    if total <= 0:
        return None
    return min(max((total - idle) / total * 100.0, 0.0), 100.0)


class TopListener(PolledListener):
    """Samples ``top/proc/*`` for the run's process tree and ``top/host/*`` for the machine.

    Option ``-o top.per_core=1`` adds ``top/host/cpu{i}/cpu_pct`` for every core.
    """

    name = "top"
    provides = ((HOST_CPU, "top/host/cpu_pct", 10),)
    records = (
        "CPU %, RSS, threads and I/O of the command's process tree; the host's CPU %, "
        "memory, swap and load"
    )
    declared_options = (
        Option("per_core", bool, "0", "also record each core's use, top/host/cpu{i}/cpu_pct"),
    )
    default_interval_s = 0.5
    final_poll = True  # the tree's CPU up to the command's end (read before it is reaped)

    def __init__(self) -> None:
        super().__init__()
        self._root: psutil.Process | None = None
        self._per_core = False
        self._since = 0.0
        self._tree: _Tree | None = None
        self._cpu: Any = None
        self._cores: list[Any] = []
        self._members: list[psutil.Process] = []
        self._members_at = float("-inf")

    def open(self, run: RunContext) -> None:
        """Find the root process and take the first readings every rate starts from."""
        self._per_core = str(run.options.get("per_core", "")).strip().lower() in TRUE_WORDS
        self._members, self._members_at = [], float("-inf")
        try:
            self._root = psutil.Process(run.pid)
        except psutil.Error:
            self._root = None
        self._since = time.monotonic()
        self._tree = self._read_tree()
        self._cpu = psutil.cpu_times()
        self._cores = psutil.cpu_times(percpu=True) if self._per_core else []

    def close(self) -> None:
        """Forget the process and every reading."""
        self._root = None
        self._tree = None

    def poll(self) -> list[Sample]:
        """Return the process-tree and host samples of this instant."""
        now = time.time()
        seconds = time.monotonic() - self._since
        ready = seconds >= MIN_WINDOW_S
        tree = self._read_tree()
        cpu = psutil.cpu_times()
        cores = psutil.cpu_times(percpu=True) if self._per_core else []
        samples = self._proc_samples(now, tree, seconds if ready else 0.0)
        samples += self._host_samples(now, cpu, cores, ready)
        if ready:
            self._since += seconds
            self._tree, self._cpu, self._cores = tree, cpu, cores
        return samples

    def _proc_samples(self, now: float, tree: _Tree | None, seconds: float) -> list[Sample]:
        if tree is None:
            return []
        before = self._tree
        values: dict[str, float | None] = {
            "cpu_pct": None,
            "rss_mib": tree.rss_b / MIB,
            "threads": tree.threads,
            "procs": tree.procs,
            "read_mib": None if tree.read_b is None else tree.read_b / MIB,
            "write_mib": None if tree.write_b is None else tree.write_b / MIB,
        }
        if before is not None and seconds > 0:
            cpu_s = rate(before.cpu_s, tree.cpu_s, seconds)
            values["cpu_pct"] = None if cpu_s is None else cpu_s * 100.0
            for quantity, old, new in (
                ("read_mib_s", before.read_b, tree.read_b),
                ("write_mib_s", before.write_b, tree.write_b),
            ):
                if old is not None and new is not None:
                    per_s = rate(old, new, seconds)
                    values[quantity] = None if per_s is None else per_s / MIB
        return samples_from(now, "top/proc", values)

    def _host_samples(self, now: float, cpu: Any, cores: list[Any], ready: bool) -> list[Sample]:
        memory = psutil.virtual_memory()
        values: dict[str, float | None] = {
            "cpu_pct": busy_pct(self._cpu, cpu) if ready else None,
            "mem_used_mib": memory.used / MIB,
            "mem_avail_mib": memory.available / MIB,
            "mem_used_pct": memory.percent,
            "swap_used_mib": psutil.swap_memory().used / MIB,
            "load1": _load1(),
        }
        samples = samples_from(now, "top/host", values)
        if ready and len(cores) == len(self._cores):
            for index, (old, new) in enumerate(zip(self._cores, cores, strict=True)):
                samples += samples_from(
                    now, f"top/host/cpu{index}", {"cpu_pct": busy_pct(old, new)}
                )
        return samples

    def _read_tree(self) -> _Tree | None:
        """Sum over the root and all its descendants; None when the root is gone.

        A root that has exited but is not reaped yet (the last poll at the command's end)
        still counts: its CPU time then includes all it collected from its children.
        """
        root = self._root
        try:
            if root is None or not root.is_running():
                self._root = None
                return None
            if root.status() == psutil.STATUS_ZOMBIE:
                self._members = []
            elif time.monotonic() - self._members_at >= TREE_REFRESH_S:
                self._members = root.children(recursive=True)
                self._members_at = time.monotonic()
        except psutil.NoSuchProcess:
            self._root = None
            return None
        tree = _Tree()
        for proc in [root, *self._members]:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
                    threads = proc.num_threads()
                    io = _io_counters(proc)
            except psutil.Error:  # vanished mid-poll, or not ours to read
                if proc is root:
                    return None
                self._members_at = float("-inf")  # the tree changed: look again next poll
                continue
            tree.procs += 1
            tree.rss_b += rss
            tree.threads += threads
            tree.cpu_s += times.user + times.system
            tree.cpu_s += getattr(times, "children_user", 0.0)
            tree.cpu_s += getattr(times, "children_system", 0.0)
            if io is None or tree.read_b is None or tree.write_b is None:
                tree.read_b = tree.write_b = None
            else:
                tree.read_b += io.read_bytes
                tree.write_b += io.write_bytes
        return tree


def _io_counters(proc: psutil.Process) -> Any:
    try:
        return proc.io_counters()
    except (psutil.AccessDenied, psutil.ZombieProcess, AttributeError, NotImplementedError):
        return None


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except (OSError, AttributeError):
        return None

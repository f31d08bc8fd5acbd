"""The ``top`` listener, on real processes: the run's tree, the host, a root that goes away."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest
from conftest import wait_for
from radt.listeners.top import TopListener, busy_pct

from radt.launch.registry import discover
from radt.listener import RunContext, Sample
from radt.record.sampler import Sampler

# Each child prints "ready" and the pids of the grandchildren it started.
BUSY = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print("ready", grandchild.pid, flush=True)
end = time.time() + 60
while time.time() < end:
    pass
"""
IDLE = """
import time
print("ready", flush=True)
time.sleep(60)
"""
# On a line from stdin, writes 5 MiB with fsync to argv[1], itself or through a
# grandchild that ends and is reaped (argv[2]), then prints "done" and waits.
WRITER = """
import os, subprocess, sys
WRITE = (
    "import os, sys\\n"
    "with open(sys.argv[1], 'wb') as f:\\n"
    "    f.write(b'x' * (5 << 20)); f.flush(); os.fsync(f.fileno())\\n"
)
print("ready", flush=True)
sys.stdin.readline()
if sys.argv[2] == "grandchild":
    subprocess.run([sys.executable, "-c", WRITE, sys.argv[1]], check=True)
else:
    exec(WRITE)
print("done", flush=True)
sys.stdin.readline()
"""

PROC_KEYS = {f"top/proc/{q}" for q in ("cpu_pct", "rss_mib", "threads", "procs")}
IO_KEYS = {f"top/proc/{q}" for q in ("read_mib", "write_mib", "read_mib_s", "write_mib_s")}
HOST_KEYS = {
    f"top/host/{q}"
    for q in ("cpu_pct", "mem_used_mib", "mem_avail_mib", "mem_used_pct", "swap_used_mib")
}

Spawn = Callable[..., subprocess.Popen[str]]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Start ``python -c CODE ARGS``, wait for its "ready" line; kill all it started after."""
    started: list[psutil.Process] = []
    popens: list[subprocess.Popen[str]] = []

    def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        popens.append(proc)
        words = proc.stdout.readline().split()  # type: ignore[union-attr]
        assert words[:1] == ["ready"], words
        for pid in words[1:]:
            started.append(psutil.Process(int(pid)))
        return proc

    try:
        yield _spawn
    finally:
        for grandchild in started:  # first, while their parents still hold them
            with contextlib.suppress(psutil.Error):
                grandchild.kill()
        for proc in popens:
            proc.kill()
            proc.wait(timeout=5)
            for stream in (proc.stdin, proc.stdout):
                stream.close()  # type: ignore[union-attr]


def run_for(pid: int, tmp_path: Path, **options: str) -> RunContext:
    return RunContext(run_id="r", pid=pid, workdir=tmp_path, emit=lambda s: None, options=options)


def by_key(samples: list[Sample]) -> dict[str, float]:
    assert len({s.timestamp for s in samples}) <= 1, "one instant per poll"
    keys = [s.key for s in samples]
    assert len(keys) == len(set(keys)), "no key twice in a poll"
    return {s.key: s.value for s in samples}


def on_tmpfs(path: Path) -> bool:
    mounts = [p for p in psutil.disk_partitions(all=True) if str(path).startswith(p.mountpoint)]
    best = max(mounts, key=lambda p: len(p.mountpoint), default=None)
    return best is not None and best.fstype in ("tmpfs", "ramfs")


def test_tree_of_a_busy_child_with_a_grandchild(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(BUSY)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path))
    try:
        first = by_key(top.poll())
        time.sleep(0.4)
        second = by_key(top.poll())
    finally:
        top.stop()
    assert first["top/proc/procs"] == 2
    assert "top/proc/read_mib_s" not in first
    assert second.keys() >= PROC_KEYS | IO_KEYS | HOST_KEYS
    assert second["top/proc/procs"] == 2  # the child and its grandchild
    assert second["top/proc/threads"] >= 2
    assert second["top/proc/rss_mib"] > 1
    assert second["top/proc/cpu_pct"] > 10  # the busy loop
    assert 0 <= second["top/host/cpu_pct"] <= 100
    assert 0 < second["top/host/mem_used_pct"] < 100
    assert second["top/host/mem_used_mib"] > 0 and second["top/host/mem_avail_mib"] > 0
    assert not [k for k in second if k.startswith("top/host/cpu0")]


@pytest.mark.parametrize("writer", ["self", "grandchild"])
def test_write_mib_grows_after_the_tree_writes(spawn: Spawn, tmp_path: Path, writer: str) -> None:
    if on_tmpfs(tmp_path):
        pytest.skip("tmpfs does not count written bytes")
    if writer == "grandchild" and not sys.platform.startswith("linux"):
        pytest.skip("a reaped child's I/O moves to its parent on Linux")
    child = spawn(WRITER, str(tmp_path / "out.bin"), writer)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path))
    try:
        before = by_key(top.poll())
        child.stdin.write("go\n")  # type: ignore[union-attr]
        child.stdin.flush()  # type: ignore[union-attr]
        assert child.stdout.readline().strip() == "done"  # type: ignore[union-attr]
        time.sleep(0.1)
        after = by_key(top.poll())
    finally:
        top.stop()
    assert after["top/proc/procs"] == 1  # the writing grandchild ended and was reaped
    assert after["top/proc/write_mib"] - before["top/proc/write_mib"] >= 4.5
    assert after["top/proc/write_mib_s"] > 0
    assert after["top/proc/read_mib_s"] >= 0


def test_vanished_root_leaves_host_samples(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(IDLE)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path))
    try:
        assert PROC_KEYS - {"top/proc/cpu_pct"} <= by_key(top.poll()).keys()
        child.kill()
        child.wait(timeout=5)
        time.sleep(0.06)
        after = by_key(top.poll())
        again = by_key(top.poll())
    finally:
        top.stop()
        top.stop()  # safe twice
    assert after.keys() >= HOST_KEYS
    assert all(key.startswith("top/host/") for key in [*after, *again])


def test_an_exited_root_not_yet_reaped_still_gives_its_cpu(spawn: Spawn, tmp_path: Path) -> None:
    # radT's last poll comes when the command has exited and before it is reaped
    child = spawn(BUSY)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path))
    try:
        top.poll()
        time.sleep(0.3)
        child.kill()
        zombie = psutil.Process(child.pid)
        wait_for(lambda: zombie.status() == psutil.STATUS_ZOMBIE, timeout=5)
        time.sleep(0.06)
        last = by_key(top.poll())
    finally:
        top.stop()
    assert last["top/proc/procs"] == 1
    assert last["top/proc/cpu_pct"] > 0  # the CPU it used since the poll before
    assert last.keys() >= HOST_KEYS


def test_root_gone_before_open(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    top = TopListener()
    top.start(run_for(int(done.stdout), tmp_path))
    try:
        samples = by_key(top.poll())
    finally:
        top.stop()
    assert samples and all(key.startswith("top/host/") for key in samples)


@pytest.mark.parametrize("value", ["1", "true", "yes", "YES"])
def test_per_core_option(spawn: Spawn, tmp_path: Path, value: str) -> None:
    child = spawn(IDLE)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path, per_core=value))
    try:
        time.sleep(0.1)
        samples = by_key(top.poll())
    finally:
        top.stop()
    cores = len(psutil.cpu_times(percpu=True))
    per_core = {k for k in samples if k.startswith("top/host/cpu") and k != "top/host/cpu_pct"}
    assert per_core == {f"top/host/cpu{i}/cpu_pct" for i in range(cores)}
    assert all(0 <= samples[k] <= 100 for k in per_core)


def test_per_core_off(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(IDLE)
    top = TopListener()
    top.start(run_for(child.pid, tmp_path, per_core="0"))
    try:
        time.sleep(0.1)
        samples = by_key(top.poll())
    finally:
        top.stop()
    assert "top/host/cpu_pct" in samples
    assert "top/host/cpu0/cpu_pct" not in samples


def test_busy_pct_counts_idle_and_iowait_as_not_busy() -> None:
    zero = psutil.cpu_times()._replace(**dict.fromkeys(psutil.cpu_times()._fields, 0.0))
    after = zero._replace(user=3.0, idle=1.0)
    assert busy_pct(zero, after) == pytest.approx(75.0)
    if "iowait" in zero._fields:
        assert busy_pct(zero, after._replace(iowait=2.0)) == pytest.approx(50.0)
    assert busy_pct(zero, zero) is None


def test_driven_by_the_shared_sampler(spawn: Spawn, tmp_path: Path) -> None:
    child = spawn(BUSY)
    got: list[Sample] = []
    warnings: list[str] = []
    run = RunContext(
        run_id="r",
        pid=child.pid,
        workdir=tmp_path,
        emit=got.extend,
        interval_s=0.1,
        warn=warnings.append,
    )
    sampler = Sampler(TopListener(), run)
    sampler.start()
    time.sleep(0.45)
    sampler.stop()
    assert sampler.failed is None and not warnings
    assert sum(s.key == "top/proc/cpu_pct" for s in got) >= 2
    assert max(s.value for s in got if s.key == "top/proc/cpu_pct") > 10


def test_found_through_its_entry_point() -> None:
    found = discover()["top"]
    assert found.reason is None
    assert isinstance(found.listener, TopListener)

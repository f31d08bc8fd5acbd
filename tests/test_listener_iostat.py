"""The ``iostat`` listener: real counters of this machine, and scripted ones for the edge cases."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import radt.listeners.iostat as iostat
from radt.listeners.iostat import IostatListener, sanitize

from radt.launch.registry import discover
from radt.listener import RunContext, Sample

KEY = re.compile(r"^iostat/[a-z0-9_.-]+/[a-z]+_(mib|ops|pkts)_s$")
DISK_TOTALS = {
    f"iostat/disk/{q}" for q in ("read_mib_s", "write_mib_s", "read_ops_s", "write_ops_s")
}
NET_TOTALS = {f"iostat/net/{q}" for q in ("recv_mib_s", "sent_mib_s", "recv_pkts_s", "sent_pkts_s")}
MIB = 1024 * 1024


def started(tmp_path: Path) -> IostatListener:
    listener = IostatListener()
    listener.start(RunContext(run_id="r", pid=os.getpid(), workdir=tmp_path, emit=lambda s: None))
    return listener


def by_key(samples: list[Sample]) -> dict[str, float]:
    assert len({s.timestamp for s in samples}) <= 1, "one instant per poll"
    return {s.key: s.value for s in samples}


def disk(read_mib: float = 0, write_mib: float = 0, reads: int = 0, writes: int = 0) -> object:
    return SimpleNamespace(
        read_bytes=int(read_mib * MIB),
        write_bytes=int(write_mib * MIB),
        read_count=reads,
        write_count=writes,
    )


def nic(recv_mib: float = 0, sent_mib: float = 0, recv: int = 0, sent: int = 0) -> object:
    return SimpleNamespace(
        bytes_recv=int(recv_mib * MIB),
        bytes_sent=int(sent_mib * MIB),
        packets_recv=recv,
        packets_sent=sent,
    )


def on_tmpfs(path: Path) -> bool:
    mounts = [p for p in psutil.disk_partitions(all=True) if str(path).startswith(p.mountpoint)]
    best = max(mounts, key=lambda p: len(p.mountpoint), default=None)
    return best is not None and best.fstype in ("tmpfs", "ramfs")


def test_first_poll_is_the_baseline_then_rates_and_totals(tmp_path: Path) -> None:
    listener = started(tmp_path)
    try:
        assert listener.poll() == []
        if not on_tmpfs(tmp_path):
            with open(tmp_path / "out.bin", "wb") as f:
                f.write(b"x" * (5 << 20))
                f.flush()
                os.fsync(f.fileno())
        time.sleep(0.1)
        samples = by_key(listener.poll())
    finally:
        listener.stop()
        listener.stop()  # safe twice
    assert samples.keys() >= DISK_TOTALS
    if any(name != "lo" for name in psutil.net_io_counters(pernic=True)):
        assert samples.keys() >= NET_TOTALS
    assert all(KEY.match(key) for key in samples), sorted(samples)
    assert all(value >= 0 for value in samples.values())
    assert not [k for k in samples if k.split("/")[1].startswith(("loop", "ram")) or "/lo/" in k]
    if not on_tmpfs(tmp_path):
        assert samples["iostat/disk/write_mib_s"] > 0


def test_scripted_counters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disks = [
        {"sda": disk(10, 20, 5, 5), "sda1": disk(10, 20, 5, 5), "loop0": disk(), "ram0": disk(),
         "Cciss/C0D0": disk(1, 1, 1, 1)},
        {"sda": disk(12, 21, 25, 15), "sda1": disk(12, 21, 25, 15), "loop0": disk(9),
         "ram0": disk(9), "Cciss/C0D0": disk(0, 2, 0, 2), "sdb": disk(50)},
    ]  # fmt: skip
    nics = [
        {"lo": nic(5), "eth0": nic(1, 1, 10, 10), "wlan0": nic(0, 0, 0, 0)},
        {"lo": nic(50), "eth0": nic(2, 3, 30, 20), "wlan0": nic(1, 0, 10, 0)},
    ]
    monkeypatch.setattr(psutil, "disk_io_counters", lambda perdisk: disks.pop(0))
    monkeypatch.setattr(psutil, "net_io_counters", lambda pernic: nics.pop(0))
    monkeypatch.setattr(iostat, "is_whole_disk", lambda name: name != "sda1")
    listener = started(tmp_path)
    assert listener.poll() == []
    began = time.monotonic()
    time.sleep(0.1)
    samples = by_key(listener.poll())
    seconds = time.monotonic() - began
    listener.stop()

    def near(key: str, delta: float) -> None:
        assert delta / seconds <= samples[key] <= delta / 0.1, (key, samples[key])

    near("iostat/sda/read_mib_s", 2)
    near("iostat/sda/read_ops_s", 20)
    near("iostat/sda1/write_ops_s", 10)
    near("iostat/cciss_c0d0/write_mib_s", 1)  # sanitized name
    assert "iostat/cciss_c0d0/read_mib_s" not in samples  # reset counter: skipped this poll
    assert not [k for k in samples if k.startswith(("iostat/loop0/", "iostat/ram0/", "iostat/lo/"))]
    assert not [k for k in samples if k.startswith("iostat/sdb/")]  # new disk: no baseline yet
    near("iostat/disk/read_mib_s", 2)  # sda only: no partition, no reset, no new disk
    near("iostat/disk/write_mib_s", 1 + 1)  # sda and cciss
    near("iostat/eth0/recv_pkts_s", 20)
    near("iostat/eth0/sent_mib_s", 2)
    near("iostat/net/recv_mib_s", 1 + 1)  # eth0 and wlan0, not lo
    near("iostat/net/sent_pkts_s", 10)


def test_too_soon_keeps_the_older_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = iter([0, 100, 101])
    monkeypatch.setattr(
        psutil, "disk_io_counters", lambda perdisk: {"vda": disk(read_mib=next(reads))}
    )
    monkeypatch.setattr(psutil, "net_io_counters", lambda pernic: {})
    listener = started(tmp_path)
    assert listener.poll() == []
    assert listener.poll() == []  # right away: too short a time for a rate
    began = time.monotonic()
    time.sleep(0.1)
    samples = by_key(listener.poll())
    listener.stop()
    # from the first reading (101 MiB), not the one dropped (1 MiB)
    assert samples["iostat/vda/read_mib_s"] >= 101 / (time.monotonic() - began + 0.05)


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ("nvme0n1", "nvme0n1"),
        ("Cciss/C0D0", "cciss_c0d0"),
        ("eth0@if12", "eth0_if12"),
        ("br-1a2B.100", "br-1a2b.100"),
        ("Wi-Fi 2", "wi-fi_2"),
        ("disk", "dev_disk"),  # never mistaken for the totals
        ("net", "dev_net"),
    ],
)
def test_sanitize(raw: str, key: str) -> None:
    assert sanitize(raw) == key


def test_available(monkeypatch: pytest.MonkeyPatch) -> None:
    assert IostatListener().available() is None

    def broken(perdisk: bool) -> None:
        raise RuntimeError("no /proc/diskstats")

    monkeypatch.setattr(psutil, "disk_io_counters", broken)
    assert "no /proc/diskstats" in (IostatListener().available() or "")
    for nothing in (None, {}):
        monkeypatch.setattr(psutil, "disk_io_counters", lambda perdisk, n=nothing: n)
        assert IostatListener().available()


def test_found_through_its_entry_point() -> None:
    found = discover()["iostat"]
    assert found.reason is None
    assert isinstance(found.listener, IostatListener)

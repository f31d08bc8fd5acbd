"""``iostat``: read/write rates of every disk and network interface, and their totals.

Keys are ``iostat/<disk>/{read,write}_{mib,ops}_s`` and
``iostat/<nic>/{recv,sent}_{mib,pkts}_s``; the totals go under the entities
``disk`` (whole disks only, so partitions are not counted twice) and ``net``.
Loop and RAM devices and the loopback interface are left out.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

import psutil

from radt.listener import DeviceListener, PolledListener, RunContext, Sample, samples_from

from ._rates import MIB, MIN_WINDOW_S, rates

SKIPPED_DISKS = ("loop", "ram", "zram")
SKIPPED_NICS = ("lo",)
TOTALS = ("disk", "net")

DISK_COUNTERS = {
    "read_mib_s": ("read_bytes", MIB),
    "write_mib_s": ("write_bytes", MIB),
    "read_ops_s": ("read_count", 1),
    "write_ops_s": ("write_count", 1),
}
NET_COUNTERS = {
    "recv_mib_s": ("bytes_recv", MIB),
    "sent_mib_s": ("bytes_sent", MIB),
    "recv_pkts_s": ("packets_recv", 1),
    "sent_pkts_s": ("packets_sent", 1),
}

Snapshot = dict[str, dict[str, float]]


def sanitize(name: str) -> str:
    """Return a device name fit for a metric key: lower case, only ``[a-z0-9_.-]``."""
    key = re.sub(r"[^a-z0-9_.-]", "_", name.lower()) or "_"
    return f"dev_{key}" if key in TOTALS else key


def is_whole_disk(name: str) -> bool:
    """Return True for a whole disk (``sda``, ``nvme0n1``), False for a partition."""
    if not os.path.isdir("/sys/block"):
        return True
    return os.path.exists(os.path.join("/sys/block", name.replace("/", "!")))


def _snapshot(
    counters: Mapping[str, Any] | None,
    fields: Mapping[str, tuple[str, int]],
    skip: tuple[str, ...],
    keep: Callable[[str], bool],
) -> Snapshot:
    return {
        name: {quantity: getattr(c, field) / scale for quantity, (field, scale) in fields.items()}
        for name, c in (counters or {}).items()
        if not name.startswith(skip) and keep(name)
    }


class IostatListener(DeviceListener, PolledListener):
    """Disk and network throughput from psutil's cumulative counters, as rates."""

    name = "iostat"
    records = "MiB/s and operations/s of each disk and network interface, and their totals"
    default_interval_s = 0.5

    def __init__(self) -> None:
        super().__init__()
        self._before: tuple[float, Snapshot, Snapshot] | None = None

    def available(self) -> str | None:
        """None when psutil can read disk counters here, else why not."""
        try:
            counters = psutil.disk_io_counters(perdisk=True)
        except Exception as exc:
            return f"psutil cannot read disk counters ({exc})"
        return None if counters else "psutil finds no disk counters"

    def open(self, run: RunContext) -> None:
        """Forget any earlier readings: the first poll sets the baseline."""
        self._before = None

    def close(self) -> None:
        """Forget the readings."""
        self._before = None

    def poll(self) -> list[Sample]:
        """Return the rates since the previous poll; the first poll returns []."""
        now = time.time()
        at = time.monotonic()
        disks = _snapshot(
            psutil.disk_io_counters(perdisk=True), DISK_COUNTERS, SKIPPED_DISKS, lambda _: True
        )
        nics = _snapshot(
            psutil.net_io_counters(pernic=True), NET_COUNTERS, (), lambda n: n not in SKIPPED_NICS
        )
        before, self._before = self._before, (at, disks, nics)
        if before is None:
            return []
        seconds = at - before[0]
        if seconds < MIN_WINDOW_S:
            self._before = before  # too soon: keep the older baseline
            return []
        samples = self._rates(now, "disk", before[1], disks, seconds, is_whole_disk)
        samples += self._rates(now, "net", before[2], nics, seconds, lambda _: True)
        return samples

    def _rates(
        self,
        now: float,
        total: str,
        before: Snapshot,
        after: Snapshot,
        seconds: float,
        counts: Callable[[str], bool],
    ) -> list[Sample]:
        samples: list[Sample] = []
        sums: dict[str, float] = {}
        for name, counters in after.items():
            found = rates(before.get(name, {}), counters, seconds)
            samples += samples_from(now, f"iostat/{sanitize(name)}", dict(found))
            if counts(name):
                for quantity, value in found.items():
                    sums[quantity] = sums.get(quantity, 0.0) + value
        return samples + samples_from(now, f"iostat/{total}", dict(sums))

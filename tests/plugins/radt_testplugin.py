"""A third-party listener package, as a user would write one, for the tests.

It is registered through ``radt_testplugin-0.1.dist-info/entry_points.txt``;
tests put this folder on PYTHONPATH, exactly how an installed package is found.
"""

from __future__ import annotations

import json
import os
import time

from radt import PolledListener, Sample, SampleBatch


class CounterListener(PolledListener):
    """Emits ``counter/seq/n`` = 0, 1, 2, … once per poll: every sample is countable."""

    name = "counter"
    default_interval_s = 0.05

    def open(self, run) -> None:
        self.n = 0

    def poll(self) -> list[Sample]:
        sample = Sample(time.time(), "counter/seq/n", float(self.n))
        self.n += 1
        return [sample]


class BoomListener(PolledListener):
    """Works for three polls, then raises inside its thread."""

    name = "boom"
    default_interval_s = 0.05

    def open(self, run) -> None:
        self.polls = 0

    def poll(self) -> list[Sample]:
        self.polls += 1
        if self.polls > 3:
            raise RuntimeError("sensor unplugged")
        return [Sample(time.time(), "boom/dev0/value_pct", 1.0)]


class AbsentListener(PolledListener):
    """A listener whose tool is never installed."""

    name = "absent"

    def available(self) -> str | None:
        return None if os.environ.get("RADT_TEST_ABSENT_OK") else "absent-tool not found"

    def poll(self) -> list[Sample]:
        return []


class ConstantPowerListener(PolledListener):
    """A GPU drawing exactly ``RADT_TEST_POWER_W`` watts (default 250): the stand-in for the
    hardware in tests whose energy must be known exactly.

    Emits ``nvml/gpu0/power_w`` = P and ``nvml/gpu0/energy_j`` = P × (seconds since it
    started), both at the sample's own timestamp: an energy counter of a constant draw. Only
    with ``-l constpower``."""

    name = "constpower"
    default_interval_s = 0.05
    on_by_default = False

    def open(self, run) -> None:
        self.watts = float(os.environ.get("RADT_TEST_POWER_W", "250"))
        self.origin = time.time()

    def poll(self) -> list[Sample]:
        now = time.time()
        return [
            Sample(now, "nvml/gpu0/power_w", self.watts),
            Sample(now, "nvml/gpu0/energy_j", self.watts * (now - self.origin)),
        ]


class BatchListener(PolledListener):
    """Hands over 40 keys per poll as one ``SampleBatch``; on odd polls key 7 is NaN (missing).

    With ``RADT_TEST_BATCH_LOG`` set, each poll's time and values are appended
    there as a JSON line, so a test knows exactly what was handed over.
    """

    name = "batch"
    default_interval_s = 0.02
    on_by_default = False  # only where a test asks for it (-l batch)
    KEYS = [f"batch/dev{i % 4}/q{i:02d}_pct" for i in range(40)]

    def open(self, run) -> None:
        self.n = 0
        path = os.environ.get("RADT_TEST_BATCH_LOG")
        self.log = open(path, "w") if path else None  # noqa: SIM115 - closed in close()

    def poll(self) -> SampleBatch:
        now = time.time()
        values = [self.n * 1000.0 + i + 0.125 for i in range(len(self.KEYS))]
        if self.n % 2:
            values[7] = float("nan")
        if self.log is not None:
            self.log.write(json.dumps([now, values]) + "\n")
            self.log.flush()
        self.n += 1
        return SampleBatch(now, self.KEYS, values)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

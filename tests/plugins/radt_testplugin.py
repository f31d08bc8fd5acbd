"""A third-party listener package, as a user would write one, for the tests.

It is registered through ``radt_testplugin-0.1.dist-info/entry_points.txt``;
tests put this folder on PYTHONPATH, exactly how an installed package is found.
"""

from __future__ import annotations

import os
import time

from radt import PolledListener, Sample


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

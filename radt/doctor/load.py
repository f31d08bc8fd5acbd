"""The built-in load of ``radt doctor --measure``: idle, short matmul bursts, idle, one
idle→full step, idle, on a fixed schedule that it writes down before it starts.

Run as ``python -m radt.doctor.load --seconds S --schedule FILE``; radT records it as a
normal run. Without CUDA it keeps the schedule but loads nothing (it says so).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from radt.tags import RADT_DOCTOR_LOAD

PHASES = (("idle", 0.2), ("bursts", 0.3), ("idle", 0.1), ("full", 0.3), ("idle", 0.1))
"""Each phase and its share of the measured seconds, in order."""
BURST_PERIOD_S = 0.2
BURST_ON_AT_S = 0.03
BURST_ON_S = 0.05
"""In the bursts phase the GPU works from 30 ms to 80 ms of every 200 ms: outside the
first 25 ms of each 100 ms, the only part A100/H100 average their power over."""
LEAD_S = 1.0
TAIL_S = 1.0
"""Idle before and after the measured seconds, so that readings straddle both ends."""


def schedule(start: float, seconds: float) -> list[dict[str, float | str]]:
    """The phases with their bounds in seconds from ``start``."""
    phases, at = [], 0.0
    for name, share in PHASES:
        phases.append({"phase": name, "from_s": at, "to_s": at + share * seconds})
        at += share * seconds
    return phases


def _busy(until: float, work) -> None:
    while time.time() < until:
        work()


def _sleep_until(moment: float) -> None:
    time.sleep(max(0.0, moment - time.time()))


def main(argv: list[str] | None = None) -> int:
    """Write the schedule, then keep it."""
    parser = argparse.ArgumentParser(prog=RADT_DOCTOR_LOAD, description=__doc__)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--schedule", type=Path, required=True)
    args = parser.parse_args(argv)
    work = _matmul()
    start = time.time() + LEAD_S
    phases = schedule(start, args.seconds)
    args.schedule.write_text(
        json.dumps({"start": start, "seconds": args.seconds, "phases": phases})
    )
    for phase in phases:
        begin, end = start + phase["from_s"], start + phase["to_s"]
        _sleep_until(begin)
        if phase["phase"] == "full":
            _busy(end, work)
        elif phase["phase"] == "bursts":
            burst = begin
            while burst + BURST_ON_AT_S < end:
                _sleep_until(burst + BURST_ON_AT_S)
                _busy(min(burst + BURST_ON_AT_S + BURST_ON_S, end), work)
                burst += BURST_PERIOD_S
        _sleep_until(end)
    _sleep_until(start + args.seconds + TAIL_S)
    return 0


def _matmul():
    """One short matmul on GPU 0 of this process, or nothing without CUDA."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        print(
            "radt doctor: no CUDA here: the load keeps its schedule but loads nothing",
            file=sys.stderr,
        )
        return lambda: time.sleep(0.001)
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")

    def work() -> None:
        torch.matmul(a, b)
        torch.cuda.synchronize()

    work()
    return work


if __name__ == "__main__":
    raise SystemExit(main())

"""Locked GPU clocks: read the supported ones, check, lock, and reset afterwards.

The clock dial beside the power cap: ``nvidia-smi -i N -lgc MHZ,MHZ`` locks the
graphics (SM) clock of GPU N, ``-rgc`` gives it back to the driver. A clock must be one
of ``--query-supported-clocks=graphics``. Locking needs root, as a power limit does
(:func:`radt.collocation.power.may_set_power_limit`); without it the check refuses
before anything starts. The undo step is the reset: radT cannot read a lock someone set
before it (nvidia-smi does not print it), so it resets to the driver's default, and says
so in the artifact line.
"""

from __future__ import annotations

from radt.collocation import nvsmi
from radt.collocation.power import may_set_power_limit
from radt.collocation.teardown import Teardown
from radt.errors import RadtError

SMI = nvsmi.SMI


def supported_mhz(index: int) -> list[int]:
    """The graphics clocks GPU ``index`` supports, highest first; RadtError when unread."""
    result = nvsmi.run(
        [
            SMI,
            "-i",
            str(index),
            "--query-supported-clocks=graphics",
            "--format=csv,noheader,nounits",
        ]
    )
    if not result.ok:
        raise RadtError(f"`{result.command}` failed: {result.summary()}")
    clocks = {int(line.strip()) for line in result.output.splitlines() if line.strip().isdigit()}
    if not clocks:
        raise RadtError(f"`{result.command}` lists no supported clock")
    return sorted(clocks, reverse=True)


def check_gpu(gpu: nvsmi.GpuListing, clock_mhz: int, where: str) -> list[str]:
    """Problems with locking ``gpu`` at ``clock_mhz``; changes nothing."""
    n = gpu.index
    try:
        clocks = supported_mhz(n)
    except RadtError as exc:
        return [f"{where}: cannot read the supported clocks of GPU {n}: {exc}"]
    if clock_mhz not in clocks:
        nearest = min(clocks, key=lambda c: (abs(c - clock_mhz), -c))
        return [
            f"{where}: GPU {n} ({gpu.name}) does not support a {clock_mhz} MHz clock; "
            f"it supports {clocks[-1]}-{clocks[0]} MHz, the nearest is {nearest} MHz"
        ]
    if not may_set_power_limit():
        return [
            f"{where}: locking the clock of GPU {n} at {clock_mhz} MHz needs root; run radT "
            f"as root, or have someone with root run `sudo nvidia-smi -i {n} -lgc "
            f"{clock_mhz},{clock_mhz}` and leave the clock out of the plan"
        ]
    return []


def setup_gpu(gpu: nvsmi.GpuListing, clock_mhz: int, teardown: Teardown, where: str) -> str:
    """Lock the clock; register its reset right after. Returns a line for the artifact."""
    n = gpu.index
    problems = check_gpu(gpu, clock_mhz, where)
    if problems:
        raise RadtError(problems[0])
    result = nvsmi.run([SMI, "-i", str(n), "-lgc", f"{clock_mhz},{clock_mhz}"], critical=True)
    if result.ok:
        teardown.add(f"reset the clocks of GPU {n}", lambda: reset(n))
    result.reraise()
    if not result.ok:
        raise RadtError(
            f"{where}: locking the clock of GPU {n} at {clock_mhz} MHz failed: {result.summary()}"
        )
    return (
        f"GPU {n} ({gpu.name}): clock locked at {clock_mhz} MHz; reset to the default afterwards\n"
    )


def reset(index: int) -> None:
    """Give GPU ``index``'s clocks back to the driver (``-rgc``)."""
    result = nvsmi.run([SMI, "-i", str(index), "-rgc"])
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")

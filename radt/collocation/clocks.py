"""Locked GPU clocks: read the supported ones, check, lock, and undo afterwards.

The clock dial beside the power cap: ``nvidia-smi -i N -lgc MHZ,MHZ`` locks the
graphics (SM) clock of GPU N, ``-rgc`` gives it back to the driver. A clock must be one
of ``--query-supported-clocks=graphics``. Locking needs root, as a power limit does
(:func:`radt.collocation.power.may_set_power_limit`); without it the check refuses
before anything starts.

The undo step puts back what was there. Neither NVML nor nvidia-smi prints a lock
someone set before radT, but an idle GPU drops to its lowest supported clock unless a
lock holds it higher (an H200 on driver 580 locked at 1410 MHz idles at 1410 MHz): a GPU
that is idle above its lowest clock is taken as locked there, and locked there again
afterwards (as ``-lgc C,C``: an upper bound above C cannot be seen). Otherwise, or when
the GPU is busy and so tells nothing, the undo is the reset. The artifact line says which.
"""

from __future__ import annotations

from radt.collocation import nvsmi
from radt.collocation.power import may_set_power_limit
from radt.collocation.teardown import Teardown
from radt.errors import RadtError

SMI = nvsmi.SMI
IDLE_REASON = 0x1  # nvmlClocksEventReasonGpuIdle in clocks_event_reasons.active


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


def existing_lock_mhz(index: int, lowest_mhz: int) -> int | None:
    """The clock a lock set before radT holds idle GPU ``index`` at, or None (no lock seen,
    the GPU busy, or the fields unknown to an old driver). See the module docstring."""
    result = nvsmi.run(
        [
            SMI,
            "-i",
            str(index),
            "--query-gpu=clocks.sm,clocks_event_reasons.active",
            "--format=csv,noheader,nounits",
        ]
    )
    if not result.ok:
        return None
    try:
        clock, reasons = (cell.strip() for cell in result.output.strip().split(","))
        idle = int(reasons, 16) & IDLE_REASON
        clock_mhz = int(clock)
    except ValueError:
        return None
    return clock_mhz if idle and clock_mhz > lowest_mhz else None


def setup_gpu(gpu: nvsmi.GpuListing, clock_mhz: int, teardown: Teardown, where: str) -> str:
    """Lock the clock; register its undo right after. Returns a line for the artifact."""
    n = gpu.index
    problems = check_gpu(gpu, clock_mhz, where)
    if problems:
        raise RadtError(problems[0])
    before_mhz = existing_lock_mhz(n, supported_mhz(n)[-1])
    result = nvsmi.run([SMI, "-i", str(n), "-lgc", f"{clock_mhz},{clock_mhz}"], critical=True)
    if result.ok:
        if before_mhz is None:
            teardown.add(f"reset the clocks of GPU {n}", lambda: reset(n))
        else:
            teardown.add(
                f"lock the clock of GPU {n} at {before_mhz} MHz again",
                lambda: lock(n, before_mhz),
            )
    result.reraise()
    if not result.ok:
        raise RadtError(
            f"{where}: locking the clock of GPU {n} at {clock_mhz} MHz failed: {result.summary()}"
        )
    after = (
        "reset to the default afterwards"
        if before_mhz is None
        else f"it idled locked at {before_mhz} MHz before, and is locked there again afterwards"
    )
    return f"GPU {n} ({gpu.name}): clock locked at {clock_mhz} MHz; {after}\n"


def lock(index: int, clock_mhz: int) -> None:
    """Lock GPU ``index``'s graphics clock at ``clock_mhz`` (``-lgc C,C``)."""
    result = nvsmi.run([SMI, "-i", str(index), "-lgc", f"{clock_mhz},{clock_mhz}"])
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")


def reset(index: int) -> None:
    """Give GPU ``index``'s clocks back to the driver (``-rgc``)."""
    result = nvsmi.run([SMI, "-i", str(index), "-rgc"])
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")

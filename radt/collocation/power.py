"""Power caps: read the limit and its range, check, set, restore.

The limit to restore is the *requested* one of ``nvidia-smi -q -d POWER``
(what the last ``-pl`` set; the *current* one can be lower when something
else caps the board, as in the H100 capture in tests/fixtures), else the
current one. Setting a limit needs root: without it (``os.geteuid() != 0``)
the check refuses before anything starts, and says the command to run; a
driver that refuses anyway ("Insufficient Permissions", e.g. in a container)
is a setup failure. A limit equal to the one set already changes nothing and
needs no permission.
"""

from __future__ import annotations

import os

from radt.collocation import nvsmi
from radt.collocation.common import watts
from radt.collocation.teardown import Teardown
from radt.errors import RadtError

SMI = nvsmi.SMI
SAME_W = 0.005  # nvidia-smi prints limits to 1/100 W


def may_set_power_limit() -> bool:
    """Whether this process may run ``nvidia-smi -pl`` (root)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0


def readings(index: int) -> nvsmi.PowerReadings:
    """Power limits of GPU ``index``; RadtError when they cannot be read."""
    result = nvsmi.run([SMI, "-i", str(index), "-q", "-d", "POWER"])
    if not result.ok:
        raise RadtError(f"`{result.command}` failed: {result.summary()}")
    found = nvsmi.parse_power(result.output)
    if not found:
        raise RadtError(f"`{result.command}` shows no power readings")
    return found[0]


def check_gpu(gpu: nvsmi.GpuListing, limit_w: float, where: str) -> list[str]:
    """Problems with capping ``gpu`` at ``limit_w``; changes nothing."""
    n = gpu.index
    try:
        power = readings(n)
    except RadtError as exc:
        return [f"{where}: cannot read the power limits of GPU {n}: {exc}"]
    if power.min is None or power.max is None or power.setting is None:
        return [
            f"{where}: GPU {n} ({gpu.name}) does not report a power-limit range, "
            "so radT cannot cap it"
        ]
    if not power.min <= limit_w <= power.max:
        return [
            f"{where}: power limit {watts(limit_w)} W is outside the range of GPU {n} "
            f"({gpu.name}): {watts(power.min)} W to {watts(power.max)} W"
        ]
    if abs(power.setting - limit_w) >= SAME_W and not may_set_power_limit():
        return [
            f"{where}: setting the power limit of GPU {n} to {watts(limit_w)} W needs root; "
            f"run radT as root, or have someone with root run "
            f"`sudo nvidia-smi -i {n} -pl {watts(limit_w)}` and leave the limit out of the plan"
        ]
    return []


def setup_gpu(
    gpu: nvsmi.GpuListing,
    limit_w: float,
    teardown: Teardown,
    where: str,
) -> str:
    """Set the limit; register its restore right after. Returns a line for the artifact."""
    n = gpu.index
    power = readings(n)
    original = power.setting
    if original is None or power.min is None or power.max is None:
        raise RadtError(f"{where}: GPU {n} ({gpu.name}) does not report a power-limit range")
    if not power.min <= limit_w <= power.max:
        raise RadtError(
            f"{where}: power limit {watts(limit_w)} W is outside the range of GPU {n}: "
            f"{watts(power.min)} W to {watts(power.max)} W"
        )
    span = f"range {watts(power.min)}-{watts(power.max)} W"
    if abs(original - limit_w) < SAME_W:
        return f"GPU {n} ({gpu.name}): {watts(limit_w)} W, already set ({span})\n"
    result = nvsmi.run([SMI, "-i", str(n), "-pl", watts(limit_w)], critical=True)
    if result.ok:
        teardown.add(
            f"restore the power limit of GPU {n} to {watts(original)} W",
            lambda: restore(n, original),
        )
    result.reraise()
    if not result.ok:
        raise RadtError(
            f"{where}: setting the power limit of GPU {n} to {watts(limit_w)} W failed: "
            f"{result.summary()}"
        )
    return (
        f"GPU {n} ({gpu.name}): {watts(limit_w)} W, was {watts(original)} W ({span}); "
        "restored afterwards\n"
    )


def restore(index: int, original_w: float) -> None:
    result = nvsmi.run([SMI, "-i", str(index), "-pl", watts(original_w)])
    if not result.ok:
        raise RadtError(f"`{result.command}`: {result.summary()}")

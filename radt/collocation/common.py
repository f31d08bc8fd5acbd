"""What a run asks for and what it gets, and small helpers the backends share."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from radt.collocation import nvsmi
from radt.gpus import list_gpus  # noqa: F401 - the inventory, re-exported for the backends
from radt.tags import Mode


@dataclass
class SlotRequest:
    """One run of a workload, as the collocation backends need it.

    ``device`` is a GPU index (``0`` or ``"0"``), a GPU UUID (or a unique
    prefix of one), or None: no GPU named (naive/none rows get no
    ``CUDA_VISIBLE_DEVICES``; mps/mig rows use GPU 0).
    """

    line: int
    letter: str
    device: int | str | None
    mode: Mode | str
    """A :class:`radt.tags.Mode`; any other word is reported by the backend's check()."""
    mps_thread_pct: int | None = None
    mig_profile: str | None = None  # GPU-instance profile name ("3g.20gb") or id ("9")


@dataclass
class Slot:
    """What one run gets: its extra environment, the devices its listeners watch, its tags."""

    env: dict[str, str] = field(default_factory=dict)
    devices: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)


def where(plan_name: str, lines: Iterable[int]) -> str:
    """``plan.csv line 3`` / ``plan.csv lines 2, 3`` / ``plan.csv`` (no line)."""
    unique = sorted(set(lines))
    if not unique:
        return plan_name
    if len(unique) == 1:
        return f"{plan_name} line {unique[0]}"
    return f"{plan_name} lines {', '.join(map(str, unique))}"


def watts(value: float) -> str:
    """``250`` / ``250.5``: a power value as the user wrote it."""
    return f"{value:g}"


def find_gpu(device: int | str | None, gpus: list[nvsmi.GpuListing]) -> nvsmi.GpuListing | None:
    """The GPU that ``device`` names (index, GPU UUID or unique prefix; None: GPU 0)."""
    if device is None:
        device = 0
    text = str(device).strip()
    if text.isdigit():
        return next((g for g in gpus if g.index == int(text)), None)
    matches = [g for g in gpus if text and g.uuid.lower().startswith(text.lower())]
    return matches[0] if len(matches) == 1 else None


def describe_gpus(gpus: list[nvsmi.GpuListing]) -> str:
    if not gpus:
        return "no GPU"
    return ", ".join(f"{g.index} ({g.name})" for g in gpus)


def mig_mode(index: int) -> tuple[str, str] | None:
    """(current, pending) MIG mode of GPU ``index`` ("Enabled", "Disabled", or a placeholder
    such as "[N/A]": see :func:`radt.placeholders.is_placeholder`)."""
    result = nvsmi.run(
        [
            nvsmi.SMI,
            "-i",
            str(index),
            "--query-gpu=mig.mode.current,mig.mode.pending",
            "--format=csv,noheader",
        ]
    )
    if not result.ok:
        return None
    for line in result.output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2:
            return parts[0], parts[1]
    return None

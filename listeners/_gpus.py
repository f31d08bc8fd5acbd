"""Which physical GPUs a run uses: ``--devices``, else ``CUDA_VISIBLE_DEVICES`` (inside a Slurm
job without it, ``SLURM_JOB_GPUS``), else all.

Entries may be indices (``0``), GPU UUIDs (``GPU-…``, or a unique prefix) or
MIG UUIDs (``MIG-…`` in the modern form, ``MIG-GPU-<uuid>/<gi>/<ci>`` in the
R450 form); a MIG device maps to its parent GPU. Note that CUDA numbers GPUs
fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; NVML and nvidia-smi
number them by PCI bus, so UUIDs are the unambiguous choice.
"""

from __future__ import annotations

from collections.abc import Sequence

from radt.gpus import GpuListing as Gpu
from radt.gpus import MigDevice
from radt.slurm.jobenv import job_gpus


def requested(devices: Sequence[str]) -> list[str]:
    """The run's device entries: ``devices`` if given, else the GPUs of its Slurm job or
    ``CUDA_VISIBLE_DEVICES``."""
    if devices:
        return [d.strip() for d in devices if d.strip()]
    return job_gpus()


def resolve(entries: Sequence[str], gpus: Sequence[Gpu]) -> list[Gpu]:
    """The physical GPUs that ``entries`` name, in order, without repeats; all if none.

    Raises ValueError naming an entry that matches no GPU.
    """
    if not entries:
        return list(gpus)
    chosen: list[Gpu] = []
    for entry in entries:
        gpu = _match(entry, gpus)
        if gpu is None:
            known = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "none"
            raise ValueError(f"device {entry!r} matches no GPU here; GPUs: {known}")
        if gpu not in chosen:
            chosen.append(gpu)
    return chosen


def migs_of_run(entries: Sequence[str], gpu: Gpu) -> list[MigDevice]:
    """The MIG devices of ``gpu`` that the run was given by UUID."""
    return [m for m in gpu.migs if any(_same_uuid(e, m.uuid) for e in entries)]


def _match(entry: str, gpus: Sequence[Gpu]) -> Gpu | None:
    if entry.isdigit():
        return next((g for g in gpus if g.index == int(entry)), None)
    if entry.startswith("MIG-GPU-"):  # R450: MIG-GPU-<parent uuid>/<gi>/<ci>
        parent = entry[len("MIG-") :].split("/")[0]
        return next((g for g in gpus if g.uuid.lower() == parent.lower()), None)
    if entry.startswith("MIG-"):
        return next((g for g in gpus for m in g.migs if _same_uuid(entry, m.uuid)), None)
    matches = [g for g in gpus if g.uuid.lower().startswith(entry.lower())]
    return matches[0] if len(matches) == 1 else None


def _same_uuid(entry: str, uuid: str) -> bool:
    return entry.lower() == uuid.lower() or (
        len(entry) > 8 and uuid.lower().startswith(entry.lower())
    )

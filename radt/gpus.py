"""The GPU inventory: this machine's GPUs as ``nvidia-smi -L`` lists them, MIG devices included.

The one list of GPUs that the collocation backends, the studies and the GPU
listeners read (:func:`list_gpus`); both MIG UUID formats (modern
``MIG-<uuid>`` and R450 ``MIG-GPU-<uuid>/<gi>/<ci>``) parse the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from radt import tools

SMI = "nvidia-smi"

_GPU_LINE = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)\s]+)\)")
_R450_UUID = re.compile(r"^MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)$")


@dataclass
class MigDevice:
    """A MIG device line of ``nvidia-smi -L``."""

    name: str  # compute-instance profile name, "3g.20gb" or "1c.3g.20gb"
    index: int  # "Device k"
    uuid: str


@dataclass
class GpuListing:
    """A GPU line of ``nvidia-smi -L`` and the MIG devices under it."""

    index: int
    name: str
    uuid: str
    migs: list[MigDevice] = field(default_factory=list)


def parse_list(text: str) -> list[GpuListing]:
    """Parse ``nvidia-smi -L``: GPUs and their MIG devices, both UUID formats."""
    gpus: list[GpuListing] = []
    for line in text.splitlines():
        if match := _GPU_LINE.match(line):
            gpus.append(GpuListing(int(match[1]), match[2], match[3]))
        elif (match := _MIG_LINE.match(line)) and gpus:
            gpus[-1].migs.append(MigDevice(match[1], int(match[2]), match[3]))
    return gpus


def list_gpus() -> list[GpuListing]:
    """The GPUs ``nvidia-smi -L`` lists, in its order.

    Raises :class:`radt.tools.ToolError` when nvidia-smi fails ("`nvidia-smi -L` failed: what
    it said", its result attached), :class:`radt.tools.ToolMissing` without it.
    """
    return parse_list(tools.run([SMI, "-L"], merge_stderr=True).check().stdout)


def r450_ids(uuid: str) -> tuple[str, int, int] | None:
    """(parent GPU UUID, GPU instance id, compute instance id) of an R450-style MIG UUID."""
    match = _R450_UUID.match(uuid)
    return (match[1], int(match[2]), int(match[3])) if match else None

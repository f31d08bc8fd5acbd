"""Running ``nvidia-smi`` / ``nvidia-cuda-mps-control`` and reading what they print.

Every call goes through :func:`radt.tools.run` (a time limit, a session of its
own, output in a temporary file); nvidia-smi prints everything, errors
included, on stdout, so stderr is merged into the same text.

The parsers take the literal formats of ``tests/fixtures/`` (see SOURCES.md
there): ``-L`` (modern and R450 MIG UUIDs), ``mig -lgip``, ``mig -lgi``,
``mig -lci``, the ``mig -cgi … -C`` success lines and ``-q -d POWER``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from radt import tools
from radt.gpus import GpuListing, MigDevice, parse_list, r450_ids  # noqa: F401 - re-exported
from radt.placeholders import is_placeholder
from radt.tools import ToolMissing, ToolResult, found  # noqa: F401 - ToolMissing and ToolResult re-exported

SMI = "nvidia-smi"
MPS_CONTROL = "nvidia-cuda-mps-control"
TIMEOUT_S = 30.0
MIG_TIMEOUT_S = 120.0  # creating/destroying instances takes seconds on a real GPU


def available(tool: str) -> bool:
    """Whether ``tool`` is on PATH."""
    return found(tool)


def run(
    argv: list[str],
    *,
    timeout: float = TIMEOUT_S,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    critical: bool = False,
) -> ToolResult:
    """Run an NVIDIA tool by :func:`radt.tools.run`'s rule, its stderr merged into its output
    (nvidia-smi prints its errors on stdout), and require an answer
    (:meth:`~radt.tools.ToolResult.ran`): :class:`ToolMissing` when the tool is not on PATH,
    :class:`~radt.tools.ToolError` when it cannot start or runs past ``timeout``. A non-zero
    exit is the caller's to read."""
    return tools.run(
        argv, timeout_s=timeout, env=env, stdin=stdin, merge_stderr=True, critical=critical
    ).ran()


# --------------------------------------------------------------------------- mig tables


@dataclass(frozen=True)
class GiProfile:
    """A row of ``nvidia-smi mig -lgip``."""

    gpu: int
    name: str  # "3g.20gb", "1g.5gb+me"
    id: int
    free: int
    total: int
    memory_gib: float

    @property
    def compute_slices(self) -> int:
        match = re.match(r"^(\d+)g\.", self.name)
        return int(match[1]) if match else 0


@dataclass(frozen=True)
class GpuInstance:
    """A row of ``nvidia-smi mig -lgi``."""

    gpu: int
    name: str
    profile_id: int
    id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstance:
    """A row of ``nvidia-smi mig -lci``."""

    gpu: int
    gi: int
    name: str
    profile_id: int
    id: int
    start: int
    size: int


_LGIP_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+)\s")
_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")
_LCI_ROW = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|")


def parse_lgip(text: str) -> list[GiProfile]:
    rows = []
    for line in text.splitlines():
        if m := _LGIP_ROW.match(line):
            rows.append(GiProfile(int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), float(m[6])))
    return rows


def parse_lgi(text: str) -> list[GpuInstance]:
    rows = []
    for line in text.splitlines():
        if m := _LGI_ROW.match(line):
            rows.append(GpuInstance(int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), int(m[6])))
    return rows


def parse_lci(text: str) -> list[ComputeInstance]:
    rows = []
    for line in text.splitlines():
        if m := _LCI_ROW.match(line):
            rows.append(
                ComputeInstance(
                    int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5]), int(m[6]), int(m[7])
                )
            )
    return rows


_CREATED_GI = re.compile(
    r"Successfully created GPU instance ID\s+(\d+) on GPU\s+(\d+) "
    r"using profile MIG (\S+) \(ID\s+(\d+)\)"
)
_CREATED_CI = re.compile(
    r"Successfully created compute instance ID\s+(\d+) on GPU\s+(\d+) "
    r"GPU instance ID\s+(\d+) using profile MIG (\S+) \(ID\s+(\d+)\)"
)


@dataclass(frozen=True)
class Created:
    """An instance that ``nvidia-smi mig -cgi … [-C]`` reports it created."""

    gpu: int
    gi: int
    ci: int | None  # None: the GPU instance line
    name: str
    profile_id: int


def parse_created(text: str) -> list[Created]:
    """The GPU and compute instances in ``-cgi`` output, in the order printed."""
    found = []
    for line in text.splitlines():
        if m := _CREATED_GI.search(line):
            found.append(Created(int(m[2]), int(m[1]), None, m[3], int(m[4])))
        elif m := _CREATED_CI.search(line):
            found.append(Created(int(m[2]), int(m[3]), int(m[1]), m[4], int(m[5])))
    return found


# --------------------------------------------------------------------------- -q -d POWER


@dataclass(frozen=True)
class PowerReadings:
    """The board power limits of one GPU block of ``nvidia-smi -q -d POWER`` (watts)."""

    current: float | None  # "Current Power Limit" (older drivers: "Enforced Power Limit")
    requested: float | None  # "Requested Power Limit" (older drivers: "Power Limit")
    default: float | None
    min: float | None
    max: float | None

    @property
    def setting(self) -> float | None:
        """The limit last set with ``-pl`` (what to restore): requested, else current."""
        return self.requested if self.requested is not None else self.current


_POWER_KEYS = {
    "Current Power Limit": "current",
    "Enforced Power Limit": "current",
    "Requested Power Limit": "requested",
    "Power Limit": "requested",
    "Default Power Limit": "default",
    "Min Power Limit": "min",
    "Max Power Limit": "max",
}


def _watts(value: str) -> float | None:
    """``250.00 W`` → 250.0; a placeholder (``N/A``, ``[Unknown Error]``) or other text → None."""
    if is_placeholder(value):
        return None
    match = re.match(r"^\s*([\d.]+)\s*W\s*$", value)
    return float(match[1]) if match else None


def parse_power(text: str) -> list[PowerReadings]:
    """One entry per GPU block, from its ``GPU Power Readings`` (or ``Power Readings``)."""
    found: list[PowerReadings] = []
    values: dict[str, float | None] | None = None
    section = ""
    for line in text.splitlines():
        if line.startswith("GPU "):
            if values is not None:
                found.append(PowerReadings(**values))
            values = dict.fromkeys(("current", "requested", "default", "min", "max"))
            section = ""
            continue
        if values is None:
            continue
        if line.startswith("    ") and not line.startswith("        "):
            section = line.strip().split(" :")[0].strip()
            continue
        if section not in ("GPU Power Readings", "Power Readings") or ":" not in line:
            continue
        key, _, value = line.partition(":")
        name = _POWER_KEYS.get(key.strip())
        if name is not None:
            values[name] = _watts(value)
    if values is not None:
        found.append(PowerReadings(**values))
    return found


def env_with(**extra: str) -> dict[str, str]:
    """radT's environment plus ``extra``."""
    env = dict(os.environ)
    env.update(extra)
    return env

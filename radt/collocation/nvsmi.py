"""Running ``nvidia-smi`` / ``nvidia-cuda-mps-control`` and reading what they print.

Every call has a time limit, runs in its own session (a Ctrl-C on the
terminal reaches radT, not the tool) and writes to a temporary file rather
than a pipe, so a daemon that keeps its inherited output open (``-d``) cannot
hold radT. nvidia-smi prints everything, errors included, on stdout; stderr
is merged into the same text.

The parsers take the literal formats of ``tests/fixtures/`` (see SOURCES.md
there): ``-L`` (modern and R450 MIG UUIDs), ``mig -lgip``, ``mig -lgi``,
``mig -lci``, the ``mig -cgi … -C`` success lines and ``-q -d POWER``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from radt.errors import RadtError
from radt.gpus import GpuListing, MigDevice, parse_list, r450_ids  # noqa: F401 - re-exported
from radt.placeholders import is_placeholder

SMI = "nvidia-smi"
MPS_CONTROL = "nvidia-cuda-mps-control"
TIMEOUT_S = 30.0
MIG_TIMEOUT_S = 120.0  # creating/destroying instances takes seconds on a real GPU


class ToolMissing(RadtError):
    """The NVIDIA tool is not on PATH."""


@dataclass
class Result:
    """One finished call of a tool."""

    argv: list[str]
    returncode: int
    output: str
    interrupted: BaseException | None = None
    """Ctrl-C/SIGTERM that arrived while a ``critical`` call ran: it was let finish."""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def summary(self) -> str:
        """The output as one line (what the tool said), or the exit status."""
        lines = [" ".join(ln.split()) for ln in self.output.splitlines() if ln.strip()]
        text = "; ".join(lines)
        if len(text) > 300:
            text = text[:297] + "..."
        return text or f"exit status {self.returncode}"

    def reraise(self) -> None:
        """Raise the interruption that this call held back, if any."""
        if self.interrupted is not None:
            raise self.interrupted


def available(tool: str) -> bool:
    return shutil.which(tool) is not None


def run(
    argv: list[str],
    *,
    timeout: float = TIMEOUT_S,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    critical: bool = False,
) -> Result:
    """Run a tool to the end and return its exit status and output.

    ``critical`` calls change the GPU: an interruption (KeyboardInterrupt, or
    the exception a SIGTERM handler raises) while one runs does not kill it;
    the call is let finish so that the caller can register the undo step of
    what it did, then call :meth:`Result.reraise`. Raises :class:`ToolMissing`
    when the tool is not on PATH and RadtError when it runs past ``timeout``.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as inp:
        if stdin is not None:
            inp.write(stdin.encode())
            inp.seek(0)
        try:
            proc = subprocess.Popen(
                argv,
                stdin=inp if stdin is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except FileNotFoundError as exc:
            raise ToolMissing(f"{argv[0]} not found on PATH") from exc
        except OSError as exc:
            raise RadtError(f"cannot run {argv[0]}: {exc.strerror or exc}") from exc
        interrupted: BaseException | None = None
        try:
            returncode = _wait(proc, timeout, argv)
        except RadtError:
            raise
        except BaseException as exc:
            if not critical:
                proc.kill()
                proc.wait()
                raise
            interrupted = exc
            returncode = _wait(proc, timeout, argv)
        out.seek(0)
        text = out.read().decode("utf-8", errors="replace")
    return Result(list(argv), returncode, text, interrupted)


def _wait(proc: subprocess.Popen, timeout: float, argv: list[str]) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise RadtError(f"`{shlex.join(argv)}` did not finish within {timeout:g} s") from None


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

"""``smi``: one long-lived ``nvidia-smi --query-gpu=… -lms N`` per run, parsed line by line.

The GPUs are the run's (``--devices``, else ``CUDA_VISIBLE_DEVICES`` with
indices, GPU UUIDs or MIG UUIDs mapped to their parent GPU, else all), found
in ``nvidia-smi -L`` and passed as ``-i``. Keys are ``smi/gpu{index}/…``:
``power_w``, ``util_pct``, ``mem_util_pct``, ``mem_used_mib``,
``mem_total_mib``, ``temp_c``, ``sm_clock_mhz``, ``mem_clock_mhz``, ``pstate``
(``P0`` → 0) and ``power_limit_w``. Values nvidia-smi prints in brackets
(``[N/A]``, ``[Not Supported]``, …) are missing, never zero; in MIG mode the
utilisations are ``[N/A]``. nvidia-smi has no energy field (see
tests/fixtures/SOURCES.md): energy comes from ``nvml`` or ``dcgm``.

Timestamps: each line carries nvidia-smi's own ``timestamp`` column (local
time, millisecond resolution, taken when it queried the GPU), and that is the
sample time, so a pipe that buffers does not shift the series. It is read in
radT's local time zone (nvidia-smi inherits radT's environment, ``TZ``
included); a timestamp that does not parse, or lies more than five minutes
from radT's clock (a daylight-saving fold, a different zone), falls back to
the moment radT read the line.
"""

from __future__ import annotations

import time
from datetime import datetime

from radt.listener import (
    GPU_MEMORY,
    GPU_POWER,
    GPU_UTILISATION,
    DeviceListener,
    RunContext,
    Sample,
    StreamedListener,
    per_gpu,
    samples_from,
)
from radt.placeholders import number
from radt.words import count

from ._gpus import Gpu
from ._tools import ToolError, found, gpus_here, gpus_of_run

QUERY: tuple[tuple[str, str | None], ...] = (
    ("timestamp", None),
    ("index", None),
    ("power.draw", "power_w"),
    ("utilization.gpu", "util_pct"),
    ("utilization.memory", "mem_util_pct"),
    ("memory.used", "mem_used_mib"),
    ("memory.total", "mem_total_mib"),
    ("temperature.gpu", "temp_c"),
    ("clocks.sm", "sm_clock_mhz"),
    ("clocks.mem", "mem_clock_mhz"),
    ("pstate", "pstate"),
    ("power.limit", "power_limit_w"),
)
"""``--query-gpu`` fields in order, and the quantity each becomes (None: not a sample).

Only fields every driver since R450 knows: one unknown field makes nvidia-smi
refuse the whole query.
"""

MIN_INTERVAL_MS = 50
"""nvidia-smi documents no floor for ``-lms``; one query round of several GPUs
takes tens of milliseconds, so asking for less only makes lines pile up."""

TIMESTAMP_FORMAT = "%Y/%m/%d %H:%M:%S.%f"
MAX_SKEW_S = 300.0
"""How far nvidia-smi's timestamp may lie from radT's clock before the read time is used."""


def parse_timestamp(text: str, now: float) -> float:
    """nvidia-smi's local-time ``2024/01/04 14:41:13.103`` as epoch seconds, else ``now``."""
    try:
        stamp = datetime.strptime(text.strip(), TIMESTAMP_FORMAT).timestamp()
    except (ValueError, OverflowError, OSError):
        return now
    return stamp if abs(stamp - now) <= MAX_SKEW_S else now


def pstate(text: str) -> float | None:
    """``P0`` → 0.0 … ``P15`` → 15.0; a placeholder → None; ValueError for anything else."""
    value = text.strip()
    if value[:1] in ("P", "p") and value[1:].isdigit():
        return float(value[1:])
    missing = number(value)  # raises for garbage, None for [N/A]
    if missing is not None:
        raise ValueError(f"not a performance state: {value!r}")
    return None


class SmiListener(DeviceListener, StreamedListener):
    """Samples ``smi/gpu{i}/*`` from ``nvidia-smi --query-gpu … -lms N``."""

    name = "smi"
    provides = per_gpu(name, {GPU_POWER: 30, GPU_UTILISATION: 20, GPU_MEMORY: 20})
    records = (
        "per GPU power, utilisation, memory, temperature, clocks, pstate and power limit, "
        "from nvidia-smi"
    )
    default_interval_s = 0.5

    def __init__(self) -> None:
        super().__init__()
        self.gpus: list[Gpu] = []
        self.clock = time.time
        """Where the read time comes from (tests replace it)."""

    def available(self) -> str | None:
        """None when ``nvidia-smi -L`` lists a GPU; else why not."""
        if not found("nvidia-smi"):
            return "nvidia-smi not found"
        try:
            gpus_here()
        except ToolError as exc:
            return str(exc)
        return None

    def interval(self, run: RunContext) -> float:
        """The asked-for interval, never below 50 ms."""
        return max(super().interval(run), MIN_INTERVAL_MS / 1000.0)

    def start(self, run: RunContext) -> None:
        """Find the run's GPUs, then start the one nvidia-smi process."""
        try:
            self.gpus = gpus_of_run(run.devices)
        except ToolError as exc:
            raise RuntimeError(str(exc)) from None
        except ValueError as exc:
            raise ValueError(f"smi watches nothing: {exc}") from None
        super().start(run)

    def command(self, run: RunContext) -> list[str]:
        """``nvidia-smi --query-gpu=… --format=csv,noheader,nounits -lms N -i IDS``."""
        argv = [
            "nvidia-smi",
            "--query-gpu=" + ",".join(field for field, _ in QUERY),
            "--format=csv,noheader,nounits",
            "-lms",
            str(round(self.interval(run) * 1000)),
        ]
        if self.gpus:
            argv += ["-i", ",".join(str(gpu.index) for gpu in self.gpus)]
        return argv

    def parse(self, line: str) -> list[Sample]:
        """One CSV line (one GPU at one instant) into samples; raises for a garbled line."""
        if not line.strip():
            return []
        now = self.clock()
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(QUERY):
            raise ValueError(f"{count(len(cells), 'column')} where {len(QUERY)} were asked for")
        index = int(cells[1])
        values: dict[str, float | None] = {}
        for (_field, quantity), cell in zip(QUERY[2:], cells[2:], strict=True):
            assert quantity is not None
            values[quantity] = pstate(cell) if quantity == "pstate" else number(cell)
        return samples_from(parse_timestamp(cells[0], now), f"smi/gpu{index}", values)

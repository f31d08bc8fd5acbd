"""``dcgm``: profiling counters, power and energy from one long-lived ``dcgmi dmon`` per run.

Fields and keys (``dcgm/<entity>/<quantity>``): 1001 ``gract_ratio``, 1002
``smact_ratio``, 1003 ``smocc_ratio``, 1004 ``tensor_active_ratio``, 1005
``dram_active_ratio``, 1006 ``fp64_active_ratio``, 1007 ``fp32_active_ratio``,
1008 ``fp16_active_ratio``, 1009/1010 ``pcie_tx_bytes_s``/``pcie_rx_bytes_s``,
1011/1012 ``nvlink_tx_bytes_s``/``nvlink_rx_bytes_s``, 155 ``power_w`` and 156
``energy_j`` (DCGM's total-energy counter is in mJ; the key holds the joules
since the first reading of the run, as ``nvml`` does).

Entities: the run's GPUs (``--devices``, else ``CUDA_VISIBLE_DEVICES``, else
all; DCGM GPU ids are taken to be the NVML indices of ``nvidia-smi -L``) and,
on a GPU in MIG mode, each of its GPU instances. ``dcgmi discovery -c`` maps a
DCGM entity id to its place: ``GPU n`` → ``dcgm/gpu{n}``, ``GPU-I e`` →
``dcgm/gpu{g}/gi{i}`` and ``GPU-CI e`` → ``dcgm/gpu{g}/gi{i}/ci{c}`` where g, i
and c are the GPU index, GPU-instance id and compute-instance id that
``nvidia-smi mig -lgi``/``-lci`` show (not DCGM's entity ids, which mean
nothing outside DCGM). A row of an entity that discovery did not list is
skipped and counted.

Columns are found by name in the ``#Entity`` header (which dcgmi prints again
every 14 samples); ``N/A`` is missing, never zero. DCGM 2.0-2.3 print an
older layout that parses the same: a ``# Entity`` header, an ``Id`` units
line and right-aligned rows (``    GPU 0  0.457  0.442``). Before streaming, one
``dcgmi dmon … -c 1`` checks that the profiling fields can be watched: when
dcgmi answers ``Error setting watches`` (profiling not supported on this GPU,
or held by a profiler such as Nsight), radT warns once naming the dropped
fields and streams 155 and 156 only. The tag ``radt.dcgm.fields`` says which
fields were recorded. The check and the start run in the background so that
a slow host engine does not delay the other listeners.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field

from radt import tools
from radt.listener import (
    GPU_ENERGY,
    GPU_POWER,
    GPU_SM_ACTIVITY,
    DeviceListener,
    RunContext,
    Sample,
    StreamedListener,
    per_gpu,
    samples_from,
)
from radt.placeholders import number
from radt.tags import RADT_DCGM_FIELDS
from radt.words import count

from ._gpus import requested
from ._tools import TOOL_TIMEOUT_S, ToolError, first_sentence, found, gpus_of_run

PROFILING_FIELDS: dict[int, tuple[str, str]] = {
    1001: ("GRACT", "gract_ratio"),
    1002: ("SMACT", "smact_ratio"),
    1003: ("SMOCC", "smocc_ratio"),
    1004: ("TENSO", "tensor_active_ratio"),
    1005: ("DRAMA", "dram_active_ratio"),
    1006: ("FP64A", "fp64_active_ratio"),
    1007: ("FP32A", "fp32_active_ratio"),
    1008: ("FP16A", "fp16_active_ratio"),
    1009: ("PCITX", "pcie_tx_bytes_s"),
    1010: ("PCIRX", "pcie_rx_bytes_s"),
    1011: ("NVLTX", "nvlink_tx_bytes_s"),
    1012: ("NVLRX", "nvlink_rx_bytes_s"),
}
"""DCGM_FI_PROF_* field id → (dcgmi's short name, quantity)."""
DEVICE_FIELDS: dict[int, tuple[str, str]] = {
    155: ("POWER", "power_w"),
    156: ("TOTEC", "energy_j"),
}
FIELDS = {**PROFILING_FIELDS, **DEVICE_FIELDS}
ALL_FIELDS = tuple(FIELDS)
FALLBACK_FIELDS = tuple(DEVICE_FIELDS)
QUANTITY_OF_NAME = {name: quantity for name, quantity in FIELDS.values()}

MIN_INTERVAL_MS = 100
"""dcgmi dmon's smallest ``-d``."""
HOSTENGINE_DOWN = "DCGM host engine not running"
WATCH_ERROR = "Error setting watches"

_ENTITY = re.compile(r"^\s*(GPU|GPU-I|GPU-CI) (\d+)(?=\s|$)")
_GI_LINE = re.compile(r"->\s*I\s+(\d+)/(\d+)\s*\|.*?EntityID:\s*(\d+)")
_CI_LINE = re.compile(r"->\s*CI\s+(\d+)/(\d+)/(\d+)\s*\|.*?EntityID:\s*(\d+)")


@dataclass
class Hierarchy:
    """MIG instances as ``dcgmi discovery -c`` lists them, by DCGM entity id."""

    gpu_instances: dict[int, tuple[int, int]] = field(default_factory=dict)
    """GPU-I entity id → (GPU index, GPU-instance id)."""
    compute_instances: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    """GPU-CI entity id → (GPU index, GPU-instance id, compute-instance id)."""


def parse_discovery(text: str) -> Hierarchy:
    """Parse the ``Instance Hierarchy`` table of ``dcgmi discovery -c``."""
    hierarchy = Hierarchy()
    for line in text.splitlines():
        if match := _CI_LINE.search(line):
            gpu, gi, ci, entity = (int(x) for x in match.groups())
            hierarchy.compute_instances[entity] = (gpu, gi, ci)
        elif match := _GI_LINE.search(line):
            gpu, gi, entity = (int(x) for x in match.groups())
            hierarchy.gpu_instances[entity] = (gpu, gi)
    return hierarchy


def hostengine_down(text: str) -> bool:
    """Whether dcgmi says it cannot reach ``nv-hostengine``.

    dcgmi prints ``Error: unable to establish a connection to the specified
    host: localhost`` and ``Error: Unable to connect to host engine. Host
    engine connection invalid/disconnected.`` (dcgmi/Command.cpp).
    """
    lowered = text.lower()
    return (
        "unable to connect to host engine" in lowered
        or "unable to establish a connection" in lowered
    )


def field_list(fields: tuple[int, ...] | list[int]) -> str:
    """``1001 GRACT, 1002 SMACT`` for messages."""
    return ", ".join(f"{fid} {FIELDS[fid][0]}" for fid in fields)


class DcgmListener(DeviceListener, StreamedListener):
    """Samples ``dcgm/gpu{i}/*`` (and ``…/gi{g}/…`` in MIG mode) from ``dcgmi dmon``."""

    name = "dcgm"
    provides = per_gpu(name, {GPU_POWER: 20, GPU_ENERGY: 20, GPU_SM_ACTIVITY: 10})
    records = (
        "per GPU and MIG instance activity (GRACT, SMACT, SMOCC, tensor, DRAM, "
        "FP64/32/16, PCIe, NVLink), power and energy, from dcgmi dmon"
    )
    default_interval_s = 0.5
    probe_timeout_s = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.fields: tuple[int, ...] = ALL_FIELDS
        self.entities: str | None = None
        """dcgmi's ``-i`` list; None: dcgmi's default (every GPU)."""
        self.hierarchy = Hierarchy()
        self.clock = time.time
        self._columns: list[str | None] | None = None
        self._starts: list[int] = []
        """Where each column starts (left-aligned layout); [] in DCGM 2.x's right-aligned one."""
        self._energy_start: dict[str, float] = {}
        self._lock = threading.Lock()
        self._cancelled = False
        self._probe: subprocess.Popen[str] | None = None
        self._starter: threading.Thread | None = None

    # ------------------------------------------------------------------ availability

    def available(self) -> str | None:
        """None when dcgmi reaches a host engine; else why not."""
        if not found("dcgmi"):
            return "dcgmi not found"
        try:
            done = tools.run(["dcgmi", "discovery", "-c"], timeout_s=TOOL_TIMEOUT_S).ran()
        except ToolError as exc:
            return str(exc)
        if hostengine_down(done.output):
            return HOSTENGINE_DOWN
        if done.returncode != 0:
            reason = first_sentence(done.first_line())
            return reason[:200] or f"dcgmi discovery -c failed with exit code {done.returncode}"
        return None

    def interval(self, run: RunContext) -> float:
        """The asked-for interval, never below dcgmi's 100 ms."""
        return max(super().interval(run), MIN_INTERVAL_MS / 1000.0)

    # ------------------------------------------------------------------ start and stop

    def start(self, run: RunContext) -> None:
        """Find the run's entities now; check the fields and start dcgmi in the background."""
        self.run = run
        self._cancelled = False
        self._reset_parser()
        self.hierarchy = self._discover(run)
        self.entities = self._entity_spec(run)
        self._starter = threading.Thread(
            target=self._begin, args=(run,), name="radt-dcgm-start", daemon=True
        )
        self._starter.start()

    def stop(self) -> None:
        """Cancel a start still under way, then stop and reap dcgmi."""
        with self._lock:
            self._cancelled = True
            probe = self._probe
        if probe is not None and probe.poll() is None:
            with contextlib.suppress(OSError):
                probe.kill()
        if self._starter is not None:
            self._starter.join(self.probe_timeout_s + self.stop_timeout_s)
        super().stop()

    def command(self, run: RunContext) -> list[str]:
        """``dcgmi dmon -e FIELDS -d MS [-i ENTITIES]``."""
        return self._argv(self.fields, run)

    def _argv(
        self, fields: tuple[int, ...], run: RunContext, count: int | None = None
    ) -> list[str]:
        argv = ["dcgmi", "dmon", "-e", ",".join(str(fid) for fid in fields)]
        argv += ["-d", str(round(self.interval(run) * 1000))]
        if count is not None:
            argv += ["-c", str(count)]
        if self.entities:
            argv += ["-i", self.entities]
        return argv

    def _discover(self, run: RunContext) -> Hierarchy:
        try:
            done = tools.run(["dcgmi", "discovery", "-c"], timeout_s=TOOL_TIMEOUT_S).ran()
        except ToolError as exc:
            raise RuntimeError(str(exc)) from None
        if hostengine_down(done.output):
            raise RuntimeError(HOSTENGINE_DOWN)
        if done.returncode != 0:
            run.warn(
                f"listener dcgm: no MIG hierarchy ({first_sentence(done.first_line())}); "
                "MIG instances will not be recorded"
            )
            return Hierarchy()
        return parse_discovery(done.stdout)

    def _entity_spec(self, run: RunContext) -> str | None:
        entries = requested(run.devices)
        try:
            ids = [gpu.index for gpu in gpus_of_run(run.devices)]
        except ToolError as exc:
            if not all(entry.isdigit() for entry in entries):
                raise RuntimeError(
                    f"cannot map devices {','.join(entries)} to DCGM GPU ids ({exc})"
                ) from None
            ids = [int(entry) for entry in entries]
        except ValueError as exc:
            raise ValueError(f"dcgm watches nothing: {exc}") from None
        if not ids:
            return None
        instances = [
            entity
            for entity, (gpu, _gi) in sorted(self.hierarchy.gpu_instances.items())
            if gpu in ids
        ]
        return ",".join([*(str(i) for i in ids), *(f"i:{entity}" for entity in instances)])

    def _begin(self, run: RunContext) -> None:
        try:
            self.fields = self._choose_fields(run)
            with self._lock:
                if self._cancelled:
                    return
                run.set_tag(RADT_DCGM_FIELDS, ",".join(str(fid) for fid in self.fields))
                super().start(run)
        except Exception as exc:
            run.warn(f"listener dcgm could not start ({exc}); the run goes on without it")

    def _choose_fields(self, run: RunContext) -> tuple[int, ...]:
        """All fields, unless one sample of them answers ``Error setting watches``."""
        argv = self._argv(ALL_FIELDS, run, count=1)
        with self._lock:
            if self._cancelled:
                return ALL_FIELDS
            self._probe = probe = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                start_new_session=True,
            )
        try:
            out, err = probe.communicate(timeout=self.probe_timeout_s)
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.communicate()
            return ALL_FIELDS  # slow, not refused: the stream will tell
        finally:
            with self._lock:
                self._probe = None
        error = next(
            (line.strip() for line in f"{out}\n{err}".splitlines() if WATCH_ERROR in line), None
        )
        if error is None:
            return ALL_FIELDS
        run.warn(
            f"listener dcgm: profiling fields cannot be watched ({error}); "
            f"dropped {field_list(tuple(PROFILING_FIELDS))}; "
            f"recording {field_list(FALLBACK_FIELDS)} only"
        )
        return FALLBACK_FIELDS

    # ------------------------------------------------------------------ parsing

    def _reset_parser(self) -> None:
        self._columns = None
        self._starts = []
        self._energy_start = {}

    def parse(self, line: str) -> list[Sample]:
        """One line of ``dcgmi dmon``: a header (kept), a row (samples), or noise (raises)."""
        text = line.rstrip()
        words = text.split()
        if not words:
            return []
        if words[0] == "#Entity" or words[:2] == ["#", "Entity"]:  # DCGM 3+, DCGM 2.x
            self._read_header(text)
            return []
        if words[0] in ("ID", "Id"):  # the units line under the header (DCGM 3+, 2.x)
            return []
        if _ENTITY.match(text):
            return self._read_row(text)
        if "dmon was stopped" in text:  # after SIGINT
            return []
        raise ValueError("not a dcgmi dmon header or row")

    def _read_header(self, text: str) -> None:
        right_aligned = text.startswith("# ")
        matches = list(re.finditer(r"\S+", text))[2 if right_aligned else 1 :]
        names = [match.group() for match in matches]
        columns = [QUANTITY_OF_NAME.get(name) for name in names]
        if None in columns and len(names) == len(self.fields):
            # a short name this table does not know: trust the order of -e
            columns = [
                quantity or FIELDS.get(fid, ("", None))[1]
                for quantity, fid in zip(columns, self.fields, strict=True)
            ]
        self._columns = columns
        # DCGM 2.x's rows are right-aligned and shifted by the width of the entity id:
        # no column positions to cut them at (their values never hold a blank)
        self._starts = [] if right_aligned else [match.start() for match in matches]

    def _read_row(self, text: str) -> list[Sample]:
        if self._columns is None:
            raise ValueError("a row before any header")
        match = _ENTITY.match(text)
        assert match is not None
        cells = text[match.end() :].split()
        if len(cells) != len(self._columns):
            cells = self._cells_by_position(text, match.group(0))
        prefix = self._prefix(match.group(1), int(match.group(2)))
        raw = {
            quantity: number(cell)
            for quantity, cell in zip(self._columns, cells, strict=True)
            if quantity is not None
        }
        if "energy_j" in raw:
            raw["energy_j"] = self._energy(prefix, raw["energy_j"])
        return samples_from(self.clock(), prefix, raw)

    def _cells_by_position(self, text: str, entity: str) -> list[str]:
        """Cut a row at the header's column starts (a value with a blank in it)."""
        starts = self._starts
        if not starts or text[: starts[0]].strip() != entity.strip() or len(text) <= starts[-1]:
            raise ValueError(f"{count(len(text[len(entity) :].split()), 'value')}, a short row")
        ends = [*starts[1:], len(text)]
        cells = [text[a:b].strip() for a, b in zip(starts, ends, strict=True)]
        if not all(cells):
            raise ValueError("a row with an empty column")
        return cells

    def _prefix(self, group: str, entity: int) -> str:
        if group == "GPU":
            return f"dcgm/gpu{entity}"
        if group == "GPU-I" and entity in self.hierarchy.gpu_instances:
            gpu, gi = self.hierarchy.gpu_instances[entity]
            return f"dcgm/gpu{gpu}/gi{gi}"
        if group == "GPU-CI" and entity in self.hierarchy.compute_instances:
            gpu, gi, ci = self.hierarchy.compute_instances[entity]
            return f"dcgm/gpu{gpu}/gi{gi}/ci{ci}"
        raise ValueError(f"{group} {entity} is not in `dcgmi discovery -c`")

    def _energy(self, prefix: str, millijoules: float | None) -> float | None:
        """Joules since the first reading of ``prefix``; None after a counter reset."""
        if millijoules is None:
            return None
        start = self._energy_start.setdefault(prefix, millijoules)
        if millijoules < start:
            return None
        return (millijoules - start) / 1000.0

"""``nvml``: power, energy, utilisation, memory, clocks and throttling of the run's GPUs.

Read in-process through ``pynvml`` (nvidia-ml-py). It watches only the run's
GPUs: ``--devices``, else ``CUDA_VISIBLE_DEVICES`` (indices, GPU UUIDs, MIG
UUIDs mapped to their parent GPU), else all. ``power_w`` is the instantaneous
power (field ``NVML_FI_DEV_POWER_INSTANT``) where the driver has it, else
``nvmlDeviceGetPowerUsage`` (a one-second average on Ampere, except GA100, and
newer); ``power_avg_w`` is the one-second average field; the tag
``radt.nvml.power_source.gpu{i}`` says which ``power_w`` is. Energy is the
delta of the NVML total-energy counter since the run started; where a GPU has
no counter, power is integrated (trapezoid) instead, and the tag
``radt.nvml.energy_method.gpu{i}`` says which. MIG devices report memory only
(NVML has no utilisation for MIG: it is missing, never 0). Processes of the
run's tree report the GPU memory they use; each run (each client of a
workload) gets the SM and memory utilisation of its own processes.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from radt.listener import (
    GPU_ENERGY,
    GPU_MEMORY,
    GPU_POWER,
    GPU_POWER_AVERAGED,
    GPU_UTILISATION,
    DeviceListener,
    Emit,
    PolledListener,
    RunContext,
    Sample,
    per_gpu,
    samples_from,
)
from radt.tags import RADT_NVML_ENERGY_METHOD, RADT_NVML_POWER_SOURCE

from ._gpus import Gpu, migs_of_run, requested, resolve
from ._nvml_fields import NOT_AVAILABLE, POWER, Device, FieldReader, inventory
from ._rates import MIB

MIN_INTERVAL_S = 0.02
INSTANT, POWER_USAGE = "instant", "power_usage"
"""The values of the power-source tag: the instantaneous field, or nvmlDeviceGetPowerUsage."""


@dataclass
class _Watched:
    """A GPU of the run, its MIG devices of the run, and where its energy starts."""

    device: Device
    migs: dict[int, Any] = field(default_factory=dict)
    energy_method: str | None = None
    power_source: str | None = None
    util_seen_us: int = 0
    """``lastSeenTimeStamp`` for the next per-process utilisation read (CPU microseconds)."""
    counter_start_mj: int = 0
    integrated_j: float = 0.0
    last_power: tuple[float, float] | None = None
    """(monotonic seconds, watts) of the last power reading, for integration."""

    @property
    def label(self) -> str:
        return f"gpu{self.device.gpu.index}"


class NvmlListener(DeviceListener, PolledListener):
    """Samples ``nvml/gpu{i}/*``, ``nvml/gpu{i}/mig{k}/*``, ``nvml/gpu{i}/proc{pid}/*``, and
    ``nvml/gpu{i}/proc/*`` (the processes of one run, in that run)."""

    name = "nvml"
    provides = per_gpu(
        name,
        {
            GPU_POWER: 10,
            GPU_POWER_AVERAGED: 10,
            GPU_ENERGY: 10,
            GPU_UTILISATION: 10,
            GPU_MEMORY: 10,
        },
    )
    records = (
        "per GPU power, energy, utilisation, memory, temperature, clocks, power limit and "
        "throttling; MIG devices' and processes' memory; each run's own SM utilisation"
    )
    default_interval_s = 0.1

    def __init__(self) -> None:
        super().__init__()
        self._nvml: Any = None
        self._reader: FieldReader | None = None
        self._watched: list[_Watched] = []
        self._root: psutil.Process | None = None
        self._chains: dict[int, tuple[int, ...]] = {}
        self._clock = time.monotonic

    def available(self) -> str | None:
        """None when NVML loads and sees a GPU; else why not."""
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return "NVML library not found (nvidia-ml-py is not installed)"
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return _init_failure(nvml, exc)
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            return f"NVML error: {exc}"
        finally:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()
        return None if count else "no NVIDIA GPU"

    def interval(self, run: RunContext) -> float:
        """The asked-for interval, never below 0.02 s."""
        return max(super().interval(run), MIN_INTERVAL_S)

    def open(self, run: RunContext) -> None:
        """Initialise NVML, choose the run's GPUs and take the first energy readings."""
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
        self._nvml = nvml
        try:
            devices = inventory(nvml)
            if not devices:
                raise RuntimeError("no NVIDIA GPU")
            entries = requested(run.devices)
            try:
                chosen = resolve(entries, [d.gpu for d in devices])
            except ValueError as exc:
                raise ValueError(f"nvml watches nothing: {exc}") from None
            self._reader = FieldReader(nvml)
            self._watched = [
                _Watched(d, {k: d.mig_handles[k] for k in _mig_indices(entries, d.gpu)})
                for d in devices
                if d.gpu in chosen
            ]
            since_us = int(time.time() * 1e6)
            for watched in self._watched:
                watched.util_seen_us = since_us
                self._start_energy(watched, run, self._start_power(watched, run))
        except BaseException:
            self.close()
            raise
        try:
            self._root = psutil.Process(run.pid) if run.pid > 0 else None
        except psutil.Error:
            self._root = None

    def close(self) -> None:
        """Shut NVML down (once) and forget every handle."""
        nvml, self._nvml = self._nvml, None
        self._watched, self._reader, self._root = [], None, None
        if nvml is not None:
            with contextlib.suppress(nvml.NVMLError):
                nvml.nvmlShutdown()

    def poll(self) -> list[Sample]:
        """Return the samples of every watched GPU, MIG device and process of this instant."""
        reader = self._reader
        if reader is None:
            return []
        now, mono = time.time(), self._clock()
        samples: list[Sample] = []
        for watched in self._watched:
            prefix = f"nvml/{watched.label}"
            instant = watched.power_source == INSTANT
            values = reader.gpu_values(watched.label, watched.device.handle, instant)
            values["energy_j"] = self._energy(watched, values["power_w"], mono)
            samples += samples_from(now, prefix, values)
            for k, handle in watched.migs.items():
                memory = reader.memory(f"{watched.label}/mig{k}", handle)
                if memory is not None:
                    samples += samples_from(
                        now,
                        f"{prefix}/mig{k}",
                        {"mem_used_mib": memory.used / MIB, "mem_total_mib": memory.total / MIB},
                    )
        return samples + self._process_samples(now)

    def _start_power(self, watched: _Watched, run: RunContext) -> float | None:
        """Choose, once, where ``power_w`` comes from, so that the series has one meaning.

        Returns the first reading (W), or None.
        """
        reader, handle = self._reader, watched.device.handle
        assert reader is not None
        power_w = reader.power(watched.label, handle, instant=True)["power_w"]
        if power_w is not None:
            watched.power_source = INSTANT
        else:
            milliwatts = reader.read(watched.label, POWER, handle)
            if milliwatts is None and not reader.supported(watched.label, POWER):
                return None
            watched.power_source = POWER_USAGE
            power_w = None if milliwatts is None else milliwatts / 1000.0
        run.set_tag(f"{RADT_NVML_POWER_SOURCE}gpu{watched.device.gpu.index}", watched.power_source)
        return power_w

    def _start_energy(self, watched: _Watched, run: RunContext, power_w: float | None) -> None:
        """Take the counter's first reading, or start integrating from ``power_w``."""
        reader, handle = self._reader, watched.device.handle
        assert reader is not None
        counter = reader.read(watched.label, "nvmlDeviceGetTotalEnergyConsumption", handle)
        if counter is not None:
            watched.energy_method, watched.counter_start_mj = "counter", counter
        else:
            if watched.power_source is None:
                return  # neither counter nor power: no energy
            watched.energy_method = "integrated_power"
            if power_w is not None:
                watched.last_power = (self._clock(), power_w)
        run.set_tag(
            f"{RADT_NVML_ENERGY_METHOD}gpu{watched.device.gpu.index}", watched.energy_method
        )

    def _energy(self, watched: _Watched, power_w: float | None, mono: float) -> float | None:
        """Joules since the run started, or None for this instant."""
        if watched.energy_method == "counter":
            assert self._reader is not None
            counter = self._reader.read(
                watched.label, "nvmlDeviceGetTotalEnergyConsumption", watched.device.handle
            )
            if counter is None or counter < watched.counter_start_mj:
                return None
            return (counter - watched.counter_start_mj) / 1000.0
        if watched.energy_method != "integrated_power" or power_w is None:
            return None
        if watched.last_power is not None:
            then, before_w = watched.last_power
            watched.integrated_j += (before_w + power_w) / 2.0 * max(mono - then, 0.0)
        watched.last_power = (mono, power_w)
        return watched.integrated_j

    def _process_samples(self, now: float) -> list[Sample]:
        """Per process of the run's tree, its GPU memory (per GPU, per MIG device in MIG mode);
        per run, the SM and memory utilisation of its processes (per GPU, in its own run)."""
        assert self._reader is not None
        listed: list[tuple[str, list[Any]]] = []
        on_gpu: dict[str, set[int]] = {}
        for watched in self._watched:
            sources = {f"{watched.label}/mig{k}": h for k, h in watched.migs.items()} or {
                watched.label: watched.device.handle
            }
            for label, handle in sources.items():
                procs = self._reader.read(label, "nvmlDeviceGetComputeRunningProcesses", handle)
                if procs:
                    listed.append((label, procs))
                    on_gpu.setdefault(watched.label, set()).update(p.pid for p in procs)
        samples: list[Sample] = []
        for label, procs in listed:
            used: dict[int, float] = {}
            for proc in procs:
                if proc.usedGpuMemory is not None and self._in_run(proc.pid):
                    used[proc.pid] = used.get(proc.pid, 0.0) + proc.usedGpuMemory / MIB
            for pid, mib in sorted(used.items()):
                samples += samples_from(now, f"nvml/{label}/proc{pid}", {"mem_used_mib": mib})
        clients = self._clients()
        if clients:
            routed: dict[Emit | None, list[Sample]] = {}
            for watched in self._watched:
                for emit, values in self._utilisation(watched, clients, on_gpu).items():
                    prefix = f"nvml/{watched.label}/proc"
                    routed.setdefault(emit, []).extend(samples_from(now, prefix, values))
            samples += routed.pop(None, [])
            for emit, theirs in routed.items():
                if emit is not None:
                    emit(theirs)
        return samples

    def _clients(self) -> dict[int, Emit | None]:
        """Root pid -> where its run's samples go: the workload's runs, or this run (None)."""
        run = self.run
        if run is None:
            return {}
        if run.clients:
            return {client.pid: client.emit for client in run.clients if client.pid > 0}
        return {run.pid: None} if run.pid > 0 else {}

    def _utilisation(
        self, watched: _Watched, clients: dict[int, Emit | None], on_gpu: dict[str, set[int]]
    ) -> dict[Emit | None, dict[str, float | None]]:
        """``sm_pct`` and ``mem_pct`` of each client's processes on one GPU since the last read.

        NVML returns one sample per process that used the GPU in a sample period since
        ``lastSeenTimeStamp``; a client whose processes hold the GPU (listed as running)
        but have no sample among new ones used none: 0. No new sample at all, or no
        support (MIG mode): nothing, never 0.
        """
        assert self._reader is not None
        found = self._reader.process_utilization(
            watched.label, watched.device.handle, watched.util_seen_us
        )
        if not found:
            return {}
        watched.util_seen_us = max(watched.util_seen_us, *(s.timeStamp for s in found))
        latest: dict[int, Any] = {}
        for sample in found:
            if sample.pid not in latest or sample.timeStamp > latest[sample.pid].timeStamp:
                latest[sample.pid] = sample
        totals: dict[Emit | None, dict[str, float | None]] = {}
        for pid in on_gpu.get(watched.label, set()) | set(latest):
            owner = self._owner(pid, clients)
            if owner is None:
                continue
            values = totals.setdefault(clients[owner], {"sm_pct": 0.0, "mem_pct": 0.0})
            sample = latest.get(pid)
            if sample is None:
                continue
            for key, value in (("sm_pct", sample.smUtil), ("mem_pct", sample.memUtil)):
                if value in NOT_AVAILABLE or values[key] is None:
                    values[key] = None
                else:
                    values[key] += value
        return totals

    def _owner(self, pid: int, roots: dict[int, Any]) -> int | None:
        """The nearest of ``roots`` that ``pid`` is or descends from, or None."""
        chain = self._chain(pid)
        return next((p for p in chain if p in roots), None)

    def _in_run(self, pid: int) -> bool:
        """Whether ``pid`` descends from the run's root process."""
        root = self._root
        if root is None or not root.is_running():
            self._root = None
            return False
        return root.pid in self._chain(pid)

    def _chain(self, pid: int) -> tuple[int, ...]:
        """``pid`` and its ancestors, nearest first (cached per pid).

        Walks up from the few pids NVML lists, rather than down a run's whole tree,
        which means reading every process of the machine at each poll.
        """
        if pid not in self._chains:
            chain, current = [pid], pid
            for _ in range(64):
                try:
                    current = psutil.Process(current).ppid()
                except psutil.Error:
                    break
                if current <= 1:
                    break
                chain.append(current)
            self._chains[pid] = tuple(chain)
        return self._chains[pid]


def _mig_indices(entries: list[str], gpu: Gpu) -> list[int]:
    """The MIG devices of ``gpu`` to watch: all if the run has the whole GPU, else its own."""
    whole = not entries or any(
        not entry.upper().startswith("MIG-") and _names(entry, gpu) for entry in entries
    )
    return [m.index for m in (gpu.migs if whole else migs_of_run(entries, gpu))]


def _names(entry: str, gpu: Gpu) -> bool:
    try:
        return resolve([entry], [gpu]) == [gpu]
    except ValueError:
        return False


def _init_failure(nvml: Any, exc: Exception) -> str:
    code = getattr(exc, "value", None)
    if code == getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12):
        return "NVML library not found"
    if code in (
        getattr(nvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9),
        getattr(nvml, "NVML_ERROR_GPU_NOT_FOUND", 28),
    ):
        return f"no NVIDIA GPU ({exc})"
    return f"NVML error: {exc}"

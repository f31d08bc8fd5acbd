"""``nvml``: power, energy, utilisation, memory, clocks and throttling of the run's GPUs.

Read in-process through ``pynvml`` (nvidia-ml-py). It watches only the run's
GPUs: ``--devices``, else ``CUDA_VISIBLE_DEVICES`` (indices, GPU UUIDs, MIG
UUIDs mapped to their parent GPU), else all. Energy is the delta of the NVML
total-energy counter since the run started; where a GPU has no counter, power
is integrated (trapezoid) instead, and the tag
``radt.nvml.energy_method.gpu{i}`` says which. MIG devices report memory only
(NVML has no utilisation for MIG: it is missing, never 0). Processes of the
run's tree report the GPU memory they use.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from radt.listener import PolledListener, RunContext, Sample, samples_from

from ._gpus import Gpu, migs_of_run, requested, resolve
from ._nvml_fields import Device, FieldReader, inventory
from ._rates import MIB

MIN_INTERVAL_S = 0.02
ENERGY_TAG = "radt.nvml.energy_method.gpu{index}"


@dataclass
class _Watched:
    """A GPU of the run, its MIG devices of the run, and where its energy starts."""

    device: Device
    migs: dict[int, Any] = field(default_factory=dict)
    energy_method: str | None = None
    counter_start_mj: int = 0
    integrated_j: float = 0.0
    last_power: tuple[float, float] | None = None
    """(monotonic seconds, watts) of the last power reading, for integration."""

    @property
    def label(self) -> str:
        return f"gpu{self.device.gpu.index}"


class NvmlListener(PolledListener):
    """Samples ``nvml/gpu{i}/*``, ``nvml/gpu{i}/mig{k}/*`` and ``nvml/gpu{i}/proc{pid}/*``."""

    name = "nvml"
    scope = "device"
    default_interval_s = 0.1

    def __init__(self) -> None:
        super().__init__()
        self._nvml: Any = None
        self._reader: FieldReader | None = None
        self._watched: list[_Watched] = []
        self._root: psutil.Process | None = None
        self._members: dict[int, bool] = {}
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
            for watched in self._watched:
                self._start_energy(watched, run)
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
            values = reader.gpu_values(watched.label, watched.device.handle)
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

    def _start_energy(self, watched: _Watched, run: RunContext) -> None:
        reader, handle = self._reader, watched.device.handle
        assert reader is not None
        counter = reader.read(watched.label, "nvmlDeviceGetTotalEnergyConsumption", handle)
        if counter is not None:
            watched.energy_method, watched.counter_start_mj = "counter", counter
        else:
            power = reader.read(watched.label, "nvmlDeviceGetPowerUsage", handle)
            if power is None and not reader.supported(watched.label, "nvmlDeviceGetPowerUsage"):
                return  # neither counter nor power: no energy
            watched.energy_method = "integrated_power"
            if power is not None:
                watched.last_power = (self._clock(), power / 1000.0)
        run.set_tag(ENERGY_TAG.format(index=watched.device.gpu.index), watched.energy_method)

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
        """GPU memory of each process of the run's tree, per GPU (per MIG device in MIG mode)."""
        assert self._reader is not None
        listed: list[tuple[str, list[Any]]] = []
        for watched in self._watched:
            sources = {f"{watched.label}/mig{k}": h for k, h in watched.migs.items()} or {
                watched.label: watched.device.handle
            }
            for label, handle in sources.items():
                procs = self._reader.read(label, "nvmlDeviceGetComputeRunningProcesses", handle)
                if procs:
                    listed.append((label, procs))
        samples: list[Sample] = []
        for label, procs in listed:
            used: dict[int, float] = {}
            for proc in procs:
                if proc.usedGpuMemory is not None and self._in_run(proc.pid):
                    used[proc.pid] = used.get(proc.pid, 0.0) + proc.usedGpuMemory / MIB
            for pid, mib in sorted(used.items()):
                samples += samples_from(now, f"nvml/{label}/proc{pid}", {"mem_used_mib": mib})
        return samples

    def _in_run(self, pid: int) -> bool:
        """Whether ``pid`` descends from the run's root process.

        Walks up from the few pids NVML lists, rather than down the run's whole
        tree, which means reading every process of the machine at each poll.
        """
        root = self._root
        if root is None or not root.is_running():
            self._root = None
            return False
        if pid not in self._members:
            current, member = pid, False
            for _ in range(64):
                if current == root.pid:
                    member = True
                    break
                try:
                    current = psutil.Process(current).ppid()
                except psutil.Error:
                    break
                if current <= 1:
                    break
            self._members[pid] = member
        return self._members[pid]
        try:
            return {root.pid, *(child.pid for child in root.children(recursive=True))}
        except psutil.Error:
            self._root = None
            return set()


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

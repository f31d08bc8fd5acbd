"""NVML read one field at a time, and the GPU inventory as NVML sees it.

Every NVML call can fail on its own: a field the GPU does not support
(``NVML_ERROR_NOT_SUPPORTED``), a function the driver lacks, a transient
error. :class:`FieldReader` turns each failure into a missing value for that
field only, and remembers "not supported" so that the call is not retried at
every poll.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._gpus import Gpu, MigDevice
from ._rates import MIB

NOT_AVAILABLE = frozenset({0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})
"""NVML_VALUE_NOT_AVAILABLE for unsigned int and unsigned long long: N/A, not a value."""

THROTTLE_BITS = {
    "throttle_power_cap": ("SwPowerCap", 0x04),
    "throttle_hw_slowdown": ("HwSlowdown", 0x08),
    "throttle_sync_boost": ("SyncBoost", 0x10),
    "throttle_sw_thermal": ("SwThermalSlowdown", 0x20),
    "throttle_hw_thermal": ("HwThermalSlowdown", 0x40),
    "throttle_hw_power_brake": ("HwPowerBrakeSlowdown", 0x80),
}
"""Key -> (suffix of pynvml's ``nvmlClocksEventReason*`` constant, its value in nvml.h)."""

MEMORY = "nvmlDeviceGetMemoryInfo"
CLOCK = "nvmlDeviceGetClockInfo"
PSTATE = ("nvmlDeviceGetPerformanceState", "nvmlDeviceGetPowerState")
REASONS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
"""The newer name first; older nvidia-ml-py has only the second."""
_UNSUPPORTED_CODES = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND")


@dataclass
class Device:
    """A GPU of this machine: its inventory entry, NVML handle and MIG device handles."""

    gpu: Gpu
    handle: Any
    mig_handles: dict[int, Any] = field(default_factory=dict)


class FieldReader:
    """Calls NVML functions by name; a failure makes that one field None."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.unsupported: set[tuple[str, str, tuple[Any, ...]]] = set()
        self._codes = {getattr(nvml, name, None) for name in _UNSUPPORTED_CODES} - {None}

    def read(self, label: str, function: str, handle: Any, *args: Any, **kwargs: Any) -> Any:
        """``nvml.function(handle, *args)`` or None; ``label`` names the device for the cache."""
        key = (label, function, args + tuple(sorted(kwargs.items())))
        if key in self.unsupported:
            return None
        call = getattr(self.nvml, function, None)
        if call is None:  # an older nvidia-ml-py
            self.unsupported.add(key)
            return None
        try:
            value = call(handle, *args, **kwargs)
        except self.nvml.NVMLError as exc:
            if getattr(exc, "value", None) in self._codes:
                self.unsupported.add(key)
            return None
        except getattr(self.nvml, "NVMLLibraryMismatchError", ()):
            self.unsupported.add(key)
            return None
        if isinstance(value, int) and value in NOT_AVAILABLE:
            return None
        return value

    def supported(self, label: str, function: str, *args: Any, **kwargs: Any) -> bool:
        """False once ``function`` proved unsupported on the device ``label``."""
        return (label, function, args + tuple(sorted(kwargs.items()))) not in self.unsupported

    def first(self, label: str, functions: tuple[str, ...], handle: Any) -> Any:
        """The value of the first of ``functions`` that this pynvml and GPU support."""
        for function in functions:
            if hasattr(self.nvml, function) and self.supported(label, function):
                value = self.read(label, function, handle)
                if value is not None or self.supported(label, function):
                    return value  # a value, or a failure that may pass
        return None

    def memory(self, label: str, handle: Any) -> Any:
        """Memory info: v2 (used without the driver's reservation, as nvidia-smi), else v1."""
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if version is not None and self.supported(label, MEMORY, version=version):
            info = self.read(label, MEMORY, handle, version=version)
            if info is not None or self.supported(label, MEMORY, version=version):
                return info
        return self.read(label, MEMORY, handle)

    def gpu_values(self, label: str, handle: Any) -> dict[str, float | None]:
        """Every per-GPU quantity of this instant, None where NVML gave none."""
        read, nvml = self.read, self.nvml
        power = read(label, "nvmlDeviceGetPowerUsage", handle)
        util = read(label, "nvmlDeviceGetUtilizationRates", handle)
        memory = self.memory(label, handle)
        pstate = self.first(label, PSTATE, handle)
        limit = read(label, "nvmlDeviceGetEnforcedPowerLimit", handle)
        values: dict[str, float | None] = {
            "power_w": None if power is None else power / 1000.0,
            "util_pct": None if util is None else _valid(util.gpu),
            "mem_util_pct": None if util is None else _valid(util.memory),
            "mem_used_mib": None if memory is None else memory.used / MIB,
            "mem_total_mib": None if memory is None else memory.total / MIB,
            "temp_c": read(label, "nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
            "sm_clock_mhz": read(label, CLOCK, handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": read(label, CLOCK, handle, nvml.NVML_CLOCK_MEM),
            "pstate": pstate if pstate is not None and 0 <= pstate <= 15 else None,
            "power_limit_w": None if limit is None else limit / 1000.0,
        }
        reasons = self.first(label, REASONS, handle)
        values["throttle_reasons"] = reasons
        for key, (suffix, default) in THROTTLE_BITS.items():
            bit = getattr(nvml, f"nvmlClocksEventReason{suffix}", default)
            values[key] = None if reasons is None else float(bool(reasons & bit))
        return values


def inventory(nvml: Any) -> list[Device]:
    """Every GPU NVML sees, with its MIG devices when MIG mode is on."""
    devices = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        device = Device(
            Gpu(index, _text(nvml.nvmlDeviceGetName(handle)), _uuid(nvml, handle)), handle
        )
        if _mig_enabled(nvml, handle):
            for k in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, k)
                    name = _text(nvml.nvmlDeviceGetName(mig))
                    profile = name.rsplit(" MIG ", 1)[1] if " MIG " in name else ""
                    device.gpu.migs.append(MigDevice(profile, k, _uuid(nvml, mig)))
                except nvml.NVMLError:  # an empty slot: NVML_ERROR_NOT_FOUND
                    continue
                device.mig_handles[k] = mig
        devices.append(device)
    return devices


def _mig_enabled(nvml: Any, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except (nvml.NVMLError, AttributeError):  # not MIG-capable, or an older pynvml
        return False
    return current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)


def _uuid(nvml: Any, handle: Any) -> str:
    return _text(nvml.nvmlDeviceGetUUID(handle))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _valid(value: Any) -> Any:
    return None if value in NOT_AVAILABLE else value

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

POWER_FIELDS = {
    "power_w": ("NVML_FI_DEV_POWER_INSTANT", 186),
    "power_avg_w": ("NVML_FI_DEV_POWER_AVERAGE", 185),
}
"""Key -> (pynvml's name of the field, its id in nvml.h): the GPU's power right now, and
its one-second average (scope ``NVML_POWER_SCOPE_GPU`` = 0, the zero the field starts with)."""
VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
"""``c_nvmlValue_t`` member for each ``NVML_VALUE_TYPE_*`` (0 = double, 1 = unsigned int, ...)."""

FIELDS = "nvmlDeviceGetFieldValues"
POWER = "nvmlDeviceGetPowerUsage"
PROCESS_UTILIZATION = "nvmlDeviceGetProcessUtilization"
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

    def fields(self, label: str, handle: Any, wanted: dict[str, int]) -> dict[str, float | None]:
        """Several NVML fields (``{key: field id}``) in one ``nvmlDeviceGetFieldValues`` call.

        Each field has its own status: one the GPU does not support is None from then on
        (and not asked again); one that failed this time is None this time.
        """
        found: dict[str, float | None] = dict.fromkeys(wanted)
        ids = {key: fid for key, fid in wanted.items() if self.supported(label, FIELDS, fid)}
        if not ids:
            return found
        values = self.read(label, FIELDS, handle, tuple(ids.values()))
        if values is None:
            if not self.supported(label, FIELDS, tuple(ids.values())):  # no such call here
                self.unsupported.update((label, FIELDS, (fid,)) for fid in ids.values())
            return found
        success = getattr(self.nvml, "NVML_SUCCESS", 0)
        for (key, fid), value in zip(ids.items(), values, strict=True):
            if value.nvmlReturn == success and 0 <= value.valueType < len(VALUE_MEMBERS):
                number = getattr(value.value, VALUE_MEMBERS[value.valueType])
                found[key] = None if number in NOT_AVAILABLE else number
            elif value.nvmlReturn in self._codes:
                self.unsupported.add((label, FIELDS, (fid,)))
        return found

    def process_utilization(self, label: str, handle: Any, since_us: int) -> list[Any] | None:
        """Per-process utilisation samples newer than ``since_us`` (CPU microseconds).

        ``[]`` when NVML has no new sample (``NVML_ERROR_NOT_FOUND``: no process used the
        GPU in a sample period since then); None when NVML gives none (not supported, as
        on a GPU in MIG mode, or a failure this time).
        """
        key = (label, PROCESS_UTILIZATION, ())
        call = getattr(self.nvml, PROCESS_UTILIZATION, None)
        if key in self.unsupported or call is None:
            return None
        try:
            return list(call(handle, since_us))
        except self.nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == getattr(self.nvml, "NVML_ERROR_NOT_FOUND", 6):
                return []
            if code in self._codes:
                self.unsupported.add(key)
            return None

    def memory(self, label: str, handle: Any) -> Any:
        """Memory info: v2 (used without the driver's reservation, as nvidia-smi), else v1."""
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if version is not None and self.supported(label, MEMORY, version=version):
            info = self.read(label, MEMORY, handle, version=version)
            if info is not None or self.supported(label, MEMORY, version=version):
                return info
        return self.read(label, MEMORY, handle)

    def power(self, label: str, handle: Any, instant: bool) -> dict[str, float | None]:
        """``power_w`` and ``power_avg_w`` in W, None where NVML gave none.

        ``power_w`` is the field ``NVML_FI_DEV_POWER_INSTANT`` when ``instant``, else
        ``nvmlDeviceGetPowerUsage``; ``power_avg_w`` is ``NVML_FI_DEV_POWER_AVERAGE``.
        """
        ids = {key: getattr(self.nvml, name, fid) for key, (name, fid) in POWER_FIELDS.items()}
        if not instant:
            del ids["power_w"]
        milliwatts = self.fields(label, handle, ids)
        if not instant:
            milliwatts["power_w"] = self.read(label, POWER, handle)
        return {key: None if mw is None else mw / 1000.0 for key, mw in milliwatts.items()}

    def gpu_values(self, label: str, handle: Any, instant: bool) -> dict[str, float | None]:
        """Every per-GPU quantity of this instant, None where NVML gave none.

        ``instant``: the GPU has the field ``NVML_FI_DEV_POWER_INSTANT`` (see :meth:`power`).
        """
        read, nvml = self.read, self.nvml
        util = read(label, "nvmlDeviceGetUtilizationRates", handle)
        memory = self.memory(label, handle)
        pstate = self.first(label, PSTATE, handle)
        limit = read(label, "nvmlDeviceGetEnforcedPowerLimit", handle)
        values: dict[str, float | None] = {
            **self.power(label, handle, instant),
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

"""Fake ``pynvml`` (the module of ``nvidia-ml-py``) for tests on machines without a GPU.

Put this folder first on ``sys.path`` / ``PYTHONPATH`` and ``import pynvml``
gets this module. It keeps the real module's names, signatures, return types
and units (nvidia-ml-py 13.615): power in mW, energy in mJ, memory in bytes,
clocks in MHz; handles are ``ctypes`` pointers (``c_nvmlDevice_t``); memory and
utilisation come back as ``ctypes`` structures; processes as
``nvmlFriendlyObject`` with ``usedGpuMemory`` None where NVML says N/A; errors
are ``NVMLError`` subclasses built from the real error codes
(``NVMLError_NotSupported``, ``.value == NVML_ERROR_NOT_SUPPORTED``).

Behaviour of the real library that the fake copies:
- ``nvmlInit`` raises ``NVMLError_LibraryNotFound`` when libnvidia-ml.so.1 cannot
  be loaded; every device call before ``nvmlInit`` (or after the last
  ``nvmlShutdown``) raises ``NVMLError_Uninitialized``; init/shutdown count.
- Utilisation is not supported on MIG devices, nor on a GPU in MIG mode
  (nvitop issue #5: ``nvmlDeviceGetUtilizationRates`` on an A100 in MIG mode
  raised ``NVMLError_NotSupported``); MIG devices report memory, not power,
  clocks or temperature.
- ``nvmlDeviceGetMigDeviceHandleByIndex`` raises ``NVMLError_NotFound`` for an
  empty slot; ``nvmlDeviceIsMigDeviceHandle`` returns a ``c_uint``, as the real one.
- ``nvmlDeviceGetFieldValues`` succeeds as a call and reports each field's own
  status in its ``nvmlReturn`` (NVML_ERROR_NOT_SUPPORTED for a field the GPU lacks,
  for any scope but ``NVML_POWER_SCOPE_GPU``, and for every field of a MIG device);
  power fields come back as ``uiVal`` in mW with ``NVML_VALUE_TYPE_UNSIGNED_INT``.
- ``nvmlDeviceGetProcessUtilization(handle, timeStamp)`` returns the samples newer
  than ``timeStamp`` (CPU microseconds), one per process that had non-zero use in a
  sample period, and raises ``NVMLError_NotFound`` when there is none; it is not
  supported on a GPU in MIG mode.

Driven by a JSON scenario (default ``../../fixtures/nvml_h100.json``) named by
the environment, read at each first ``nvmlInit``:
- ``FAKE_PYNVML_SCENARIO``: path of the scenario file;
- ``FAKE_PYNVML_MISSING=1``: the library is missing (``NVMLError_LibraryNotFound``);
- ``FAKE_PYNVML_INIT_ERROR=DRIVER_NOT_LOADED`` (any ``NVML_ERROR_*`` suffix): ``nvmlInit`` fails so;
- ``FAKE_PYNVML_GPUS=N``: only the first N GPUs of the scenario (0: none);
- ``FAKE_PYNVML_ROOT_PID``: the pid that a process entry ``"$ROOT"`` stands for.

Scenario, per GPU (see nvml_h100.json): ``name``, ``uuid``, ``power_mw``,
``energy_mj`` (``{"start": counter at the first read, "step": added per read}``),
``utilization_pct`` (``{"gpu", "memory"}``), ``memory_bytes`` (``{"total",
"reserved", "free", "used"}``; v1 ``used`` is total - free), ``temperature_c``,
``clocks_mhz`` (``{"graphics", "sm", "mem", "video"}``), ``pstate``,
``enforced_power_limit_mw``, ``clocks_event_reasons``, ``power_instant_mw`` and
``power_average_mw`` (the fields ``NVML_FI_DEV_POWER_INSTANT`` / ``_AVERAGE``; absent or
null: the field is not supported; ``{"error": "UNKNOWN"}``: that read fails so),
``power_trace`` (a known power curve over time, overriding the instant and averaged
power, ``nvmlDeviceGetPowerUsage`` and the energy counter: ``{"start_file": path of a JSON
file with the epoch ``start`` (the GPU idles while it is missing), "idle_w": W,
"segments": [{"from_s", "to_s", "w"}, or for bursts also "period_s", "on_at_s", "on_s"]}``;
the instant power is the segment's ``w`` at that moment (else ``idle_w``), the averaged one
its mean over the last second sampled only in the first 25 ms of every 100 ms (25 % duty,
as A100/H100 do), the counter its exact integral since the scenario was loaded, on top of
``energy_mj.start``),
``process_utilization`` (a list of batches, the k-th call adds batch k, cycling, stamped
with the current time: each batch a list of ``{"pid", "sm_pct", "mem_pct"}``; absent: not
supported), ``api_restrictions`` (``{"application_clocks": bool, "auto_boosted_clocks":
bool}``: whether ``nvmlDeviceGetAPIRestriction`` says root only, ``NVML_FEATURE_ENABLED``;
absent: restricted, the drivers' default), ``mig_mode`` (``[current,
pending]``), ``max_mig_devices``, ``mig_devices`` (``index``, ``uuid``, ``name``,
``gpu_instance_id``, ``compute_instance_id``, ``memory_bytes``), ``processes``
(``pid``: a number, ``"$ROOT"``, ``"$CHILDREN"`` (each child of this process) or
``"$FILE:/path"`` (the pid written in that file, none while it is missing);
``used_memory_bytes``: bytes or null for N/A; ``mig``: the MIG device index it
runs on), and ``errors``: ``{function name: "NOT_SUPPORTED"}`` to fail every call,
or ``{"error": "GPU_IS_LOST", "from_read": 2}`` to fail from the third call on.
A MIG device takes its own ``errors``. A scalar given as a list is read in turn
(cycling). ``FAKE_CALLS`` counts calls per ``(function, "gpu0" | "gpu0/mig1")``.
"""

from __future__ import annotations

import json
import os
import string
import sys
import threading
import time
from collections import Counter
from ctypes import (
    POINTER,
    Structure,
    Union,
    c_double,
    c_int,
    c_int64,
    c_longlong,
    c_uint,
    c_uint32,
    c_ulong,
    c_ulonglong,
    c_ushort,
    pointer,
)
from pathlib import Path
from typing import Any

DEFAULT_SCENARIO = Path(__file__).resolve().parents[2] / "fixtures" / "nvml_h100.json"

# ---- constants (values as in the real pynvml) ----
NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_GPU_MAX = 1
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PSTATE_0 = 0
NVML_PSTATE_15 = 15
NVML_PSTATE_UNKNOWN = 32
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS = 0
NVML_RESTRICTED_API_SET_AUTO_BOOSTED_CLOCKS = 1
NVML_DEVICE_MIG_ENABLE = 0x1
NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)
nvmlMemory_v2 = 0x02000028
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG = 2
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4
NVML_VALUE_TYPE_SIGNED_INT = 5
NVML_VALUE_TYPE_UNSIGNED_SHORT = 6
NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_POWER_SCOPE_GPU = 0
NVML_POWER_SCOPE_MODULE = 1
NVML_POWER_SCOPE_MEMORY = 2

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksEventReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksEventReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksEventReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonHwSlowdown = nvmlClocksEventReasonHwSlowdown
nvmlClocksThrottleReasonSyncBoost = nvmlClocksEventReasonSyncBoost
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksEventReasonHwThermalSlowdown
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = nvmlClocksEventReasonHwPowerBrakeSlowdown
nvmlClocksThrottleReasonDisplayClockSetting = nvmlClocksEventReasonDisplayClockSetting
nvmlClocksThrottleReasonBoardLimit = 0x0000000000000200
nvmlClocksThrottleReasonReliability = 0x0000000000000400
nvmlClocksThrottleReasonNone = 0x0000000000000000


# ---- errors: the real class, its string table and its generated subclasses ----
class NVMLLibraryMismatchError(Exception):
    pass


class NVMLError(Exception):
    _valClassMapping: dict[int, type] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):  # noqa: N804 - as in the real module
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other):
        return self.value == other.value

    __hash__ = Exception.__hash__


def _extract_errors_as_classes() -> None:
    module = sys.modules[__name__]
    for err_name in [x for x in dir(module) if x.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(
            err_name.replace("NVML_ERROR_", ""), "_"
        ).replace("_", "")
        err_val = getattr(module, err_name)

        def gen_new(val):
            def new(typ, *args):
                return NVMLError.__new__(typ, val)

            return new

        cls = type(class_name, (NVMLError,), {"__new__": gen_new(err_val)})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[err_val] = cls


_extract_errors_as_classes()


def nvmlExceptionClass(nvmlErrorCode):
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


def nvmlErrorString(result):
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


# ---- structures ----
class _PrintableStructure(Structure):
    _fmt_: dict[str, str] = {}

    def __str__(self):
        parts = []
        for key, _ in self._fields_:
            fmt = self._fmt_.get(key, self._fmt_.get("<default>", "%s"))
            parts.append(("%s: " + fmt) % (key, getattr(self, key)))
        return self.__class__.__name__ + "(" + ", ".join(parts) + ")"


class c_nvmlMemory_t(_PrintableStructure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]
    _fmt_ = {"<default>": "%d B"}


class c_nvmlMemory_v2_t(_PrintableStructure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]
    _fmt_ = {"<default>": "%d B"}


class c_nvmlUtilization_t(_PrintableStructure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]
    _fmt_ = {"<default>": "%d %%"}


class c_nvmlValue_t(Union):
    _fields_ = [
        ("dVal", c_double),
        ("uiVal", c_uint),
        ("ulVal", c_ulong),
        ("ullVal", c_ulonglong),
        ("sllVal", c_longlong),
        ("siVal", c_int),
        ("usVal", c_ushort),
    ]


class c_nvmlFieldValue_t(_PrintableStructure):
    _fields_ = [
        ("fieldId", c_uint32),
        ("scopeId", c_uint32),
        ("timestamp", c_int64),
        ("latencyUsec", c_int64),
        ("valueType", c_uint),
        ("nvmlReturn", c_uint),
        ("value", c_nvmlValue_t),
    ]


class c_nvmlProcessUtilizationSample_t(_PrintableStructure):
    _fields_ = [
        ("pid", c_uint),
        ("timeStamp", c_ulonglong),
        ("smUtil", c_uint),
        ("memUtil", c_uint),
        ("encUtil", c_uint),
        ("decUtil", c_uint),
    ]


class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for key in dictionary:
            setattr(self, key, dictionary[key])

    def __str__(self):
        return self.__dict__.__str__()


class struct_c_nvmlDevice_t(Structure):
    # Opaque in the real module; here it says which scenario device it is.
    _fields_ = [("_gpu", c_int), ("_mig", c_int)]


c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)


# ---- the scenario and the library state ----
FAKE_CALLS: Counter = Counter()
_lock = threading.Lock()
_refcount = 0
_gpus: list[dict[str, Any]] = []
_loaded_at = 0.0
_handles: dict[tuple[int, int], Any] = {}
_reads: Counter = Counter()


def _load_scenario() -> None:
    global _gpus, _loaded_at
    _loaded_at = time.time()
    path = os.environ.get("FAKE_PYNVML_SCENARIO") or str(DEFAULT_SCENARIO)
    with open(path) as f:
        scenario = json.load(f)
    gpus = scenario.get("gpus", [])
    limit = os.environ.get("FAKE_PYNVML_GPUS")
    if limit is not None and limit.strip() != "":
        gpus = gpus[: int(limit)]
    _gpus = gpus
    _handles.clear()
    _reads.clear()
    _history.clear()
    FAKE_CALLS.clear()


def _handle(gpu: int, mig: int = -1):
    key = (gpu, mig)
    if key not in _handles:
        _handles[key] = pointer(struct_c_nvmlDevice_t(gpu, mig))
    return _handles[key]


def _device(handle) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """The scenario GPU, MIG device (or None) and label of a handle."""
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    try:
        gpu_index, mig_index = handle.contents._gpu, handle.contents._mig
        gpu = _gpus[gpu_index]
    except (AttributeError, ValueError, IndexError):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT) from None
    if mig_index < 0:
        return gpu, None, f"gpu{gpu_index}"
    mig = next((m for m in gpu.get("mig_devices", []) if m["index"] == mig_index), None)
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu, mig, f"gpu{gpu_index}/mig{mig_index}"


def _call(function: str, handle) -> tuple[dict[str, Any], dict[str, Any] | None, int]:
    """Count the call, raise the error the scenario asks for; return the device and read no."""
    gpu, mig, label = _device(handle)
    with _lock:
        FAKE_CALLS[(function, label)] += 1
        read = _reads[(function, label)]
        _reads[(function, label)] += 1
    error = (mig if mig is not None else gpu).get("errors", {}).get(function)
    if isinstance(error, str):
        raise NVMLError(globals()[f"NVML_ERROR_{error}"])
    if isinstance(error, dict) and read >= error.get("from_read", 0):
        raise NVMLError(globals()[f"NVML_ERROR_{error['error']}"])
    return gpu, mig, read


def _value(entry: dict[str, Any], field: str, read: int):
    if field not in entry:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    value = entry[field]
    if isinstance(value, list):
        value = value[read % len(value)]
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


def _gpu_only(function: str, handle, field: str):
    gpu, mig, read = _call(function, handle)
    if mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return gpu, _value(gpu, field, read), read


def _mig_on(gpu: dict[str, Any]) -> bool:
    return bool(gpu.get("mig_mode", [0, 0])[0])


# ---- init / system ----
def nvmlInitWithFlags(flags):
    global _refcount
    if os.environ.get("FAKE_PYNVML_MISSING") == "1":
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    failure = os.environ.get("FAKE_PYNVML_INIT_ERROR")
    if failure:
        raise NVMLError(globals()[f"NVML_ERROR_{failure}"])
    with _lock:
        first = _refcount == 0
        _refcount += 1
    if first:
        _load_scenario()
    return None


def nvmlInit():
    nvmlInitWithFlags(0)
    return None


def nvmlShutdown():
    global _refcount
    with _lock:
        if _refcount == 0:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)
        _refcount -= 1
    return None


def nvmlSystemGetDriverVersion():
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return "590.48.01"


# ---- devices ----
def nvmlDeviceGetCount():
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    return len(_gpus)


def nvmlDeviceGetHandleByIndex(index):
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if not 0 <= index < len(_gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _handle(index)


def nvmlDeviceGetHandleByUUID(uuid):
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    for i, gpu in enumerate(_gpus):
        if gpu["uuid"] == uuid:
            return _handle(i)
        for mig in gpu.get("mig_devices", []):
            if mig["uuid"] == uuid and _mig_on(gpu):
                return _handle(i, mig["index"])
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetIndex(handle):
    _, mig, _ = _call("nvmlDeviceGetIndex", handle)
    if mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return handle.contents._gpu


def nvmlDeviceGetName(handle):
    gpu, mig, _ = _call("nvmlDeviceGetName", handle)
    return (mig or gpu)["name"]


def nvmlDeviceGetUUID(handle):
    gpu, mig, _ = _call("nvmlDeviceGetUUID", handle)
    return (mig or gpu)["uuid"]


def _trace_time(trace: dict[str, Any]) -> float | None:
    """Seconds since the trace's start (the epoch ``start`` in its ``start_file``); None
    while that file is missing: the GPU idles."""
    try:
        with open(trace["start_file"]) as f:
            start = float(json.load(f)["start"])
    except (OSError, ValueError, KeyError):
        return None
    return time.time() - start


def _trace_instant_w(trace: dict[str, Any], t: float | None) -> float:
    if t is None:
        return trace["idle_w"]
    for seg in trace["segments"]:
        if seg["from_s"] <= t < seg["to_s"]:
            if "period_s" not in seg:
                return seg["w"]
            phase = (t - seg["from_s"]) % seg["period_s"]
            if seg["on_at_s"] <= phase < seg["on_at_s"] + seg["on_s"]:
                return seg["w"]
    return trace["idle_w"]


def _trace_energy_j(trace: dict[str, Any], t: float | None) -> float:
    """The integral of the instant power since the scenario was loaded: the idle power all
    along, plus each segment's excess over it up to ``t`` (closed form)."""
    energy = trace["idle_w"] * (time.time() - _loaded_at)
    for seg in trace["segments"] if t is not None else ():
        length = max(0.0, min(t, seg["to_s"]) - seg["from_s"])
        if "period_s" in seg:
            full = length // seg["period_s"]
            rest = length - full * seg["period_s"]
            length = full * seg["on_s"] + min(max(rest - seg["on_at_s"], 0.0), seg["on_s"])
        energy += (seg["w"] - trace["idle_w"]) * length
    return energy


def _trace_average_w(trace: dict[str, Any], t: float | None) -> float:
    """The one-second mean that NVML's averaged power is on A100/H100: of the instant power
    at each millisecond of the last second that falls in the first 25 ms of a 100-ms
    period (25 % duty), periods counted from the trace's start."""
    if t is None:
        return trace["idle_w"]
    now_ms = int(t * 1000.0 // 1)
    values = [
        _trace_instant_w(trace, ms / 1000.0 + 0.0005)
        for ms in range(now_ms - 999, now_ms + 1)
        if ms % 100 < 25
    ]
    return sum(values) / len(values)


def nvmlDeviceGetPowerUsage(handle):
    gpu, mig, _ = _device(handle)
    if mig is None and (trace := gpu.get("power_trace")):
        _call("nvmlDeviceGetPowerUsage", handle)
        return round(_trace_average_w(trace, _trace_time(trace)) * 1000)  # A100+: averaged
    return int(_gpu_only("nvmlDeviceGetPowerUsage", handle, "power_mw")[1])


def nvmlDeviceGetTotalEnergyConsumption(handle):
    gpu, counter, read = _gpu_only("nvmlDeviceGetTotalEnergyConsumption", handle, "energy_mj")
    if trace := gpu.get("power_trace"):
        return int(counter["start"] + round(_trace_energy_j(trace, _trace_time(trace)) * 1000))
    return int(counter["start"] + counter["step"] * read)


_FIELDS = {
    NVML_FI_DEV_POWER_AVERAGE: "power_average_mw",
    NVML_FI_DEV_POWER_INSTANT: "power_instant_mw",
}
"""Field id -> scenario entry (mW, read as ``uiVal``); any other field is NOT_SUPPORTED."""


def nvmlDeviceGetFieldValues(handle, fieldIds):
    gpu, mig, _ = _call("nvmlDeviceGetFieldValues", handle)
    label = f"gpu{handle.contents._gpu}" + ("" if mig is None else f"/mig{mig['index']}")
    values = (c_nvmlFieldValue_t * len(fieldIds))()
    for i, field_id in enumerate(fieldIds):
        try:
            values[i].fieldId, values[i].scopeId = field_id
        except TypeError:
            values[i].fieldId = field_id
        entry = _FIELDS.get(values[i].fieldId)
        values[i].timestamp = int(time.time() * 1e6)
        if entry is None or mig is not None or values[i].scopeId != NVML_POWER_SCOPE_GPU:
            values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED
            continue
        with _lock:
            read = _reads[(entry, label)]
            _reads[(entry, label)] += 1
        trace = gpu.get("power_trace")
        try:
            if trace and entry in gpu:
                at = _trace_time(trace)
                instant = entry == "power_instant_mw"
                watts = _trace_instant_w(trace, at) if instant else _trace_average_w(trace, at)
                value = round(watts * 1000)
            else:
                value = _value(gpu, entry, read)
        except NVMLError as exc:
            values[i].nvmlReturn = exc.value
            continue
        if isinstance(value, dict):  # {"error": "UNKNOWN"}: this read of the field fails so
            values[i].nvmlReturn = globals()[f"NVML_ERROR_{value['error']}"]
            continue
        values[i].nvmlReturn = NVML_SUCCESS
        values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_INT
        values[i].value.uiVal = int(value)
    return values


def nvmlDeviceGetAPIRestriction(device, apiType):
    gpu, mig, _ = _call("nvmlDeviceGetAPIRestriction", device)
    if mig is not None or apiType not in (0, 1):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    names = ("application_clocks", "auto_boosted_clocks")
    restricted = gpu.get("api_restrictions", {}).get(names[apiType], True)
    return NVML_FEATURE_ENABLED if restricted else NVML_FEATURE_DISABLED


def nvmlDeviceGetEnforcedPowerLimit(handle):
    return int(_gpu_only("nvmlDeviceGetEnforcedPowerLimit", handle, "enforced_power_limit_mw")[1])


def nvmlDeviceGetPowerManagementLimit(handle):
    return int(_gpu_only("nvmlDeviceGetPowerManagementLimit", handle, "enforced_power_limit_mw")[1])


def nvmlDeviceGetUtilizationRates(handle):
    gpu, rates, _ = _gpu_only("nvmlDeviceGetUtilizationRates", handle, "utilization_pct")
    if _mig_on(gpu):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    c_util = c_nvmlUtilization_t()
    c_util.gpu, c_util.memory = int(rates["gpu"]), int(rates["memory"])
    return c_util


def nvmlDeviceGetMemoryInfo(handle, version=None):
    gpu, mig, read = _call("nvmlDeviceGetMemoryInfo", handle)
    memory = _value(mig or gpu, "memory_bytes", read)
    if not version:
        c_memory = c_nvmlMemory_t()
        c_memory.total, c_memory.free = memory["total"], memory["free"]
        c_memory.used = memory["total"] - memory["free"]
        return c_memory
    c_memory = c_nvmlMemory_v2_t()
    c_memory.version = version
    c_memory.total, c_memory.free = memory["total"], memory["free"]
    c_memory.reserved, c_memory.used = memory.get("reserved", 0), memory["used"]
    return c_memory


def nvmlDeviceGetTemperature(handle, sensor):
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(_gpu_only("nvmlDeviceGetTemperature", handle, "temperature_c")[1])


_CLOCK_NAMES = {
    NVML_CLOCK_GRAPHICS: "graphics",
    NVML_CLOCK_SM: "sm",
    NVML_CLOCK_MEM: "mem",
    NVML_CLOCK_VIDEO: "video",
}


def nvmlDeviceGetClockInfo(handle, type):  # noqa: A002 - the real parameter name
    if type not in _CLOCK_NAMES:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _, clocks, read = _gpu_only("nvmlDeviceGetClockInfo", handle, "clocks_mhz")
    value = clocks.get(_CLOCK_NAMES[type])
    if isinstance(value, list):
        value = value[read % len(value)]
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(value)


def nvmlDeviceGetPerformanceState(handle):
    return int(_gpu_only("nvmlDeviceGetPerformanceState", handle, "pstate")[1])


def nvmlDeviceGetPowerState(handle):
    return int(_gpu_only("nvmlDeviceGetPowerState", handle, "pstate")[1])


def nvmlDeviceGetCurrentClocksEventReasons(handle):
    field = "clocks_event_reasons"
    return int(_gpu_only("nvmlDeviceGetCurrentClocksEventReasons", handle, field)[1])


def nvmlDeviceGetCurrentClocksThrottleReasons(handle):
    field = "clocks_event_reasons"
    return int(_gpu_only("nvmlDeviceGetCurrentClocksThrottleReasons", handle, field)[1])


# ---- MIG ----
def nvmlDeviceGetMigMode(device):
    gpu, mig, _ = _call("nvmlDeviceGetMigMode", device)
    if mig is not None or "mig_mode" not in gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return [int(gpu["mig_mode"][0]), int(gpu["mig_mode"][1])]


def nvmlDeviceGetMaxMigDeviceCount(device):
    gpu, mig, _ = _call("nvmlDeviceGetMaxMigDeviceCount", device)
    if mig is not None or "max_mig_devices" not in gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(gpu["max_mig_devices"])


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    gpu, mig, _ = _call("nvmlDeviceGetMigDeviceHandleByIndex", device)
    if mig is not None or "max_mig_devices" not in gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= index < gpu["max_mig_devices"]:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    found = any(m["index"] == index for m in gpu.get("mig_devices", []))
    if not (_mig_on(gpu) and found):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _handle(device.contents._gpu, index)


def nvmlDeviceIsMigDeviceHandle(device):
    _, mig, _ = _call("nvmlDeviceIsMigDeviceHandle", device)
    return c_uint(1 if mig is not None else 0)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice):
    _, mig, _ = _call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle", migDevice)
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return _handle(migDevice.contents._gpu)


def nvmlDeviceGetGpuInstanceId(device):
    _, mig, _ = _call("nvmlDeviceGetGpuInstanceId", device)
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(mig["gpu_instance_id"])


def nvmlDeviceGetComputeInstanceId(device):
    _, mig, _ = _call("nvmlDeviceGetComputeInstanceId", device)
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(mig["compute_instance_id"])


# ---- processes ----
def _pids(entry) -> list[int]:
    if entry == "$ROOT":
        root = os.environ.get("FAKE_PYNVML_ROOT_PID")
        return [int(root)] if root else []
    if entry == "$CHILDREN":
        return _children(os.getpid())
    if isinstance(entry, str) and entry.startswith("$FILE:"):
        try:
            text = Path(entry[len("$FILE:") :]).read_text().strip()
        except OSError:
            return []
        return [int(text)] if text.isdigit() else []
    return [int(entry)]


def _children(parent: int) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] != "Z":
            found.append(int(name))
    return sorted(found)


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    gpu, mig, _ = _call("nvmlDeviceGetComputeRunningProcesses", handle)
    procs = []
    for entry in gpu.get("processes", []):
        if mig is not None and entry.get("mig") != mig["index"]:
            continue
        on = next((m for m in gpu.get("mig_devices", []) if m["index"] == entry.get("mig")), None)
        for pid in _pids(entry["pid"]):
            used = entry.get("used_memory_bytes")
            procs.append(
                nvmlFriendlyObject(
                    {
                        "pid": pid,
                        "usedGpuMemory": None if used is None else int(used),
                        "gpuInstanceId": on["gpu_instance_id"] if on else 0xFFFFFFFF,
                        "computeInstanceId": on["compute_instance_id"] if on else 0xFFFFFFFF,
                    }
                )
            )
    return procs


nvmlDeviceGetComputeRunningProcesses_v2 = nvmlDeviceGetComputeRunningProcesses_v3


def nvmlDeviceGetComputeRunningProcesses(handle):
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


_history: dict[int, list[Any]] = {}
"""Per GPU: the process utilisation samples the fake driver holds (the newest 256)."""


def nvmlDeviceGetProcessUtilization(handle, timeStamp):
    gpu, _, read = _gpu_only("nvmlDeviceGetProcessUtilization", handle, "process_utilization")
    if _mig_on(gpu):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    batches = gpu["process_utilization"]
    batch = batches[read % len(batches)] if batches else []
    history = _history.setdefault(handle.contents._gpu, [])
    with _lock:
        stamp = max(int(time.time() * 1e6), history[-1].timeStamp + 1 if history else 0)
        for entry in batch:
            for pid in _pids(entry["pid"]):
                sample = c_nvmlProcessUtilizationSample_t()
                sample.pid, sample.timeStamp = pid, stamp
                sample.smUtil, sample.memUtil = int(entry["sm_pct"]), int(entry["mem_pct"])
                sample.encUtil, sample.decUtil = 0, 0
                history.append(sample)
        del history[:-256]
        newer = [sample for sample in history if sample.timeStamp > timeStamp]
    if not newer:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return newer

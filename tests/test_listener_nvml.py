"""The ``nvml`` listener against the fake pynvml (tests/fakes/pynvml), and once through radT.

The fake keeps the real library's types, units and error codes; its values
come from tests/fixtures/nvml_h100.json (sources in tests/fixtures/SOURCES.md).
The listener imports ``pynvml`` when it starts, so putting the fake first on
``sys.path`` (and out of ``sys.modules`` afterwards) is all a test needs.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FAKES, FIXTURES, kill_quietly
from radt.listeners.nvml import NvmlListener

from radt.listener import Client, RunContext, Sample

FAKE_DIR = FAKES / "pynvml"
SCENARIO = FIXTURES / "nvml_h100.json"
MIB = 1024 * 1024
GPU1_UUID = "GPU-c08d91cb-e324-655c-71ba-7570956445bc"
MIG0_UUID = "MIG-405bbda1-6b05-535f-9702-f95e8cd170ce"
MIG1_UUID = "MIG-b0a55a70-b1b0-529f-af26-79ccdc267be0"
FAKE_ENV = (
    "FAKE_PYNVML_SCENARIO",
    "FAKE_PYNVML_MISSING",
    "FAKE_PYNVML_INIT_ERROR",
    "FAKE_PYNVML_GPUS",
    "FAKE_PYNVML_ROOT_PID",
    "CUDA_VISIBLE_DEVICES",
)
GPU_KEYS = {
    "power_w",
    "power_avg_w",
    "energy_j",
    "util_pct",
    "mem_util_pct",
    "mem_used_mib",
    "mem_total_mib",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "pstate",
    "power_limit_w",
    "throttle_reasons",
    "throttle_power_cap",
    "throttle_sw_thermal",
    "throttle_hw_slowdown",
    "throttle_hw_thermal",
    "throttle_hw_power_brake",
    "throttle_sync_boost",
}


@pytest.fixture
def fake(monkeypatch) -> Iterator[Any]:
    """The fake pynvml as ``pynvml``; the real module (if loaded) comes back after."""
    for name in FAKE_ENV:
        monkeypatch.delenv(name, raising=False)
    saved = sys.modules.pop("pynvml", None)
    sys.path.insert(0, str(FAKE_DIR))
    try:
        module = importlib.import_module("pynvml")
        assert Path(module.__file__).parent == FAKE_DIR
        yield module
    finally:
        sys.path.remove(str(FAKE_DIR))
        sys.modules.pop("pynvml", None)
        if saved is not None:
            sys.modules["pynvml"] = saved


Edit = Callable[[dict[str, Any]], None]


@pytest.fixture
def scenario(fake, tmp_path, monkeypatch) -> Callable[[Edit], Path]:
    """Write the default scenario changed by ``edit`` and point the fake at it."""

    def _scenario(edit: Edit) -> Path:
        data = json.loads(SCENARIO.read_text())
        edit(data)
        path = tmp_path / "scenario.json"
        path.write_text(json.dumps(data))
        monkeypatch.setenv("FAKE_PYNVML_SCENARIO", str(path))
        return path

    return _scenario


class Started:
    """A started listener with what it told the run."""

    def __init__(self, devices: tuple[str, ...] = (), pid: int = 0, clock=None) -> None:
        self.tags: dict[str, str] = {}
        self.listener = NvmlListener()
        if clock is not None:
            self.listener._clock = clock
        self.run = RunContext(
            run_id="r",
            pid=pid,
            workdir=Path("."),
            emit=lambda samples: None,
            devices=devices,
            set_tag=self.tags.__setitem__,
        )
        self.listener.start(self.run)

    def poll(self) -> dict[str, float]:
        samples = self.listener.poll()
        assert all(isinstance(s, Sample) for s in samples)
        values = {s.key: s.value for s in samples}
        assert len(values) == len(samples), "a key twice in one poll"
        return values


@pytest.fixture
def started() -> Iterator[Callable[..., Started]]:
    """Start listeners; stop them all after the test."""
    made: list[Started] = []

    def _start(*args, **kwargs) -> Started:
        made.append(Started(*args, **kwargs))
        return made[-1]

    yield _start
    for each in made:
        each.listener.stop()


def entities(values: dict[str, float]) -> set[str]:
    """``gpu0``, ``gpu1/mig0``… of the keys, leaving out processes."""
    found = {key.split("/", 1)[1].rsplit("/", 1)[0] for key in values}
    return {e for e in found if "proc" not in e}


@pytest.fixture
def real_pynvml() -> Iterator[Any]:
    """The installed nvidia-ml-py module, loaded under another name beside the fake."""
    paths = [p for p in sys.path if Path(p or ".").resolve() != FAKE_DIR]
    found = importlib.machinery.PathFinder.find_spec("pynvml", paths)
    if found is None or found.origin is None:
        pytest.skip("nvidia-ml-py is not installed")
    spec = importlib.util.spec_from_file_location("real_pynvml", found.origin)
    module = importlib.util.module_from_spec(spec)
    sys.modules["real_pynvml"] = module  # its error classes are made through sys.modules
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["real_pynvml"]


def test_the_fake_has_the_real_names_signatures_constants_and_errors(fake, real_pynvml):
    public = [n for n in dir(fake) if not n.startswith("_") and n not in ("FAKE_CALLS",)]
    public = [n for n in public if n.startswith(("nvml", "NVML", "c_nvml", "struct_c_nvml"))]
    assert len(public) > 100
    for name in public:
        assert hasattr(real_pynvml, name), name
        ours, theirs = getattr(fake, name), getattr(real_pynvml, name)
        if inspect.isfunction(ours):
            assert list(inspect.signature(ours).parameters) == list(
                inspect.signature(theirs).parameters
            ), name
        elif isinstance(ours, int):
            assert ours == theirs, name
        elif hasattr(ours, "_fields_") and not name.startswith("struct_"):
            # Same members with the same C types (a nested type by its name).
            assert [(f, t.__name__) for f, t in ours._fields_] == [
                (f, t.__name__) for f, t in theirs._fields_
            ], name
        elif (
            inspect.isclass(ours)
            and issubclass(ours, fake.NVMLError)
            and ours is not fake.NVMLError
        ):
            assert ours(0).value == theirs(0).value, name
    assert fake.NVML_VALUE_NOT_AVAILABLE_ulonglong.value == (
        real_pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    )
    assert str(fake.NVMLError(fake.NVML_ERROR_NOT_SUPPORTED)) == "Not Supported"
    assert type(fake.NVMLError(3)).__name__ == type(real_pynvml.NVMLError(3)).__name__


def test_gpu_values_in_the_units_of_their_keys(fake, started):
    nvml = started(devices=("0",))
    first, second = nvml.poll(), nvml.poll()
    assert {k.rsplit("/", 1)[1] for k in first} == GPU_KEYS
    # The field NVML_FI_DEV_POWER_INSTANT (588390 mW), and the 1 s average field (629450 mW).
    assert first["nvml/gpu0/power_w"] == pytest.approx(588.39)
    assert first["nvml/gpu0/power_avg_w"] == pytest.approx(629.45)
    assert first["nvml/gpu0/mem_total_mib"] == 81559.0  # 85520809984 B
    assert first["nvml/gpu0/mem_used_mib"] == 19818.0  # v2: without the 479 MiB reserved
    assert first["nvml/gpu0/util_pct"] == 100.0 and first["nvml/gpu0/mem_util_pct"] == 11.0
    assert first["nvml/gpu0/temp_c"] == 59.0
    assert first["nvml/gpu0/sm_clock_mhz"] == 1980.0
    assert first["nvml/gpu0/mem_clock_mhz"] == 2619.0
    assert first["nvml/gpu0/pstate"] == 0.0
    assert first["nvml/gpu0/power_limit_w"] == 700.0
    assert first["nvml/gpu0/throttle_reasons"] == 0.0
    assert first["nvml/gpu0/throttle_power_cap"] == 0.0
    # The counter starts at 4819276123 mJ and adds 62945 mJ per read: a delta, in J.
    assert first["nvml/gpu0/energy_j"] == pytest.approx(62.945)
    assert second["nvml/gpu0/energy_j"] == pytest.approx(125.890)
    assert nvml.tags == {
        "radt.nvml.energy_method.gpu0": "counter",
        "radt.nvml.power_source.gpu0": "instant",
    }


def test_close_shuts_nvml_down_once(fake, started):
    nvml = started()
    nvml.listener.stop()
    nvml.listener.stop()
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    assert nvml.listener.poll() == []


def test_throttle_reasons_each_as_zero_or_one(scenario, started):
    scenario(lambda s: s["gpus"][0].update(clocks_event_reasons=0x04 | 0x20 | 0x80))
    values = started(devices=("0",)).poll()
    assert values["nvml/gpu0/throttle_reasons"] == float(0x04 | 0x20 | 0x80)
    flags = {k.rsplit("/", 1)[1]: v for k, v in values.items() if "/throttle_" in k}
    del flags["throttle_reasons"]
    assert flags == {
        "throttle_power_cap": 1.0,
        "throttle_sw_thermal": 1.0,
        "throttle_hw_power_brake": 1.0,
        "throttle_hw_slowdown": 0.0,
        "throttle_hw_thermal": 0.0,
        "throttle_sync_boost": 0.0,
    }


def test_older_driver_throttle_reasons_come_from_the_old_name(fake, scenario, started):
    errors = {"nvmlDeviceGetCurrentClocksEventReasons": "FUNCTION_NOT_FOUND"}
    scenario(lambda s: s["gpus"][0].update(clocks_event_reasons=0x04, errors=errors))
    nvml = started(devices=("0",))
    for _ in range(3):
        assert nvml.poll()["nvml/gpu0/throttle_power_cap"] == 1.0
    assert fake.FAKE_CALLS[("nvmlDeviceGetCurrentClocksEventReasons", "gpu0")] == 1


def test_energy_integrates_power_where_the_counter_is_not_supported(fake, scenario, started):
    def edit(s):
        s["gpus"][0]["errors"] = {"nvmlDeviceGetTotalEnergyConsumption": "NOT_SUPPORTED"}
        s["gpus"][0]["power_instant_mw"] = [100000, 200000, 300000]

    scenario(edit)
    times = iter([10.0, 11.0, 11.5])
    nvml = started(devices=("0",), clock=lambda: next(times))
    # open: 100 W at 10 s; then 200 W at 11 s and 300 W at 11.5 s (trapezoids).
    assert nvml.poll()["nvml/gpu0/energy_j"] == pytest.approx(150.0)
    assert nvml.poll()["nvml/gpu0/energy_j"] == pytest.approx(150.0 + 125.0)
    assert nvml.tags == {
        "radt.nvml.energy_method.gpu0": "integrated_power",
        "radt.nvml.power_source.gpu0": "instant",
    }
    assert fake.FAKE_CALLS[("nvmlDeviceGetTotalEnergyConsumption", "gpu0")] == 1


def test_no_energy_and_no_tag_without_counter_or_power(scenario, started):
    errors = {
        "nvmlDeviceGetTotalEnergyConsumption": "NOT_SUPPORTED",
        "nvmlDeviceGetPowerUsage": "NOT_SUPPORTED",
        "nvmlDeviceGetFieldValues": "FUNCTION_NOT_FOUND",  # a driver without power fields
    }
    scenario(lambda s: s["gpus"][0].update(errors=errors))
    nvml = started(devices=("0",))
    values = nvml.poll()
    assert not {"energy_j", "power_w", "power_avg_w"} & {k.rsplit("/", 1)[1] for k in values}
    assert values["nvml/gpu0/temp_c"] == 59.0
    assert nvml.tags == {}


def test_mig_device_of_the_run_reports_memory_and_no_utilisation(fake, started):
    nvml = started(devices=(MIG1_UUID,))
    values = nvml.poll()
    assert entities(values) == {"gpu1", "gpu1/mig1"}
    assert values["nvml/gpu1/mig1/mem_used_mib"] == 17.0
    assert values["nvml/gpu1/mig1/mem_total_mib"] == 20096.0
    # NVML has no utilisation on MIG devices nor on a GPU in MIG mode: missing, never 0.
    assert not [k for k in values if "util" in k]
    assert values["nvml/gpu1/power_w"] == pytest.approx(444.72)
    assert values["nvml/gpu1/power_avg_w"] == pytest.approx(432.21)
    assert values["nvml/gpu1/mem_used_mib"] == 11125.0
    assert nvml.tags == {
        "radt.nvml.energy_method.gpu1": "counter",
        "radt.nvml.power_source.gpu1": "instant",
    }


def test_a_failing_call_drops_only_its_field(fake, scenario, started):
    errors = {
        "nvmlDeviceGetTemperature": "NOT_SUPPORTED",
        "nvmlDeviceGetPowerUsage": {"error": "GPU_IS_LOST", "from_read": 3},
    }
    # No power fields: power_w is nvmlDeviceGetPowerUsage, read once at start, then per poll.
    scenario(
        lambda s: s["gpus"][0].update(
            errors=errors, pstate=32, power_instant_mw=None, power_average_mw=None
        )
    )
    nvml = started(devices=("0",))
    polls = [nvml.poll() for _ in range(4)]
    for values in polls:
        assert "nvml/gpu0/temp_c" not in values
        assert "nvml/gpu0/pstate" not in values  # NVML_PSTATE_UNKNOWN is N/A, not a state
        assert values["nvml/gpu0/mem_total_mib"] == 81559.0
        assert values["nvml/gpu0/sm_clock_mhz"] == 1980.0
    assert [v.get("nvml/gpu0/power_w") for v in polls] == [629.45, 629.45, None, None]
    # Not supported: asked once, never again; a failing call is asked again each time.
    assert fake.FAKE_CALLS[("nvmlDeviceGetTemperature", "gpu0")] == 1
    assert fake.FAKE_CALLS[("nvmlDeviceGetPowerUsage", "gpu0")] == 5


def test_process_memory_of_the_run_tree_only(scenario, started, monkeypatch):
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(g.pid, flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        grandchild = int(child.stdout.readline())  # type: ignore[union-attr]

        def edit(s):
            s["gpus"][0]["processes"] = [
                {"pid": "$ROOT", "used_memory_bytes": 326 * MIB},
                {"pid": grandchild, "used_memory_bytes": 100 * MIB},
                {"pid": 1, "used_memory_bytes": 60 * MIB},
            ]
            s["gpus"][1]["processes"] = [
                {"pid": grandchild, "used_memory_bytes": None, "mig": 0},
                {"pid": "$ROOT", "used_memory_bytes": 50 * MIB, "mig": 1},
                {"pid": 3817, "used_memory_bytes": 326 * MIB, "mig": 1},
            ]

        scenario(edit)
        monkeypatch.setenv("FAKE_PYNVML_ROOT_PID", str(child.pid))
        values = started(pid=child.pid).poll()
        procs = {k: v for k, v in values.items() if k.endswith("/mem_used_mib") and "/proc" in k}
        assert procs == {
            f"nvml/gpu0/proc{child.pid}/mem_used_mib": 326.0,
            f"nvml/gpu0/proc{grandchild}/mem_used_mib": 100.0,
            f"nvml/gpu1/mig1/proc{child.pid}/mem_used_mib": 50.0,
        }
    finally:
        child.kill()
        child.wait()
        if "grandchild" in locals():
            os.kill(grandchild, 9)


@pytest.mark.parametrize(
    ("edit", "field_calls", "average"),
    [
        # The GPU has neither field (each field's own status is NOT_SUPPORTED): asked once.
        ({"power_instant_mw": None, "power_average_mw": None}, 1, None),
        # A driver older than the fields' API: nvmlDeviceGetFieldValues itself is missing.
        ({"errors": {"nvmlDeviceGetFieldValues": "FUNCTION_NOT_FOUND"}}, 1, None),
        # The average field without the instant one: power_w is still nvmlDeviceGetPowerUsage.
        ({"power_instant_mw": None, "power_average_mw": 611000}, 4, 611.0),
    ],
)
def test_without_the_instant_field_power_w_is_the_power_usage_and_a_tag_says_so(
    fake, scenario, started, edit, field_calls, average
):
    scenario(lambda s: s["gpus"][0].update(edit, power_mw=629450))
    nvml = started(devices=("0",))
    polls = [nvml.poll() for _ in range(3)]
    assert [v["nvml/gpu0/power_w"] for v in polls] == [pytest.approx(629.45)] * 3
    assert [v.get("nvml/gpu0/power_avg_w") for v in polls] == [average] * 3
    assert nvml.tags["radt.nvml.power_source.gpu0"] == "power_usage"
    assert fake.FAKE_CALLS[("nvmlDeviceGetFieldValues", "gpu0")] == field_calls


def test_a_failed_instant_reading_is_missing_not_replaced_by_the_average(fake, scenario, started):
    instant = [588390, {"error": "UNKNOWN"}, 590120]
    scenario(lambda s: s["gpus"][0].update(power_instant_mw=instant))
    nvml = started(devices=("0",))  # the start reads 588390: the source is the instant field
    first, second = nvml.poll(), nvml.poll()
    assert "nvml/gpu0/power_w" not in first
    assert first["nvml/gpu0/power_avg_w"] == pytest.approx(629.45)
    assert second["nvml/gpu0/power_w"] == pytest.approx(590.12)
    assert nvml.tags["radt.nvml.power_source.gpu0"] == "instant"
    assert fake.FAKE_CALLS[("nvmlDeviceGetPowerUsage", "gpu0")] == 0


@pytest.fixture
def tree() -> Iterator[tuple[int, int]]:
    """A child process and its own child: (child pid, grandchild pid); killed after the test."""
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time\n"
            "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(g.pid, flush=True)\ntime.sleep(60)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    grandchild = None
    try:
        grandchild = int(child.stdout.readline())  # type: ignore[union-attr]
        yield child.pid, grandchild
    finally:
        child.kill()
        child.wait()
        if grandchild is not None:
            kill_quietly(grandchild)


def test_per_process_utilisation_of_the_run_since_the_last_read(
    fake, scenario, started, monkeypatch, tree
):
    root, grandchild = tree

    def edit(s):
        s["gpus"][0]["processes"] = [
            {"pid": "$ROOT", "used_memory_bytes": 326 * MIB},
            {"pid": grandchild, "used_memory_bytes": 100 * MIB},
            {"pid": 1, "used_memory_bytes": 60 * MIB},
        ]
        s["gpus"][0]["process_utilization"] = [
            [
                {"pid": "$ROOT", "sm_pct": 40, "mem_pct": 5},
                {"pid": grandchild, "sm_pct": 20, "mem_pct": 3},
                {"pid": 1, "sm_pct": 30, "mem_pct": 9},
            ],
            [],
            [{"pid": 1, "sm_pct": 30, "mem_pct": 9}],
            [{"pid": "$ROOT", "sm_pct": 70, "mem_pct": 8}],
        ]
        s["gpus"][1]["processes"] = [{"pid": "$ROOT", "used_memory_bytes": 50 * MIB, "mig": 1}]
        s["gpus"][1]["process_utilization"] = [[{"pid": "$ROOT", "sm_pct": 50, "mem_pct": 5}]]

    scenario(edit)
    monkeypatch.setenv("FAKE_PYNVML_ROOT_PID", str(root))
    nvml = started(pid=root)

    def utilisation(values: dict[str, float]) -> dict[str, float]:
        return {k: v for k, v in values.items() if "/proc/" in k}

    polls = [utilisation(nvml.poll()) for _ in range(4)]
    assert polls == [
        # The run's two processes summed; pid 1 is not the run's.
        {"nvml/gpu0/proc/sm_pct": 60.0, "nvml/gpu0/proc/mem_pct": 8.0},
        # No sample since the last read (NVML_ERROR_NOT_FOUND): missing, not the last value.
        {},
        # New samples, none of the run's processes among them while they hold the GPU: 0.
        {"nvml/gpu0/proc/sm_pct": 0.0, "nvml/gpu0/proc/mem_pct": 0.0},
        {"nvml/gpu0/proc/sm_pct": 70.0, "nvml/gpu0/proc/mem_pct": 8.0},
    ]
    # GPU 1 is in MIG mode: NVML has no per-process utilisation there; asked once.
    assert fake.FAKE_CALLS[("nvmlDeviceGetProcessUtilization", "gpu1")] == 1


def test_in_a_workload_each_run_gets_the_utilisation_of_its_own_processes(fake, scenario, tree):
    a, a_child = tree
    b = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:

        def edit(s):
            s["gpus"][0]["processes"] = [{"pid": a, "used_memory_bytes": 100 * MIB}]
            s["gpus"][0]["process_utilization"] = [
                [
                    {"pid": a, "sm_pct": 30, "mem_pct": 4},
                    {"pid": a_child, "sm_pct": 5, "mem_pct": 1},
                    {"pid": b.pid, "sm_pct": 50, "mem_pct": 6},
                    {"pid": 1, "sm_pct": 9, "mem_pct": 9},
                ]
            ]

        scenario(edit)
        own: list[Sample] = []
        theirs: dict[str, list[Sample]] = {"a": [], "b": []}
        listener = NvmlListener()
        listener.start(
            RunContext(
                run_id="workload",
                pid=os.getpid(),  # the workload's listeners watch radT's tree
                workdir=Path("."),
                emit=own.extend,
                devices=("0",),
                clients=(
                    Client("a", a, theirs["a"].extend),
                    Client("b", b.pid, theirs["b"].extend),
                ),
            )
        )
        try:
            values = {s.key: s.value for s in listener.poll()}
        finally:
            listener.stop()
        assert {k: v for k, v in values.items() if "/proc" in k} == {
            f"nvml/gpu0/proc{a}/mem_used_mib": 100.0  # per-process memory stays in the workload
        }
        assert own == []  # the sampler emits what poll returns; nothing else went there
        assert {s.key: s.value for s in theirs["a"]} == {
            "nvml/gpu0/proc/sm_pct": 35.0,
            "nvml/gpu0/proc/mem_pct": 5.0,
        }
        assert {s.key: s.value for s in theirs["b"]} == {
            "nvml/gpu0/proc/sm_pct": 50.0,
            "nvml/gpu0/proc/mem_pct": 6.0,
        }
    finally:
        b.kill()
        b.wait()


WHOLE_GPU1 = {"gpu1", "gpu1/mig0", "gpu1/mig1", "gpu1/mig2", "gpu1/mig3"}


@pytest.mark.parametrize(
    ("devices", "visible", "expected"),
    [
        ((), None, {"gpu0"} | WHOLE_GPU1),
        (("0",), None, {"gpu0"}),
        (("1",), None, WHOLE_GPU1),  # the whole GPU in MIG mode: all its MIG devices
        ((GPU1_UUID,), None, WHOLE_GPU1),
        (("GPU-c08d91cb",), None, WHOLE_GPU1),  # a unique UUID prefix
        ((MIG0_UUID,), None, {"gpu1", "gpu1/mig0"}),
        ((MIG0_UUID, MIG1_UUID), None, {"gpu1", "gpu1/mig0", "gpu1/mig1"}),
        (("0", MIG1_UUID), None, {"gpu0", "gpu1", "gpu1/mig1"}),
        ((), "1", WHOLE_GPU1),
        ((), MIG1_UUID, {"gpu1", "gpu1/mig1"}),
        ((), "GPU-00000000-0000-0000-0000-000000000000", {"gpu0"}),
        (("1",), "0", WHOLE_GPU1),  # --devices wins over CUDA_VISIBLE_DEVICES
    ],
)
def test_only_the_runs_gpus_are_watched(fake, started, monkeypatch, devices, visible, expected):
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    nvml = started(devices=devices)
    assert entities(nvml.poll()) == expected
    gpus = {e for e in expected if "/" not in e}
    assert set(nvml.tags) == {
        f"radt.nvml.{tag}.{e}" for e in gpus for tag in ("energy_method", "power_source")
    }


def test_an_unknown_device_refuses_to_start_and_releases_nvml(fake):
    listener = NvmlListener()
    run = RunContext(run_id="r", pid=0, workdir=Path("."), emit=print, devices=("7",))
    with pytest.raises(ValueError, match="device '7' matches no GPU here"):
        listener.start(run)
    with pytest.raises(fake.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({}, None),
        ({"FAKE_PYNVML_MISSING": "1"}, "NVML library not found"),
        ({"FAKE_PYNVML_GPUS": "0"}, "no NVIDIA GPU"),
        ({"FAKE_PYNVML_INIT_ERROR": "DRIVER_NOT_LOADED"}, "no NVIDIA GPU (Driver Not Loaded)"),
        ({"FAKE_PYNVML_INIT_ERROR": "NO_PERMISSION"}, "NVML error: Insufficient Permissions"),
    ],
)
def test_available_says_why_not(fake, monkeypatch, env, reason):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert NvmlListener().available() == reason
    with pytest.raises(fake.NVMLError_Uninitialized):  # available() leaves NVML shut
        fake.nvmlDeviceGetCount()


def test_available_without_nvidia_ml_py(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert NvmlListener().available().startswith("NVML library not found")


def test_interval_default_and_floor():
    listener = NvmlListener()

    def run(interval):
        return RunContext(run_id="r", pid=0, workdir=Path("."), emit=print, interval_s=interval)

    assert listener.interval(run(None)) == 0.1
    assert listener.interval(run(0.05)) == 0.05
    assert listener.interval(run(0.001)) == 0.02


SCRIPT = """
import os, time
with open("pid.txt", "w") as f:
    f.write(str(os.getpid()))
time.sleep(1.5)
"""


@pytest.mark.slow
def test_through_radt_series_in_mlflow_and_the_samples_artifact(workspace, tmp_path):
    workspace.script("train.py", SCRIPT)
    env = {k: v for k, v in workspace.env.items() if k not in FAKE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_DIR), env["PYTHONPATH"]])
    done = workspace.run(["-l", "nvml", "--interval", "0.05", "train.py"], env=env)
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    run_id = run.info.run_id
    assert run.data.tags["radt.listeners"] == "nvml"
    assert run.data.tags["radt.nvml.energy_method.gpu0"] == "counter"
    assert run.data.tags["radt.nvml.energy_method.gpu1"] == "counter"
    assert run.data.tags["radt.nvml.power_source.gpu0"] == "instant"
    client = workspace.client()
    history = client.get_metric_history(run_id, "system/nvml/gpu0/power_w")
    assert history and all(m.value == pytest.approx(588.39) for m in history)
    assert "system/nvml/gpu1/mig0/mem_used_mib" in run.data.metrics
    local = client.download_artifacts(run_id, "radt/samples.parquet", str(tmp_path))
    table = pd.read_parquet(local)
    power = table[table.key == "nvml/gpu0/power_w"]
    assert len(power) >= 10  # 1.5 s at 0.05 s
    assert power.value.tolist() == pytest.approx([588.39] * len(power))
    assert set(power.listener) == {"nvml"}
    energy = table[table.key == "nvml/gpu0/energy_j"].sort_values("timestamp").value.tolist()
    assert energy[0] == pytest.approx(62.945) and energy == sorted(energy)
    assert not table[table.key.str.contains("util") & table.key.str.startswith("nvml/gpu1")].size
    pid = (workspace.root / "pid.txt").read_text()
    proc = table[table.key == f"nvml/gpu0/proc{pid}/mem_used_mib"]
    assert len(proc) >= 5 and set(proc.value) == {15690.0}


PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, PowerLimit, Env
shared, pair, , , 0, naive, job.py, nvml, --lr 0.1, -, JOB=a
shared, pair, , , 0, naive, job.py, nvml, --lr 0.2, -, JOB=b
"""
JOB = """
import os, time
with open(f"started-{os.environ['JOB']}", "w") as f:
    f.write(str(os.getpid()))
time.sleep(2.5)
"""


@pytest.mark.slow
def test_through_a_plan_each_run_gets_its_own_processes_utilisation(workspace, tmp_path):
    workspace.script("job.py", JOB)
    (workspace.root / "plan.csv").write_text(PLAN)
    data = json.loads(SCENARIO.read_text())
    data["gpus"][0]["process_utilization"] = [
        [
            {"pid": f"$FILE:{workspace.root / 'started-a'}", "sm_pct": 30, "mem_pct": 4},
            {"pid": f"$FILE:{workspace.root / 'started-b'}", "sm_pct": 50, "mem_pct": 6},
        ]
    ]
    (tmp_path / "scenario.json").write_text(json.dumps(data))
    env = {k: v for k, v in workspace.env.items() if k not in FAKE_ENV}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKE_DIR), env["PYTHONPATH"]])
    env["FAKE_PYNVML_SCENARIO"] = str(tmp_path / "scenario.json")
    done = workspace.run(["--interval", "0.05", "plan.csv"], env=env)
    assert done.returncode == 0, done.stderr
    runs = workspace.runs("shared")
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    letter = {r.data.tags["radt.letter"]: r for r in runs if "mlflow.parentRunId" in r.data.tags}
    key = "system/nvml/gpu0/proc/sm_pct"
    assert parent.data.metrics["system/nvml/gpu0/power_w"] == pytest.approx(588.39)
    assert key not in parent.data.metrics
    assert letter["A"].data.metrics[key] == 30.0
    assert letter["A"].data.metrics["system/nvml/gpu0/proc/mem_pct"] == 4.0
    assert letter["B"].data.metrics[key] == 50.0
    assert "system/nvml/gpu0/power_w" not in letter["B"].data.metrics

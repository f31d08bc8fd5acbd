"""Sources by quantity: which recorded keys provide a quantity, from what listeners declare,
and a plug-in listener's GPU power counted in a real run's energy figures."""

from __future__ import annotations

import logging
import os
from importlib.metadata import distribution

import pytest
from test_listener_kit import install

import radt
from radt import quantities
from radt.quantities import (
    GPU_ENERGY,
    GPU_MEMORY,
    GPU_POWER,
    GPU_SM_ACTIVITY,
    GPU_UTILISATION,
    GROUP,
    HOST_ENERGY,
    declared,
    keys_for,
    per_gpu,
    sources,
)

WATTS = 150.0
WATTMETER = f"""
import time

from radt.listener import GPU_POWER, PolledListener, Sample


class Wattmeter(PolledListener):
    \"\"\"A board power meter on GPU 0 that always reads {WATTS} W.\"\"\"

    name = "wattmeter"
    default_interval_s = 2.0
    final_poll = True
    provides = ((GPU_POWER, "wattmeter/gpu*/power_w", 50),)

    def poll(self):
        return [Sample(time.time(), "wattmeter/gpu0/power_w", {WATTS})]
"""


@pytest.fixture
def fresh_declarations():
    """The registered declarations read again now, and again after the test."""
    quantities.registered.cache_clear()
    quantities.providers_of.cache_clear()
    yield
    quantities.registered.cache_clear()
    quantities.providers_of.cache_clear()


def own_declarations() -> tuple:
    """The declarations of radT's own listeners: the entry points radt's distribution registers
    (listeners/, from pyproject.toml), never a plug-in installed beside it."""
    points = sorted(distribution("radt").entry_points.select(group=GROUP), key=lambda p: p.name)
    return tuple(entry for point in points for entry in declared(point.load()))


@pytest.fixture
def plugin_installed(tmp_path, monkeypatch, fresh_declarations):
    """A third-party listener installed beside radT, providing GPU power."""
    install(tmp_path, "wattmeter_plugin", WATTMETER, {"wattmeter": "Wattmeter"})
    monkeypatch.syspath_prepend(str(tmp_path))


def test_radts_own_listeners_are_the_sources_in_their_order(plugin_installed):
    # the plug-in is registered, and these checks read radT's own listeners past it
    assert (GPU_POWER, "wattmeter/gpu*/power_w", 50) in quantities.registered()
    own = own_declarations()
    assert sources(GPU_ENERGY, own) == [("nvml", "energy_j"), ("dcgm", "energy_j")]
    assert sources(GPU_POWER, own) == [
        ("nvml", "power_w"),
        ("dcgm", "power_w"),
        ("smi", "power_w"),
    ]
    assert sources(GPU_UTILISATION, own) == [("nvml", "util_pct"), ("smi", "util_pct")]
    assert sources(GPU_SM_ACTIVITY, own) == [("dcgm", "smact_ratio")]
    assert sources(GPU_MEMORY, own) == [("nvml", "mem_used_mib"), ("smi", "mem_used_mib")]


def test_keys_for_a_quantity_come_best_source_first():
    keys = [
        "smi/gpu0/power_w",
        "dcgm/gpu1/power_w",
        "nvml/gpu1/power_w",
        "nvml/gpu0/power_w",
        "nvml/gpu0/power_avg_w",
        "rapl/package0/energy_j",
        "nvml/gpu0/energy_j",
    ]
    own = own_declarations()
    assert keys_for(GPU_POWER, keys, own) == [
        "nvml/gpu0/power_w",
        "nvml/gpu1/power_w",
        "dcgm/gpu1/power_w",
        "smi/gpu0/power_w",
    ]
    assert keys_for(HOST_ENERGY, keys, own) == ["rapl/package0/energy_j"]
    mine = [(GPU_POWER, "mine/gpu*/power_w", 5), (GPU_POWER, "nvml/gpu*/power_w", 10)]
    assert keys_for(GPU_POWER, keys + ["mine/gpu0/power_w"], mine) == [
        "mine/gpu0/power_w",
        "nvml/gpu0/power_w",
        "nvml/gpu1/power_w",
    ]


def test_a_device_listener_declares_per_gpu_quantities_by_priority_and_takes_no_options():
    from radt.listener import DeviceListener, Option, PolledListener

    class Meter(DeviceListener, PolledListener):
        name = "meter"
        provides = per_gpu(name, {GPU_POWER: 5, GPU_ENERGY: 7})

        def poll(self):
            return []

    class Tuned(Meter):
        declared_options = (Option("rate", float, "1", "how often"),)

    expected = [(GPU_POWER, "meter/gpu*/power_w", 5), (GPU_ENERGY, "meter/gpu*/energy_j", 7)]
    assert declared(Meter) == expected
    assert (Meter.scope, Meter.declared_options) == ("device", ())
    assert (Tuned.scope, [o.name for o in Tuned.declared_options]) == ("device", ["rate"])
    assert (PolledListener.scope, PolledListener.declared_options) == ("run", None)


def test_a_declaration_the_analysis_cannot_read_is_left_out_with_a_reason(caplog):
    class Odd:
        provides = (
            (GPU_POWER, "odd/gpu*/watts", 5),
            (GPU_POWER, "od*/gpu*/power_w", 5),
            (GPU_POWER, "odd/board/power_w", 5),
            ("gpu_voltage", "odd/gpu*/volt_v", 5),
            (GPU_POWER, "odd/gpu*/power_w"),
            (GPU_POWER, "odd/gpu*/power_w", 7),
        )

    with caplog.at_level(logging.WARNING, logger="radt.quantities"):
        assert declared(Odd) == [(GPU_POWER, "odd/gpu*/power_w", 7)]
    reasons = [record.getMessage() for record in caplog.records]
    assert len(reasons) == 5
    assert "LISTENER/ENTITY/power_w" in reasons[0] and "without wildcards" in reasons[1]
    assert "LISTENER/gpu*/power_w" in reasons[2] and "unknown quantity" in reasons[3]
    assert "not a (quantity, key pattern, priority) tuple" in reasons[4]


def test_a_plugins_gpu_power_is_counted_in_the_runs_energy(
    workspace, monkeypatch, fresh_declarations
):
    plugins = workspace.root / "plugins"
    install(plugins, "wattmeter_plugin", WATTMETER, {"wattmeter": "Wattmeter"})
    workspace.env["PYTHONPATH"] = f"{plugins}{os.pathsep}{workspace.env['PYTHONPATH']}"
    workspace.script("work.py", "import time\ntime.sleep(5)\n")
    done = workspace.run(["-l", "wattmeter", "work.py"])
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    # the headline figures radT logged as the run closed, with the plug-in installed
    window_s = run.data.metrics["radt/window_s"]
    assert window_s > 4.0
    assert run.data.metrics["radt/energy_j"] == pytest.approx(WATTS * window_s)

    monkeypatch.syspath_prepend(str(plugins))
    quantities.registered.cache_clear()
    quantities.providers_of.cache_clear()
    table = radt.summary("Default", tracking_uri=workspace.uri, cache_dir=workspace.root / "cache")
    row = table[table["run_id"] == run.info.run_id].iloc[0]
    # constant power: the held trapezoid over the window is power × window
    assert row["window_s"] == pytest.approx(window_s)
    assert row["energy_j"] == pytest.approx(WATTS * window_s)
    assert (row["power_mean_w"], row["power_max_w"]) == (WATTS, WATTS)
    assert row["energy_method"] == "integrated_power"


def test_the_gpus_of_a_run_are_its_gpu_listeners_gpus_each_once():
    """nvml and smi reading GPU 0 show it once; the process tree (``top/proc``), the host and
    nvml's per-process keys never make a GPU; MIG devices count one each, by the listener
    that recorded most of them; without a GPU listener there is none."""
    from radt.quantities import gpu_devices

    both = [
        "nvml/gpu0/power_w",
        "nvml/gpu0/energy_j",
        "smi/gpu0/temp_c",  # no quantity the analysis reads
        "smi/gpu2/temp_c",  # nor here: no GPU shown by it alone
        "smi/gpu0/power_w",
        "smi/gpu0/util_pct",
        "smi/gpu1/util_pct",
        "nvml/gpu0/proc/mem_used_mib",
        "nvml/gpu0/proc4242/mem_used_mib",
        "top/proc/cpu_pct",
        "top/proc/rss_mib",
        "top/host/cpu_pct",
        "rapl/package0/energy_j",
    ]
    own = own_declarations()
    assert gpu_devices(both, own) == ["gpu0", "gpu1"]
    assert gpu_devices(["top/proc/cpu_pct", "top/proc/rss_mib", "top/host/cpu_pct"], own) == []
    assert gpu_devices([], own) == []
    mig = [
        "nvml/gpu0/power_w",
        "nvml/gpu0/mig1/mem_used_mib",
        "nvml/gpu0/mig2/mem_used_mib",
        "dcgm/gpu0/gi1/gract_ratio",
        "dcgm/gpu0/gi1/ci0/smact_ratio",
        "nvml/gpu10/power_w",
    ]
    assert gpu_devices(mig, own) == ["gpu0/mig1", "gpu0/mig2", "gpu10"]
    plugin = [("gpu_power", "wattmeter/gpu*/power_w", 5)]
    assert gpu_devices(["wattmeter/gpu3/power_w", "nvml/gpu0/power_w"], plugin) == ["gpu3"]

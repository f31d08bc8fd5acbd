"""The ``dcgm`` listener: parsing ``dcgmi dmon`` and ``dcgmi discovery -c``, the fake dcgmi,
the fallback when profiling cannot be watched, and faults."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXTURES, Recorded, path_without_nvidia_tools, pid_alive, wait_for
from radt.listeners.dcgm import (
    ALL_FIELDS,
    HOSTENGINE_DOWN,
    DcgmListener,
    Hierarchy,
    parse_discovery,
)

from radt.listener import Sample

PROF = (FIXTURES / "dcgmi_dmon_prof.txt").read_text().splitlines()
PROF_MIG = (FIXTURES / "dcgmi_dmon_prof_mig.txt").read_text().splitlines()
PROF_DCGM2 = (FIXTURES / "dcgmi_dmon_prof_dcgm2.txt").read_text().splitlines()
DISCOVERY = (FIXTURES / "dcgmi_discovery_c.txt").read_text()
PROFILING_DROPPED = (
    "1001 GRACT, 1002 SMACT, 1003 SMOCC, 1004 TENSO, 1005 DRAMA, 1006 FP64A, 1007 FP32A, "
    "1008 FP16A, 1009 PCITX, 1010 PCIRX, 1011 NVLTX, 1012 NVLRX"
)
NO_HOSTENGINE = (
    # dcgmi without nv-hostengine (dcgmi/Command.cpp prints both on stdout); see SOURCES.md
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)
QUANTITY = {
    "GRACT": "gract_ratio",
    "SMACT": "smact_ratio",
    "SMOCC": "smocc_ratio",
    "TENSO": "tensor_active_ratio",
    "DRAMA": "dram_active_ratio",
}


def scripted_dcgmi(folder: Path, body: str) -> str:
    """A stand-in ``dcgmi`` whose ``main(args)`` is ``body``; returns a PATH with it first.

    It has no nvidia-smi beside it, and the real PATH's tools are left out, so the
    listener sees only this dcgmi.
    """
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "dcgmi"
    script.write_text(
        f"#!{sys.executable}\nimport sys, time\n{body}\nsys.exit(main(sys.argv[1:]))\n"
    )
    script.chmod(0o755)
    return f"{folder}{os.pathsep}{path_without_nvidia_tools()}"


def parsed(listener: DcgmListener, lines: list[str]) -> list[list[Sample]]:
    return [listener.parse(line) for line in lines]


def values(samples: list[Sample]) -> dict[str, float]:
    return {s.key: s.value for s in samples}


# --------------------------------------------------------------------------- parsing


def test_the_fixture_parses_row_by_row_with_its_repeated_header():
    listener = DcgmListener()
    listener.fields = (1001, 1002, 1003, 1004, 1005)
    results = parsed(listener, PROF)
    rows = [line for line in PROF if line.startswith("GPU 0")]
    assert len(rows) == 17 and sum(line.startswith("#Entity") for line in PROF) == 2
    produced = [values(r) for line, r in zip(PROF, results, strict=True) if line.startswith("GPU")]
    assert produced[0] == {}  # N/A everywhere: missing, never zero
    names = PROF[0].split()[1:]
    for line, got in zip(rows[1:], produced[1:], strict=True):
        printed = line.split()[2:]
        assert got == {
            f"dcgm/gpu0/{QUANTITY[name]}": float(text)
            for name, text in zip(names, printed, strict=True)
        }
    assert produced[3] == {
        "dcgm/gpu0/gract_ratio": 0.993,
        "dcgm/gpu0/smact_ratio": 0.987,
        "dcgm/gpu0/smocc_ratio": 0.123,
        "dcgm/gpu0/tensor_active_ratio": 0.940,
        "dcgm/gpu0/dram_active_ratio": 0.869,
    }
    # the header lines themselves give nothing
    assert all(r == [] for line, r in zip(PROF, results, strict=True) if not line.startswith("GPU"))


def test_columns_are_found_by_name_not_by_the_order_asked_for():
    listener = DcgmListener()
    listener.fields = (1001, 1002, 155, 156)  # the header below says otherwise
    listener.parse("#Entity   POWER             SMACT        TOTEC             ")
    listener.parse("ID        W                              mJ                ")
    got = values(listener.parse("GPU 3     61.500            0.250        5000              "))
    assert got == {
        "dcgm/gpu3/power_w": 61.5,
        "dcgm/gpu3/smact_ratio": 0.25,
        "dcgm/gpu3/energy_j": 0,
    }


def test_an_unknown_short_name_falls_back_to_the_order_of_the_fields():
    listener = DcgmListener()
    listener.fields = (1002, 1009)
    listener.parse("#Entity   SMACT        PCIE_TX           ")
    got = values(listener.parse("GPU 0     0.500        21618             "))
    assert got == {"dcgm/gpu0/smact_ratio": 0.5, "dcgm/gpu0/pcie_tx_bytes_s": 21618.0}


def test_energy_is_joules_since_the_first_reading_and_power_is_watts():
    listener = DcgmListener()
    listener.fields = (155, 156)
    listener.parse("#Entity   POWER             TOTEC             ")
    listener.parse("ID        W                 mJ                ")
    energy = []
    for line in [
        "GPU 0     52.120            1000000           ",
        "GPU 0     87.120            N/A               ",
        "GPU 0     85.090            1008712           ",
        "GPU 0     52.120            1017424           ",
        "GPU 0     52.120            5                 ",  # counter reset (driver reload)
    ]:
        got = values(listener.parse(line))
        energy.append(got.get("dcgm/gpu0/energy_j"))
        assert "dcgm/gpu0/power_w" in got
    assert energy == [0.0, None, pytest.approx(8.712), pytest.approx(17.424), None]


def test_the_discovery_fixture_maps_instances_to_gpu_and_instance_ids():
    hierarchy = parse_discovery(DISCOVERY)
    assert hierarchy.gpu_instances == {0: (0, 1), 1: (0, 2), 7: (1, 1), 8: (1, 2)}
    assert hierarchy.compute_instances == {0: (0, 1, 0), 1: (0, 2, 0), 7: (1, 1, 0), 8: (1, 2, 0)}
    assert parse_discovery("") == Hierarchy()


def test_mig_rows_map_to_their_slice():
    listener = DcgmListener()
    listener.fields = (1001, 1002, 1003, 1004)
    # the fixture's GPU-I entity ids on an 8-GPU box (7 instance slots per GPU)
    listener.hierarchy = Hierarchy(
        gpu_instances={21: (3, 1), 22: (3, 2), 28: (4, 1), 29: (4, 2), 30: (4, 3), 31: (4, 4)}
    )
    results = parsed(listener, PROF_MIG[:-1])
    got = {}
    for r in results:
        got.update(values(r))
    assert got["dcgm/gpu3/gi1/smact_ratio"] == 0.0
    assert got["dcgm/gpu4/gi2/gract_ratio"] == 0.495
    assert got["dcgm/gpu4/gi3/tensor_active_ratio"] == 0.465
    assert got["dcgm/gpu4/gi1/smocc_ratio"] == 0.123
    assert len(got) == 6 * 4
    with pytest.raises(ValueError, match="GPU-I 35 is not in"):
        listener.parse(PROF_MIG[-1])  # an instance discovery did not list


def test_the_dcgm2_layout_parses_its_right_aligned_rows():
    """DCGM 2.0-2.3: `# Entity`, `Id`, rows right-aligned (the user guide's MIG capture)."""
    listener = DcgmListener()
    listener.fields = (1001, 1004)
    # the same example's `dcgmi discovery -c`: I 0/1 is entity 0, I 0/2 is entity 1
    listener.hierarchy = Hierarchy(gpu_instances={0: (0, 1), 1: (0, 2)})
    results = parsed(listener, PROF_DCGM2)
    assert results[:2] == [[], []]
    rows = [values(r) for r in results[2:]]
    assert len(rows) == 30 and all(len(r) == 2 for r in rows)
    assert rows[6:9] == [
        {"dcgm/gpu0/gract_ratio": 0.457, "dcgm/gpu0/tensor_active_ratio": 0.442},
        {"dcgm/gpu0/gi1/gract_ratio": 0.534, "dcgm/gpu0/gi1/tensor_active_ratio": 0.516},
        {"dcgm/gpu0/gi2/gract_ratio": 0.533, "dcgm/gpu0/gi2/tensor_active_ratio": 0.515},
    ]
    assert rows[-1] == {
        "dcgm/gpu0/gi2/gract_ratio": 0.985,
        "dcgm/gpu0/gi2/tensor_active_ratio": 0.952,
    }


def test_the_dcgm2_layout_with_units_repeats_n_a_and_a_full_width_value():
    listener = DcgmListener()
    listener.fields = (155, 156, 1002)
    lines = [
        "# Entity       POWER             TOTEC  SMACT",
        "      Id           W                mJ       ",
        "    GPU 0      61.500           1000000    N/A",
        "     GPU 1      62.000           2000000  0.250",  # DCGM 2.3: "GPU", a blank, the id
        "",
        "# Entity       POWER             TOTEC  SMACT",
        "      Id           W                mJ       ",
        "    GPU 0 12345678.125 1000000000000000000  0.500",  # wider than the columns
        "",
        "dmon was stopped due to receiving a signal.",
    ]
    got = [values(r) for r in parsed(listener, lines)]
    assert got == [
        {},
        {},
        {"dcgm/gpu0/power_w": 61.5, "dcgm/gpu0/energy_j": 0.0},
        {"dcgm/gpu1/power_w": 62.0, "dcgm/gpu1/energy_j": 0.0, "dcgm/gpu1/smact_ratio": 0.25},
        {},
        {},
        {},
        {
            "dcgm/gpu0/power_w": 12345678.125,
            "dcgm/gpu0/energy_j": pytest.approx((1e18 - 1e6) / 1000),
            "dcgm/gpu0/smact_ratio": 0.5,
        },
        {},
        {},
    ]


def test_compute_instance_rows_use_the_discovery_ids():
    listener = DcgmListener()
    listener.fields = (1002,)
    listener.hierarchy = parse_discovery(DISCOVERY)
    listener.parse("#Entity   SMACT        ")
    assert values(listener.parse("GPU-CI 8  0.750        ")) == {
        "dcgm/gpu1/gi2/ci0/smact_ratio": 0.75
    }
    assert values(listener.parse("GPU-I 1   0.500        ")) == {"dcgm/gpu0/gi2/smact_ratio": 0.5}


def test_a_value_with_a_blank_is_cut_at_the_header_columns():
    listener = DcgmListener()
    listener.fields = (1002, 155)
    header = "#Entity   SMACT        POWER             "
    listener.parse(header)
    row = "GPU 0     N/A          61.500            "
    assert values(listener.parse(row)) == {"dcgm/gpu0/power_w": 61.5}
    with pytest.raises(ValueError):  # a blank inside a value that is not a placeholder
        listener.parse("GPU 0     Not Known    61.500            ")


@pytest.mark.parametrize(
    "line",
    [
        "garbage",
        "GPU 0     0.993        0.987",  # truncated: 2 of 5 values
        "GPU 0     0.993        0.987        0.12x        0.940        0.869        ",
        "GPU 0     0.993        0.987        0.123        0.940        0.869        0.1",
        "GPU x     0.993        0.987        0.123        0.940        0.869        ",
        "Error setting watches. Result: -33: This request is serviced by a module of DCGM "
        "that is not currently loaded",
    ],
)
def test_garbled_lines_raise_so_the_reader_skips_and_counts_them(line):
    listener = DcgmListener()
    listener.fields = (1001, 1002, 1003, 1004, 1005)
    listener.parse(PROF[0])
    with pytest.raises(ValueError):
        listener.parse(line)


def test_a_row_before_any_header_raises():
    with pytest.raises(ValueError, match="before any header"):
        DcgmListener().parse("GPU 0     0.993        ")


def test_blank_lines_and_the_stop_message_give_nothing():
    listener = DcgmListener()
    assert listener.parse("") == []
    assert listener.parse("dmon was stopped do to receiving a signal") == []
    assert listener.parse("dmon was stopped due to receiving a signal") == []


# --------------------------------------------------------------------------- the fake tool


def test_available_with_the_fake(fakes_on_path):
    assert DcgmListener().available() is None


def test_available_without_the_tool(clean_env):
    clean_env.setenv("PATH", path_without_nvidia_tools())
    assert DcgmListener().available() == "dcgmi not found"


def test_available_says_when_the_host_engine_is_not_running(clean_env, tmp_path):
    body = f"def main(args):\n    sys.stdout.write({NO_HOSTENGINE!r})\n    return 239\n"
    clean_env.setenv("PATH", scripted_dcgmi(tmp_path / "bin", body))
    assert DcgmListener().available() == HOSTENGINE_DOWN
    listener = DcgmListener()
    with pytest.raises(RuntimeError, match=HOSTENGINE_DOWN):
        listener.start(Recorded(tmp_path).context)
    listener.stop()


def test_streams_the_fakes_values_and_reaps_it_on_stop(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    log = tmp_path / "dcgmi.jsonl"
    fakes_on_path.setenv("FAKE_DCGMI_LOG", str(log))
    collected = Recorded(tmp_path, interval_s=0.1, devices=["1"])
    listener = DcgmListener()
    listener.start(collected.context)
    try:
        wait_for(lambda: len(collected.series("dcgm/gpu1/smact_ratio")) >= 4, timeout=30)
        pid = listener.process.pid
    finally:
        listener.stop()
    assert listener.process.returncode is not None and not pid_alive(pid)
    assert collected.warnings == [] and listener.skipped == 0
    assert collected.tags == {"radt.dcgm.fields": ",".join(str(f) for f in ALL_FIELDS)}
    assert not any(key.startswith("dcgm/gpu0/") for key in collected.key_set())
    # one check of one sample, then the stream; both for GPU 1 only, every 100 ms
    calls = [json.loads(line)["argv"] for line in log.read_text().splitlines()]
    fields = ",".join(str(f) for f in ALL_FIELDS)
    assert calls == [
        ["discovery", "-c"],
        ["dmon", "-e", fields, "-d", "100", "-c", "1", "-i", "1"],
        ["dmon", "-e", fields, "-d", "100", "-i", "1"],
    ]
    # the fake's first sample is N/A, then the fixture's values in turn
    smact = [
        float(line.split()[3]) for line in PROF if line.startswith("GPU 0") and "N/A" not in line
    ]
    series = collected.series("dcgm/gpu1/smact_ratio")
    # the fake offsets each entity by its position in -i (here 0)
    assert series == [smact[i % len(smact)] for i in range(len(series))]
    assert collected.series("dcgm/gpu1/power_w")[:3] == [52.12, 87.12, 85.09]
    energy = collected.series("dcgm/gpu1/energy_j")
    assert energy == pytest.approx([8.712 * i for i in range(len(energy))])


def test_streams_the_dcgm2_layout_of_the_fake(fakes_on_path, tmp_path):
    """A DCGM 2.x host records the same series, header repeats included."""
    fakes_on_path.setenv("FAKE_DCGMI_LAYOUT", "2")
    collected = Recorded(tmp_path, interval_s=0.1)
    listener = DcgmListener()
    listener.start(collected.context)
    try:
        # past the first repeated header (after 15 samples)
        wait_for(lambda: len(collected.series("dcgm/gpu0/smact_ratio")) >= 18, timeout=60)
    finally:
        listener.stop()
    assert collected.warnings == [] and listener.skipped == 0
    assert collected.series("dcgm/gpu0/power_w")[:3] == [52.12, 87.12, 85.09]
    energy = collected.series("dcgm/gpu0/energy_j")
    assert energy == pytest.approx([8.712 * i for i in range(len(energy))])


def test_dcgm2_profiling_busy_falls_back_with_one_warning(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_DCGMI_LAYOUT", "2")
    fakes_on_path.setenv("FAKE_DCGMI_PROF_BUSY", "1")
    collected = Recorded(tmp_path)
    listener = DcgmListener()
    listener.start(collected.context)
    try:
        wait_for(lambda: len(collected.series("dcgm/gpu0/power_w")) >= 2, timeout=30)
    finally:
        listener.stop()
    assert len(collected.warnings) == 1 and "Error setting watches" in collected.warnings[0]
    assert collected.tags == {"radt.dcgm.fields": "155,156"}
    assert listener.skipped == 0


def test_mig_instances_of_the_runs_gpu_are_watched_under_their_slice(fakes_on_path, tmp_path):
    state = tmp_path / "state.json"
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_STATE", str(state))
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_MIG", "1")
    fakes_on_path.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    subprocess.run(["nvidia-smi", "mig", "-i", "0", "-cgi", "9,14", "-C"], check=True)
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=True)
    mig_uuid = next(w for w in listed.stdout.split() if w.startswith("MIG-")).rstrip(")")
    collected = Recorded(tmp_path, devices=[mig_uuid])
    listener = DcgmListener()
    listener.start(collected.context)
    try:
        assert listener.entities == "0,i:0,i:1"
        wait_for(lambda: len(collected.series("dcgm/gpu0/gi5/smact_ratio")) >= 2, timeout=30)
    finally:
        listener.stop()
    keys = collected.key_set()
    assert {"dcgm/gpu0/smact_ratio", "dcgm/gpu0/gi2/smact_ratio"} <= keys
    assert not any(key.startswith("dcgm/gpu1") for key in keys)
    assert collected.warnings == []


def test_profiling_busy_falls_back_to_power_and_energy_with_one_warning(fakes_on_path, tmp_path):
    fakes_on_path.setenv("FAKE_DCGMI_PROF_BUSY", "1")
    collected = Recorded(tmp_path)
    listener = DcgmListener()
    listener.start(collected.context)
    try:
        wait_for(lambda: len(collected.series("dcgm/gpu0/power_w")) >= 3, timeout=30)
    finally:
        listener.stop()
    assert len(collected.warnings) == 1
    warning = collected.warnings[0]
    assert "Error setting watches. Result: -33" in warning
    assert f"dropped {PROFILING_DROPPED}" in warning
    assert "155 POWER, 156 TOTEC" in warning
    assert collected.tags == {"radt.dcgm.fields": "155,156"}
    assert listener.process.args[:4] == ["dcgmi", "dmon", "-e", "155,156"]
    assert collected.key_set() == {"dcgm/gpu0/power_w", "dcgm/gpu0/energy_j"}
    assert listener.skipped == 0


DYING = """
def main(args):
    if args[:1] == ["discovery"]:
        print("+---+\\n| Instance Hierarchy |\\n+===+\\n+---+")
        return 0
    print("#Entity   SMACT        POWER             ", flush=True)
    print("ID                     W                 ", flush=True)
    print("GPU 0     0.500        61.500            ", flush=True)
    if "-c" in args:
        return 0
    time.sleep(0.05)
    print("GPU 0     0.250        62.500            ", flush=True)
    sys.stderr.write("Error getting values information. Return -7: Host engine is down\\n")
    return 249
"""


def test_a_tool_dying_mid_run_gives_exactly_one_warning(clean_env, tmp_path):
    clean_env.setenv("PATH", scripted_dcgmi(tmp_path / "bin", DYING))
    collected = Recorded(tmp_path)
    listener = DcgmListener()
    listener.start(collected.context)
    wait_for(lambda: collected.warnings, timeout=30)
    listener.stop()
    assert collected.series("dcgm/gpu0/smact_ratio") == [0.5, 0.25]
    assert collected.series("dcgm/gpu0/power_w") == [61.5, 62.5]
    assert len(collected.warnings) == 1
    assert "exited with code 249" in collected.warnings[0]
    assert "Host engine is down" in collected.warnings[0]


SLOW_CHECK = """
def main(args):
    if args[:1] == ["discovery"]:
        return 0
    time.sleep(60)
    return 0
"""


def test_stop_during_the_field_check_ends_it_at_once(clean_env, tmp_path):
    clean_env.setenv("PATH", scripted_dcgmi(tmp_path / "bin", SLOW_CHECK))
    collected = Recorded(tmp_path)
    listener = DcgmListener()
    listener.start(collected.context)
    wait_for(lambda: listener._probe is not None, timeout=30)
    probe = listener._probe
    began = time.monotonic()
    listener.stop()
    assert time.monotonic() - began < 10  # the check alone would take 60 s
    assert probe.returncode is not None and not pid_alive(probe.pid)
    assert listener.process is None  # the stream never started
    assert collected.warnings == [] and collected.tags == {}


def test_interval_default_and_floor(tmp_path):
    listener = DcgmListener()
    assert listener.interval(Recorded(tmp_path, interval_s=None).context) == 0.5
    assert listener.interval(Recorded(tmp_path, interval_s=0.01).context) == 0.1


def test_an_unknown_device_refuses_to_start(fakes_on_path, tmp_path):
    listener = DcgmListener()
    with pytest.raises(ValueError, match="dcgm watches nothing"):
        listener.start(Recorded(tmp_path, devices=["5"]).context)
    listener.stop()
    assert listener.process is None

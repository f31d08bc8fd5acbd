"""Collocation backends against the stateful fakes in tests/fakes (real subprocesses).

Every test points the fakes at a state file and MPS pipe directory under
tmp_path and checks that after setup + teardown (success, failure, Ctrl-C, a
crash inside setup) the fake GPU is exactly as before: no MIG instance, no
MPS daemon, no changed power limit.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from radt.collocation import (
    Slot,
    SlotRequest,
    Teardown,
    after_start,
    check,
    mig,
    mps,
    nvsmi,
    power,
    server_list,
    setup,
)
from radt.errors import RadtError

TESTS = Path(__file__).resolve().parent
FAKES = TESTS / "fakes"
FIXTURES = TESTS / "fixtures"
CHANGING = ("-cgi", "-dci", "-dgi", "-pl", "-mig")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def load_fake_smi():
    """The fake nvidia-smi as a module (for its MIG UUID formula)."""
    loader = importlib.machinery.SourceFileLoader("fake_nvidia_smi", str(FAKES / "nvidia-smi"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@dataclass
class FakeGpu:
    """The fakes' state under tmp_path, and what was called."""

    root: Path
    state_file: Path
    smi_log: Path
    mps_log: Path
    default_pipe: Path

    def state(self) -> dict:
        if not self.state_file.exists():
            return {}
        return json.loads(self.state_file.read_text())

    def write_state(self, state: dict) -> None:
        self.state_file.write_text(json.dumps(state, indent=1, sort_keys=True))

    def smi_calls(self) -> list[list[str]]:
        if not self.smi_log.exists():
            return []
        return [json.loads(ln)["argv"] for ln in self.smi_log.read_text().splitlines()]

    def mps_calls(self) -> list[dict]:
        if not self.mps_log.exists():
            return []
        return [json.loads(ln) for ln in self.mps_log.read_text().splitlines()]

    def changing_calls(self) -> list[list[str]]:
        return [argv for argv in self.smi_calls() if any(a in CHANGING for a in argv)]

    def smi(self, *args: str) -> nvsmi.ToolResult:
        return nvsmi.run(["nvidia-smi", *args])


@pytest.fixture
def gpu(tmp_path, monkeypatch) -> FakeGpu:
    for name in list(os.environ):
        if name.startswith(("FAKE_", "CUDA_MPS", "CUDA_VISIBLE")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ['PATH']}")
    fake = FakeGpu(
        tmp_path,
        tmp_path / "smi-state.json",
        tmp_path / "smi.log",
        tmp_path / "mps.log",
        tmp_path / "default-mps",
    )
    monkeypatch.setenv("FAKE_NVIDIA_SMI_STATE", str(fake.state_file))
    monkeypatch.setenv("FAKE_NVIDIA_SMI_LOG", str(fake.smi_log))
    monkeypatch.setenv("FAKE_MPS_LOG", str(fake.mps_log))
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(fake.default_pipe))
    monkeypatch.setattr(power, "may_set_power_limit", lambda: True)
    return fake


@pytest.fixture
def mig_gpu(gpu, monkeypatch) -> FakeGpu:
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MIG", "1")
    return gpu


def req(line, mode, profile=None, device=0, pct=None, letter=None) -> SlotRequest:
    return SlotRequest(
        line=line,
        letter=letter or "ABCDEFGH"[line - 2],
        device=device,
        mode=mode,
        mps_thread_pct=pct,
        mig_profile=profile,
    )


def run_teardown(teardown: Teardown) -> tuple[list[str], list[str]]:
    warned: list[str] = []
    return teardown.run(warned.append), warned


# --------------------------------------------------------------------------- Teardown


def test_teardown_runs_steps_in_reverse_and_reports_failures():
    done: list[str] = []
    teardown = Teardown()
    teardown.add("first", lambda: done.append("first"))

    def broken():
        raise RadtError("nvidia-smi said\nno")

    teardown.add("second", broken)
    teardown.add("third", lambda: done.append("third"))
    assert teardown.pending() == ["third", "second", "first"]
    failures, warned = run_teardown(teardown)
    assert done == ["third", "first"]
    assert failures == ["teardown: second failed: nvidia-smi said no"]
    assert warned == failures
    assert teardown.run(warned.append) == []  # idempotent
    assert done == ["third", "first"]


def test_teardown_goes_on_after_ctrl_c_in_a_step_and_a_broken_warn():
    done: list[str] = []
    teardown = Teardown()
    teardown.add("last", lambda: done.append("last"))

    def interrupted():
        raise KeyboardInterrupt

    teardown.add("interrupted", interrupted)

    def bad_warn(message):
        raise OSError("terminal gone")

    assert teardown.run(bad_warn) == ["teardown: interrupted failed: interrupted"]
    assert done == ["last"]


def test_teardown_entered_again_from_a_step_runs_each_step_once():
    done: list[str] = []
    teardown = Teardown()
    teardown.add("a", lambda: done.append("a"))
    teardown.add("b", lambda: done.append("b"))
    teardown.add("reenter", lambda: teardown.run(lambda m: None))  # as a signal handler would
    teardown.run(lambda m: None)
    assert done == ["b", "a"]


# --------------------------------------------------------------------------- running tools


def test_critical_call_is_let_finish_when_interrupted():
    argv = [sys.executable, "-c", "import time; time.sleep(0.6); print('created')"]

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        result = nvsmi.run(argv, critical=True)
        assert isinstance(result.interrupted, KeyboardInterrupt)
        assert result.ok and result.output == "created\n"
        with pytest.raises(KeyboardInterrupt):
            result.reraise()
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(KeyboardInterrupt):
            nvsmi.run(argv)  # not critical: the tool is killed, the interruption goes on
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_missing_tool_and_timeout_are_one_line_errors():
    with pytest.raises(nvsmi.ToolMissing, match="no-such-tool-here not found on PATH"):
        nvsmi.run(["no-such-tool-here"])
    with pytest.raises(RadtError, match=r"did not finish within 0.2 s"):
        nvsmi.run([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.2)


# --------------------------------------------------------------------------- parsers


def test_parse_list_both_mig_uuid_formats():
    modern = nvsmi.parse_list(fixture("nvidia_smi_L.txt"))
    assert [(g.index, g.name) for g in modern] == [(0, "NVIDIA H100 80GB HBM3")]
    assert [(m.name, m.index) for m in modern[0].migs] == [
        ("3g.40gb", 0),
        ("2g.20gb", 1),
        ("1g.10gb", 2),
        ("1g.10gb", 3),
    ]
    old = nvsmi.parse_list(fixture("nvidia_smi_L_r450.txt"))
    assert old[0].name == "A100-SXM4-40GB"
    assert len(old[0].migs) == 7
    assert nvsmi.r450_ids(old[0].migs[3].uuid) == (old[0].uuid, 11, 0)
    assert nvsmi.r450_ids(modern[0].migs[0].uuid) is None
    assert nvsmi.parse_list(fixture("nvidia_smi_L_plain.txt"))[0].migs == []
    a100 = nvsmi.parse_list(fixture("nvidia_smi_L_a100_mig.txt"))
    assert a100[0].migs[0].uuid == "MIG-b6cd45f2-9655-5269-9b96-65446729d5dc"


def test_parse_mig_tables():
    profiles = nvsmi.parse_lgip(fixture("nvidia_smi_mig_lgip.txt"))
    assert [(p.name, p.id, p.free, p.total) for p in profiles] == [
        ("1g.5gb", 19, 7, 7),
        ("1g.5gb+me", 20, 1, 1),
        ("1g.10gb", 15, 4, 4),
        ("2g.10gb", 14, 3, 3),
        ("3g.20gb", 9, 2, 2),
        ("4g.20gb", 5, 1, 1),
        ("7g.40gb", 0, 1, 1),
    ]
    assert [p.compute_slices for p in profiles] == [1, 1, 1, 2, 3, 4, 7]
    gis = nvsmi.parse_lgi(fixture("nvidia_smi_mig_lgi.txt"))
    assert [(g.name, g.profile_id, g.id, g.start, g.size) for g in gis] == [
        ("1g.5gb", 19, 11, 0, 1),
        ("1g.5gb", 19, 12, 1, 1),
        ("2g.10gb", 14, 6, 2, 2),
        ("3g.20gb", 9, 1, 4, 4),
    ]
    cis = nvsmi.parse_lci(fixture("nvidia_smi_mig_lci.txt"))
    assert [(c.gpu, c.gi, c.name, c.id, c.start, c.size) for c in cis] == [
        (0, 11, "1g.5gb", 0, 0, 1),
        (0, 12, "1g.5gb", 0, 0, 1),
    ]
    created = nvsmi.parse_created(fixture("nvidia_smi_mig_create.txt"))
    assert [(c.gi, c.ci, c.name, c.profile_id) for c in created] == [
        (2, None, "3g.20gb", 9),
        (2, 0, "3g.20gb", 2),
        (1, None, "3g.20gb", 9),
        (1, 0, "3g.20gb", 2),
    ]


def test_parse_power_a100_and_h100():
    (a100,) = nvsmi.parse_power(fixture("nvidia_smi_q_power.txt"))
    assert (a100.current, a100.requested, a100.min, a100.max) == (400.0, 400.0, 100.0, 400.0)
    (h100,) = nvsmi.parse_power(fixture("nvidia_smi_q_power_h100.txt"))
    assert (h100.current, h100.requested, h100.default) == (500.0, 700.0, 700.0)
    assert h100.setting == 700.0  # restore what -pl set, not what is enforced now
    assert (h100.min, h100.max) == (200.0, 700.0)


# --------------------------------------------------------------------------- MIG placement model


def a100_profiles() -> dict[str, nvsmi.GiProfile]:
    return {p.name: p for p in nvsmi.parse_lgip(fixture("nvidia_smi_mig_lgip.txt"))}


def test_layout_gives_the_a100_placements_of_the_mig_user_guide():
    profiles = a100_profiles()
    layout = mig.layout_of(list(profiles.values()))
    assert (layout.memory_slices, layout.compute_slices) == (8, 7)
    fake = load_fake_smi()
    for profile in profiles.values():
        assert layout.placements(profile) == fake.PROFILES[profile.id][2], profile.name
        assert layout.sizes[profile.id] == fake.PROFILES[profile.id][1], profile.name


@pytest.mark.parametrize(
    ("names", "fits"),
    [
        (["7g.40gb"], True),
        (["4g.20gb", "3g.20gb"], True),
        (["1g.5gb", "2g.10gb", "4g.20gb"], True),
        (["2g.10gb", "3g.20gb", "2g.10gb"], True),
        (["2g.10gb", "2g.10gb", "2g.10gb", "1g.5gb"], True),
        (["1g.5gb"] * 7, True),
        (["3g.20gb", "3g.20gb", "1g.5gb"], False),
        (["4g.20gb", "4g.20gb"], False),
        (["7g.40gb", "1g.5gb"], False),
        (["1g.10gb"] * 4 + ["1g.5gb"], False),
    ],
)
def test_arrange_the_partitionings_of_the_study(names, fits):
    profiles = a100_profiles()
    layout = mig.layout_of(list(profiles.values()))
    wanted = [profiles[n] for n in names]
    starts = mig.arrange(layout, [], wanted)
    assert (starts is not None) == fits
    if starts:
        cells = [
            c for p, s in zip(wanted, starts, strict=True) for c in range(s, s + layout.sizes[p.id])
        ]
        assert len(cells) == len(set(cells))


def test_arrange_around_instances_that_exist():
    profiles = a100_profiles()
    layout = mig.layout_of(list(profiles.values()))
    existing = nvsmi.parse_lgi(fixture("nvidia_smi_mig_lgi.txt"))  # 1g 0, 1g 1, 2g 2, 3g 4
    assert mig.arrange(layout, existing, [profiles["1g.5gb"]]) is None
    assert mig.arrange(layout, existing[:1], [profiles["1g.5gb"], profiles["2g.10gb"]]) == [1, 2]


# --------------------------------------------------------------------------- MIG UUIDs


def test_map_uuids_modern_format_by_instance_order():
    (h100,) = nvsmi.parse_list(fixture("nvidia_smi_L.txt"))
    ci = nvsmi.ComputeInstance
    cis = [  # as -lci would list them (its own order), GI ids as an H100 numbers them
        ci(0, 13, "1g.10gb", 0, 0, 0, 1),
        ci(0, 1, "3g.40gb", 2, 0, 0, 3),
        ci(0, 14, "1g.10gb", 0, 0, 0, 1),
        ci(0, 5, "2g.20gb", 1, 0, 0, 2),
    ]
    wanted = [(5, 0, "2g.20gb"), (14, 0, "1g.10gb"), (1, 0, "3g.40gb")]
    found, how = mig.map_uuids(h100, cis, wanted, before=set())
    assert found == {
        (1, 0): "MIG-00000000-0000-0000-0000-000000000000",
        (5, 0): "MIG-00000001-0000-0000-0000-000000000001",
        (14, 0): "MIG-00000003-0000-0000-0000-000000000003",
    }
    assert "by GPU instance id" in how


def test_map_uuids_r450_format_reads_the_ids():
    (a100,) = nvsmi.parse_list(fixture("nvidia_smi_L_r450.txt"))
    found, how = mig.map_uuids(a100, [], [(11, 0, "1g.5gb"), (7, 0, "1g.5gb")], before=set())
    assert found == {
        (11, 0): "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/11/0",
        (7, 0): "MIG-GPU-5c89852c-d268-c3f3-1b07-005d5ae1dc3f/7/0",
    }
    assert "R450" in how


def test_map_uuids_falls_back_to_new_devices_by_name_then_fails_clearly():
    (h100,) = nvsmi.parse_list(fixture("nvidia_smi_L.txt"))
    before = {m.uuid for m in h100.migs if m.name != "2g.20gb"}
    cis = [nvsmi.ComputeInstance(0, 5, "2g.20gb", 1, 0, 0, 2)]  # -lci misses the others
    found, how = mig.map_uuids(h100, cis, [(5, 0, "2g.20gb")], before)
    assert found == {(5, 0): "MIG-00000001-0000-0000-0000-000000000001"}
    assert how.startswith("fallback")
    with pytest.raises(RadtError, match="cannot find the MIG device of GPU instance 9"):
        mig.map_uuids(h100, cis, [(9, 0, "7g.80gb")], before)


# --------------------------------------------------------------------------- naive


def test_naive_needs_no_tool(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all (a CPU-only machine)
    requests = [req(2, "naive"), req(3, "naive"), req(4, "naive", device=None)]
    assert check(requests, {}, "plan.csv") == []
    teardown = Teardown()
    slots, artifacts = setup(requests, {}, tmp_path / "work", teardown, print)
    assert slots[0] == Slot(
        {"CUDA_VISIBLE_DEVICES": "0"}, ["0"], {"radt.collocation": "naive", "radt.devices": "0"}
    )
    assert slots[2].env == {} and slots[2].devices == []
    assert artifacts == {} and len(teardown) == 0


# --------------------------------------------------------------------------- MIG


@pytest.mark.slow
def test_mig_setup_and_teardown_leave_the_gpu_as_before(mig_gpu):
    fake = load_fake_smi()
    # a GPU instance someone else made, and a limit someone else set: both must stay
    assert mig_gpu.smi("mig", "-i", "0", "-cgi", "19", "-C").ok
    assert mig_gpu.smi("-i", "0", "-pl", "300").ok
    before = mig_gpu.state()
    foreign = before["gpus"]["0"]["gis"][0]["id"]
    requests = [req(2, "mig", "3g.20gb"), req(3, "mig", "2g.10gb"), req(4, "mig", "1g.5gb")]
    assert check(requests, {0: 250}, "plan.csv") == []
    assert mig_gpu.state() == before

    teardown = Teardown()
    slots, artifacts = setup(requests, {0: 250}, mig_gpu.root / "work", teardown, print)
    during = mig_gpu.state()["gpus"]["0"]
    assert during["power_limit"] == 250.0
    created = {gi["id"]: gi for gi in during["gis"] if gi["id"] != foreign}
    assert len(created) == 3
    uuids = set()
    for request, slot in zip(requests, slots, strict=True):
        (uuid,) = slot.devices
        assert slot.env == {"CUDA_VISIBLE_DEVICES": uuid}
        gi_id = int(slot.tags["radt.mig_instance"].split("GPU instance ")[1].split()[0])
        gi = created[gi_id]
        assert fake.PROFILES[gi["profile"]][0] == request.mig_profile
        assert uuid == fake.mig_uuid(0, gi_id, 0)
        assert slot.tags["radt.mig_profile"] == request.mig_profile
        assert slot.tags["radt.collocation"] == "mig"
        assert slot.tags["radt.devices"] == uuid
        assert slot.tags["radt.power_limit_w"] == "250"
        uuids.add(uuid)
    assert len(uuids) == 3
    placement = artifacts["mig_placement.txt"]
    assert "$ nvidia-smi mig -i 0 -lgi" in placement and "$ nvidia-smi mig -i 0 -lci" in placement
    assert all(u in placement for u in uuids)
    assert "was 300 W" in artifacts["power_limits.txt"]
    creates = [argv for argv in mig_gpu.smi_calls() if "-cgi" in argv][1:]
    assert [argv[argv.index("-cgi") + 1] for argv in creates] == [
        "9:4",
        "14:2",
        "19:1",
    ]  # around the 1g at 0

    failures, _ = run_teardown(teardown)
    assert failures == []
    assert mig_gpu.state() == before
    destroyed = [argv for argv in mig_gpu.smi_calls() if "-dgi" in argv]
    assert sorted(int(argv[argv.index("-gi") + 1]) for argv in destroyed) == sorted(created)
    assert not any("-gi" not in argv for argv in mig_gpu.changing_calls() if "-dci" in argv)


@pytest.mark.slow
def test_mig_with_r450_uuids(mig_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_MIG_UUIDS", "r450")
    gpu_uuid = nvsmi.parse_list(mig_gpu.smi("-L").output)[0].uuid
    requests = [req(2, "mig", "1g.5gb"), req(3, "mig", "1g.5gb"), req(4, "mig", "2g.10gb")]
    teardown = Teardown()
    slots, artifacts = setup(requests, {}, mig_gpu.root / "work", teardown, print)
    try:
        for slot in slots:
            gi_id = slot.tags["radt.mig_instance"].split("GPU instance ")[1].split()[0]
            assert slot.env["CUDA_VISIBLE_DEVICES"] == f"MIG-{gpu_uuid}/{gi_id}/0"
        assert "R450" in artifacts["mig_placement.txt"]
    finally:
        run_teardown(teardown)
    assert mig_gpu.state() == {}


@pytest.mark.slow
def test_mig_second_create_fails_and_teardown_destroys_the_first(mig_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "cgi2")
    requests = [req(2, "mig", "4g.20gb"), req(3, "mig", "3g.20gb")]
    teardown = Teardown()
    with pytest.raises(RadtError) as failed:
        setup(requests, {0: 200}, mig_gpu.root / "work", teardown, print)
    message = str(failed.value)
    assert message.startswith("plan line 3: creating MIG instance 3g.20gb on GPU 0 failed")
    assert "Insufficient Resources" in message and "\n" not in message
    assert len(mig_gpu.state()["gpus"]["0"]["gis"]) == 1
    assert teardown.pending() == [
        "destroy MIG compute instance 0 of GPU instance 1 on GPU 0",
        "destroy MIG GPU instance 1 on GPU 0",
        "restore the power limit of GPU 0 to 400 W",
    ]
    assert run_teardown(teardown)[0] == []
    assert mig_gpu.state() == {}


@pytest.mark.slow
def test_ctrl_c_during_a_create_still_destroys_what_it_made(mig_gpu, monkeypatch):
    real_run = nvsmi.run
    creates = []

    def ctrl_c_in_second_create(argv, **kwargs):
        result = real_run(argv, **kwargs)
        if "-cgi" in argv:
            creates.append(argv)
            if len(creates) == 2:  # Ctrl-C arrived while nvidia-smi created the instance
                result.interrupted = KeyboardInterrupt()
        return result

    monkeypatch.setattr(nvsmi, "run", ctrl_c_in_second_create)
    requests = [req(2, "mig", "3g.20gb"), req(3, "mig", "2g.10gb"), req(4, "mig", "1g.5gb+me")]
    teardown = Teardown()
    with pytest.raises(KeyboardInterrupt):
        setup(requests, {}, mig_gpu.root / "work", teardown, print)
    assert len(mig_gpu.state()["gpus"]["0"]["gis"]) == 2  # both made, both known
    assert len(teardown) == 4
    assert run_teardown(teardown)[0] == []
    assert mig_gpu.state() == {}


@pytest.mark.slow
def test_a_crash_inside_setup_after_the_creates_is_cleaned_up(mig_gpu, monkeypatch):
    def crash(*args, **kwargs):
        raise RuntimeError("bug in radT")

    monkeypatch.setattr(mig, "map_uuids", crash)
    teardown = Teardown()
    with pytest.raises(RuntimeError):
        setup([req(2, "mig", "7g.40gb")], {0: 150}, mig_gpu.root / "work", teardown, print)
    assert mig_gpu.state() != {}
    assert run_teardown(teardown)[0] == []
    assert mig_gpu.state() == {}


@pytest.mark.slow
def test_a_failing_teardown_step_is_reported_and_the_rest_still_run(mig_gpu, monkeypatch):
    requests = [req(2, "mig", "4g.20gb"), req(3, "mig", "3g.20gb")]
    teardown = Teardown()
    setup(requests, {0: 220}, mig_gpu.root / "work", teardown, print)
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "dgi")
    failures, warned = run_teardown(teardown)
    assert len(failures) == 2 and warned == failures
    assert all(f.startswith("teardown: destroy MIG GPU instance") for f in failures)
    assert all("In use by another client" in f and "\n" not in f for f in failures)
    state = mig_gpu.state()["gpus"]["0"]
    assert "power_limit" not in state  # restored to 400 W after the failures
    assert [gi["cis"] for gi in state["gis"]] == [[], []]  # compute instances went first
    monkeypatch.delenv("FAKE_NVIDIA_SMI_FAIL")
    for gi in state["gis"]:
        mig.destroy_gi(0, gi["id"])
    assert mig_gpu.state() == {}


# --------------------------------------------------------------------------- MPS


@pytest.mark.slow
def test_mps_setup_and_teardown(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    monkeypatch.setenv("FAKE_MPS_SERVER_PIDS", "3809")
    gpus = nvsmi.parse_list(gpu.smi("-L").output)
    requests = [req(2, "mps", device=1, pct=50), req(3, "mps", device="1")]
    assert check(requests, {}, "plan.csv") == []
    teardown = Teardown()
    slots, artifacts = setup(requests, {}, gpu.root / "work", teardown, print)
    pipe = Path(slots[0].env["CUDA_MPS_PIPE_DIRECTORY"])
    log = Path(slots[0].env["CUDA_MPS_LOG_DIRECTORY"])
    assert pipe.parent == Path("/tmp") and pipe.name.startswith("radt-mps1-")
    assert len(str(pipe)) <= mps.PIPE_PATH_MAX  # whatever the workdir: its sockets' paths fit
    assert log == (gpu.root / "work" / "mps-gpu1" / "log")
    assert (pipe / mps.PID_FILE).exists()
    for slot in slots:
        assert slot.env["CUDA_VISIBLE_DEVICES"] == gpus[1].uuid
        assert slot.devices == ["1"]
        assert slot.tags["radt.collocation"] == "mps"
    assert slots[0].env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert slots[0].tags["radt.mps_thread_pct"] == "50"
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in slots[1].env
    assert slots[0].env["CUDA_MPS_PIPE_DIRECTORY"] == slots[1].env["CUDA_MPS_PIPE_DIRECTORY"]
    assert "line 2 (A): active thread percentage 50 %" in artifacts["mps.txt"]
    assert server_list(slots[0]) == "3809\n"
    assert after_start(slots)["mps_servers_gpu1.txt"].endswith("nvidia-cuda-mps-control\n3809\n")

    assert run_teardown(teardown)[0] == []
    assert not pipe.exists() and log.is_dir()
    calls = gpu.mps_calls()
    assert calls[0]["argv"] == ["-d"]
    assert calls[-1]["stdin"] == ["quit"]
    assert not gpu.default_pipe.exists()  # the default pipe directory was never touched
    assert gpu.changing_calls() == []


def test_mps_with_a_long_workdir_uses_a_short_pipe_directory(gpu):
    teardown = Teardown()
    work = gpu.root / ("a-long-folder-name-" * 8) / "work"  # 152 characters more
    slots, _ = setup([req(2, "mps")], {}, work, teardown, print)
    pipe = Path(slots[0].env["CUDA_MPS_PIPE_DIRECTORY"])
    assert pipe.name.startswith("radt-mps0-") and (pipe / mps.PID_FILE).exists()
    assert len(str(pipe)) <= mps.PIPE_PATH_MAX
    assert Path(slots[0].env["CUDA_MPS_LOG_DIRECTORY"]) == work / "mps-gpu0" / "log"
    assert run_teardown(teardown)[0] == []
    assert not pipe.exists()


def test_a_pipe_directory_too_long_for_sockets_is_refused_in_one_line(gpu, monkeypatch):
    monkeypatch.setattr(mps, "PIPE_PATH_MAX", 10)  # as a long TMPDIR would be
    teardown = Teardown()
    with pytest.raises(RadtError) as caught:
        setup([req(2, "mps")], {}, gpu.root / "work", teardown, print)
    message = str(caught.value)
    assert re.fullmatch(
        r"plan line 2: the MPS pipe directory /tmp/radt-mps0-\S+ is \d+ characters long, too "
        r"long for the daemon's sockets \(at most 10\); make /tmp writable, or set TMPDIR to "
        r"a short folder",
        message,
    ), message
    assert not Path(message.split()[7]).exists()  # nothing left behind
    assert gpu.mps_calls() == []  # no daemon was started
    assert run_teardown(teardown)[0] == []


def test_mps_daemon_that_fails_to_start_is_a_setup_error(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_MPS_START_ERROR", "An instance of this daemon is already running")
    teardown = Teardown()
    with pytest.raises(RadtError, match=r"^plan line 2: starting the MPS control daemon for GPU 0"):
        setup([req(2, "mps")], {}, gpu.root / "work", teardown, print)
    (pending,) = teardown.pending()  # no daemon to stop: only its pipe directory to remove
    assert pending.startswith("remove the MPS pipe directory /tmp/radt-mps0-")
    pipe = Path(pending.rsplit(" ", 1)[1])
    assert pipe.is_dir()
    assert run_teardown(teardown)[0] == []
    assert not pipe.exists()


def test_mps_quit_of_a_daemon_that_is_gone_counts_as_stopped(gpu):
    teardown = Teardown()
    slots, _ = setup([req(2, "mps")], {}, gpu.root / "work", teardown, print)
    mps.stop(Path(slots[0].env["CUDA_MPS_PIPE_DIRECTORY"]), slots[0].env)  # it died meanwhile
    assert run_teardown(teardown)[0] == []


@pytest.mark.slow
def test_check_refuses_mps_next_to_a_running_daemon(gpu):
    started = nvsmi.run(["nvidia-cuda-mps-control", "-d"])  # at the default pipe directory
    assert started.ok
    before = sorted(p.name for p in gpu.default_pipe.iterdir())
    problems = check([req(2, "mps"), req(3, "mps")], {}, "plan.csv")
    assert len(problems) == 1
    assert problems[0].startswith(
        "plan.csv lines 2, 3: an MPS control daemon already runs for GPU 0"
    )
    assert str(gpu.default_pipe) in problems[0]
    assert "echo quit" in problems[0]
    naive = check([req(2, "naive"), req(3, "naive")], {}, "plan.csv")
    assert naive and "would run under MPS" in naive[0]
    assert sorted(p.name for p in gpu.default_pipe.iterdir()) == before
    assert [c["argv"] for c in gpu.mps_calls()].count(["-d"]) == 1


def test_a_daemon_of_another_pipe_directory_counts_for_its_gpus_only(monkeypatch):
    gpus = nvsmi.parse_list("GPU 0: X (UUID: GPU-aaaa)\nGPU 1: X (UUID: GPU-bbbb)\n")
    assert mps._scope({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, gpus) == {1}
    assert mps._scope({"CUDA_VISIBLE_DEVICES": "0"}, gpus) == {0}
    assert mps._scope({}, gpus) is None and mps._scope(None, gpus) is None
    daemon = mps.Daemon(77, "/tmp/elsewhere", {1}, default_pipe=False)
    assert mps.check_gpu(gpus[0], [req(2, "mps")], [daemon], lambda lines: "p") == []
    (problem,) = mps.check_gpu(gpus[1], [req(2, "mps", device=1)], [daemon], lambda lines: "p")
    assert "pid 77" in problem
    assert mps.check_gpu(gpus[1], [req(2, "naive", device=1)], [daemon], lambda lines: "p") == []


# --------------------------------------------------------------------------- power


def test_power_limit_set_and_restored_to_the_original(gpu):
    gpu.smi("-i", "0", "-pl", "320")
    before = gpu.state()
    teardown = Teardown()
    slots, artifacts = setup(
        [req(2, "naive"), req(3, "naive")], {0: 175.5}, gpu.root, teardown, print
    )
    assert gpu.state()["gpus"]["0"]["power_limit"] == 175.5
    assert [s.tags["radt.power_limit_w"] for s in slots] == ["175.5", "175.5"]
    assert "was 320 W" in artifacts["power_limits.txt"]
    assert teardown.pending() == ["restore the power limit of GPU 0 to 320 W"]
    assert run_teardown(teardown)[0] == []
    assert gpu.state() == before


def test_power_limit_equal_to_the_current_one_changes_nothing(gpu, monkeypatch):
    monkeypatch.setattr(power, "may_set_power_limit", lambda: False)
    assert check([req(2, "naive")], {0: 400}, "plan.csv") == []
    teardown = Teardown()
    slots, artifacts = setup([req(2, "naive")], {0: 400}, gpu.root, teardown, print)
    assert slots[0].tags["radt.power_limit_w"] == "400"
    assert "already set" in artifacts["power_limits.txt"]
    assert len(teardown) == 0 and gpu.changing_calls() == []


def test_power_limit_refused_by_the_driver_is_a_setup_error(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "pl")
    teardown = Teardown()
    with pytest.raises(RadtError, match="Insufficient Permissions") as failed:
        setup([req(4, "naive")], {0: 250}, gpu.root, teardown, print)
    assert str(failed.value).startswith("plan line 4: setting the power limit of GPU 0 to 250 W")
    assert len(teardown) == 0 and gpu.state() == {}


# --------------------------------------------------------------------------- check: bad input


def assert_nothing_changed(gpu: FakeGpu, before: dict) -> None:
    assert gpu.state() == before
    assert gpu.changing_calls() == []
    assert not gpu.default_pipe.exists()


@pytest.mark.parametrize(
    ("requests", "limits", "expected"),
    [
        (
            [req(3, "mig", "9g.90gb")],
            {},
            [
                "plan.csv line 3: MIG profile 9g.90gb does not exist on GPU 0 "
                "(NVIDIA A100-SXM4-40GB); it offers 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, "
                "3g.20gb, 4g.20gb, 7g.40gb"
            ],
        ),
        (
            [req(2, "mig", "4g.20gb"), req(3, "mig", "4g.20gb")],
            {},
            [
                "plan.csv lines 2, 3: MIG profiles 4g.20gb + 4g.20gb need 8 compute slices "
                "together, but GPU 0 (NVIDIA A100-SXM4-40GB) has 7 free of 7"
            ],
        ),
        (
            [req(2, "mig", "3g.20gb"), req(3, "mig", "3g.20gb"), req(4, "mig", "1g.5gb")],
            {},
            [
                "plan.csv lines 2, 3, 4: MIG profiles 3g.20gb + 3g.20gb + 1g.5gb cannot be "
                "placed side by side on GPU 0 (NVIDIA A100-SXM4-40GB): MIG instances sit at "
                "fixed positions, and these leave no room for each other"
            ],
        ),
        (
            [req(2, "mig", "1g.5gb+me"), req(3, "mig", "1g.5gb+me")],
            {},
            [
                "plan.csv lines 2, 3: MIG profiles 1g.5gb+me + 1g.5gb+me ask for 2 x 1g.5gb+me, "
                "but GPU 0 (NVIDIA A100-SXM4-40GB) has room for 1 more (at most 1)"
            ],
        ),
        (
            [req(2, "mig", "3g.20gb"), req(3, "mps")],
            {},
            [
                "plan.csv lines 2, 3: GPU 0 (NVIDIA A100-SXM4-40GB): radT does not mix MIG "
                "slices and MPS on one GPU"
            ],
        ),
        (
            [req(2, "mig", "3g.20gb")],
            {0: 50},
            [
                "plan.csv line 2: power limit 50 W is outside the range of GPU 0 "
                "(NVIDIA A100-SXM4-40GB): 100 W to 400 W"
            ],
        ),
        (
            [req(2, "mig", "1g.5gb", device=3)],
            {},
            [
                "plan.csv line 2: GPU 3 does not exist here; nvidia-smi -L lists "
                "0 (NVIDIA A100-SXM4-40GB)"
            ],
        ),
        (
            [req(2, "mig", "1g.5gb", pct=30), req(3, "mig", "MIG 1g.5gb")],
            {},
            ["plan.csv line 2: an active thread percentage applies to mps rows only"],
        ),
        (
            [req(2, "naive"), req(3, "naive")],
            {},
            [
                "plan.csv lines 2, 3: GPU 0 (NVIDIA A100-SXM4-40GB) is in MIG mode, so naive "
                "runs would get one MIG slice at most; give them MIG profiles, or have someone "
                "with root turn MIG off (`sudo nvidia-smi -i 0 -mig 0`)"
            ],
        ),
    ],
)
def test_check_bad_input_names_the_line_and_changes_nothing(mig_gpu, requests, limits, expected):
    before = mig_gpu.state()
    assert check(requests, limits, "plan.csv") == expected
    assert_nothing_changed(mig_gpu, before)


def test_check_mig_mode_off_gives_the_root_command(gpu):
    problems = check([req(5, "mig", "3g.20gb"), req(6, "mig", "3g.20gb")], {}, "plan.csv")
    assert len(problems) == 1
    assert problems[0].startswith("plan.csv lines 5, 6: MIG mode is off on GPU 0")
    assert "`sudo nvidia-smi -i 0 -mig 1`" in problems[0]
    assert "reset" in problems[0] and "never switches it on" in problems[0]
    assert_nothing_changed(gpu, {})
    gpu.write_state({"gpus": {"0": {"mig": False}}})
    with pytest.raises(RadtError, match="MIG mode is off"):
        setup([req(5, "mig", "3g.20gb")], {}, gpu.root, Teardown(), print)
    assert_nothing_changed(gpu, {"gpus": {"0": {"mig": False}}})


@pytest.mark.slow
def test_check_counts_instances_that_exist_already(mig_gpu):
    assert mig_gpu.smi("mig", "-cgi", "4g.20gb", "-C").ok
    before = mig_gpu.state()
    (problem,) = check([req(2, "mig", "4g.20gb")], {}, "plan.csv")
    assert problem.startswith("plan.csv line 2: MIG profiles 4g.20gb need 4 compute slices")
    assert "has 3 free of 7; it already holds 4g.20gb (GPU instance 1 at 0:4)" in problem
    assert check([req(2, "mig", "3g.20gb")], {}, "plan.csv") == []
    assert mig_gpu.state() == before


def test_check_power_permission(gpu, monkeypatch):
    monkeypatch.setattr(power, "may_set_power_limit", lambda: False)
    (problem,) = check([req(2, "naive"), req(3, "naive")], {0: 250}, "plan.csv")
    assert problem.startswith("plan.csv lines 2, 3: setting the power limit of GPU 0 to 250 W")
    assert "`sudo nvidia-smi -i 0 -pl 250`" in problem
    assert_nothing_changed(gpu, {})


def test_check_mps_thread_percentage(gpu):
    assert check([req(2, "mps", pct=0), req(3, "mps", pct=100)], {}, "plan.csv") == [
        "plan.csv line 2: MPS active thread percentage 0 must be from 1 to 100"
    ]


def test_check_without_the_tools(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    problems = check([req(2, "mps"), req(3, "mps")], {0: 200}, "plan.csv")
    assert problems == [
        "plan.csv lines 2, 3: mps and a power limit needs nvidia-smi, which is not on PATH",
        "plan.csv lines 2, 3: mps needs nvidia-cuda-mps-control, which is not on PATH",
    ]


def test_check_when_nvidia_smi_cannot_reach_the_driver(gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_FAIL", "nvml")
    (problem,) = check([req(2, "mig", "1g.5gb")], {}, "plan.csv")
    assert problem.startswith("plan.csv line 2: `nvidia-smi -L` failed: NVIDIA-SMI has failed")


@pytest.mark.slow
def test_mig_and_mps_on_two_gpus_in_one_workload(mig_gpu, monkeypatch):
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "2")
    mig_gpu.write_state({"gpus": {"1": {"mig": False}}})
    before = mig_gpu.state()
    requests = [req(2, "mig", "4g.20gb"), req(3, "mps", device=1), req(4, "mig", "3g.20gb")]
    assert check(requests, {0: 300, 1: 250}, "plan.csv") == []
    teardown = Teardown()
    slots, artifacts = setup(requests, {0: 300, 1: 250}, mig_gpu.root / "w", teardown, print)
    assert [s.tags["radt.collocation"] for s in slots] == ["mig", "mps", "mig"]
    assert [s.tags["radt.power_limit_w"] for s in slots] == ["300", "250", "300"]
    assert slots[0].devices[0].startswith("MIG-") and slots[1].devices == ["1"]
    assert set(artifacts) == {"power_limits.txt", "mig_placement.txt", "mps.txt"}
    assert run_teardown(teardown)[0] == []
    assert mig_gpu.state() == before


def test_setup_refuses_what_check_refuses_before_changing_anything(mig_gpu):
    with pytest.raises(RadtError, match=r"^plan lines 2, 3: GPU 0 .*does not mix MIG"):
        setup([req(2, "mig", "3g.20gb"), req(3, "mps")], {0: 200}, mig_gpu.root, Teardown(), print)
    with pytest.raises(RadtError, match=r"^plan line 2: GPU 4 does not exist here"):
        setup([req(2, "mps", device=4)], {}, mig_gpu.root, Teardown(), print)
    assert_nothing_changed(mig_gpu, {})


# --------------------------------------------------------------------------- one backend per mode


def test_each_mode_has_one_backend_with_the_same_verbs(tmp_path):
    from radt.collocation import backend_for
    from radt.collocation.backend import SettingUp
    from radt.tags import Mode

    assert [backend_for(mode).mode for mode in Mode] == list(Mode)
    assert backend_for("mps") is backend_for(Mode.MPS)
    with pytest.raises(ValueError):
        backend_for("time-slicing")
    for mode in Mode:
        assert callable(backend_for(mode).check) and callable(backend_for(mode).set_up)
    rows = [req(2, "naive", device="1"), req(3, "naive", device=None)]
    setting_up = SettingUp(lambda lines: "plan.csv", tmp_path, Teardown(), print)
    slots, text = backend_for(Mode.NAIVE).set_up(None, rows, setting_up)
    assert [s.env for s in slots] == [{"CUDA_VISIBLE_DEVICES": "1"}, {}] and text == ""
    assert backend_for(Mode.MIG).row_problems(req(2, "mig")) == [
        "mig needs a MIG profile, e.g. 3g.20gb"
    ]
    assert backend_for(Mode.MPS).row_problems(req(2, "mps", pct=0)) == [
        "MPS active thread percentage 0 must be from 1 to 100"
    ]
    assert backend_for(Mode.NONE).row_problems(req(2, "none", pct=50)) == [
        "an active thread percentage applies to mps rows only"
    ]

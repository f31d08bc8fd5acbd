"""The ``rapl`` listener against fake powercap trees (tests/fakes/powercap.py).

The trees are built from ``powercap-info`` captures (tests/fixtures/powercap_info_*.txt,
sources in tests/fixtures/SOURCES.md) in the kernel's layout. Exact arithmetic (energy,
power, a wrap) runs on a listener whose clock the test sets; a second test runs radT as a
real process while the training command itself moves the counters at known powers.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from conftest import FAKES, FIXTURES
from radt.listeners.rapl import ROOT_ONLY, RaplListener, find_zones

from radt.launch.registry import discover
from radt.listener import RunContext


def _load_fake() -> Any:
    """tests/fakes/powercap.py, loaded by path (tests/fakes is not put on sys.path: its
    ``pynvml`` folder would shadow a missing nvidia-ml-py for the rest of the session)."""
    spec = importlib.util.spec_from_file_location("fake_powercap", FAKES / "powercap.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


powercap = _load_fake()

CLIENT_I5 = FIXTURES / "powercap_info_i5_13500.txt"
LAPTOP_USER = FIXTURES / "powercap_info_psys_user.txt"
XEON_2S = FIXTURES / "powercap_info_xeon_2s.txt"
INTEL_RANGE_UJ = 262143328850
ROOT = os.geteuid() == 0


@pytest.fixture
def tree_of() -> Iterator[Callable[[Path], Path]]:
    """Build a fake tree from a capture in a folder any user may enter; its class folder."""
    made: list[Path] = []

    def build(capture: Path) -> Path:
        folder = Path(tempfile.mkdtemp(prefix="radt-powercap-"))
        folder.chmod(0o755)
        made.append(folder)
        return powercap.build(capture, folder)

    yield build
    import shutil

    for folder in made:
        shutil.rmtree(folder, ignore_errors=True)


class Started:
    """A started listener, what it told the run, and a clock the test moves."""

    def __init__(self, root: Path, now: float = 100.0) -> None:
        self.now = now
        self.tags: dict[str, str] = {}
        self.warnings: list[str] = []
        self.listener = RaplListener()
        self.listener._clock = lambda: self.now
        self.listener.start(
            RunContext(
                run_id="r",
                pid=0,
                workdir=Path("."),
                emit=lambda samples: None,
                warn=self.warnings.append,
                set_tag=self.tags.__setitem__,
                options={"root": str(root)},
            )
        )

    def poll(self, at: float) -> dict[str, float]:
        self.now = at
        samples = self.listener.poll()
        values = {s.key: s.value for s in samples}
        assert len(values) == len(samples), "a key twice in one poll"
        return values


@pytest.fixture
def started() -> Iterator[Callable[..., Started]]:
    made: list[Started] = []

    def start(*args: Any, **kwargs: Any) -> Started:
        made.append(Started(*args, **kwargs))
        return made[-1]

    yield start
    for each in made:
        each.listener.stop()


def deny(path: Path) -> None:
    """Make ``path`` unreadable to the listener: root-only for ``as_nobody``, else for all."""
    path.chmod(0o600 if ROOT else 0o000)


def as_nobody(fn: Callable[[], Any]) -> Any:
    """``fn()`` in a child process that dropped root for ``nobody`` (as is when not root).

    The child is forked, so it keeps this process's imports: no interpreter start as a
    user who may not read the Python installation.
    """
    if not ROOT:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 0
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            result = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the parent
            result, code = pickle.dumps(("error", repr(exc))), 1
        with os.fdopen(write, "wb") as out:
            out.write(result)
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as source:
        data = source.read()
    os.waitpid(pid, 0)
    status, value = pickle.loads(data)
    assert status == "ok", value
    return value


@pytest.mark.parametrize(
    ("capture", "entities"),
    [
        (CLIENT_I5, ["package0", "core0", "uncore0"]),
        (XEON_2S, ["package0", "dram0", "package1", "dram1"]),
        (LAPTOP_USER, ["package0", "core0", "uncore0", "psys"]),
    ],
)
def test_zones_are_named_by_socket_from_their_name_files(tree_of, capture, entities):
    root = tree_of(capture)
    assert [entity for _, entity in find_zones(root)] == entities
    # The control type (intel-rapl) is not a zone; the class folder holds symlinks.
    assert all(path.is_symlink() for path, _ in find_zones(root))


def test_energy_and_power_of_every_zone_exact_across_a_wrap(tree_of, started):
    root = tree_of(CLIENT_I5)
    powercap.set_energy(root, "0", INTEL_RANGE_UJ - 3_000_000)  # 3 J below the wrap
    core = powercap.energy(root, "0:0")
    rapl = started(root, now=100.0)
    assert rapl.tags == {"radt.rapl.zones": "package0,core0,uncore0"}

    powercap.set_energy(root, "0", INTEL_RANGE_UJ - 1_000_000)
    powercap.set_energy(root, "0:0", core + 1_250_000)
    first = rapl.poll(100.5)
    powercap.set_energy(root, "0", 2_500_000)  # wrapped: 1 J to the top, then 2.5 J
    powercap.set_energy(root, "0:0", core + 2_000_000)
    second = rapl.poll(101.5)

    assert first == {
        "rapl/package0/energy_j": pytest.approx(2.0),
        "rapl/package0/power_w": pytest.approx(4.0),  # 2 J in 0.5 s
        "rapl/core0/energy_j": pytest.approx(1.25),
        "rapl/core0/power_w": pytest.approx(2.5),
        "rapl/uncore0/energy_j": 0.0,
        "rapl/uncore0/power_w": 0.0,
    }
    assert second == {
        "rapl/package0/energy_j": pytest.approx(5.5),
        "rapl/package0/power_w": pytest.approx(3.5),
        "rapl/core0/energy_j": pytest.approx(2.0),
        "rapl/core0/power_w": pytest.approx(0.75),
        "rapl/uncore0/energy_j": 0.0,
        "rapl/uncore0/power_w": 0.0,
    }


def test_two_sockets_each_with_its_dram(tree_of, started):
    root = tree_of(XEON_2S)
    before = {zone: powercap.energy(root, zone) for zone in ("0", "0:0", "1", "1:0")}
    rapl = started(root, now=0.0)
    for zone, rise_uj in {"0": 9_000_000, "0:0": 1_500_000, "1": 7_000_000, "1:0": 500_000}.items():
        powercap.set_energy(root, zone, before[zone] + rise_uj)
    values = rapl.poll(0.1)
    assert {k: v for k, v in values.items() if k.endswith("power_w")} == {
        "rapl/package0/power_w": pytest.approx(90.0),
        "rapl/dram0/power_w": pytest.approx(15.0),
        "rapl/package1/power_w": pytest.approx(70.0),
        "rapl/dram1/power_w": pytest.approx(5.0),
    }
    assert values["rapl/dram1/energy_j"] == pytest.approx(0.5)


def test_a_counter_that_cannot_be_read_once_is_missing_then_caught_up(tree_of, started):
    root = tree_of(CLIENT_I5)
    start = powercap.energy(root, "0:1")
    rapl = started(root, now=0.0)
    (powercap.zone_folder(root, "0:1") / "energy_uj").write_text("")  # a torn read
    first = rapl.poll(1.0)
    powercap.set_energy(root, "0:1", start + 3_000_000)
    second = rapl.poll(2.0)
    assert "rapl/uncore0/energy_j" not in first and "rapl/package0/energy_j" in first
    # The next reading covers the whole gap: energy exact, power over the 2 s since start.
    assert second["rapl/uncore0/energy_j"] == pytest.approx(3.0)
    assert second["rapl/uncore0/power_w"] == pytest.approx(1.5)


def test_unreadable_zones_are_left_out_and_said_so(tree_of):
    root = tree_of(CLIENT_I5)
    deny(powercap.zone_folder(root, "0:0") / "energy_uj")

    def start_and_poll() -> tuple[str | None, dict[str, str], list[str], list[str]]:
        listener = RaplListener()
        listener.configure({"root": str(root)})
        reason = listener.available()
        tags: dict[str, str] = {}
        warnings: list[str] = []
        run = RunContext(
            run_id="r",
            pid=0,
            workdir=Path("."),
            emit=print,
            warn=warnings.append,
            set_tag=tags.__setitem__,
            options={"root": str(root)},
        )
        listener.start(run)
        try:
            keys = sorted(s.key for s in listener.poll())
        finally:
            listener.stop()
        return reason, tags, warnings, keys

    reason, tags, warnings, keys = as_nobody(start_and_poll)
    assert reason is None
    assert tags == {"radt.rapl.zones": "package0,uncore0"}
    assert len(warnings) == 1 and warnings[0].startswith("rapl: core0 left out: ")
    assert "sudo chmod o+r" in warnings[0]
    assert keys == [
        f"rapl/{e}/{q}" for e in ("package0", "uncore0") for q in ("energy_j", "power_w")
    ]


def test_available_says_why_not_with_the_fix(tree_of, tmp_path):
    def reason(root: Path) -> str | None:
        listener = RaplListener()
        listener.configure({"root": str(root)})
        return listener.available()

    assert reason(tmp_path / "absent") == (
        f"no RAPL zones in {tmp_path / 'absent'} (no powercap RAPL driver here)"
    )
    (tmp_path / "empty").mkdir()
    assert reason(tmp_path / "empty").startswith("no RAPL zones in ")
    readable = tree_of(CLIENT_I5)
    assert reason(readable) is None
    # A laptop whose powercap-info, run as a user, printed no energy_uj: every counter
    # is root's alone, as on any kernel since CVE-2020-8694.
    locked = tree_of(LAPTOP_USER)
    for path, _ in find_zones(locked):
        deny(path / "energy_uj")
    said = as_nobody(lambda: reason(locked))
    assert said == ROOT_ONLY.format(root=locked)
    assert said.startswith("RAPL energy counters are readable by root only (since CVE-2020-8694)")
    assert f"sudo chmod o+r {locked}/intel-rapl:*/energy_uj" in said


def test_the_default_tree_and_the_option_reach_availability(tree_of, monkeypatch):
    root = tree_of(CLIENT_I5)
    monkeypatch.setattr("radt.listeners.rapl.DEFAULT_ROOT", root.parent / "nowhere")
    assert RaplListener().available().startswith("no RAPL zones in ")
    found = discover({"rapl": {"root": str(root)}})["rapl"]
    assert found.reason is None and found.listener.root == root
    assert found.listener.scope == "device" and found.listener.on_by_default


def test_interval_default_floor_and_ceiling():
    listener = RaplListener()

    def run(interval: float | None) -> RunContext:
        return RunContext(run_id="r", pid=0, workdir=Path("."), emit=print, interval_s=interval)

    assert listener.interval(run(None)) == 0.1
    assert listener.interval(run(0.001)) == 0.02
    assert listener.interval(run(600)) == 30.0


def test_radt_refuses_a_tree_it_cannot_read_in_one_line(workspace, tmp_path):
    workspace.script("train.py", "print('never runs')\n")
    done = workspace.run(["-l", "rapl", "-o", f"rapl.root={tmp_path / 'none'}", "train.py"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"radt: error: listener not available here: rapl (no RAPL zones in {tmp_path / 'none'} "
        "(no powercap RAPL driver here)); run `radt listeners` to see why, or leave it out of -l"
    ]
    assert "never runs" not in done.stdout


# The training command moves the counters itself: once radT has the counters open (their
# files appear among its open files), it raises package 0 at 40 W (across its wrap) and
# core 0 at 25 W for one second, writes the rises, and lets radT read the final values.
TRAIN = """
import json, os, sys, time
sys.path.insert(0, {fakes!r})
import powercap
classes, tree = sys.argv[1], os.path.realpath(sys.argv[1] + "/../..")

def opened():
    fds = f"/proc/{{os.getppid()}}/fd"
    found = 0
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        found += target.startswith(tree) and target.endswith("/energy_uj")
    return found

deadline = time.monotonic() + 60
while opened() < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
rise = powercap.advance(classes, {{"0": 40.0, "0:0": 25.0}}, seconds=1.0)
with open("rise.json", "w") as f:
    json.dump(rise, f)
time.sleep(1.0)
"""


@pytest.mark.slow
def test_through_radt_a_process_moves_the_counters_at_known_powers(workspace, tree_of, tmp_path):
    root = tree_of(CLIENT_I5)
    powercap.set_energy(root, "0", INTEL_RANGE_UJ - 20_000_000)  # the 40 J cross the wrap
    workspace.script("train.py", TRAIN.format(fakes=str(FAKES)))
    done = workspace.run(
        ["-l", "rapl", "-o", f"rapl.root={root}", "--interval", "0.05", "train.py", str(root)]
    )
    assert done.returncode == 0, done.stderr
    rise = json.loads((workspace.root / "rise.json").read_text())
    assert rise == {"0": 40_000_000, "0:0": 25_000_000}
    run = workspace.only_run()
    assert run.data.tags["radt.listeners"] == "rapl"
    assert run.data.tags["radt.rapl.zones"] == "package0,core0,uncore0"
    local = workspace.client().download_artifacts(
        run.info.run_id, "radt/samples.parquet", str(tmp_path)
    )
    table = pd.read_parquet(local).sort_values("timestamp")
    assert set(table.listener) == {"rapl"}
    for entity, joules, step_uj in (("package0", 40.0, 200_000), ("core0", 25.0, 125_000)):
        energy = table[table.key == f"rapl/{entity}/energy_j"]
        power = table[table.key == f"rapl/{entity}/power_w"]
        # Every reading is a whole number of the writer's 5 ms steps (a wrong wrap is not),
        # and the last one, after the writer stopped, is all of it.
        microjoules = [round(value * 1e6) for value in energy.value]
        assert all(uj % step_uj == 0 for uj in microjoules), microjoules
        assert microjoules == sorted(microjoules)
        assert energy.value.iloc[-1] == pytest.approx(joules)
        # Power times the time between readings adds up to the energy (the exact arithmetic
        # is the fake-clock test's; here sample stamps and the listener's clock differ a bit).
        seconds = energy.timestamp.diff().dt.total_seconds().iloc[1:].to_numpy()
        assert (power.value >= 0).all()
        assert (power.value.iloc[1:].to_numpy() * seconds).sum() == pytest.approx(
            energy.value.iloc[-1] - energy.value.iloc[0], rel=0.1
        )
    uncore = table[table.key == "rapl/uncore0/energy_j"]
    assert len(uncore) >= 10 and set(uncore.value) == {0.0}

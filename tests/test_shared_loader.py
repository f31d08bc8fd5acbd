"""Shared data loading: a ``Role=loader`` row feeds the trainings of its workload.

The end-to-end tests run the real ``tensorsocket`` package on the CPU:
``examples/loader.py`` and ``examples/train.py --shared-loader`` under
``python -m radt plan.csv``, on a real SQLite store. The lifecycle tests (ports,
readiness, ending, failures, signals) use tiny scripts that listen on the ports
themselves, so that they take seconds. Every test checks that nothing it started
is left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from conftest import REPO, Workspace, default_signals, wait_for

from radt.plans.model import PlanError
from radt.plans.read import read_plan

EXAMPLES = REPO / "examples"
HEADER = (
    "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, Role, Env\n"  # noqa: E501
)

if not os.environ.get("CI"):
    TENSORSOCKET = pytest.importorskip(
        "tensorsocket", reason="pip install tensorsocket (the test and shared-loader extras)"
    )

# A stand-in loader: listens on the four ports radT hands it (unless NEVER_READY),
# notes its environment and when it listened, and how it was ended.
LOADER = r"""
import json, os, signal, socket, sys, time
if os.environ.get("EXIT_BEFORE_READY"):
    print("cannot open the dataset /nope", flush=True)
    sys.exit(1)
def ended(signum, frame):
    with open("loader-term.json", "w") as f:
        json.dump(time.time(), f)
    if not os.environ.get("IGNORE_TERM"):
        sys.exit(0)
signal.signal(signal.SIGTERM, ended)
ports = [int(os.environ["RADT_LOADER_PORT"]), int(os.environ["RADT_LOADER_ACK_PORT"])]
ports += [int(p) for p in os.environ["RADT_LOADER_HEART_PORTS"].split(",")]
socks = []
if not os.environ.get("NEVER_READY"):
    for port in ports:
        s = socket.socket()
        s.bind(("127.0.0.1", port))
        s.listen()
        socks.append(s)
env = {k: v for k, v in os.environ.items() if k.startswith("RADT_LOADER")}
with open("loader.json", "w") as f:
    json.dump({"env": env, "listening": time.time(), "pid": os.getpid()}, f)
print("listening", flush=True)
while True:
    time.sleep(0.1)
"""

# A stand-in training: notes its environment and when it started and ended.
TRAINING = r"""
import json, os, sys, time
start = time.time()
env = {k: v for k, v in os.environ.items() if k.startswith("RADT_LOADER")}
with open(f"started-{os.environ['JOB']}", "w") as f:
    f.write(str(os.getpid()))
time.sleep(float(os.environ.get("SLEEP", "0")))
with open(f"training-{os.environ['JOB']}.json", "w") as f:
    json.dump({"env": env, "start": start, "end": time.time()}, f)
"""


# --------------------------------------------------------------------------- helpers


class Radt:
    """``python -m radt`` started in a workspace, its output in files, its process tree noted:
    radT runs the plan itself (``RADT_WARM=0``), so that its loader and trainings are this
    process's descendants (a warm launcher's fork would have them)."""

    def __init__(self, ws: Workspace, args: list[str]) -> None:
        self.ws = ws
        self.out_path = ws.root / "radt.out"
        self.err_path = ws.root / "radt.err"
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(  # the stop signals at their defaults, whatever
                ws.argv(args),  # this suite inherited (a suite started with `cmd &` ignores SIGINT)
                cwd=ws.root,
                env={**ws.env, "RADT_WARM": "0"},
                stdout=out,
                stderr=err,
                preexec_fn=default_signals,
            )
        self.seen: set[tuple[int, float]] = set()

    @property
    def out(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def err(self) -> str:
        return self.err_path.read_text(errors="replace")

    def note_tree(self) -> list[psutil.Process]:
        """The descendants of radT now (and remember them)."""
        try:
            tree = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.Error:
            return []
        for proc in tree:
            with contextlib.suppress(psutil.Error):
                self.seen.add((proc.pid, proc.create_time()))
        return tree

    def wait(self, timeout: float) -> int:
        """Wait for radT to end, noting its process tree meanwhile; its exit status."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            assert time.monotonic() < deadline, f"radT still runs after {timeout} s:\n{self.err}"
            self.note_tree()
            time.sleep(0.1)
        return self.process.returncode

    def left_running(self) -> list[str]:
        """Processes radT started that still exist (a pid reused since does not count)."""
        alive = []
        for pid, created in self.seen:
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(" ".join(proc.cmdline()))
            except psutil.Error:
                continue
        return alive

    def kill_all(self) -> None:
        """Clean up after a failed test: radT and everything it started."""
        self.note_tree()
        self.process.kill()
        self.process.wait()
        for pid, created in self.seen:
            try:
                proc = psutil.Process(pid)
                if proc.create_time() == created:
                    proc.kill()
            except psutil.Error:
                continue


def write_plan(ws: Workspace, rows: list[str]) -> Path:
    path = ws.root / "plan.csv"
    path.write_text(HEADER + "".join(row + "\n" for row in rows))
    return path


def runs_by_letter(ws: Workspace, experiment: str) -> tuple[object, dict]:
    """The workload's parent run and its runs by letter."""
    runs = ws.runs(experiment)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, [r.info.run_name for r in parents]
    children = {r.data.tags["radt.letter"]: r for r in runs if r not in parents}
    return parents[0], children


def statuses(plan: Path) -> list[str]:
    """The Status cell of every row of the plan, in order."""
    return [line.split(",")[2].strip() for line in plan.read_text().splitlines()[1:]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def ws(workspace: Workspace) -> Workspace:
    workspace.script("loader.py", LOADER)
    workspace.script("training.py", TRAINING)
    return workspace


def stand_in_plan(ws: Workspace, loader_env: str = "", sleep: str = "1") -> Path:
    return write_plan(
        ws,
        [
            f"e, w, , , , naive, loader.py, none, , loader, {loader_env}",
            f"e, w, , , , naive, training.py, none, , , JOB=a SLEEP={sleep}",
            f"e, w, , , , naive, training.py, none, , , JOB=b SLEEP={sleep}",
        ],
    )


# --------------------------------------------------------------------------- plan errors


def test_loader_row_without_trainings_or_twice_is_a_plan_error_with_its_line(tmp_path):
    plan = tmp_path / "plan.csv"
    (tmp_path / "t.py").write_text("")
    plan.write_text(
        HEADER
        + "e, alone, , , , naive, t.py, none, , loader,\n"  # line 2: no trainings
        + "e, two, , , , naive, t.py, none, , loader,\n"  # line 3: the loader of 'two'
        + "e, two, , , , naive, t.py, none, , ,\n"
        + "e, two, , , , naive, t.py, none, , Loader,\n"  # line 5: a second loader
        + "e, odd, , , , naive, t.py, none, , feeder,\n"  # line 6: unknown role
        + "e, fed, , , , naive, t.py, none, , consumer,\n"  # line 7: consumer, no loader
        + "e, mig, , , 0, 3g.40gb, t.py, none, , loader,\n"  # line 8: a loader on a slice
        + "e, mig, , , 0, 3g.40gb, t.py, none, , ,\n"
    )
    with pytest.raises(PlanError) as error:
        read_plan(plan, cwd=tmp_path)
    by_line = {p.line: p.message for p in error.value.problems}
    assert sorted(by_line) == [2, 5, 6, 7, 8], error.value
    assert "loader of workload e/alone has no trainings to feed" in by_line[2]
    assert "second loader row (line 3 is its loader)" in by_line[5]
    assert "unknown Role 'feeder'" in by_line[6]
    assert "Role consumer needs a loader row" in by_line[7]
    assert "cannot have Collocation 3g.40gb" in by_line[8]


@pytest.mark.slow
def test_plan_with_loader_errors_is_refused_before_anything_starts(ws):
    write_plan(
        ws,
        [
            "e, w, , , , naive, loader.py, none, , loader, ",
            "e, w, , , , naive, loader.py, none, , loader, ",
        ],
    )
    result = ws.run(["plan.csv"])
    assert result.returncode == 2, result.stderr
    assert "plan.csv line 3: workload e/w has a second loader row" in result.stderr
    assert "plan.csv line 2: the loader of workload e/w has no trainings" in result.stderr
    assert "Traceback" not in result.stderr
    assert ws.runs("e") == []


def test_letters_skip_l_when_a_workload_has_a_loader(tmp_path):
    plan = tmp_path / "plan.csv"
    (tmp_path / "t.py").write_text("")
    rows = ["e, w, , , , naive, t.py, none, , ,"] * 12
    rows.append("e, w, , , , naive, t.py, none, , loader,")
    plan.write_text(HEADER + "".join(row + "\n" for row in rows))
    (workload,) = read_plan(plan, cwd=tmp_path).workloads
    letters = [row.letter for row in workload.rows]
    assert letters == [*"ABCDEFGHIJKM", "L"]
    assert [row.role for row in workload.rows] == ["consumer"] * 12 + ["loader"]
    assert workload.loader is workload.rows[-1]
    assert len(workload.trainings) == 12


# --------------------------------------------------------------------------- lifecycle


@pytest.mark.slow
def test_loader_starts_first_hands_its_ports_and_is_ended_after_its_trainings(ws):
    plan = stand_in_plan(ws)
    radt = Radt(ws, ["plan.csv"])
    try:
        assert radt.wait(180) == 0, radt.err
    finally:
        radt.kill_all()
    assert radt.left_running() == []
    loader = json.loads((ws.root / "loader.json").read_text())
    trainings = [json.loads((ws.root / f"training-{j}.json").read_text()) for j in "ab"]
    ports = loader["env"]
    assert ports["RADT_LOADER_CONSUMERS"] == "2"
    assert len({ports[k] for k in ports if k != "RADT_LOADER_CONSUMERS"}) == 3
    assert len(set(ports["RADT_LOADER_HEART_PORTS"].split(","))) == 2
    for training in trainings:
        assert training["env"] == ports
        assert training["start"] > loader["listening"]
    term = json.loads((ws.root / "loader-term.json").read_text())
    assert term >= max(t["end"] for t in trainings)

    parent, runs = runs_by_letter(ws, "e")
    assert sorted(runs) == ["A", "B", "L"]
    assert {r.info.status for r in [parent, *runs.values()]} == {"FINISHED"}
    assert runs["L"].data.tags["radt.role"] == "loader"
    assert runs["L"].data.tags["radt.stop_reason"] == "its trainings ended"
    assert runs["L"].data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert runs["L"].data.tags["radt.loader_ports"] == ",".join(
        [ports["RADT_LOADER_PORT"], ports["RADT_LOADER_ACK_PORT"], ports["RADT_LOADER_HEART_PORTS"]]
    )
    for letter in "AB":
        assert runs[letter].data.tags["radt.role"] == "consumer"
    for run in [parent, *runs.values()]:
        assert run.data.tags["radt.loader"] == "shared"
        assert run.data.tags["radt.collocation"] == "naive"
    assert runs["L"].info.end_time >= max(runs[x].info.end_time for x in "AB")
    assert "[L] listening" in radt.out
    assert "shared loader [L] is ready; starting the trainings" in radt.err
    assert statuses(plan) == ["FINISHED"] * 3


@pytest.mark.slow
def test_loader_that_ignores_sigterm_is_killed_after_the_grace_period(ws):
    stand_in_plan(ws, loader_env="IGNORE_TERM=1", sleep="0")
    radt = Radt(ws, ["--grace", "1", "plan.csv"])
    try:
        code = radt.wait(180)
    finally:
        radt.kill_all()
    assert code == 128 + signal.SIGKILL, radt.err
    assert radt.left_running() == []
    assert (ws.root / "loader-term.json").exists()
    parent, runs = runs_by_letter(ws, "e")
    assert runs["A"].info.status == runs["B"].info.status == "FINISHED"
    assert runs["L"].info.status == "KILLED"
    assert "after SIGTERM" in runs["L"].data.tags["radt.stop_reason"]
    assert parent.info.status == "KILLED"
    assert "did not end after SIGTERM; sending SIGKILL" in radt.err


@pytest.mark.slow
def test_loader_that_ends_before_it_is_ready_fails_the_workload_and_no_training_starts(ws):
    plan = stand_in_plan(ws, loader_env="EXIT_BEFORE_READY=1")
    radt = Radt(ws, ["plan.csv"])
    try:
        code = radt.wait(180)
    finally:
        radt.kill_all()
    assert code == 1, radt.err
    assert radt.left_running() == []
    assert not list(ws.root.glob("started-*"))
    reason = "the shared loader [L] exited with code 1 before it was ready: cannot open the dataset /nope"  # noqa: E501
    assert f"radt: error: {reason}" in radt.err
    assert "Traceback" not in radt.err
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, *runs.values()]} == {"FAILED"}
    assert runs["L"].data.tags["radt.stop_reason"] == reason
    assert reason in parent.data.tags["radt.stop_reason"]
    assert reason in runs["A"].data.tags["radt.stop_reason"]
    assert statuses(plan) == ["FAILED"] * 3


@pytest.mark.slow
def test_loader_that_never_listens_fails_after_the_loader_timeout(ws):
    stand_in_plan(ws, loader_env="NEVER_READY=1")
    radt = Radt(ws, ["--loader-timeout", "2", "plan.csv"])
    try:
        code = radt.wait(180)
    finally:
        radt.kill_all()
    assert code == 1, radt.err
    assert radt.left_running() == []
    assert (ws.root / "loader.json").exists()  # it ran, and radT ended it
    assert not list(ws.root.glob("started-*"))
    assert "the shared loader [L] was not ready within 2 s: nothing listens on port" in radt.err
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, *runs.values()]} == {"FAILED"}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_radt_ends_the_loader_and_the_trainings(ws, signum):
    plan = stand_in_plan(ws, sleep="600")
    radt = Radt(ws, ["--grace", "5", "plan.csv"])
    try:
        wait_for(lambda: len(list(ws.root.glob("started-*"))) == 2, timeout=120)
        radt.note_tree()
        radt.process.send_signal(signum)
        code = radt.wait(120)
    finally:
        radt.kill_all()
    assert code == 128 + signum, radt.err
    assert radt.left_running() == []
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, *runs.values()]} == {"KILLED"}
    assert statuses(plan) == ["KILLED"] * 3


@pytest.mark.slow
def test_max_time_stops_the_loader_with_the_trainings(ws):
    stand_in_plan(ws, sleep="600")
    radt = Radt(ws, ["--max-time", "0.05", "--grace", "5", "plan.csv"])
    try:
        code = radt.wait(180)
    finally:
        radt.kill_all()
    assert code != 0, radt.err
    assert radt.left_running() == []
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, runs["A"], runs["B"]]} == {"KILLED"}
    # the stand-in loader ends cleanly on SIGTERM (exit 0): like any command that does
    assert runs["L"].info.status == "FINISHED"
    assert (ws.root / "loader-term.json").exists()
    for run in [parent, *runs.values()]:
        assert run.data.tags["radt.stop_reason"] == "--max-time of 0.05 min reached"


# --------------------------------------------------------------------------- the real package


def shared_plan(ws: Workspace, data: str, epochs: int) -> Path:
    common = f"--epochs {epochs} {data}"
    return write_plan(
        ws,
        [
            f"e, w, , , , naive, {EXAMPLES / 'loader.py'}, top, {common}, loader,",
            f"e, w, , , , naive, {EXAMPLES / 'train.py'}, top, --shared-loader {common} "
            "--threads 1, ,",
            f"e, w, , , , naive, {EXAMPLES / 'train.py'}, top, --shared-loader {common} "
            "--threads 1 --seed 1, ,",
        ],
    )


@pytest.mark.slow
def test_tensorsocket_loader_feeds_every_batch_to_two_trainings(ws):
    plan = shared_plan(ws, "--examples 256 --batch-size 32 --augment 1", epochs=2)
    radt = Radt(ws, ["plan.csv"])
    try:
        assert radt.wait(280) == 0, radt.err
    finally:
        radt.kill_all()
    assert radt.left_running() == []
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, *runs.values()]} == {"FINISHED"}, radt.err
    for letter in "AB":
        assert runs[letter].data.metrics["examples"] == 256 * 2
    assert runs["L"].info.end_time >= max(runs[x].info.end_time for x in "AB")
    assert runs["L"].data.tags["radt.stop_reason"] == "its trainings ended"
    assert "system/top/proc/cpu_pct" in runs["L"].data.metrics  # its CPU is measured
    assert radt.out.count("[L] epoch") == 2
    assert " DEBUG " not in radt.out  # importing tensorsocket turns DEBUG logging on
    assert statuses(plan) == ["FINISHED"] * 3


@pytest.mark.slow
def test_tensorsocket_loader_killed_mid_epoch_fails_the_workload_and_stops_the_trainings(ws):
    plan = shared_plan(ws, "--examples 4096 --batch-size 32 --augment 1", epochs=3)
    radt = Radt(ws, ["--grace", "5", "plan.csv"])
    try:
        wait_for(lambda: "[L] epoch 0: served" in radt.out, timeout=240)
        (loader,) = [p for p in radt.note_tree() if "loader.py" in " ".join(p.cmdline())]
        loader.kill()
        code = radt.wait(120)
    finally:
        radt.kill_all()
    assert code != 0
    assert radt.left_running() == []
    reason = "the shared loader [L] died of SIGKILL while the trainings ran"
    assert f"radt: error: {reason}" in radt.err
    parent, runs = runs_by_letter(ws, "e")
    assert {r.info.status for r in [parent, *runs.values()]} == {"FAILED"}, radt.err
    assert runs["L"].data.tags["radt.stop_reason"].startswith(reason)
    assert parent.data.tags["radt.stop_reason"].startswith(f"stopped because {reason}")
    for letter in "AB":
        assert runs[letter].data.tags["radt.stop_reason"].startswith(f"stopped because {reason}")
        assert runs[letter].data.metrics.get("examples", 0) < 4096 * 3
    assert statuses(plan) == ["FAILED"] * 3


@pytest.mark.slow
def test_training_that_cannot_reach_the_loader_fails_in_bounded_time_and_says_why(tmp_path):
    port, ack, pub, sub = (free_port() for _ in range(4))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "RADT_"))}
    env.update(
        RADT_LOADER_PORT=str(port),
        RADT_LOADER_ACK_PORT=str(ack),
        RADT_LOADER_HEART_PORTS=f"{pub},{sub}",
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        MLFLOW_DISABLE_TELEMETRY="true",
    )
    argv = [sys.executable, str(EXAMPLES / "train.py"), "--shared-loader", "--loader-timeout", "3"]
    result = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert result.returncode == 3, result.stderr
    expected = f"train.py: error: no answer from the shared loader on 127.0.0.1:{port} for 3 s"
    assert expected in result.stderr
    assert "Traceback" not in result.stderr

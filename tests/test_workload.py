"""Plans end to end: `python -m radt plan.csv` as a real process on a real SQLite store.

The training commands are a tiny script (``JOB`` below) that reports what it
saw (its argv, its CUDA variables, the fake GPU's state while it runs) and
when it ran. GPU tools are the stateful fakes of tests/fakes, first on PATH,
with their state in the test's own folder, so every test can compare the
(fake) GPU before and after. The naive plan runs once per module and several
tests read its result: each radT process costs seconds here.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest
from conftest import FAKES, Workspace, kill_quietly, pid_alive, wait_for
from conftest import new_workspace as conftest_workspace

HEADER = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, PowerLimit, Env\n"  # noqa: E501
CHANGING = ("-cgi", "-dci", "-dgi", "-pl", "-mig")
ROOT = hasattr(os, "geteuid") and os.geteuid() == 0  # radT refuses power limits otherwise

# One training command for every test, steered by the Env column:
# JOB names it, SLEEP is how long it runs, EXIT its exit status, SMI_L=1 runs
# `nvidia-smi -L` while it runs, EXAMPLES=N reports N examples and epoch 0 (radT's run API).
# It writes started-JOB (its pid) when it starts and times-JOB.json ([start, end]) when it ends.
JOB = r"""
import json, os, subprocess, sys, time
job = os.environ.get("JOB", "x")
start = time.time()
with open(f"started-{job}", "w") as f:
    f.write(str(os.getpid()))
info = {
    "job": job,
    "run": os.environ.get("RADT_RUN_ID"),
    "argv": sys.argv[1:],
    "env": {k: v for k, v in os.environ.items() if k.startswith("CUDA_")},
}
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
if pipe:
    try:
        with open(os.path.join(pipe, "fake-mps-state.json")) as f:
            info["mps"] = json.load(f)
    except OSError:
        info["mps"] = None
state = os.environ.get("FAKE_NVIDIA_SMI_STATE")
if state and os.path.exists(state):
    with open(state) as f:
        info["gpu"] = json.load(f)
if os.environ.get("SMI_L"):
    info["smi_l"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
print("JOB " + json.dumps(info), flush=True)
print(f"second line of {job}", flush=True)
if os.environ.get("EXAMPLES"):
    import radt
    radt.log_examples(int(os.environ["EXAMPLES"]))
    radt.log_epoch(0)
time.sleep(float(os.environ.get("SLEEP", "0")))
with open(f"times-{job}.json", "w") as f:
    json.dump([start, time.time()], f)
sys.exit(int(os.environ.get("EXIT", "0")))
"""


# --------------------------------------------------------------------------- helpers


def new_workspace(base: Path, template_db: Path) -> Workspace:
    """As conftest's ``workspace`` fixture, in ``base`` (so a module can share one), without
    the outside's FAKE_* and CUDA_* settings; ``job.py`` written."""
    ws = conftest_workspace(base, template_db, drop=("MLFLOW_", "RADT_", "FAKE_", "CUDA_"))
    ws.script("job.py", JOB)
    return ws


@dataclass
class FakeGpu:
    """The fakes' files under the test's folder, and what was called."""

    state_file: Path
    smi_log: Path
    mps_log: Path
    default_pipe: Path
    env: dict[str, str]

    def smi(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["nvidia-smi", *args], env=self.env, capture_output=True, text=True, check=True
        )

    def state_text(self) -> str | None:
        return self.state_file.read_text() if self.state_file.exists() else None

    def smi_calls(self) -> list[list[str]]:
        if not self.smi_log.exists():
            return []
        return [json.loads(line)["argv"] for line in self.smi_log.read_text().splitlines()]

    def changing_calls(self) -> list[list[str]]:
        return [argv for argv in self.smi_calls() if any(a in CHANGING for a in argv)]

    def mps_calls(self) -> list[dict]:
        if not self.mps_log.exists():
            return []
        return [json.loads(line) for line in self.mps_log.read_text().splitlines()]


def with_fakes(ws: Workspace, mig: bool = False) -> FakeGpu:
    """Put tests/fakes first on radT's PATH, their state next to the workspace."""
    base = ws.root.parent
    gpu = FakeGpu(
        base / "smi-state.json",
        base / "smi.log",
        base / "mps.log",
        base / "default-mps",  # radT's own CUDA_MPS_PIPE_DIRECTORY: no daemon there
        ws.env,
    )
    ws.env.update(
        PATH=f"{FAKES}{os.pathsep}{ws.env['PATH']}",
        FAKE_NVIDIA_SMI_STATE=str(gpu.state_file),
        FAKE_NVIDIA_SMI_LOG=str(gpu.smi_log),
        FAKE_MPS_LOG=str(gpu.mps_log),
        CUDA_MPS_PIPE_DIRECTORY=str(gpu.default_pipe),
    )
    if mig:
        ws.env["FAKE_NVIDIA_SMI_MIG"] = "1"
    return gpu


def someone_else_set_300_w(gpu: FakeGpu) -> str:
    """A limit set before radT (so the state file exists and is not the default); the state."""
    gpu.smi("-i", "0", "-pl", "300")
    gpu.smi_log.unlink()
    before = gpu.state_text()
    assert before is not None and json.loads(before)["gpus"]["0"]["power_limit"] == 300.0
    return before


def write_plan(ws: Workspace, text: str, name: str = "plan.csv") -> Path:
    path = ws.root / name
    path.write_text(text)
    return path


def jobs(stdout: str) -> dict[str, tuple[str, dict]]:
    """JOB lines on radT's stdout: job name -> (the line's prefix, what the job reported)."""
    found = {}
    for line in stdout.splitlines():
        match = re.match(r"^(.*?)JOB (\{.*\})$", line)
        if match:
            info = json.loads(match[2])
            found[info["job"]] = (match[1], info)
    return found


def all_runs(ws: Workspace) -> list:
    client = ws.client()
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids) if ids else []


def parents_and_children(runs) -> tuple[dict, dict]:
    """Parent runs by name, child runs by radt.letter + workload (``pair/A``)."""
    parents = {r.info.run_name: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    children = {
        f"{r.data.tags['radt.workload']}/{r.data.tags['radt.letter']}": r
        for r in runs
        if "mlflow.parentRunId" in r.data.tags
    }
    return parents, children


def artifact_text(ws: Workspace, run_id: str, path: str, dest: Path) -> str:
    dest.mkdir(parents=True, exist_ok=True)
    return Path(ws.client().download_artifacts(run_id, path, str(dest))).read_text()


def read_times(ws: Workspace, job: str) -> tuple[float, float]:
    start, end = json.loads((ws.root / f"times-{job}.json").read_text())
    return start, end


def both_started(ws: Workspace) -> list[int] | None:
    """The pids of jobs a and b once both have started."""
    pids = [started_pid(ws, "a"), started_pid(ws, "b")]
    return pids if all(pids) else None  # type: ignore[return-value]


def started_pid(ws: Workspace, job: str) -> int | None:
    path = ws.root / f"started-{job}"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text.isdigit() else None


# --------------------------------------------------------------------------- naive plan

NAIVE = """\
# A naive pair and its baseline. Comments, blank lines and spacing must survive.
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, PowerLimit, Env

study, pair, {a}, {ra}, 0, naive, job.py, top+iostat, --lr 0.1, -, JOB=a SLEEP=3
study,  pair ,{b}, {rb}, 0, naive,  job.py , top+iostat, --lr 0.2, , JOB=b SLEEP=3
# the same job alone
study, alone, {c}, {rc}, 0, none, job.py, top+iostat, --lr 0.1, -, JOB=c SLEEP=1
"""


@dataclass
class NaiveResult:
    ws: Workspace
    plan: Path
    first: subprocess.CompletedProcess
    after_first: str
    runs_after_first: list
    cached_after_first: list[str]
    second: subprocess.CompletedProcess


@pytest.fixture(scope="module")
def naive(tmp_path_factory, template_db) -> NaiveResult:
    ws = new_workspace(tmp_path_factory.mktemp("naive"), template_db)
    plan = write_plan(ws, NAIVE.format(a="", ra="", b="", rb="", c="", rc=""))
    first = ws.run(["plan.csv"])
    after_first = plan.read_text()
    runs = all_runs(ws)
    cache = ws.home / "cache"
    cached = sorted(p.name for p in cache.iterdir()) if cache.is_dir() else []
    second = ws.run(["plan.csv"])
    return NaiveResult(ws, plan, first, after_first, runs, cached, second)


def test_a_workload_run_reads_its_runs_samples_where_they_were_compacted(naive):
    """The workload run's figures need its runs' samples: it reads them from the runs' folders,
    kept until it has closed, and downloads nothing of what they had just uploaded."""
    assert naive.first.returncode == 0, naive.first.stderr
    parents, children = parents_and_children(naive.runs_after_first)
    figures = json.loads(parents["pair"].data.tags["radt.figures"])
    kids = sorted(children[k].info.run_id for k in ("pair/A", "pair/B"))
    assert figures["level"] == "provider"
    assert figures["family"] == sorted([parents["pair"].info.run_id, *kids])
    note = parents["pair"].data.tags.get("radt.window_note", "")
    assert "samples were not available" not in note, note  # every run's samples were read
    assert naive.cached_after_first == []  # nothing downloaded
    assert not any((naive.ws.home / "runs").glob("*/run.json"))  # every folder removed


@pytest.mark.slow
def test_naive_plan_nests_one_child_run_per_row_under_a_parent_per_workload(naive):
    assert naive.first.returncode == 0, naive.first.stderr
    parents, children = parents_and_children(naive.runs_after_first)
    assert len(naive.runs_after_first) == 5
    assert sorted(parents) == ["alone", "pair"]
    assert sorted(children) == ["alone/A", "pair/A", "pair/B"]
    experiments = {r.info.experiment_id for r in naive.runs_after_first}
    assert len(experiments) == 1
    assert naive.ws.client().get_experiment(experiments.pop()).name == "study"
    for key, child in children.items():
        workload, letter = key.split("/")
        parent = parents[workload]
        assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.info.status == "FINISHED"
        assert child.data.tags["radt.workload"] == workload
        assert child.data.tags["radt.letter"] == letter
        assert child.data.tags["radt.devices"] == "0"
        assert child.data.tags["radt.collocation"] == ("naive" if workload == "pair" else "none")
    for name, parent in parents.items():
        assert parent.info.status == "FINISHED"
        assert parent.data.tags["radt.workload"] == name
        assert parent.data.tags["radt.devices"] == "0"
        assert parent.data.tags["radt.collocation"] == ("naive" if name == "pair" else "none")
    assert children["pair/B"].data.params["lr"] == "0.2"


@pytest.mark.slow
def test_naive_runs_of_a_workload_run_at_the_same_time(naive):
    a_start, a_end = read_times(naive.ws, "a")
    b_start, b_end = read_times(naive.ws, "b")
    assert a_start < b_end and b_start < a_end, "the two runs of the pair did not overlap"
    # the baseline is a workload of its own: it ran after the pair, alone
    c_start, _ = read_times(naive.ws, "c")
    assert c_start > max(a_end, b_end)


@pytest.mark.slow
def test_naive_output_is_prefixed_on_the_terminal_and_plain_in_each_run(naive, tmp_path):
    stdout = naive.first.stdout
    lines = [line for line in stdout.splitlines() if line]
    assert lines and all(re.match(r"^\[[AB]\] ", line) for line in lines), stdout
    reported = jobs(stdout)
    _, children = parents_and_children(naive.runs_after_first)
    for job, key in (("a", "pair/A"), ("b", "pair/B"), ("c", "alone/A")):
        prefix, info = reported[job]
        run = children[key]
        assert prefix == f"[{key[-1]}] "
        assert info["run"] == run.info.run_id
        assert f"[{key[-1]}] second line of {job}" in lines
        log = artifact_text(naive.ws, run.info.run_id, "radt/output.log", tmp_path / job)
        assert log.startswith("JOB {")
        assert f"\nsecond line of {job}\n" in log
        assert "[A]" not in log and "[B]" not in log
        others = {"a", "b", "c"} - {job}
        assert not any(f"second line of {other}" in log for other in others)


@pytest.mark.slow
def test_naive_device_listeners_record_into_the_parent_and_run_listeners_into_children(naive):
    parents, children = parents_and_children(naive.runs_after_first)
    for parent in parents.values():
        keys = set(parent.data.metrics)
        assert any(k.startswith("system/iostat/") for k in keys), sorted(keys)
        assert not any(k.startswith("system/top/") for k in keys), sorted(keys)
        assert parent.data.tags["radt.listeners"] == "iostat"
    for child in children.values():
        keys = set(child.data.metrics)
        assert "system/top/proc/rss_mib" in keys, sorted(keys)
        assert not any(k.startswith("system/iostat/") for k in keys), sorted(keys)
        assert child.data.tags["radt.listeners"] == "top+iostat"


@pytest.mark.slow
def test_naive_statuses_and_run_ids_are_written_back_and_nothing_else_changes(naive):
    _, children = parents_and_children(naive.runs_after_first)
    ids = {key: run.info.run_id for key, run in children.items()}
    expected = NAIVE.format(
        a="FINISHED",
        ra=ids["pair/A"],
        b="FINISHED",
        rb=ids["pair/B"],
        c="FINISHED",
        rc=ids["alone/A"],
    )
    # a cell without a leading space gets none either
    expected = expected.replace("study,  pair , FINISHED", "study,  pair ,FINISHED")
    assert naive.after_first == expected


@pytest.mark.slow
def test_naive_second_invocation_skips_everything_and_creates_no_run(naive):
    assert naive.second.returncode == 0, naive.second.stderr
    assert (
        "nothing to run in plan.csv: 2 workloads (2 FINISHED); --rerun-all" in naive.second.stderr
    )
    assert naive.second.stdout == ""
    assert len(all_runs(naive.ws)) == len(naive.runs_after_first)
    assert naive.plan.read_text() == naive.after_first


# --------------------------------------------------------------------------- a failing row

FAILING = HEADER + (
    "study, w, , , 0, naive, job.py, none, , , JOB=bad EXIT=3\n"
    "study, w, , , 0, naive, job.py, none, , , JOB=good\n"
)


def csv_cells(plan: Path) -> list[tuple[str, str]]:
    """(Status, Run) of each data row."""
    rows = [line.split(",") for line in plan.read_text().splitlines()[1:] if line.strip()]
    return [(row[2].strip(), row[3].strip()) for row in rows]


@pytest.mark.slow
def test_failing_row_fails_its_run_and_the_workload_and_reruns_only_with_rerun(
    tmp_path, template_db
):
    ws = new_workspace(tmp_path, template_db)
    plan = write_plan(ws, FAILING)
    first = ws.run(["plan.csv"])
    assert first.returncode == 3, first.stderr
    parents, children = parents_and_children(all_runs(ws))
    assert children["w/A"].info.status == "FAILED"
    assert children["w/A"].data.tags["radt.exit_code"] == "3"
    assert children["w/B"].info.status == "FINISHED"
    assert parents["w"].info.status == "FAILED"
    first_ids = [children["w/A"].info.run_id, children["w/B"].info.run_id]
    assert csv_cells(plan) == [("FAILED", first_ids[0]), ("FINISHED", first_ids[1])]

    again = ws.run(["plan.csv"])
    assert again.returncode == 0, again.stderr
    assert "nothing to run in plan.csv: 1 workload (1 FAILED); --rerun runs" in again.stderr
    assert len(all_runs(ws)) == 3
    assert csv_cells(plan) == [("FAILED", first_ids[0]), ("FINISHED", first_ids[1])]

    rerun = ws.run(["--rerun", "plan.csv"])
    assert rerun.returncode == 3, rerun.stderr
    runs = all_runs(ws)
    assert len(runs) == 6
    new = [
        r for r in runs if r.info.run_id not in first_ids and "mlflow.parentRunId" in r.data.tags
    ]
    by_letter = {r.data.tags["radt.letter"]: r.info.run_id for r in new}
    assert csv_cells(plan) == [("FAILED", by_letter["A"]), ("FINISHED", by_letter["B"])]
    assert set(by_letter.values()).isdisjoint(first_ids)


# --------------------------------------------------------------------------- MPS

MPS_PLAN = HEADER + (
    "study, shared, , , 0, mps:50, job.py, none, , {w}, JOB=a\n"
    "study, shared, , , 0, mps:50, job.py, none, , {w} W, JOB=b\n"
)


@pytest.mark.slow
def test_mps_workload_gives_each_run_the_daemon_and_quits_it(tmp_path, template_db):
    """As root under a PowerLimit column too: set, tagged and restored."""
    ws = new_workspace(tmp_path, template_db)
    gpu = with_fakes(ws)
    before = someone_else_set_300_w(gpu)
    write_plan(ws, MPS_PLAN.format(w="250" if ROOT else "-"))
    done = ws.run(["plan.csv"])
    assert done.returncode == 0, done.stderr
    reported = jobs(done.stdout)
    pipes = set()
    for job in ("a", "b"):
        assert reported[job][1]["gpu"]["gpus"]["0"]["power_limit"] == (250.0 if ROOT else 300.0)
        env = reported[job][1]["env"]
        assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
        assert env["CUDA_VISIBLE_DEVICES"].startswith("GPU-")
        assert Path(env["CUDA_MPS_LOG_DIRECTORY"]).is_absolute()
        assert env["CUDA_MPS_PIPE_DIRECTORY"] != str(gpu.default_pipe)
        pipes.add(env["CUDA_MPS_PIPE_DIRECTORY"])
        # while the runs ran, a (fake) daemon answered at that pipe directory
        assert reported[job][1]["mps"]["running"] is True
    (pipe,) = pipes
    # afterwards: quit was sent to the daemon radT started, and its pipe directory is gone
    calls = gpu.mps_calls()
    assert [c["argv"] for c in calls].count(["-d"]) == 1
    started = next(i for i, c in enumerate(calls) if c["argv"] == ["-d"])
    assert any(c.get("stdin") == ["quit"] for c in calls[started:])
    assert not Path(pipe).exists()
    assert not gpu.default_pipe.exists()
    parents, children = parents_and_children(all_runs(ws))
    for letter in "AB":
        tags = children[f"shared/{letter}"].data.tags
        assert tags["radt.mps_thread_pct"] == "50"
        assert tags["radt.power_limit_w"] == ("250" if ROOT else "-")
        assert tags["radt.collocation"] == "mps"
        assert children[f"shared/{letter}"].info.status == "FINISHED"
    assert parents["shared"].data.tags["radt.collocation"] == "mps"
    assert parents["shared"].data.tags["radt.power_limit_w"] == ("250" if ROOT else "-")
    note = artifact_text(ws, parents["shared"].info.run_id, "radt/collocation/mps.txt", tmp_path)
    assert f"CUDA_MPS_PIPE_DIRECTORY={pipe}" in note
    # the power limit someone else set before is back
    assert gpu.state_text() == before
    expected = [["-i", "0", "-pl", "250"], ["-i", "0", "-pl", "300"]] if ROOT else []
    assert gpu.changing_calls() == expected


# --------------------------------------------------------------------------- MIG

MIG_PLAN = HEADER + (
    "study, sliced, , , 0, 3g.20gb, job.py, none, , , JOB=a SMI_L=1\n"
    "study, sliced, , , 0, 4g.20gb, job.py, none, , , JOB=b SMI_L=1\n"
)


@pytest.mark.slow
def test_mig_workload_gives_each_run_its_slice_and_destroys_them(tmp_path, template_db):
    """As root with --power-limit too: set before the slices are made, restored after."""
    ws = new_workspace(tmp_path, template_db)
    gpu = with_fakes(ws, mig=True)
    before = someone_else_set_300_w(gpu)
    write_plan(ws, MIG_PLAN)
    done = ws.run(["--power-limit", "250", "plan.csv"] if ROOT else ["plan.csv"])
    watts = 250.0 if ROOT else 300.0
    assert done.returncode == 0, done.stderr
    reported = jobs(done.stdout)
    uuids = {}
    for job, profile in (("a", "3g.20gb"), ("b", "4g.20gb")):
        info = reported[job][1]
        uuid = info["env"]["CUDA_VISIBLE_DEVICES"]
        assert uuid.startswith("MIG-")
        # `nvidia-smi -L` during the run lists that UUID on a line of the row's profile
        (line,) = [ln for ln in info["smi_l"].splitlines() if uuid in ln]
        assert f"MIG {profile} " in line
        assert len(info["gpu"]["gpus"]["0"]["gis"]) == 2
        assert info["gpu"]["gpus"]["0"]["power_limit"] == watts
        uuids[job] = uuid
    assert uuids["a"] != uuids["b"]
    parents, children = parents_and_children(all_runs(ws))
    assert children["sliced/A"].data.tags["radt.mig_profile"] == "3g.20gb"
    assert children["sliced/B"].data.tags["radt.mig_profile"] == "4g.20gb"
    assert children["sliced/A"].data.tags["radt.devices"] == uuids["a"]
    assert children["sliced/B"].data.tags["radt.collocation"] == "mig"
    assert parents["sliced"].data.tags["radt.mig_profile"] == "3g.20gb+4g.20gb"
    assert parents["sliced"].data.tags["radt.power_limit_w"] == ("250" if ROOT else "-")
    assert children["sliced/A"].data.tags["radt.power_limit_w"] == ("250" if ROOT else "-")
    placement = artifact_text(
        ws, parents["sliced"].info.run_id, "radt/collocation/mig_placement.txt", tmp_path
    )
    assert "3g.20gb" in placement and "4g.20gb" in placement
    # exactly what radT made was destroyed: the fake GPU is as before
    assert gpu.state_text() == before
    changing = gpu.changing_calls()
    if ROOT:
        assert changing[0] == ["-i", "0", "-pl", "250"]
        assert changing[-1] == ["-i", "0", "-pl", "300"]
        changing = changing[1:-1]
    middle = changing
    assert sum("-cgi" in argv for argv in middle) >= 1
    assert sum("-dgi" in argv for argv in middle) >= 1
    assert not any("-pl" in argv or "-mig" in argv for argv in middle)


# --------------------------------------------------------------------------- interrupted

INTERRUPTED_PLAN = HEADER + (
    "study, sliced, , , 0, 3g.20gb, job.py, none, , , JOB=a SLEEP=120\n"
    "study, sliced, , , 0, 4g.20gb, job.py, none, , , JOB=b SLEEP=120\n"
    "study, next, , , 0, none, job.py, none, , , JOB=next\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_workload_kills_its_runs_tears_down_and_stops_the_plan(
    tmp_path, template_db, signum
):
    ws = new_workspace(tmp_path, template_db)
    gpu = with_fakes(ws, mig=True)
    before = someone_else_set_300_w(gpu)
    plan = write_plan(ws, INTERRUPTED_PLAN)
    radt = ws.start(["--grace", "2", "plan.csv"])
    pids: list[int] = []
    try:
        pids = wait_for(lambda: both_started(ws), timeout=90)
        radt.send_signal(signum)
        _, err = radt.communicate(timeout=90)
        assert radt.returncode == 128 + signum, err
        for pid in pids:
            wait_for(lambda pid=pid: not pid_alive(pid), timeout=10)
        assert not (ws.root / "times-a.json").exists()
        runs = all_runs(ws)
        parents, children = parents_and_children(runs)
        assert sorted(parents) == ["sliced"]
        assert sorted(children) == ["sliced/A", "sliced/B"]
        assert {r.info.status for r in runs} == {"KILLED"}
        name = signal.Signals(signum).name
        for letter in "AB":
            assert name in children[f"sliced/{letter}"].data.tags["radt.stop_reason"]
        assert "the remaining workloads run the next time" in err
        assert started_pid(ws, "next") is None
        ids = [children[f"sliced/{letter}"].info.run_id for letter in "AB"]
        assert csv_cells(plan) == [("KILLED", ids[0]), ("KILLED", ids[1]), ("", "")]
        assert gpu.state_text() == before
        assert sum("-dgi" in argv for argv in gpu.changing_calls()) >= 1
    finally:
        radt.kill()
        for pid in pids:
            kill_quietly(pid)


# --------------------------------------------------------------------------- bad plans

# problems read_plan finds: each line of its own
CSV_PROBLEMS = HEADER + (
    "study, w, , , 0, turbo, job.py, none, , , JOB=a\n"
    "study, w, , , 0, none, -, none, , , JOB=b\n"
    "study, v, , , 0, 4g.20gb, job.py, none, , , JOB=c\n"
    "study, v, , , 0, 4g.20gb, job.py, none, , , JOB=d\n"
)

# problems found before the start by asking the (fake) GPU and the listeners
DEVICE_PROBLEMS = HEADER + (
    "study, w, , , 0, 3g.20gb, job.py, nosuch, , , JOB=a\n"
    "study, w, , , 0, 3g.20gb, job.py, none, , , JOB=b\n"
    "study, w, , , 0, 1g.10gb, job.py, none, , , JOB=c\n"
    "study, v, , , 0, none, job.py, none, , 900, JOB=d\n"
)

# both kinds in one plan
SEVERAL_PROBLEMS = HEADER + (
    "study, w, , , 0, turbo, job.py, none, , , JOB=a\n"
    "study, w, , , 0, none, -, none, , , JOB=b\n"
    "study, v, , , 0, 3g.20gb, job.py, nosuch, , , JOB=c\n"
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "mig", "expected"),
    [
        pytest.param(
            CSV_PROBLEMS,
            True,
            [
                r"line 2: unknown collocation mode 'turbo'",
                r"line 3: missing File",
                r"line 5: the MIG profiles of workload study/v on GPU 0 need 8 compute slices",
            ],
            id="csv-problems-and-4g+4g",
        ),
        pytest.param(
            DEVICE_PROBLEMS,
            True,
            [
                r"line 2: unknown listener nosuch",
                r"lines 2, 3, 4: MIG profiles 3g\.20gb \+ 3g\.20gb \+ 1g\.10gb cannot be placed",
                r"line 5: power limit 900 W is outside the range of GPU 0",
            ],
            id="listener-placement-power",
        ),
        pytest.param(
            SEVERAL_PROBLEMS,
            True,
            [r"line 2: .*'turbo'", r"line 3: missing File", r"line 4: unknown listener nosuch"],
            id="csv-and-listener-problems",
        ),
        pytest.param(
            MIG_PLAN, False, [r"lines 2, 3: .*`sudo nvidia-smi -i 0 -mig 1`"], id="mig-mode-off"
        ),
    ],
)
def test_bad_plan_is_refused_with_every_line_and_nothing_changes(
    tmp_path, template_db, text, mig, expected
):
    ws = new_workspace(tmp_path, template_db)
    gpu = with_fakes(ws, mig=mig)
    before = someone_else_set_300_w(gpu)
    plan = write_plan(ws, text)
    done = ws.run(["plan.csv"])
    assert done.returncode == 2, done.stderr
    assert "nothing was started" in done.stderr
    for pattern in expected:
        assert re.search(pattern, done.stderr), (pattern, done.stderr)
    assert done.stdout == ""
    assert all_runs(ws) == []
    assert not list(ws.root.glob("started-*"))
    assert plan.read_text() == text
    assert gpu.state_text() == before
    assert gpu.changing_calls() == []
    assert gpu.mps_calls() == []


# --------------------------------------------------------------------------- Params, --modes

MIXED = HEADER + (
    "study, pair, , , 0, naive, job.py, none, , , JOB=a\n"
    "study, pair, , , 0, naive, job.py, none, , , JOB=b\n"
    "study, alone, , , 0, none, job.py, none, ; touch pwned; rm -rf ~, , JOB=c\n"
)


@pytest.mark.slow
def test_modes_none_runs_only_the_baseline_and_params_never_reach_a_shell(tmp_path, template_db):
    ws = new_workspace(tmp_path, template_db)
    # were Params given to a shell, `rm -rf ~` would empty this folder, not the real home
    home = tmp_path / "home"
    home.mkdir()
    (home / "canary").write_text("still here")
    ws.env["HOME"] = str(home)
    plan = write_plan(ws, MIXED)
    done = ws.run(["--modes", "none", "plan.csv"])
    assert done.returncode == 0, done.stderr
    assert "skipping 1 workload (1 not among --modes none)" in done.stderr
    reported = jobs(done.stdout)
    assert sorted(reported) == ["c"]
    assert reported["c"][1]["argv"] == [";", "touch", "pwned;", "rm", "-rf", "~"]
    assert not (ws.root / "pwned").exists()
    assert not list(tmp_path.rglob("pwned*"))
    assert (home / "canary").read_text() == "still here"
    parents, children = parents_and_children(all_runs(ws))
    assert sorted(parents) == ["alone"] and sorted(children) == ["alone/A"]
    assert csv_cells(plan)[2] == ("FINISHED", children["alone/A"].info.run_id)
    assert csv_cells(plan)[:2] == [("", ""), ("", "")]


# --------------------------------------------------------------------------- --max-time

SLOW = HEADER + (
    "study, slow, , , 0, naive, job.py, none, , , JOB=a SLEEP=120\n"
    "study, slow, , , 0, naive, job.py, none, , , JOB=b SLEEP=120\n"
)


@pytest.fixture(scope="module")
def max_time(tmp_path_factory, template_db) -> tuple:
    ws = new_workspace(tmp_path_factory.mktemp("max-time"), template_db)
    write_plan(ws, SLOW)
    done = ws.run(["--max-time", "0.1", "--grace", "2", "plan.csv"], timeout=120)
    pids = [started_pid(ws, job) for job in ("a", "b")]
    alive = [pid for pid in pids if pid and pid_alive(pid)]
    for pid in alive:
        kill_quietly(pid)
    return ws, done, pids, alive


@pytest.mark.slow
def test_max_time_stops_every_run_and_says_why(max_time):
    ws, done, pids, alive = max_time
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "--max-time of 0.1 min reached" in done.stderr
    assert all(pids) and alive == []
    assert not (ws.root / "times-a.json").exists()
    parents, children = parents_and_children(all_runs(ws))
    for letter in "AB":
        run = children[f"slow/{letter}"]
        assert run.info.status == "KILLED"
        assert run.data.tags["radt.stop_reason"] == "--max-time of 0.1 min reached"
    assert parents["slow"].info.status == "KILLED"


@pytest.mark.slow
def test_max_time_stop_reason_is_on_the_parent_too(max_time):
    ws, _, _, _ = max_time
    parents, _ = parents_and_children(all_runs(ws))
    assert parents["slow"].data.tags.get("radt.stop_reason") == "--max-time of 0.1 min reached"


# --------------------------------------------------------------------------- unequal clients

UNEQUAL = """\
Experiment, Workload, Devices, Collocation, File, Listeners, Params, Env, Job, WarmupEpochs, WarmupS
study, unequal, 0, naive, job.py, top+iostat, --lr 0.1, JOB=short SLEEP=1 EXAMPLES=64, cnn, 2, -
study, unequal, 0, naive, job.py, top+iostat, --lr 0.2, JOB=long SLEEP=5 EXAMPLES=32, -, -, 1.5
"""
INTERVAL_S = 0.2


def last_sample_s(ws: Workspace, run, prefix: str, dest: Path) -> float:
    """Epoch seconds of the run's last sample whose key starts with ``prefix``."""
    dest.mkdir(parents=True, exist_ok=True)
    local = ws.client().download_artifacts(run.info.run_id, "radt/samples.parquet", str(dest))
    table = pd.read_parquet(local)
    stamps = table[table.key.str.startswith(prefix)].timestamp
    assert len(stamps), f"no {prefix} samples"
    return stamps.max().value / 1e9


@pytest.mark.slow
def test_a_clients_listeners_stop_with_its_command_and_the_workloads_with_the_last(
    tmp_path, template_db
):
    ws = new_workspace(tmp_path, template_db)
    write_plan(ws, UNEQUAL)
    done = ws.run(["--interval", str(INTERVAL_S), "--job-ignore", "--lr", "plan.csv"])
    assert done.returncode == 0, done.stderr
    parents, children = parents_and_children(all_runs(ws))
    short, long, parent = children["unequal/A"], children["unequal/B"], parents["unequal"]
    ends = {}
    for job, run in (("short", short), ("long", long)):
        began, ended = read_times(ws, job)
        start = float(run.data.tags["radt.command_start_s"])
        ends[job] = float(run.data.tags["radt.command_end_s"])
        assert start <= began < ended <= ends[job], "command times bracket the script's own"
        assert run.info.end_time == pytest.approx(ends[job] * 1000, abs=1)
    assert ends["long"] - ends["short"] > 2
    # The short client's own listener stopped with its command (one interval plus a second of
    # slack for a loaded machine), while the long one's went on; the workload's device listener
    # ran until the last command ended.
    bound = INTERVAL_S + 1.0
    assert last_sample_s(ws, short, "top/", tmp_path / "a") <= ends["short"] + bound
    assert last_sample_s(ws, long, "top/", tmp_path / "b") > ends["short"] + 2
    assert last_sample_s(ws, long, "top/", tmp_path / "b") <= ends["long"] + bound
    device_last = last_sample_s(ws, parent, "iostat/", tmp_path / "p")
    assert ends["short"] + 2 < device_last <= ends["long"] + bound
    assert "radt.command_start_s" not in parent.data.tags
    # The run API works in plan rows: plain metrics, not system/script/...
    assert short.data.metrics["examples"] == 64 and long.data.metrics["examples"] == 32
    assert short.data.metrics["epoch"] == 0
    assert not any(key.startswith("system/script") for key in short.data.metrics)
    # Job and warm-up columns, and --job-ignore, as tags.
    assert short.data.tags["radt.job"] == "cnn"
    assert short.data.tags["radt.warmup_epochs"] == "2"
    assert "radt.warmup_s" not in short.data.tags
    assert "radt.job" not in long.data.tags
    assert long.data.tags["radt.warmup_s"] == "1.5"
    assert short.data.tags["radt.job_ignore"] == long.data.tags["radt.job_ignore"] == "--lr"

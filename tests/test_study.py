"""Studies end to end: YAML read and expanded, dry runs, real runs of `python -m radt study.yaml`
on a real SQLite store with the stateful NVIDIA stand-ins, resumption after SIGINT, studies
written by the original radT, and the batch-size search against a job whose memory limit
depends on its MIG slice.

The training command is a small script (``JOB``): it logs what it got (batch size, the memory of
the slot its ``CUDA_VISIBLE_DEVICES`` maps to through ``nvidia-smi -L``, whether it is a probe)
to ``started.log`` when it starts and to ``jobs.log`` when it ends, and runs out of memory
(PyTorch's message, exit 1) above 3 examples per GB.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections import Counter

import pytest
import yaml
from conftest import FAKES, REPO, wait_for
from test_workload import ROOT, new_workspace, with_fakes

from radt.plans import batch
from radt.plans.read import read_plan
from radt.plans.runner import PlanOptions
from radt.plans.study import StudyError, read_study
from radt.plans.studyaxes import parse_configuration
from radt.plans.studyexpand import expand
from radt.plans.studyfile import write_progress
from radt.plans.studyprogress import progress_of
from radt.plans.studyrun import StudyOptions, run_study

JOB = r"""
import argparse, json, os, re, subprocess, sys, time
parser = argparse.ArgumentParser(description="stand-in training job")
parser.add_argument("--batch-size", type=int, default=8)
parser.add_argument("--lr", type=float, default=0.1)
args = parser.parse_args()
visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
memory_gb = 40  # the whole A100-SXM4-40GB of the fake
if visible.startswith("MIG-"):
    listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
    for line in listing.splitlines():
        m = re.match(r"^\s+MIG \d+g\.(\d+)gb\S*\s+Device\s+\d+: \(UUID: ([^)]+)\)", line)
        if m and m[2] == visible:
            memory_gb = int(m[1])
record = {"probe": bool(os.environ.get("RADT_MAX_STEPS")), "batch": args.batch_size,
          "memory_gb": memory_gb, "lr": args.lr, "run": os.environ.get("RADT_RUN_ID")}


def log(name, **extra):
    with open(name, "a") as f:
        f.write(json.dumps({**record, **extra}) + "\n")


log("started.log")
if os.environ.get("JOB_FAIL"):
    print("ValueError: the data folder is missing", flush=True)
    sys.exit(3)
if args.batch_size > 3 * memory_gb:
    log("jobs.log", outcome="oom")
    print("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
          file=sys.stderr, flush=True)
    sys.exit(1)
time.sleep(float(os.environ.get("SLEEP", "0")))
log("jobs.log", outcome="fits")
"""

CAPS = "[default, 250]" if ROOT else "[default, 400]"  # 400 W is set already: no root needed


def study_ws(tmp_path, template_db, text: str, mig: bool = True):
    ws = new_workspace(tmp_path, template_db)
    gpu = with_fakes(ws, mig=mig)
    ws.script("job.py", JOB)
    path = ws.root / "study.yaml"
    path.write_text(text)
    return ws, gpu, path


def jobs_log(ws, name: str = "jobs.log") -> list[dict]:
    path = ws.root / name
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def all_runs(ws) -> list:
    client = ws.client()
    ids = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(ids, max_results=5000) if ids else []


# --------------------------------------------------------------------------- reading, expansion

GRID = """\
# a comment that must survive the write-back
name: grid
experiment: grid-study
file: job.py
devices: 0
listeners: none
method: grid
parameters:
  lr:
    values: [0.1]
collocation: [none, 3g.20gb+3g.20gb]
power_limit: {caps}
repeats: 2
"""


def test_two_configurations_two_caps_two_repeats_expand_to_exactly_those_workloads(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    path = tmp_path / "study.yaml"
    path.write_text(GRID.format(caps="[default, 250]"))
    study = read_study(path, cwd=tmp_path)
    workloads = expand(study)
    assert [
        (w.index, w.name, w.configuration.label, w.power_limit_w, w.repeat, w.descriptor)
        for w in workloads
    ] == [
        (1, "001-none-default-r1", "none", None, 1, "--lr 0.1"),
        (2, "002-3g+3g-default-r1", "3g.20gb+3g.20gb", None, 1, "--lr 0.1 | 3g.20gb+3g.20gb"),
        (3, "003-none-250w-r1", "none", 250.0, 1, "--lr 0.1 | 250 W"),
        (4, "004-3g+3g-250w-r1", "3g.20gb+3g.20gb", 250.0, 1, "--lr 0.1 | 3g.20gb+3g.20gb | 250 W"),
        (5, "005-none-default-r2", "none", None, 2, "--lr 0.1 | repeat 2"),
        (
            6,
            "006-3g+3g-default-r2",
            "3g.20gb+3g.20gb",
            None,
            2,
            "--lr 0.1 | 3g.20gb+3g.20gb | repeat 2",
        ),
        (7, "007-none-250w-r2", "none", 250.0, 2, "--lr 0.1 | 250 W | repeat 2"),
        (
            8,
            "008-3g+3g-250w-r2",
            "3g.20gb+3g.20gb",
            250.0,
            2,
            "--lr 0.1 | 3g.20gb+3g.20gb | 250 W | repeat 2",
        ),
    ]
    assert {w.job for w in workloads} == {"job.py --lr 0.1"}


def test_random_method_shuffles_the_same_workloads_reproducibly_with_seed(tmp_path):
    (tmp_path / "job.py").write_text(JOB)
    path = tmp_path / "study.yaml"
    text = GRID.format(caps="[default, 250]").replace("method: grid", "method: random")
    path.write_text(text + "seed: 7\n")
    grid_path = tmp_path / "grid.yaml"
    grid_path.write_text(GRID.format(caps="[default, 250]"))
    shuffled = [w.descriptor for w in expand(read_study(path, cwd=tmp_path))]
    again = [w.descriptor for w in expand(read_study(path, cwd=tmp_path))]
    grid = [w.descriptor for w in expand(read_study(grid_path, cwd=tmp_path))]
    assert shuffled == again and sorted(shuffled) == sorted(grid) and shuffled != grid
    path.write_text(text + "seed: 8\n")
    assert [w.descriptor for w in expand(read_study(path, cwd=tmp_path))] != shuffled


@pytest.mark.parametrize(
    ("text", "label", "runs"),
    [
        ("-", "none", ["none"]),
        ("naive x3", "naive x3", ["naive"] * 3),
        ("mps", "mps x1", ["mps"]),
        ("mps:50 x2", "mps:50 x2", ["mps:50"] * 2),
        ("3g.40gb+4g.40gb", "4g.40gb+3g.40gb", ["4g.40gb", "3g.40gb"]),
        ("1g.10gb+2g.20gb+2g.20gb+2g.20gb", "2g.20gb+2g.20gb+2g.20gb+1g.10gb", None),
        ("1g.5gb+me x2", "1g.5gb+me+1g.5gb+me", ["1g.5gb+me"] * 2),
    ],
)
def test_configurations_are_labelled_as_the_analysis_labels_them(text, label, runs):
    configuration = parse_configuration(text)
    assert configuration.label == label
    if runs is not None:
        assert [run.label for run in configuration.runs] == runs


def test_original_radt_yaml_with_its_status_and_parent_reads_back(tmp_path):
    # The layout yaml.dump gives it (sorted keys), as the original writes it after a workload.
    (tmp_path / "cifar10.py").write_text(JOB)
    original = {
        "collocation": "-",
        "devices": 0,
        "experiment": 0,
        "file": "cifar10.py",
        "listeners": "smi+top",
        "method": "grid",
        "name": "Sweep name",
        "parameters": {"batch-size": {"values": [8, 16]}, "learning-rate": {"values": [0.001]}},
        "parent": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
        "status": {1: "FINISHED 5f4e3d2c1b0a (--batch-size 8 --learning-rate 0.001)"},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.dump(original))
    study = read_study(path, cwd=tmp_path)
    workloads = expand(study)
    assert [w.descriptor for w in workloads] == [
        "--batch-size 8 --learning-rate 0.001",
        "--batch-size 16 --learning-rate 0.001",
    ]
    assert [w.name for w in workloads] == ["001", "002"]
    assert study.parent == original["parent"] and study.experiment == "0"
    progress = progress_of(study)
    assert progress[workloads[0].descriptor].status == "FINISHED"
    assert workloads[1].descriptor not in progress


def test_progress_is_written_in_place_and_reads_back_as_the_original_reads_it(tmp_path):
    path = tmp_path / "study.yaml"
    path.write_text(GRID.format(caps="[default]") + "status:\n  1: FAILED x (--lr 9)\n")
    warnings: list[str] = []
    status = {1: "FINISHED abc (--lr 0.1)", 2: "KILLED def (--lr 0.1 | 3g.20gb+3g.20gb)"}
    write_progress(path, "parent-run", status, warnings.append)
    text = path.read_text()
    assert not warnings
    assert text.startswith("# a comment that must survive the write-back\nname: grid\n")
    assert text.count("status:") == 1 and "FAILED x" not in text
    data = yaml.safe_load(text)
    assert data["parent"] == "parent-run" and data["status"] == status
    # the original radT's reading of it: FINISHED entries give their params string
    finished = [
        " ".join(s.split()[2:]).strip()[1:-1] for s in data["status"].values() if "FINISHED" in s
    ]
    assert finished == ["--lr 0.1"]


LOADER_STUDY = """\
name: fed
file: job.py --batch-size 4
devices: 0
listeners: none
parameters:
  lr:
    values: [0.1]
collocation: [none, naive x2]
loader: [own, shared]
loader_file: feeder.py --epochs 2 --augment 2
"""


def test_loader_dimension_runs_each_configuration_with_own_loaders_and_one_shared(
    tmp_path, monkeypatch, capsys
):
    (tmp_path / "job.py").write_text(JOB)
    (tmp_path / "feeder.py").write_text("")
    path = tmp_path / "study.yaml"
    path.write_text(LOADER_STUDY)
    monkeypatch.chdir(tmp_path)
    workloads = expand(read_study(path, cwd=tmp_path))
    assert [(w.name, w.configuration.label, w.loader, w.descriptor) for w in workloads] == [
        ("001-none-own", "none", "own", "--lr 0.1"),
        ("002-none-shared", "none", "shared", "--lr 0.1 | shared loader"),
        ("003-naive-x2-own", "naive x2", "own", "--lr 0.1 | naive x2"),
        ("004-naive-x2-shared", "naive x2", "shared", "--lr 0.1 | naive x2 | shared loader"),
    ]
    assert len({w.job for w in workloads}) == 1  # own and shared compare as one Job

    assert run_study(StudyOptions(path, PlanOptions(path=path), dry_run=True)) == 0
    out = capsys.readouterr().out
    assert (
        "4 workloads, 8 runs = 1 parameter combination x 2 configurations x 1 power limit"
        " x 2 loaders x 1 repeat"
    ) in out
    assert "loaders: own, shared; shared loader: feeder.py --epochs 2 --augment 2" in out
    table = out[out.index("#  workload") :].splitlines()
    assert table[0].split() == [
        "#", "workload", "configuration", "runs", "loader", "power", "repeat", "params", "status"
    ]  # fmt: skip
    assert [line.split()[-6:-4] for line in table[1:]] == [
        ["1", "own"], ["2", "shared"], ["2", "own"], ["3", "shared"]
    ]  # fmt: skip

    plan = read_plan(tmp_path / "study.plan.csv", cwd=tmp_path)  # as a study run reads it
    rows = {w.name: w.rows for w in plan.workloads}
    assert not any(r.role for r in rows["001-none-own"] + rows["003-naive-x2-own"])
    assert [r.params for r in rows["003-naive-x2-own"]] == [["--lr", "0.1"]] * 2
    assert [(r.letter, r.role, r.collocation.label) for r in rows["004-naive-x2-shared"]] == [
        ("L", "loader", "naive"),
        ("A", "consumer", "naive"),
        ("B", "consumer", "naive"),
    ]
    loader, *trainings = rows["004-naive-x2-shared"]
    assert loader.command == ["feeder.py", "--epochs", "2", "--augment", "2"]
    assert loader.power_limit_w is None and loader.job is None
    for row in trainings:
        assert row.command == ["job.py", "--batch-size", "4", "--shared-loader", "--lr", "0.1"]
        assert row.job == workloads[0].job
    # none with a shared loader: the training alone on its GPU, and the loader beside it
    assert [(r.letter, r.role, r.collocation.mode) for r in rows["002-none-shared"]] == [
        ("L", "loader", "none"),
        ("A", "consumer", "none"),
    ]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("file: job.py\ncolocation: [none]\n", r"line 2: colocation: unknown key .*'collocation'"),
        ("file: job.py\nparameters:\n  lr: [0.1, 0.2]\n", r"line 3: parameters\.lr: needs values"),
        ("file: job.py\nparameters:\n  lr: {values: []}\n", r"parameters\.lr: .*empty product"),
        ("file: job.py\ncollocation: []\n", r"line 2: collocation: the list is empty"),
        (
            "file: job.py\ncollocation: [none, 4g.20gb+4g.20gb]\n",
            r"line 2: collocation\[1\]: '4g.20gb\+4g.20gb' needs 8 compute slices",
        ),
        ("file: job.py\ncollocation: none x2\n", r"collocation: 'none x2': none is the job alone"),
        ("file: job.py\nmethod: bayes\n", r"line 2: method: 'bayes' is not grid or random"),
        ("file: job.py\npower_limit: [150, hot]\n", r"power_limit\[1\]: 'hot' is not a number"),
        ("file: nosuch.py\n", r"line 1: file: File 'nosuch.py' not found"),
        ("file: job.py\nbatch_size: 64\n", r"line 2: batch_size: must be a mapping"),
        ("file: job.py\nname: [a\n", r"not valid YAML: .*flow sequence on line 2"),
        ("file: job.py\nloader: [own, borrowed]\n", r"line 2: loader\[1\]: 'borrowed' is not own"),
        ("file: job.py\nloader: [own, shared]\n", r"line 2: loader: shared needs loader_file"),
        ("file: job.py\nloader: []\n", r"line 2: loader: the list is empty"),
        ("file: job.py\nloader: [own, OWN]\n", r"line 2: loader\[1\]: own is listed twice$"),
        ("file: job.py\ncollocation: [none, none]\n", r"collocation\[1\]: none is listed twice$"),
        ("file: job.py\ngpu_clock: [1410, fast]\n", r"gpu_clock\[1\]: .*'fast'.*, or default$"),
        ("file: job.py\ngpu_clock: [default, default]\n", r"gpu_clock\[1\]: default is listed"),
        ("file: job.py\ngpu_clock: [1410, 1410 MHz]\n", r"gpu_clock\[1\]: 1410 MHz is listed"),
        ("file: job.py\npower_limit: [250, 250 W]\n", r"power_limit\[1\]: 250 W is listed twice$"),
        ("file: job.py\nloader_file: job.py\n", r"line 2: loader_file: is only run with loader"),
        (
            "file: job.py\nloader: shared\nloader_file: nope.py\n",
            r"line 3: loader_file: File 'nope.py' not found",
        ),
        ("file: job.py\nnodes: 0\n", r"line 2: nodes: 0 is not a positive whole number of nodes$"),
        ("file: job.py\nnodes: two\n", r"line 2: nodes: 'two' is not a positive whole number"),
        (
            "file: job.py\nnodes: 2\ncollocation: mps x2\n",
            r"line 3: collocation: mps x2 shares one GPU and cannot span nodes; with nodes: 2",
        ),
        (
            "file: job.py\nnodes: 2\ncollocation: [none, 3g.40gb]\n",
            r"line 3: collocation\[1\]: 3g.40gb shares one GPU and cannot span nodes",
        ),
        ("file: job.py\nnodes: 2\npower_limit: 150\n", r"line 3: power_limit: is not available"),
    ],
)
def test_bad_study_is_one_line_per_problem_with_its_key(tmp_path, text, expected):
    import re

    (tmp_path / "job.py").write_text(JOB)
    path = tmp_path / "study.yaml"
    path.write_text(text)
    with pytest.raises(StudyError) as info:
        read_study(path, cwd=tmp_path)
    lines = str(info.value).splitlines()
    assert lines[0].endswith("nothing was started:")
    assert len(lines) == 2, lines
    assert re.search(expected, lines[1]), lines[1]


@pytest.mark.slow
def test_dry_run_finds_placement_power_flag_problems_before_anything_starts(tmp_path, template_db):
    ws, gpu, path = study_ws(
        tmp_path,
        template_db,
        "file: job.py\n"
        "listeners: none\n"
        "collocation: [none, 3g.20gb+3g.20gb+1g.5gb, 4g.40gb]\n"
        "power_limit: [default, 900]\n"
        "batch_size: {search: max, flag: --micro-batch}\n",
        mig=False,
    )
    done = ws.run(["study.yaml", "--dry-run"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0] == "radt: error: study.yaml has 4 problems; nothing was started:"
    assert "line 3: collocation[1]: 3g.20gb+3g.20gb+1g.5gb: MIG profiles" in lines[1]
    assert "cannot be placed side by side" in lines[1]
    assert "line 3: collocation[2]: 4g.40gb: MIG profile 4g.40gb does not exist" in lines[2]
    assert "line 4: power_limit[1]: 900 W is outside the range of GPU 0" in lines[3]
    assert "line 5: batch_size.flag: the job has no --micro-batch flag" in lines[4]
    assert "Traceback" not in done.stderr
    assert not (ws.root / "study.plan.csv").exists()
    assert gpu.changing_calls() == [] and all_runs(ws) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "model", "caps"),
    [
        ("mig_study_h100.yaml", "h100-80gb", [None, 500.0, 300.0]),
        ("mig_study_a100.yaml", "a100-80gb", [None, 250.0, 150.0]),
    ],
)
def test_mig_study_examples_pass_dry_run_on_the_stand_in_host(
    tmp_path, template_db, name, model, caps
):
    ws, gpu, _ = study_ws(tmp_path, template_db, "", mig=False)
    (ws.root / "examples").mkdir()
    for part in (name, "train.py", "synthetic_data.py"):  # train.py imports its data module
        (ws.root / "examples" / part).write_text((REPO / "examples" / part).read_text())
    ws.env["FAKE_NVIDIA_SMI_MODEL"] = model
    # the stand-in host has NVML too: a dry run refuses the nvml listener without it, as a run
    ws.env["PYTHONPATH"] = os.pathsep.join([str(FAKES / "pynvml"), ws.env["PYTHONPATH"]])
    done = ws.run([f"examples/{name}", "--dry-run", "--plan", "plan.csv"])
    assert done.returncode == 0, done.stderr
    assert (
        "36 workloads, 96 runs = 1 parameter combination x 12 configurations x 3 power "
        "limits" in done.stdout
    )
    rows = [
        [cell.strip() for cell in line.split(",")]
        for line in (ws.root / "plan.csv").read_text().splitlines()
        if not line.startswith("#")
    ][1:]
    assert len(rows) == 96
    workloads: dict[str, list[list[str]]] = {}
    for row in rows:
        workloads.setdefault(row[1], []).append(row)
    partitionings = {
        "+".join(row[5] for row in w) for w in workloads.values() if w[0][5][0].isdigit()
    }
    assert partitionings == {
        "7g.80gb",
        "4g.40gb+3g.40gb",
        "4g.40gb+2g.20gb+1g.10gb",
        "3g.40gb+2g.20gb+2g.20gb",
        "2g.20gb+2g.20gb+2g.20gb+1g.10gb",
    }
    for mode in ("naive", "mps"):
        assert sorted(len(w) for w in workloads.values() if w[0][5] == mode) == [
            2,
            2,
            2,
            3,
            3,
            3,
            4,
            4,
            4,
        ]
    assert Counter(w[0][9] for w in workloads.values()) == {
        ("-" if cap is None else f"{cap:g}"): 12 for cap in caps
    }
    assert gpu.changing_calls() == [] and all_runs(ws) == []
    # on the default stand-in (an A100 40GB) the 80 GB profiles do not exist
    del ws.env["FAKE_NVIDIA_SMI_MODEL"]
    refused = ws.run([f"examples/{name}", "--dry-run", "--plan", "plan.csv"])
    assert refused.returncode == 2
    assert refused.stderr.count("does not exist on GPU 0 (NVIDIA A100-SXM4-40GB)") == 5


# --------------------------------------------------------------------------- running


@pytest.mark.slow
def test_study_runs_nested_and_resumes_after_sigint_without_rerunning_finished_work(
    tmp_path, template_db
):
    ws, gpu, path = study_ws(tmp_path, template_db, GRID.format(caps=CAPS))
    ws.env["SLEEP"] = "2"
    radt = ws.start(["--grace", "5", "study.yaml"])
    try:
        # workloads 1 (1 run) and 2 (2 runs) done, workload 3 started: interrupt it
        wait_for(lambda: len(jobs_log(ws, "started.log")) >= 4, timeout=240)
        radt.send_signal(signal.SIGINT)
        _, err = radt.communicate(timeout=120)
    finally:
        radt.kill()
    assert radt.returncode == 130, err
    status = yaml.safe_load(path.read_text())["status"]
    assert [status[n].split()[0] for n in sorted(status)] == ["FINISHED", "FINISHED", "KILLED"]
    assert "# a comment that must survive" in path.read_text()
    started = len(jobs_log(ws))
    assert started == 3
    ws.env["SLEEP"] = "0"
    done = ws.run(["study.yaml"], timeout=600)
    assert done.returncode == 0, done.stderr
    # the finished workloads 1 and 2 (3 runs) did not run again; 3..8 ran (9 runs)
    assert len(jobs_log(ws)) == started + 9
    data = yaml.safe_load(path.read_text())
    assert sorted(data["status"]) == list(range(1, 9))
    assert {s.split()[0] for s in data["status"].values()} == {"FINISHED"}
    runs = all_runs(ws)
    studies = [r for r in runs if "radt.study_file" in r.data.tags]
    assert len(studies) == 1 and studies[0].info.run_id == data["parent"]
    assert studies[0].info.status == "FINISHED"
    study_id = studies[0].info.run_id
    workload_runs = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == study_id]
    names = Counter(r.info.run_name for r in workload_runs)
    assert names["001-none-default-r1"] == names["002-3g+3g-default-r1"] == 1
    assert names[sorted(names)[2]] == 2  # workload 3: the killed run and the finished one
    assert len(names) == 8
    by_id = {r.info.run_id: r for r in workload_runs}
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") in by_id]
    assert len(children) == 4 + 9  # every run of a workload nests under its workload run
    finished = [r for r in workload_runs if r.info.status == "FINISHED"]
    assert sorted(r.data.tags.get("radt.power_limit_w", "-") for r in finished) == sorted(
        ["-"] * 4 + ["250" if ROOT else "400"] * 4
    )
    assert {r.data.params.get("lr") for r in children} == {"0.1"}
    assert json.loads(gpu.state_text() or "{}").get("gpus", {}) == {}  # slices gone, cap restored
    plan = (ws.root / "study.plan.csv").read_text()
    assert plan.count(", FINISHED, ") == 12


@pytest.mark.slow
def test_yaml_written_by_the_original_radt_resumes_under_its_parent(tmp_path, template_db):
    ws, _gpu, path = study_ws(tmp_path, template_db, "", mig=False)
    client = ws.client()
    parent = client.create_run("0", run_name="Sweep name").info.run_id
    client.set_terminated(parent, "FINISHED")
    path.write_text(
        yaml.dump(
            {
                "collocation": "-",
                "devices": 0,
                "experiment": 0,
                "file": "job.py",
                "listeners": "none",
                "method": "grid",
                "name": "Sweep name",
                "parameters": {"batch-size": {"values": [8, 16]}, "lr": {"values": [0.1]}},
                "parent": parent,
                "status": {1: "FINISHED 5f4e3d2c1b0a (--batch-size 8 --lr 0.1)"},
            }
        )
    )
    done = ws.run(["study.yaml"], timeout=300)
    assert done.returncode == 0, done.stderr
    assert [(j["batch"], j["lr"]) for j in jobs_log(ws)] == [(16, 0.1)]
    data = yaml.safe_load(path.read_text())
    assert data["parent"] == parent
    assert data["status"][1].startswith("FINISHED 5f4e3d2c1b0a")
    assert data["status"][2].split()[0] == "FINISHED"
    assert data["status"][2].endswith("(--batch-size 16 --lr 0.1)")
    runs = all_runs(ws)
    workload = next(r for r in runs if r.info.run_name == "002")
    assert workload.data.tags["mlflow.parentRunId"] == parent
    assert client.get_run(parent).info.status == "FINISHED"


# --------------------------------------------------------------------------- batch-size search

SEARCH = """\
name: search
experiment: search
file: job.py
devices: 0
listeners: none
collocation: [1g.5gb, 3g.20gb]
batch_size: {search: max, min: 1, max: 64}
"""


@pytest.mark.slow
def test_radt_runs_of_a_study_has_a_column_per_swept_param_and_none_for_constant_ones(
    tmp_path, template_db
):
    ws, _gpu, _path = study_ws(
        tmp_path,
        template_db,
        "experiment: swept\nfile: job.py\ndevices: 0\nlisteners: none\nmethod: grid\n"
        "parameters:\n  lr:\n    values: [0.1, 0.2]\n  batch-size:\n    values: [8]\n"
        "collocation: [none]\n",
        mig=False,
    )
    done = ws.run(["study.yaml"], timeout=300)
    assert done.returncode == 0, done.stderr
    listed = ws.run(["runs", "-e", "swept"])
    assert listed.returncode == 0, listed.stderr
    head, *lines = listed.stdout.splitlines()
    assert head.split()[:5] == ["name", "status", "configuration", "workload", "lr"]
    assert "batch-size" not in head
    at = head.index("lr")
    lr = {line.split()[0].strip(":"): line[at:].split()[0] for line in lines}
    workloads = sorted(name for name in lr if name != "A")
    assert len(lines) == 4 and len(workloads) == 2  # 2 workloads, each with its run A
    assert [lr[name] for name in workloads] == ["0.1", "0.2"]
    assert sorted(line[at:].split()[0] for line in lines if line.startswith("  A:")) == [
        "0.1",
        "0.2",
    ]


def probes(ws) -> list[dict]:
    """The probes that ran to their end."""
    return [j for j in jobs_log(ws) if j["probe"]]


def outcomes(ws) -> list[str]:
    """Outcomes radT recorded on probe runs so far."""
    runs = all_runs(ws)
    return [r.data.tags["radt.probe.outcome"] for r in runs if "radt.probe.outcome" in r.data.tags]


@pytest.mark.slow
def test_batch_search_finds_each_slots_limit_and_probes_nothing_twice(tmp_path, template_db):
    ws, gpu, path = study_ws(tmp_path, template_db, SEARCH)
    most = math.ceil(math.log2(64 / 1)) + 1
    ws.env["SLEEP"] = "3"
    radt = ws.start(["study.yaml"])
    try:  # interrupt the search of the first slot once three probes are recorded
        wait_for(lambda: len(outcomes(ws)) >= 3, timeout=240)
        radt.send_signal(signal.SIGINT)
        _out, err = radt.communicate(timeout=120)
    finally:
        radt.kill()
    assert radt.returncode == 130, err
    assert len(outcomes(ws)) == 3  # the fourth probe was cut short: not recorded
    ws.env["SLEEP"] = "0"
    done = ws.run(["study.yaml"], timeout=600)
    assert done.returncode == 0, done.stderr
    seen = Counter((j["memory_gb"], j["batch"]) for j in probes(ws))
    assert max(seen.values()) == 1, seen  # the interrupted search went on, nothing twice
    per_slot = Counter(memory for memory, _ in seen)
    assert set(per_slot) == {5, 20} and max(per_slot.values()) <= most
    trained = {(j["memory_gb"], j["batch"]) for j in jobs_log(ws) if not j["probe"]}
    assert trained == {(5, 15), (20, 60)}  # the exact limits: 3 examples per GB
    runs = all_runs(ws)
    searches = [r for r in runs if r.data.tags.get("radt.probe") == "search"]
    assert sorted(r.info.status for r in searches) == ["FINISHED", "FINISHED", "KILLED"]
    finished = {r.data.tags["radt.probe.slot"]: r for r in searches if r.info.status == "FINISHED"}
    assert {k: r.data.tags["radt.probe.batch_size"] for k, r in finished.items()} == {
        "1g.5gb": "15",
        "3g.20gb": "60",
    }
    workload_runs = [r for r in runs if r.data.tags.get("radt.workload", "").startswith("00")]
    assert {
        r.data.params.get("batch-size") for r in workload_runs if "radt.letter" in r.data.tags
    } == {"15", "60"}
    # a study that runs its workloads again probes nothing: the answers are in the experiment
    text = path.read_text()
    path.write_text(text[: text.index("\nparent:")] + "\n")
    again = ws.run(["study.yaml"], timeout=600)
    assert again.returncode == 0, again.stderr
    assert len(probes(ws)) == sum(seen.values())
    assert json.loads(gpu.state_text() or "{}").get("gpus", {}) == {}


@pytest.mark.slow
def test_probe_that_fails_for_another_reason_stops_the_study_in_one_line(tmp_path, template_db):
    ws, gpu, path = study_ws(tmp_path, template_db, SEARCH)
    ws.env["JOB_FAIL"] = "1"
    done = ws.run(["study.yaml"], timeout=300)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("radt: error:")]
    assert len(errors) == 1
    assert "failed for another reason than memory" in errors[0]
    assert "ValueError: the data folder is missing" in errors[0]
    assert "Traceback" not in done.stderr
    assert len(jobs_log(ws, "started.log")) == 1
    assert json.loads(gpu.state_text() or "{}").get("gpus", {}) == {}


def test_candidates_and_the_most_probes():
    from radt.plans.study import BatchSearch

    assert batch.candidates(BatchSearch(min=3, max=40, power_of_two=True)) == [4, 8, 16, 32]
    assert batch.most_probes(BatchSearch(min=1, max=65536)) == 17
    assert batch.has_oom("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling")
    assert not batch.has_oom("RuntimeError: CUDA error: an illegal memory access")


@pytest.mark.slow
def test_study_cli_subprocess_smoke_of_bad_plan_path(tmp_path, template_db):
    ws, _gpu, _path = study_ws(tmp_path, template_db, "file: job.py\nlisteners: none\n")
    done = ws.run(["study.yaml", "--dry-run", "--plan", "plan.txt"])
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "radt: error: --plan plan.txt: the plan is a CSV file (e.g. study.plan.csv)"
    )


@pytest.mark.slow
def test_radt_max_steps_ends_the_script_cleanly_after_that_many_log_examples_calls(workspace):
    workspace.script(
        "steps.py",
        "import radt\n"
        "for step in range(1000):\n"
        "    print('step', step, flush=True)\n"
        "    radt.log_examples(4)\n",
    )
    env = {**workspace.env, "RADT_MAX_STEPS": "3"}
    done = workspace.run(["-l", "none", "steps.py"], env=env)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if line.startswith("step")] == [
        "step 0",
        "step 1",
        "step 2",
    ]
    assert "RADT_MAX_STEPS=3 steps done" in done.stderr
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.metrics["examples"] == 12

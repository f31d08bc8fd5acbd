"""One distributed training across two "nodes" on this host is one job run with a node run each
(issue 21): real torchrun, gloo on 127.0.0.1, each node under its own radT."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO, default_signals, kill_quietly, wait_for
from servers import free_port

from radt.launch import group

TRAIN = REPO / "examples" / "ddp_train.py"


def test_group_from_flag_environment_torchrun_and_slurm():
    torchrun = [
        "torchrun",
        "--nnodes=2",
        "--node_rank",
        "1",
        "--rdzv-id",
        "j7",
        "train.py",
        "--node-rank",
        "5",
    ]
    assert group.resolve(None, torchrun, {"RADT_NODE": "b"}) == group.Group("j7", "b", 1, 2)
    module = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1:4", "t.py"]
    assert group.resolve("g", module, {"RADT_NODE": "a"}) == group.Group("g", "a", 0, 4)
    assert group.resolve(None, ["python", "train.py"], {}) is None
    assert group.resolve(None, ["python", "train.py"], {"RADT_GROUP": "x"}).name == "x"
    slurm = {
        "SLURM_JOB_ID": "41",
        "SLURM_STEP_ID": "0",
        "SLURM_STEP_NUM_TASKS": "2",
        "SLURM_STEP_NUM_NODES": "2",
        "SLURM_NODEID": "1",
        "SLURM_PROCID": "1",
        "SLURMD_NODENAME": "gpu07",
    }
    assert group.resolve(None, ["train.py"], slurm) == group.Group("slurm-41.0", "gpu07", 1, 2)
    one_node = {**slurm, "SLURM_STEP_NUM_NODES": "1", "SLURM_NODEID": "0", "RADT_NODE": "t1"}
    assert group.resolve(None, ["train.py"], one_node) == group.Group("slurm-41.0", "t1", 1, 2)
    del one_node["RADT_NODE"]
    assert group.resolve(None, ["train.py"], one_node).node == "gpu07-1"
    assert group.resolve(None, ["train.py"], {**slurm, "SLURM_STEP_NUM_TASKS": "1"}) is None
    with pytest.raises(group.UsageError, match="node rank 'x'"):
        group.resolve("g", ["train.py"], {"RADT_NODE_RANK": "x"})
    with pytest.raises(group.UsageError, match="cannot be used"):
        group.resolve("a b", ["train.py"], {})


def start_node(
    workspace,
    tmp_path,
    rank: int,
    port: int,
    steps: int = 12,
    step_s: float = 0.0,
    *,
    nnodes: int = 2,
    radt_args: tuple[str, ...] = ("-l", "none", "--group", "ddp1"),
    env: dict[str, str] | None = None,
):
    """One node's radT running its torchrun (2 ranks); its output goes to ``node<rank>.log``."""
    env = {**(env or workspace.env), "RADT_NODE": "ab"[rank], "RADT_NODE_RANK": str(rank)}
    log = (tmp_path / f"node{rank}.log").open("w")
    argv = workspace.argv(
        [*radt_args, "--", sys.executable, "-m", "torch.distributed.run"]
        + ["--nnodes", str(nnodes), "--node-rank", str(rank), "--nproc-per-node", "2"]
        + ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        + [str(TRAIN), "--steps", str(steps), "--step-s", str(step_s)]
    )
    return subprocess.Popen(
        argv,
        cwd=workspace.root,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=default_signals,
    )


def said(tmp_path, rank: int, text: str) -> bool:
    return text in (tmp_path / f"node{rank}.log").read_text()


def printed_examples(tmp_path, rank: int) -> dict[int, int]:
    """Each training rank's own count, as it printed it: {rank: examples}."""
    text = (tmp_path / f"node{rank}.log").read_text()
    return {int(r): int(n) for r, n in re.findall(r"rank (\d+) examples (\d+) rate", text)}


def finish(nodes, timeout: float = 300) -> list[int]:
    try:
        return [node.wait(timeout=timeout) for node in nodes]
    finally:
        for node in nodes:
            kill_quietly(node.pid)


def job_and_nodes(workspace):
    return job_and_nodes_in(workspace.runs())


@pytest.fixture(scope="module")
def scaled(tmp_path_factory, template_db):
    """One recorded pair, shared by the tests that only read it: the training on one node as a
    lone run (no group), then on two nodes started at once (group ``two``, logs ``node0.log``
    and ``node1.log``), each recording one (fake) GPU that ``nvml`` and ``smi`` both read,
    and its process tree (``top``)."""
    import os

    from conftest import FAKES, new_workspace

    base = tmp_path_factory.mktemp("scaled")
    ws = new_workspace(base, template_db)
    env = {k: v for k, v in ws.env.items() if not k.startswith(("FAKE_", "CUDA_"))}
    env["PYTHONPATH"] = os.pathsep.join([str(FAKES / "pynvml"), env["PYTHONPATH"]])
    env["PATH"] = os.pathsep.join([str(FAKES), env["PATH"]])
    common = ("-l", "nvml+smi+top", "-d", "0", "--interval", "0.1", "--job", "ddp-linear")
    one = start_node(ws, base, 0, free_port(), nnodes=1, radt_args=(*common, "-n", "one"), env=env)
    assert finish([one]) == [0], (base / "node0.log").read_text()
    port = free_port()
    nodes = [
        start_node(ws, base, k, port, radt_args=(*common, "--group", "two"), env=env)
        for k in (0, 1)
    ]
    assert finish(nodes) == [0, 0], [(base / f"node{k}.log").read_text() for k in (0, 1)]
    return ws, base


def test_a_node_looks_again_soon_at_first_and_at_most_twice_a_second_later():
    assert [group.pause_s(looks) for looks in range(6)] == [0.05, 0.1, 0.2, 0.4, 0.5, 0.5]
    assert group.pause_s(10_000) == group.POLL_S == 0.5
    assert group.pause_s(10_000, 2.0) == 2.0  # the node that ends last: every 2 s at most


@pytest.mark.slow
@pytest.mark.parametrize("order", ["rank 0 first", "rank 1 first"])
def test_two_nodes_started_one_after_the_other_make_one_job_run(workspace, tmp_path, order):
    port = free_port()
    first = 1 if order == "rank 1 first" else 0
    nodes = [start_node(workspace, tmp_path, first, port)]
    if order == "rank 0 first":
        wait_for(lambda: said(tmp_path, 0, "created job run"), timeout=120)
    else:
        wait_for(lambda: said(tmp_path, 1, "looks for its job run"), timeout=120)
    nodes.append(start_node(workspace, tmp_path, 1 - first, port))
    assert finish(nodes) == [0, 0], [(tmp_path / f"node{k}.log").read_text() for k in (0, 1)]
    check_two_node_job(workspace, tmp_path, "ddp1", gpus=0)


@pytest.mark.slow
def test_two_nodes_started_at_once_make_one_job_run(scaled):
    ws, logs = scaled
    check_two_node_job(ws, logs, "two", gpus=2)


def check_two_node_job(workspace, logs, name: str, gpus: int) -> None:
    """The job run of group ``name`` (its nodes' output in ``logs``): one job run of two node
    runs, the examples the four ranks printed, its window the overlap, one line in `radt runs`."""
    runs = workspace.runs()
    job, (a, b) = job_and_nodes_in([r for r in runs if r.data.tags.get(group.GROUP_TAG) == name])
    assert job.info.status == "FINISHED"
    assert job.data.tags[group.NODES_TAG] == "2"
    assert [a.data.tags[group.NODE_TAG], b.data.tags[group.NODE_TAG]] == ["a", "b"]
    assert all(n.info.status == "FINISHED" for n in (a, b))
    client = workspace.client()
    for rank, node in enumerate((a, b)):
        ranks = printed_examples(logs, rank)
        assert len(ranks) == 2
        history = client.get_metric_history(node.info.run_id, "examples")
        assert max(m.value for m in history) == sum(ranks.values())

    printed = {**printed_examples(logs, 0), **printed_examples(logs, 1)}
    assert sorted(printed) == [0, 1, 2, 3]
    assert job.data.metrics["examples"] == sum(printed.values())
    assert job.data.metrics["radt/nodes"] == 2
    from radt.analysis.summary import summary

    frame = summary("Default", tracking_uri=workspace.uri, cache_dir=logs / "cache")
    ids = [job.info.run_id, a.info.run_id, b.info.run_id]
    frame = frame[frame["run_id"].isin(ids)]
    assert list(frame["level"]) == ["job", "node", "node"]
    job_row, node_rows = frame.iloc[0], frame.iloc[1:]
    assert job_row["examples_total"] == sum(printed.values())
    microsecond = pd.Timedelta(microseconds=1)  # the job's window is kept in µs
    assert abs(job_row["window_start"] - node_rows["window_start"].max()) <= microsecond
    assert abs(job_row["window_end"] - node_rows["window_end"].min()) <= microsecond
    seconds = (job_row["window_end"] - job_row["window_start"]).total_seconds()
    assert job_row["window_s"] == pytest.approx(seconds, abs=1e-5)
    assert job_row["examples_per_s"] == pytest.approx(job_row["examples"] / seconds, rel=1e-4)

    listed = workspace.run(["runs", "-e", "Default"])
    assert listed.returncode == 0, listed.stderr
    lines = [line for line in listed.stdout.splitlines() if job.info.run_id in line]
    assert len(lines) == 1
    if gpus:
        assert f"2 nodes, {gpus} GPUs" in lines[0]
        assert job.data.metrics["radt/gpus"] == gpus  # nvml and smi read one GPU: counted once
    else:  # no GPU listener: no GPU count (issue 29), and no per-GPU figure
        assert "2 nodes" in lines[0] and "GPU" not in lines[0]
        assert "radt/gpus" not in job.data.metrics
        assert "radt/examples_per_s_per_gpu" not in job.data.metrics
        assert "no GPU listener recorded on node a, b" in job.data.tags["radt.window_note"]
    assert a.info.run_id not in listed.stdout and b.info.run_id not in listed.stdout


@pytest.mark.slow
def test_a_killed_node_fails_the_job_run_naming_it(workspace, tmp_path):
    port = free_port()
    nodes = [start_node(workspace, tmp_path, k, port, steps=100_000, step_s=0.05) for k in (0, 1)]
    try:
        wait_for(lambda: "rank 3" in _examples_seen(workspace), timeout=240, interval=0.5)
        nodes[1].send_signal(signal.SIGTERM)
        codes = finish(nodes)
    finally:
        for node in nodes:
            kill_quietly(node.pid)
    assert codes[1] == 143
    job, (a, b) = job_and_nodes(workspace)
    assert b.info.status == "KILLED"
    assert b.data.tags["radt.stop_reason"] == "radT received SIGTERM"
    assert a.info.status in ("FAILED", "KILLED")  # its ranks lost their peers
    assert job.info.status == "FAILED"
    assert job.data.tags["radt.note"].startswith("node b KILLED (radT received SIGTERM)")


def _examples_seen(workspace) -> str:
    """'rank 3' once node b's run has counted examples (its ranks are 2 and 3 and both train)."""
    runs = [r for r in workspace.runs() if r.data.tags.get(group.NODE_TAG) == "b"]
    if runs and runs[0].data.metrics.get("examples", 0) > 0:
        return "rank 3"
    return ""


def test_a_node_without_its_rank_0_trains_and_says_in_one_line_it_has_no_job_run(workspace):
    """The node's command runs (radT never holds a training back for another node's radT); its
    node run is kept, without a job run, and the reason is one line and the run's note."""
    env = {**workspace.env, "RADT_NODE_RANK": "1", "RADT_GROUP_WAIT_S": "1"}
    done = workspace.run(["-l", "none", "--group", "lonely", "--", "echo", "trained"], env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trained"
    warning = [line for line in done.stderr.splitlines() if "found no running job run" in line]
    assert len(warning) == 1 and warning[0].startswith("radt: node ")
    assert "of group lonely within 1 s; start the node of rank 0 too" in warning[0]
    assert warning[0].endswith("is kept without a job run")
    assert "Traceback" not in done.stderr
    (run,) = workspace.runs()
    assert run.info.status == "FINISHED"
    assert run.data.tags[group.ROLE_TAG] == "node" and run.data.tags[group.NODE_RANK_TAG] == "1"
    assert "mlflow.parentRunId" not in run.data.tags
    assert "found no running job run of group lonely" in run.data.tags["radt.note"]


def test_a_joining_nodes_command_starts_before_its_job_run_exists(workspace, tmp_path):
    """Rank 1's command runs before rank 0 is even started: it writes ``started``, and only
    then is rank 0 started. Both nodes end in one job run, rank 1's node run its child. (Had
    rank 1 waited for the job run before its command, ``started`` would never appear.)"""
    started = tmp_path / "started"
    wait_rank0 = (
        "import pathlib, sys, time; pathlib.Path(sys.argv[1]).touch(); "
        "[time.sleep(0.05) for _ in iter(lambda: pathlib.Path(sys.argv[2]).exists(), True)]"
    )
    created = tmp_path / "rank0-created"
    env = {**workspace.env, "RADT_NODES": "2", "RADT_GROUP_WAIT_S": "120"}
    argv = ["-l", "none", "--group", "early", "--", sys.executable, "-c", wait_rank0]
    rank1 = subprocess.Popen(
        workspace.argv([*argv, str(started), str(created)]),
        cwd=workspace.root,
        env={**env, "RADT_NODE": "b", "RADT_NODE_RANK": "1"},
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "rank1.log").open("w"),
        preexec_fn=default_signals,
    )
    try:
        wait_for(started.exists, timeout=120)
        assert workspace.runs() and not [
            r for r in workspace.runs() if r.data.tags.get(group.ROLE_TAG) == group.JOB_ROLE
        ]
        rank0 = workspace.run(
            ["-l", "none", "--group", "early", "--", "touch", str(created)],
            env={**env, "RADT_NODE": "a", "RADT_NODE_RANK": "0"},
        )
        assert rank0.returncode == 0, rank0.stderr
        assert rank1.wait(timeout=180) == 0, (tmp_path / "rank1.log").read_text()
    finally:
        kill_quietly(rank1.pid)
    job, (a, b) = job_and_nodes(workspace)
    assert job.info.status == "FINISHED"
    assert (a.data.tags[group.NODE_TAG], b.data.tags[group.NODE_TAG]) == ("a", "b")
    assert a.info.status == b.info.status == "FINISHED"
    assert "radt.note" not in b.data.tags


def test_a_node_that_never_joins_fails_the_job_run_naming_it(workspace):
    """Two nodes expected (RADT_NODES), only rank 0 started: once its node has ended and rank 1
    has not appeared within RADT_GROUP_WAIT_S, the job run ends FAILED naming rank 1."""
    env = {**workspace.env, "RADT_NODE": "a", "RADT_NODE_RANK": "0", "RADT_NODES": "2"}
    env["RADT_GROUP_WAIT_S"] = "1"
    done = workspace.run(["-l", "none", "--group", "half", "--", "true"], env=env)
    assert done.returncode == 0, done.stderr  # the node itself trained and finished
    job, (a,) = job_and_nodes(workspace)
    assert a.info.status == "FINISHED"
    assert job.info.status == "FAILED"
    assert job.data.tags["radt.note"] == "node rank 1 never joined"
    assert f"job run {job.info.run_id} of group half FAILED" in done.stderr


def test_without_a_node_count_the_job_run_ends_with_the_nodes_it_has(workspace):
    """No RADT_NODES, no torchrun --nnodes, no Slurm: radT cannot know a node is missing
    (docs/analysis.md says so)."""
    env = {**workspace.env, "RADT_NODE": "a", "RADT_NODE_RANK": "0", "RADT_GROUP_WAIT_S": "60"}
    done = workspace.run(["-l", "none", "--group", "alone", "--", "true"], env=env)
    assert done.returncode == 0, done.stderr
    job, (a,) = job_and_nodes(workspace)
    assert job.info.status == "FINISHED" and group.NODES_TAG not in job.data.tags


def test_a_group_wait_that_is_not_seconds_is_one_line(workspace):
    env = {**workspace.env, "RADT_GROUP_WAIT_S": "soon"}
    done = workspace.run(["-l", "none", "--group", "g", "--", "true"], env=env)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last == "radt: error: RADT_GROUP_WAIT_S='soon' is not a number of seconds ≥ 0"
    assert "Traceback" not in done.stderr
    assert workspace.runs() == []


def test_job_figures_by_hand():
    """docs/analysis.md, "Distributed jobs": the worked example."""
    import math

    import numpy as np

    from radt.analysis.distributed import NodeSamples, job_figures, scaling_efficiency
    from radt.analysis.windows import Timeline

    def arrays(*pairs):
        return np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], float)

    a = NodeSamples(
        "a",
        Timeline(*arrays((100, 50), (110, 150), (130, 350))),
        {("nvml", "gpu0", "energy_j"): arrays((100, 0), (130, 300))},
        {"rapl/package0/energy_j": arrays((100, 0), (130, 300))},
    )
    b = NodeSamples(
        "b",
        Timeline(*arrays((104, 40), (114, 140), (124, 240))),
        {
            ("nvml", "gpu0", "energy_j"): arrays((100, 1000), (130, 1300)),
            ("nvml", "gpu1", "energy_j"): arrays((100, 0), (130, 300)),
        },
        {"rapl/package0/energy_j": arrays((100, 0), (130, 150))},
    )
    figures, start, end, note = job_figures([a, b])
    assert (start, end, note) == (104.0, 124.0, None)
    expected = {
        "window_s": 20.0,
        "examples": 400.0,  # a: 290 - 90 (interpolated at 124 and 104), b: 240 - 40
        "examples_total": 590.0,
        "examples_per_s": 20.0,
        "time_per_example_ns": 5e7,
        "gpus": 3.0,
        "nodes": 2.0,
        "examples_per_s_per_gpu": 20 / 3,
        "energy_j": 600.0,  # 200 J on each of the three GPUs
        "energy_per_example_nj": 1.5e9,
        "host_energy_j": 300.0,
        "host_energy_per_example_nj": 0.75e9,
    }
    for name, value in expected.items():
        assert math.isclose(figures[name], value, rel_tol=1e-9), name
    assert math.isclose(scaling_efficiency(20 / 3, 8.0), 5 / 6)
    assert math.isnan(scaling_efficiency(20 / 3, math.nan))

    apart = NodeSamples("c", Timeline(*arrays((140, 0), (150, 100))))
    figures, _, _, note = job_figures([a, apart])
    assert note.startswith("the nodes never trained at the same time: no job window; ")
    assert "no GPU listener recorded on node c" in note
    assert math.isnan(figures["examples_per_s"]) and figures["examples_total"] == 450.0


def test_a_jobs_gpus_are_its_nodes_gpu_listeners_gpus_never_its_processes():
    """Issue 29: two nodes without GPUs (only ``top``) have no GPU count and no per-GPU
    figures, each missing with its reason, while their examples/s stand; nodes whose GPU 0
    nvml and smi both read, beside ``top/proc``, count one GPU each."""
    import math

    import numpy as np

    from radt.analysis.distributed import NodeSamples, job_figures
    from radt.analysis.windows import Timeline

    def arrays(*pairs):
        return np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], float)

    tree = {("top", "proc", "cpu_pct"): arrays((100, 90), (130, 95))}
    a = Timeline(*arrays((100, 0), (120, 400)))  # 400 examples in [100, 120]
    b = Timeline(*arrays((100, 0), (120, 200)))
    figures, start, end, note = job_figures([NodeSamples("a", a, tree), NodeSamples("b", b, tree)])
    assert (start, end, figures["examples"], figures["examples_per_s"]) == (100, 120, 600, 30)
    for name in ("gpus", "examples_per_s_per_gpu", "energy_j", "scaling_efficiency"):
        assert math.isnan(figures[name]), name
    assert note == (
        "no GPU listener recorded on node a, b: gpus, energy_j and the per-GPU figures "
        "(examples_per_s_per_gpu, scaling_efficiency) missing"
    )

    gpu = {
        **tree,
        ("nvml", "gpu0", "energy_j"): arrays((100, 0), (120, 200)),
        ("nvml", "gpu0", "power_w"): arrays((100, 10), (120, 10)),
        ("smi", "gpu0", "power_w"): arrays((100, 10), (120, 10)),
    }
    nodes = [NodeSamples("a", a, gpu), NodeSamples("b", b, gpu)]
    figures, _, _, note = job_figures(nodes)
    assert [n.gpus for n in nodes] == [["gpu0"], ["gpu0"]]
    assert (figures["gpus"], figures["examples_per_s_per_gpu"]) == (2, 15)  # 30 examples/s / 2
    assert figures["energy_j"] == 400 and note is None


@pytest.mark.slow
def test_a_node_whose_radt_dies_is_finished_by_sync_and_fails_the_job(workspace, tmp_path):
    """Node b's whole machine dies (radT and its training, SIGKILL): node a's record completes,
    the job run waits for b; `radt sync` finishes b's record and then ends the job run."""
    import psutil

    workspace.env["RADT_WARM"] = "0"  # radT's own processes record: the ones this test kills
    port = free_port()
    nodes = [start_node(workspace, tmp_path, k, port, steps=100_000, step_s=0.05) for k in (0, 1)]
    try:
        wait_for(lambda: "rank 3" in _examples_seen(workspace), timeout=240, interval=0.5)
        training = psutil.Process(nodes[1].pid).children(recursive=True)
        nodes[1].kill()
        for process in training:
            kill_quietly(process.pid)
        codes = finish(nodes)
    finally:
        for node in nodes:
            kill_quietly(node.pid)
    assert codes[1] == -signal.SIGKILL
    job, (a, b) = job_and_nodes(workspace)
    assert a.info.status != "RUNNING" and b.info.status == "RUNNING"
    assert job.info.status == "RUNNING"  # b may still end: radt sync finishes it

    synced = workspace.run(["sync"])
    assert synced.returncode == 0, synced.stderr
    job, (a, b) = job_and_nodes(workspace)
    assert b.info.status == "FAILED" and b.data.tags["radt.stop_reason"] == "radT was killed"
    assert job.info.status == "FAILED"
    assert "b FAILED (radT was killed)" in job.data.tags["radt.note"]
    assert f"job run {job.info.run_id} of group ddp1 FAILED" in synced.stderr


def test_the_baseline_is_the_latest_run_of_the_job_on_fewer_nodes_with_a_per_gpu_rate(store):
    """Which finished run of the Job a 4-node job is measured against: a lone run's rate is its
    examples/s over the GPUs its GPU listeners recorded (nvml and smi: one GPU; top: none),
    a job run's its ``radt/examples_per_s_per_gpu``; a lone run without a GPU listener,
    a workload's run and a run on as many nodes are never a baseline."""
    import math

    from radt.analysis.distributed import _baseline, per_gpu_rate

    client, _ = store

    def run(name, tags, metrics):
        made = client.create_run("0", run_name=name, tags={"radt.job": "lin", **tags})
        for key, value in metrics.items():
            client.log_metric(made.info.run_id, key, value, step=0)
        client.set_terminated(made.info.run_id, "FINISHED")
        return client.get_run(made.info.run_id)

    gpu = {"system/nvml/gpu0/power_w": 100, "system/smi/gpu0/power_w": 100}
    two_gpus = {**gpu, "system/nvml/gpu1/power_w": 100, "system/top/proc/cpu_pct": 50}
    lone = run("lone", {}, {"radt/examples_per_s": 120, **two_gpus})
    assert per_gpu_rate(lone) == (60, None)  # 120 examples/s over 2 GPUs
    two = run(
        "two", {"radt.group.role": "job"}, {"radt/nodes": 2, "radt/examples_per_s_per_gpu": 50}
    )
    assert per_gpu_rate(two) == (50, None)
    cpu = run("cpu", {}, {"radt/examples_per_s": 99, "system/top/proc/cpu_pct": 50})
    assert math.isnan(per_gpu_rate(cpu)[0]) and per_gpu_rate(cpu)[1] == "no GPU listener recorded"
    run("client", {"mlflow.parentRunId": lone.info.run_id}, {"radt/examples_per_s": 500, **gpu})
    run("four", {"radt.group.role": "job"}, {"radt/nodes": 4, "radt/examples_per_s_per_gpu": 1})
    job = run("job", {"radt.group.role": "job"}, {})

    found, rate, why = _baseline(client, job, 4)
    assert (found.info.run_id, rate, why) == (two.info.run_id, 50, None)  # the latest
    found, rate, why = _baseline(client, job, 2)  # the 2-node job is not on fewer nodes
    assert (found.info.run_id, rate, why) == (lone.info.run_id, 60, None)
    found, rate, why = _baseline(client, job, 1)
    assert found is None and math.isnan(rate) and "of Job 'lin' on fewer nodes" in why


@pytest.mark.slow
def test_scaling_efficiency_against_a_lone_run_of_the_same_job(scaled):
    """Issue 29: the 1-node lone run of the Job is the 2-node job's baseline: the job's
    examples/s per GPU over the lone run's (its examples/s over its one GPU, which nvml and
    smi both read), and the job names it."""
    from radt.analysis.distributed import per_gpu_rate

    ws, _ = scaled
    runs = ws.runs()
    (lone,) = [r for r in runs if r.info.run_name == "one"]
    (job,) = [r for r in runs if r.data.tags.get(group.ROLE_TAG) == group.JOB_ROLE]
    assert group.GROUP_TAG not in lone.data.tags
    rate = lone.data.metrics["radt/examples_per_s"]
    assert per_gpu_rate(lone) == (rate, None)  # one GPU
    two = job.data.metrics
    assert two["radt/gpus"] == 2  # one per node, nvml's and smi's the same
    assert two["radt/examples_per_s_per_gpu"] == pytest.approx(two["radt/examples_per_s"] / 2)
    assert two["radt/scaling_efficiency"] == pytest.approx(
        two["radt/examples_per_s_per_gpu"] / rate
    )
    assert job.data.tags["radt.scaling_baseline"] == f"{lone.info.run_id} (1 node)"


@pytest.mark.slow
def test_a_study_of_nodes_2_runs_each_workload_as_one_job_under_the_study_run(workspace, tmp_path):
    """Without Slurm, `nodes: 2` runs two local radT "nodes" (node0, node1) per workload; the
    job run is the workload, nested under the study run, and the summary's job row has its
    figures."""
    import yaml

    study = workspace.root / "ddp.yaml"
    study.write_text(
        "name: ddp\n"
        "listeners: none\n"
        "nodes: 2\n"
        f"file: {sys.executable} -m torch.distributed.run --nproc-per-node 1 {TRAIN}\n"
        "parameters:\n"
        "  steps: {values: [4]}\n"
    )
    done = workspace.run(["ddp.yaml"])
    assert done.returncode == 0, done.stderr
    runs = workspace.runs("ddp")
    (study_run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    job, (a, b) = job_and_nodes_in(runs)
    assert study_run.info.status == "FINISHED"
    assert job.data.tags["mlflow.parentRunId"] == study_run.info.run_id
    assert job.data.tags["radt.study"] == "ddp" and job.data.tags[group.NODES_TAG] == "2"
    assert [a.data.tags[group.NODE_TAG], b.data.tags[group.NODE_TAG]] == ["node0", "node1"]
    assert job.info.status == "FINISHED" and job.data.metrics["examples"] == 2 * 4 * 16
    status = yaml.safe_load(study.read_text())["status"]
    assert status == {1: f"FINISHED {job.info.run_id} (--steps 4 | 2 nodes)"}
    plan = (workspace.root / "ddp.plan.csv").read_text()
    assert f"FINISHED, {job.info.run_id}" in plan

    from radt.analysis.summary import summary

    frame = summary("ddp", tracking_uri=workspace.uri, cache_dir=tmp_path / "cache")
    (job_row,) = frame[frame["level"] == "job"].itertuples()
    assert job_row.examples_total == 2 * 4 * 16


def job_and_nodes_in(runs):
    """The one job run among ``runs`` and its node runs, by rank."""
    jobs = [r for r in runs if r.data.tags.get(group.ROLE_TAG) == group.JOB_ROLE]
    assert len(jobs) == 1, f"expected one job run, found {len(jobs)}"
    nodes = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == jobs[0].info.run_id]
    return jobs[0], sorted(nodes, key=lambda r: r.data.tags[group.NODE_RANK_TAG])


def test_a_study_of_nodes_2_on_slurm_is_one_sbatch_of_2_nodes_srunning_radt_per_node(
    tmp_path, monkeypatch
):
    """The job that `radt study.yaml --slurm` submits for `nodes: 2`: one task per node, the
    script `srun`s radT, and each node's radT is the workload's command as a lone run with the
    group's variables (the tests' Slurm has one node: tests/test_slurm.py runs it there)."""
    import json

    from radt.plans.multinode import node_argv, node_env
    from radt.plans.read import read_plan
    from radt.plans.study import read_study
    from radt.plans.studyexpand import expand
    from radt.plans.studyplan import plan_rows, plan_text, write_plan
    from radt.slurm.dispatch import Dispatch, SlurmRequest
    from radt.slurm.options import slurm_options

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print('hi')\n")
    path = tmp_path / "ddp.yaml"
    path.write_text(
        "name: ddp\nlisteners: top\ndevices: 0\nnodes: 2\nfile: train.py\n"
        "parameters:\n  steps: {values: [4]}\nslurm: {partition: gpu}\n"
    )
    study = read_study(path, cwd=tmp_path)
    plan_path = tmp_path / "ddp.plan.csv"
    write_plan(plan_path, plan_text(study, plan_rows(study, expand(study), {}, {}, {}), False))
    plan = read_plan(plan_path)
    (workload,) = plan.workloads
    dispatch = Dispatch(
        plan_path,
        slurm_options(study.slurm, {}),
        SlurmRequest(node_args=["--interval", "0.5"]),
        None,
        "sqlite:///x.db",
        parent_run_id="study1",
        tags={"radt.study": "ddp"},
        nodes=2,
    )
    args = dispatch._sbatch_args(workload)
    assert args == ["--partition=gpu", "--gres=gpu:1", "--nodes=2", "--ntasks-per-node=1"]
    script = dispatch._write_task_files(0, [workload])
    last = script.read_text().splitlines()[-1]
    tasks = next(dispatch.folder.glob("tasks-*.json"))
    assert last == (
        f"exec srun {sys.executable} -m radt {plan_path.resolve()} --slurm-task {tasks} "
        "--interval 0.5"
    )
    assert json.loads(tasks.read_text())["nodes"] == 2

    argv = node_argv(workload, "ddp", "study1", interval_s=0.5, radt=["radt"])
    assert argv == [
        *["radt", "-e", "ddp", "-l", "top", "-d", "0", "--interval", "0.5"],
        *["--job", "train.py --steps 4"],
        *["-t", "radt.study=ddp", "-t", "radt.workload=001", "-t", "mlflow.parentRunId=study1"],
        *["--", "train.py", "--steps", "4"],  # radT runs a .py with its Python
    ]
    env = node_env({"PATH": "/bin"}, 2, 1, "gpu07", 21234)
    assert env == {
        "PATH": "/bin",
        "RADT_NODES": "2",
        "RADT_NODE_RANK": "1",
        "PET_NNODES": "2",
        "PET_NODE_RANK": "1",
        "PET_MASTER_ADDR": "gpu07",
        "PET_MASTER_PORT": "21234",
    }


@pytest.mark.slow
def test_under_nsys_each_nodes_report_is_its_node_runs_artifact(workspace):
    """`-l nsys` on both nodes (the fake nsys): each node run holds its own report, the job
    run none."""
    from test_listener_nsys import SCRIPT, artifact_paths, fake_env

    workspace.script("work.py", SCRIPT)
    base = {**fake_env(workspace), "RADT_NODES": "2", "RADT_GROUP_WAIT_S": "120"}
    nodes = [
        subprocess.Popen(
            workspace.argv(["-l", "nsys", "--group", "prof", "work.py"]),
            cwd=workspace.root,
            env={**base, "RADT_NODE": "ab"[rank], "RADT_NODE_RANK": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=default_signals,
        )
        for rank in (0, 1)
    ]
    assert finish(nodes) == [0, 0]
    job, (a, b) = job_and_nodes(workspace)
    assert job.info.status == "FINISHED"
    client = workspace.client()
    for node in (a, b):
        assert artifact_paths(client, node.info.run_id, "radt/nsys") == [
            "radt/nsys/kernels.csv",
            "radt/nsys/report.nsys-rep",
        ]
        assert "system/nsys/kernels/count" in node.data.metrics
    assert artifact_paths(client, job.info.run_id, "radt/nsys") == []


@pytest.mark.slow
def test_ctrl_c_stops_a_study_of_nodes_2_and_its_workload_runs_again(workspace, tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) reaches the study's radT, through the
    warm launcher or not, and from it both local nodes: every record ends, the workload is KILLED
    in the study file (so it runs again)."""
    import os

    import yaml

    study = workspace.root / "ddp.yaml"
    study.write_text(
        "name: ddp\nlisteners: none\nnodes: 2\n"
        f"file: {sys.executable} -m torch.distributed.run --nproc-per-node 1 {TRAIN}"
        " --step-s 0.05\n"
        "parameters:\n  steps: {values: [100000]}\n"
    )
    with (tmp_path / "study.log").open("w") as out:
        radt = subprocess.Popen(
            workspace.argv(["ddp.yaml"]),
            cwd=workspace.root,
            env=workspace.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
            start_new_session=True,  # its own "terminal" process group
        )
    try:

        def both_train() -> bool:
            nodes = [r for r in workspace.runs("ddp") if r.data.tags.get(group.NODE_TAG)]
            return len(nodes) == 2 and all(n.data.metrics.get("examples", 0) > 0 for n in nodes)

        wait_for(both_train, timeout=240, interval=0.5)
        os.killpg(radt.pid, signal.SIGINT)
        code = radt.wait(timeout=300)
    finally:
        kill_quietly(radt.pid)
    assert code == 130, (tmp_path / "study.log").read_text()
    runs = workspace.runs("ddp")
    (study_run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    job, (a, b) = job_and_nodes_in(runs)
    assert study_run.info.status == "KILLED"
    assert {a.info.status, b.info.status} == {"KILLED"}
    assert job.info.status == "FAILED" and "radT received SIGINT" in job.data.tags["radt.note"]
    status = yaml.safe_load(study.read_text())["status"]
    assert status == {1: f"KILLED {job.info.run_id} (--steps 100000 | 2 nodes)"}


def _waiting_for_rank_1(store, caplog, wait_s: float) -> tuple[str | None, list[str]]:
    """The job run of two nodes whose rank 0 has finished and whose rank 1 never joins, ended
    by rank 0 with ``wait_s``: its status and radT's lines about the wait."""
    import logging

    from radt.tags import MLFLOW_PARENT_RUN_ID

    client, uri = store
    pair = group.Group("pair", "a", 0, 2)
    job_id = group.create_job_run(client, uri, "0", pair, {}, "pair")
    node = client.create_run("0", tags={**pair.tags(), MLFLOW_PARENT_RUN_ID: job_id})
    client.set_terminated(node.info.run_id, "FINISHED")
    caplog.set_level(logging.INFO, logger=group.log.name)
    status = group.end_job_run(client, "0", job_id, expected=2, wait_s=wait_s)
    lines = [r.getMessage() for r in caplog.records if r.name == group.log.name]
    return status, [line.split(": ", 1)[1] for line in lines if "waiting" in line]


def test_the_last_node_says_once_that_it_waits_for_a_rank(store, caplog):
    """Waiting 5 s (a poll every 2 s) for rank 1: one line, in whole seconds."""
    status, lines = _waiting_for_rank_1(store, caplog, wait_s=5)
    assert status == "FAILED"
    assert len(lines) == 1, lines
    said = re.fullmatch(r"waiting up to (\d) s for node rank 1, which has not joined", lines[0])
    assert said and int(said[1]) <= 5


def test_the_last_node_repeats_the_wait_at_most_every_remind_s(store, caplog, monkeypatch):
    monkeypatch.setattr(group, "REMIND_S", 0.0)  # every poll (2 s), to see the later lines
    status, lines = _waiting_for_rank_1(store, caplog, wait_s=3)
    assert status == "FAILED"
    assert lines[0].startswith("waiting up to ") and len(lines) >= 2, lines
    left = [re.fullmatch(r"still waiting for node rank 1 \((\d) s left\)", x) for x in lines[1:]]
    assert all(left), lines
    assert [int(m[1]) for m in left] == sorted((int(m[1]) for m in left), reverse=True)


def test_a_joining_node_links_to_the_job_run_made_after_it_began_looking(store):
    """`group.Joining` against a real store: the job run appears only after the look began;
    ``link`` gets its id once, and ``finish`` returns it."""
    client, uri = store
    experiment = client.create_experiment("join")
    node = group.Group("g", "b", 1, 2)
    linked: list[str] = []
    joining = group.Joining(client, uri, experiment, node, wait_s=120)
    joining.start(linked.append)
    job = group.create_job_run(client, uri, experiment, group.Group("g", "a", 0, 2), {}, "g")
    assert joining.finish() == job
    assert linked == [job] and joining.error is None


def test_a_joining_node_stopped_by_a_signal_gives_up_saying_so(store, monkeypatch):
    """`finish(give_up=True)` ends the look after the look under way, not after
    RADT_GROUP_WAIT_S, without a job run, and the reason says radT was stopped."""
    monkeypatch.setattr(group, "GIVE_UP_S", 600.0)  # however slow this machine's one look
    client, uri = store
    experiment = client.create_experiment("alone")
    joining = group.Joining(client, uri, experiment, group.Group("g", "b", 1, 2), wait_s=3600)
    linked: list[str] = []
    joining.start(linked.append)
    assert joining.finish(give_up=True) is None
    assert linked == []
    assert str(joining.error) == (
        "node b (rank 1) stopped looking for the job run of group g when radT was stopped, "
        "and had found none"
    )

"""Arguments a user can get wrong, and the original radT's flags (issue 22, items 7-12 and 15):
listener options checked against what each listener declares, `radt listeners NAME`, -o and -d
refused in one line, a study's dry run that refuses what its run refuses, the MIG tables named
truly, an unreachable server's reason whole, and the original radT's command-line flags."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest
from conftest import FAKES, FIXTURES, new_workspace, path_without_nvidia_tools
from test_run_api import samples

from radt.cli.run import launcher_parser

WINDOW_KEY = "script/run/window_start"

ENV_SCRIPT = """\
import os
import sys

import radt

with open("seen.txt", "w") as out:
    for name in ("CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "RADT_MANUAL"):
        out.write(f"{name}={os.environ.get(name, '<unset>')}\\n")
with radt.run.RADTBenchmark() as run:
    for epoch in range(2):
        run.log_metric("ML - epoch", epoch, epoch)
        radt.log_metrics({"acc": 0.5 + epoch / 4, "lr": 0.01}, epoch)
print("done", file=sys.stderr)
"""


def refused(done: subprocess.CompletedProcess, *fragments: str) -> str:
    """The one line of a radT that refused its arguments (rc 2), holding every fragment."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("radt: error: "), done.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------ 7, 8, 9: options and devices


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (
            ["-o", "top.per_cor=1"],
            ["-o top.per_cor=1: top has no option per_cor; its options: per_core"],
        ),
        (["-o", "top.per_core=banana"], ["-o top.per_core=banana: per_core takes yes/no (1/0"]),
        (["-o", "ncu.launch_count=0"], ["launch_count takes a whole number ≥ 1"]),
        (["-o", "nsys.capture=some"], ["capture takes one of all, nvtx, none"]),
        (["-o", "smi.interval=1"], ["smi has no option interval; its options: none"]),
        (["-o", "top"], ["expected LISTENER.KEY=VALUE, e.g. top.per_core=1"]),
        (["-o", "top=1"], ["expected LISTENER.KEY=VALUE"]),
        (["-d", "abc"], ["-d abc: abc is not a GPU index or UUID", "1+2"]),
        (["-d", "0,x1"], ["x1 is not a GPU index or UUID"]),
    ],
)
def test_a_wrong_option_or_device_is_one_line_and_rc_2(workspace, args, fragments):
    workspace.script("s.py", "print('ran')\n")
    done = workspace.run([*args, "-l", "top", "s.py"])
    line = refused(done, *fragments)
    assert "team=vision" not in line
    assert workspace.runs() == []


@pytest.mark.slow
def test_a_declared_option_runs_and_an_undeclared_plugin_is_not_checked(workspace):
    # 0.3 s: several of top's 0.05 s windows (a command ended within the first window has no
    # CPU share to give, per core or for the host)
    workspace.script("s.py", "import time\nprint('ran')\ntime.sleep(0.3)\n")
    done = workspace.run(["-l", "top", "-o", "top.per_core=yes", "--interval", "0.05", "s.py"])
    assert done.returncode == 0, done.stderr
    keys = workspace.only_run().data.metrics
    assert any(key.startswith("system/top/host/cpu0/") for key in keys), sorted(keys)
    # the test plugin declares no options: they reach it as they are
    done = workspace.run(["-l", "counter", "-o", "counter.step=2", "s.py"])
    assert done.returncode == 0, done.stderr


def test_radt_listeners_name_lists_its_options(workspace):
    done = workspace.run(["listeners", "top"])
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.strip().splitlines()[1:]
    assert header.split() == ["option", "value", "default", "meaning"]
    # the default in the value's own words, as a wrong value is answered
    assert row.split()[:4] == ["-o", "top.per_core=", "yes/no", "no"]
    assert row.endswith("also record each core's use, top/host/cpu{i}/cpu_pct")
    torch = workspace.run(["listeners", "torch"]).stdout
    assert "-o torch.steps=" in torch and "whole number ≥ 1" in torch and " 5 " in torch
    smi = workspace.run(["listeners", "smi"])
    assert "smi takes no -o options" in smi.stdout
    refused(workspace.run(["listeners", "nosuch"]), "unknown listener nosuch", "top")


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--experimnt", "x", "s.py"],
            "radt: error: unknown option --experimnt; did you mean --experiment?",
        ),
        (["-l", "top", "--listners", "top", "s.py"], "unknown option --listners; did you mean"),
        (["plan.yaml", "--dry-rn"], "unknown option --dry-rn; did you mean --dry-run?"),
        (
            ["--epochs", "2", "s.py"],
            "radt: error: unknown option --epochs; flags for your script go after it: "
            "radt [options] s.py --epochs 2",
        ),
        (["--epochs=2", "s.py"], "go after it: radt [options] s.py --epochs=2"),
        (
            ["--epochs", "2", "--lr", "0.1", "s.py", "--seed", "1"],
            "go after it: radt [options] s.py --seed 1 --epochs 2 --lr 0.1",
        ),
        (["-l", "top", "--fast", "-e", "x", "s.py"], "go after it: radt [options] s.py --fast"),
        (["plan.yaml", "--fast"], "unknown option --fast; radt --help lists radT's options"),
    ],
)
def test_an_unknown_option_is_one_line_naming_the_option_meant_or_where_it_goes(
    workspace, args, line
):
    """A misspelt option of radT's is named; a script's flag put before the script is shown
    after it; parsed before any file is read or run is made."""
    workspace.script("s.py", "print('ran')\n")
    said = refused(workspace.run(args), line)
    assert "Traceback" not in said and "usage:" not in said
    assert workspace.runs() == []


def test_an_options_default_is_shown_in_the_words_of_its_values():
    from radt.listener import Option

    assert [Option("x", bool, raw, "").shown_default for raw in ("1", "on", "0", "")] == [
        "yes",
        "yes",
        "no",
        "no",
    ]
    assert Option("n", int, "", "", least=1).shown_default == "-"
    assert Option("n", int, "5", "", least=1).shown_default == "5"
    assert Option("x", bool, "0", "").problem("maybe").startswith("takes yes/no ")


# ------------------------------------------------------------------ 10, 11: studies


@pytest.mark.slow
def test_the_original_grid_study_dry_run_refuses_what_its_run_refuses(tmp_path, template_db):
    """experiment_grid_context.yaml names smi: without nvidia-smi both refuse it, rc 2."""
    ws = new_workspace(tmp_path, template_db)
    (ws.root / "yaml").mkdir()
    (ws.root / "pytorch").mkdir()
    study = (FIXTURES / "radt030" / "experiment_grid_context.yaml").read_text()
    (ws.root / "yaml" / "grid.yaml").write_text(study)
    standin = (FIXTURES / "radt030" / "standin" / "cifar10_context.py").read_text()
    (ws.root / "pytorch" / "cifar10_context.py").write_text(standin)
    ws.root = ws.root / "yaml"
    ws.env["PATH"] = path_without_nvidia_tools()
    dry = ws.run(["grid.yaml", "--dry-run"])
    real = ws.run(["grid.yaml"])
    for done in (dry, real):
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith("radt: error: grid.yaml has 1 problem; nothing was started")
        assert "listener not available here: smi" in done.stderr
    assert dry.stderr == real.stderr
    assert ws.client().search_experiments(filter_string="name != 'Default'") == []
    # with the stand-in GPU the same dry run passes and lists the 15 workloads
    ws.env["PATH"] = f"{FAKES}{os.pathsep}{ws.env['PATH']}"
    dry = ws.run(["grid.yaml", "--dry-run"])
    assert dry.returncode == 0, dry.stderr
    assert "15 workloads, 15 runs" in dry.stdout


@pytest.mark.slow
def test_a_dry_run_says_which_lines_are_warnings(tmp_path, template_db):
    ws = new_workspace(tmp_path, template_db)
    ws.script("job.py", "print('ran')\n")
    (ws.root / "study.yaml").write_text(
        "file: job.py\ndevices: 0\nlisteners: none\ncollocation: [none, 3g.40gb+4g.40gb]\n"
        "power_limit: [default, 300]\n"
    )
    ws.env["PATH"] = path_without_nvidia_tools()
    done = ws.run(["study.yaml", "--dry-run"])
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines() == [
        "radt: warning: study.yaml: no nvidia-smi here, so the power limits are not checked "
        "against a GPU's range"
    ]
    # 3g.40gb and 4g.40gb are on the A100 80GB and the H100 80GB alike: both are named
    assert (
        "checked against: no nvidia-smi here; MIG profiles checked against the A100 80GB and "
        "H100 80GB tables (the same profiles)" in done.stdout
    )


# ------------------------------------------------------------------ 12: an unreachable server


def test_an_unreachable_servers_reason_is_whole(monkeypatch):
    from radt.errors import TrackingUnreachable
    from radt.tracking import connect

    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    with pytest.raises(TrackingUnreachable) as caught:
        connect(f"http://127.0.0.1:{port}")
    message = str(caught.value)
    assert (
        f"(API request to http://127.0.0.1:{port}/api/2.0/mlflow/experiments/search failed: "
        "Connection refused); start the server" in message
    )
    assert "\n" not in message


def test_a_long_reason_is_cut_between_words():
    from radt.tracking import reason

    text = "word " * 60
    cut = reason(RuntimeError(text))
    assert cut.endswith("word…") and len(cut) <= 201
    assert reason(RuntimeError("short")) == "short"


# ------------------------------------------------------------------ 15: the original radT's flags


def test_the_original_flags_mean_what_they_meant():
    parser = launcher_parser()
    args = parser.parse_args(["-r", "-n", "a", "--poll_interval", "0.25", "-e", "0"])
    assert (args.rerun, args.run_name, args.interval, args.experiment) == (True, "a", 0.25, "0")
    assert parser.parse_args(["--name", "b"]).run_name == "b"


@pytest.mark.slow
def test_the_original_flags_run_a_command(workspace, tmp_path):
    workspace.script("env.py", ENV_SCRIPT)
    args = ["-e", "0", "-n", "mine", "-d", "1+2", "--poll_interval", "0.2", "-l", "none"]
    done = workspace.run([*args, "-c", "-", "--buffered", "--manual", "env.py"])
    assert done.returncode == 0, done.stderr
    run = workspace.only_run("Default")
    assert run.info.run_name == "mine" and run.data.tags["radt.devices"] == "1,2"
    seen = (workspace.root / "seen.txt").read_text().splitlines()
    assert seen == ["CUDA_VISIBLE_DEVICES=1,2", "PYTHONUNBUFFERED=", "RADT_MANUAL=1"]
    history = workspace.client().get_metric_history(run.info.run_id, "ML - epoch")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (1, 1.0)]
    acc = workspace.client().get_metric_history(run.info.run_id, "acc")
    assert [(m.step, m.value) for m in acc] == [(0, 0.5), (1, 0.75)]
    # --manual: the window opened with the context
    assert set(samples(workspace, run.info.run_id, tmp_path)["key"]) >= {WINDOW_KEY}
    # without --manual the context opens no window, and radT keeps the output unbuffered
    done = workspace.run(["-n", "plain", "-l", "none", "env.py"])
    assert done.returncode == 0, done.stderr
    plain = next(r for r in workspace.runs() if r.info.run_name == "plain")
    (tmp_path / "plain").mkdir()
    keys = set(samples(workspace, plain.info.run_id, tmp_path / "plain")["key"])
    assert WINDOW_KEY not in keys
    seen = (workspace.root / "seen.txt").read_text().splitlines()
    assert seen == ["CUDA_VISIBLE_DEVICES=<unset>", "PYTHONUNBUFFERED=1", "RADT_MANUAL=<unset>"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["-w", "3"], ["-w/--workload 3", "Workload column"]),
        (["--workload", "3"], ["-w/--workload 3"]),
        (["-c", "mps"], ["-c/--collocation mps", "Collocation column"]),
        (["--conda"], ["--conda", "conda activate"]),
    ],
)
def test_the_original_flags_radt_does_otherwise_are_one_line(workspace, args, fragments):
    workspace.script("s.py", "print('ran')\n")
    refused(workspace.run([*args, "-l", "none", "s.py"]), *fragments)
    assert workspace.runs() == []

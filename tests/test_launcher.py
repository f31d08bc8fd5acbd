"""The launcher end to end: real radT processes, a real SQLite MLflow store, real signals."""

from __future__ import annotations

import importlib.metadata
import json
import signal
import socket
import sys
import time

import pandas as pd
import pytest
from conftest import kill_quietly, pid_alive, wait_for

LOGS = """
import os, sys, time, mlflow
# MLflow removes MLFLOW_RUN_ID from the environment once it joins the run.
print("run id", os.environ["MLFLOW_RUN_ID"], "exp", os.environ["MLFLOW_EXPERIMENT_ID"])
print("tracking", os.environ["MLFLOW_TRACKING_URI"])
mlflow.log_metric("loss", 0.5, step=1)
mlflow.log_param("from_script", "yes")
print("to stderr", file=sys.stderr)
time.sleep(float(os.environ.get("SLEEP", "0.8")))
sys.exit(int(os.environ.get("EXIT", "0")))
"""

SLEEPER = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open("pids.txt", "w") as f:
    f.write(f"{os.getpid()} {grandchild.pid}")
print("ready", flush=True)
time.sleep(600)
"""


def artifact_text(client, run_id: str, path: str, tmp_path) -> str:
    local = client.download_artifacts(run_id, path, str(tmp_path))
    with open(local) as f:
        return f.read()


def samples(client, run_id: str, tmp_path) -> pd.DataFrame:
    local = client.download_artifacts(run_id, "radt/samples.parquet", str(tmp_path))
    return pd.read_parquet(local)


@pytest.mark.slow
def test_run_has_params_script_metrics_listener_series_and_artifacts(workspace, tmp_path):
    workspace.script("logs.py", LOGS)
    done = workspace.run(
        [
            "-e",
            "study",
            "--run-name",
            "base",
            "--tag",
            "team=vision",
            "-l",
            "top+counter",
            "logs.py",
            "--batch-size",
            "128",
            "--lr=0.1",
            "--flag",
        ]
    )
    assert done.returncode == 0, done.stderr
    run = workspace.only_run("study")
    run_id = run.info.run_id
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "base"
    assert run.data.params["batch-size"] == "128"
    assert run.data.params["lr"] == "0.1"
    assert run.data.params["flag"] == "True"
    assert run.data.params["from_script"] == "yes"
    assert "logs.py --batch-size 128" in run.data.params["radt.command"]
    assert run.data.tags["team"] == "vision"
    assert run.data.tags["radt.listeners"] == "top+counter"
    assert run.data.tags["radt.collocation"] == "none"
    assert run.data.tags["radt.exit_code"] == "0"
    assert (
        run.data.tags["radt.python"]
        == f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"
    )
    assert int(run.data.tags["radt.cpu_cores"]) >= 1
    assert "radt.cpu_model" in run.data.tags and "radt.ram_gib" in run.data.tags
    # The script's own mlflow calls landed in radT's run.
    assert run.data.metrics["loss"] == 0.5
    assert f"run id {run_id} exp {run.info.experiment_id}" in done.stdout
    # Listener series in MLflow, decimated, under system/.
    client = workspace.client()
    assert "system/top/proc/rss_mib" in run.data.metrics
    assert "system/top/host/cpu_pct" in run.data.metrics
    assert len(client.get_metric_history(run_id, "system/counter/seq/n")) >= 1
    # The per-key table of the closing summary, not ~40 single-point metrics.
    assert not [k for k in run.data.metrics if k.startswith("summary/")]
    assert "counter/seq/n," in artifact_text(client, run_id, "radt/summary.csv", tmp_path)
    # Output kept as an artifact; environment captured.
    log = artifact_text(client, run_id, "radt/output.log", tmp_path)
    assert "to stderr" in log and f"run id {run_id}" in log
    env = json.loads(artifact_text(client, run_id, "radt/environment/environment.json", tmp_path))
    assert env["tags"]["radt.cpu_cores"] == run.data.tags["radt.cpu_cores"]
    assert "pip-freeze.txt" in [
        a.path.split("/")[-1] for a in client.list_artifacts(run_id, "radt/environment")
    ]
    assert f"mlflow=={importlib.metadata.version('mlflow')}" in run.data.tags["radt.libraries"]
    # Every sample is in the samples artifact: the counter has no gaps.
    table = samples(client, run_id, tmp_path)
    assert list(table.columns) == ["timestamp", "key", "value", "listener", "entity"]
    counter = table[table.key == "counter/seq/n"].value.tolist()
    assert counter == [float(i) for i in range(len(counter))] and len(counter) >= 5
    assert set(table[table.key == "counter/seq/n"].listener) == {"counter"}
    assert set(table[table.key == "counter/seq/n"].entity) == {"seq"}
    # The local folder is gone once everything is in MLflow.
    assert not any((workspace.home / "runs").iterdir())


@pytest.mark.slow
def test_failing_command_gives_failed_run_and_its_exit_code(workspace):
    workspace.script("logs.py", LOGS)
    done = workspace.run(
        ["-l", "none", "logs.py"], env={**workspace.env, "EXIT": "3", "SLEEP": "0"}
    )
    assert done.returncode == 3
    run = workspace.only_run()
    assert run.info.status == "FAILED"
    assert run.data.tags["radt.exit_code"] == "3"


@pytest.mark.slow
def test_child_killed_by_signal_gives_killed_run(workspace):
    workspace.script("die.py", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)\n")
    done = workspace.run(["-l", "none", "die.py"])
    assert done.returncode == 128 + signal.SIGKILL
    run = workspace.only_run()
    assert run.info.status == "KILLED"
    assert "SIGKILL" in run.data.tags["radt.stop_reason"]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_to_radt_stops_the_tree_and_kills_the_run(workspace, tmp_path, signum):
    workspace.script("sleeper.py", SLEEPER)
    radt = workspace.start(["-l", "counter", "--grace", "2", "sleeper.py"])
    pids: list[int] = []
    try:
        pids = wait_for(lambda: _read_pids(workspace.root / "pids.txt"), timeout=60)
        time.sleep(0.3)
        radt.send_signal(signum)
        _, err = radt.communicate(timeout=60)
        assert radt.returncode == 128 + signum
        name = signal.Signals(signum).name
        assert f"radt: received {name}; stopping the command (again to kill it at once)" in err
        for pid in pids:
            wait_for(lambda pid=pid: not pid_alive(pid), timeout=5)
        run = workspace.only_run()
        assert run.info.status == "KILLED"
        assert run.data.tags["radt.stop_reason"] == f"radT received {name}"
        table = samples(workspace.client(), run.info.run_id, tmp_path)
        assert (table.key == "counter/seq/n").sum() >= 3
    finally:
        radt.kill()
        for pid in pids:
            kill_quietly(pid)


def _read_pids(path):
    try:
        text = path.read_text().split()
    except FileNotFoundError:
        return None
    return [int(p) for p in text] if len(text) == 2 else None


@pytest.mark.slow
def test_max_time_sends_sigterm_then_sigkill_and_says_why(workspace):
    workspace.script(
        "stubborn.py",
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: print('ignoring SIGTERM', flush=True))\n"
        "print('started', flush=True)\nwhile True: time.sleep(0.05)\n",
    )
    began = time.monotonic()
    done = workspace.run(["-l", "none", "--max-time", "0.02", "--grace", "0.5", "stubborn.py"])
    assert time.monotonic() - began < 60
    assert done.returncode == 128 + signal.SIGKILL
    assert "--max-time of 0.02 min reached" in done.stderr
    assert "ignoring SIGTERM" in done.stdout
    run = workspace.only_run()
    assert run.info.status == "KILLED"
    assert run.data.tags["radt.stop_reason"] == "--max-time of 0.02 min reached"


@pytest.mark.slow
def test_max_time_with_a_clean_exit_on_sigterm_finishes(workspace):
    workspace.script(
        "polite.py",
        "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
        "while True: time.sleep(0.05)\n",
    )
    done = workspace.run(["-l", "none", "--max-time", "0.01", "polite.py"])
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.stop_reason"].startswith("--max-time")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-l", "none", "--", "no-such-command-xyz"], "command not found: no-such-command-xyz"),
        (["-l", "none", "missing.py"], "script not found: missing.py"),
        (["-l", "top+nosuch", "--", "true"], "unknown listener nosuch; known listeners:"),
        (
            ["-l", "absent", "--", "true"],
            "listener not available here: absent (absent-tool not found)",
        ),
        (["--tag", "novalue", "--", "true"], "malformed --tag 'novalue': expected KEY=VALUE"),
        (["-o", "per_core=1", "--", "true"], "malformed listener option 'per_core'"),
        (["--max-time", "-1", "--", "true"], "--max-time must be positive"),
        (["--warmup-epochs", "0", "--", "true"], "--warmup-epochs '0' is not a whole number"),
        (["--warmup-s", "-2", "--", "true"], "--warmup-s '-2' is not a number of seconds"),
        (
            ["--warmup-s", "1", "--warmup-epochs", "1", "--", "true"],
            "give --warmup-epochs or --warmup-s, not both",
        ),
        (["--job-ignore", "seed", "--", "true"], "--job-ignore 'seed' is not a flag"),
        (["--job", "", "--", "true"], "--job is empty"),
        (["--job", "x", "plan.csv"], "--job names a single command's Job; in a plan"),
    ],
)
def test_bad_input_is_one_line_error_before_anything_starts(workspace, args, message):
    done = workspace.run(args)
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if line.startswith("radt: error:")]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert workspace.runs() == []


@pytest.mark.slow
def test_unknown_listener_lists_the_known_ones(workspace):
    done = workspace.run(["-l", "nosuch", "--", "true"])
    assert "counter" in done.stderr and "top" in done.stderr and "iostat" in done.stderr


@pytest.mark.slow
def test_unreachable_tracking_server_refuses_with_what_to_do(workspace):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**workspace.env, "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{port}"}
    began = time.monotonic()
    done = workspace.run(["-l", "none", "--", "true"], env=env)
    assert done.returncode == 2
    assert f"cannot reach the tracking store http://127.0.0.1:{port}" in done.stderr
    assert "unset it to use the embedded store" in done.stderr
    assert "Traceback" not in done.stderr
    assert time.monotonic() - began < 60


@pytest.mark.slow
def test_listener_that_raises_stops_alone(workspace, tmp_path):
    workspace.script("logs.py", LOGS)
    done = workspace.run(["-l", "counter+boom", "logs.py"], env={**workspace.env, "SLEEP": "1"})
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if "listener boom stopped" in line]
    assert len(warnings) == 1 and "RuntimeError: sensor unplugged" in warnings[0]
    run = workspace.only_run()
    assert run.info.status == "FINISHED"
    table = samples(workspace.client(), run.info.run_id, tmp_path)
    assert (table.key == "boom/dev0/value_pct").sum() == 3
    assert (table.key == "counter/seq/n").sum() >= 10


@pytest.mark.slow
def test_default_listeners_are_the_available_ones(workspace):
    workspace.script("logs.py", LOGS)
    done = workspace.run(["logs.py"], env={**workspace.env, "SLEEP": "0"})
    assert done.returncode == 0, done.stderr
    chosen = workspace.only_run().data.tags["radt.listeners"].split("+")
    assert {"top", "iostat", "counter"} <= set(chosen)
    assert "absent" not in chosen


@pytest.mark.slow
def test_embedded_store_is_the_default_and_said_so(workspace):
    workspace.script("logs.py", LOGS)
    env = {k: v for k, v in workspace.env.items() if k != "MLFLOW_TRACKING_URI"}
    done = workspace.run(["-l", "none", "logs.py"], env={**env, "SLEEP": "0"})
    assert done.returncode == 0, done.stderr
    notices = [n for n in done.stderr.splitlines() if "MLFLOW_TRACKING_URI is not set" in n]
    assert len(notices) == 1 and str(workspace.root / "mlflow.db") in notices[0]
    assert workspace.only_run().info.status == "FINISHED"


@pytest.mark.slow
def test_command_after_double_dash_runs_as_given(workspace):
    workspace.script("logs.py", LOGS)
    done = workspace.run(
        ["-l", "none", "--", sys.executable, "-u", "logs.py", "--epochs", "2", "; rm -rf ~"],
        env={**workspace.env, "SLEEP": "0"},
    )
    assert done.returncode == 0, done.stderr
    params = workspace.only_run().data.params
    assert params["epochs"] == "2"
    assert "u" not in params


@pytest.mark.slow
def test_secrets_never_reach_the_run(workspace, tmp_path):
    workspace.script("logs.py", LOGS)
    env = {
        **workspace.env,
        "SLEEP": "0",
        "DB_PASSWORD": "hunter2-pw",
        "HF_TOKEN": "hunter2-token",
        "AWS_SECRET_ACCESS_KEY": "hunter2-aws",
        "SOME_URL": "postgresql://radt:hunter2-uri@db/mlflow",
    }
    done = workspace.run(["-l", "none", "logs.py"], env=env)
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    client = workspace.client()
    text = artifact_text(client, run.info.run_id, "radt/environment/environment.json", tmp_path)
    assert "hunter2" not in text
    assert "DB_PASSWORD" in text and "postgresql://radt:***@db/mlflow" in text
    assert not any("hunter2" in v for v in {**run.data.params, **run.data.tags}.values())


@pytest.mark.parametrize(
    ("uri", "clean", "env"),
    [
        (
            "http://alice:s%40cret@127.0.0.1:5000",
            "http://127.0.0.1:5000",
            {"MLFLOW_TRACKING_USERNAME": "alice", "MLFLOW_TRACKING_PASSWORD": "s@cret"},
        ),
        ("https://:tok@mlflow.lab/x", "https://mlflow.lab/x", {"MLFLOW_TRACKING_PASSWORD": "tok"}),
        (
            "postgresql+psycopg2://bob:pw@db:5432/mlflow",
            "postgresql+psycopg2://bob@db:5432/mlflow",
            {"PGPASSWORD": "pw"},
        ),
        ("http://127.0.0.1:5000", "http://127.0.0.1:5000", {}),
        ("sqlite:///tmp/mlflow.db", "sqlite:///tmp/mlflow.db", {}),
    ],
)
def test_a_password_in_the_uri_moves_to_the_variables_its_client_reads(uri, clean, env):
    from radt.tracking import move_credentials

    assert move_credentials(uri) == (clean, env)


@pytest.mark.slow
def test_nvidia_smi_q_is_recorded_when_the_tool_exists(workspace, tmp_path):
    from conftest import FAKES

    if not (FAKES / "nvidia-smi").exists():
        pytest.fail("the fake nvidia-smi is missing from tests/fakes")
    workspace.script("logs.py", LOGS)
    env = {**workspace.env, "SLEEP": "0", "PATH": f"{FAKES}:{workspace.env['PATH']}"}
    done = workspace.run(["-l", "none", "logs.py"], env=env)
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    text = artifact_text(
        workspace.client(), run.info.run_id, "radt/environment/nvidia-smi-q.txt", tmp_path
    )
    assert "Driver Version" in text
    assert run.data.tags["radt.gpu_driver"]
    assert "radt.gpus" in run.data.tags
    assert run.data.tags["radt.gpu_memory_mib"] == "40960"  # the stand-in A100-SXM4-40GB's


def test_listeners_command_explains_availability(workspace):
    done = workspace.run(["listeners"])
    assert done.returncode == 0
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:]}
    assert "absent-tool not found" in lines["absent"]
    assert " yes " in lines["top"] and " yes " in lines["counter"]

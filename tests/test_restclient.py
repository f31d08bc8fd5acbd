"""The light path of a cold radT's first calls to an ``mlflow server`` (``radt.restclient``,
issue 32): the run it makes over REST is the run MLflow's client makes, MLflow is imported
only once the command runs, and whatever fails goes through MLflow's client as before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import default_signals
from mlflow_server import MlflowServer, ensure_running, server_fixture

from radt.restclient import LightClient

mlflow_server = server_fixture(scope="module")

SCRIPT = """\
import argparse, time
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.add_argument("--epochs", type=int)
parser.parse_args()
time.sleep(0.3)
print("trained")
"""

HOOK = """\
import json, sys, threading
import psutil

class FirstMlflowImport:
    '''Notes, at radT's first import of MLflow, which thread imports it and which commands
    radT has started by then, then lets the waiting command go on.'''

    def find_spec(self, name, path=None, target=None):
        if name == "mlflow":
            sys.meta_path.remove(self)
            children = [" ".join(p.cmdline()) for p in psutil.Process().children()]
            with open("first-import.json", "w") as out:
                json.dump({"thread": threading.current_thread().name, "children": children}, out)
            open("hooked", "w").close()
        return None

sys.meta_path.insert(0, FirstMlflowImport())
sys.argv = ["radt", *sys.argv[1:]]
import runpy
runpy.run_module("radt", run_name="__main__", alter_sys=True)
"""

WAITER = (
    "import os, time\nwhile not os.path.exists('hooked'):\n    time.sleep(0.02)\nprint('went on')\n"
)


@pytest.fixture
def server(mlflow_server: MlflowServer) -> MlflowServer:
    return ensure_running(mlflow_server)


def cold_env(workspace, uri: str, light: bool) -> dict[str, str]:
    """radT's own process making the run (no warm launcher), with or without the light path."""
    return {
        **workspace.env,
        "MLFLOW_TRACKING_URI": uri,
        "RADT_WARM": "0",
        "RADT_LIGHT": "1" if light else "0",
    }


def run_script(workspace, args: list[str], env: dict[str, str], timeout: float = 120):
    """``python ARGS`` in the workspace's folder with ``env``, its output captured and the stop
    signals at their defaults."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=workspace.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=default_signals,
    )


def test_a_light_run_is_the_run_mlflows_client_makes(server, workspace):
    """Name, user, experiment, tags, params, status and metrics: the same either way."""
    workspace.script("train.py", SCRIPT)
    runs = {}
    for light in (True, False):
        args = ["-e", "light-same", "-n", "same", "-l", "top", "--interval", "0.1"]
        done = workspace.run(
            [*args, "train.py", "--lr", "0.1", "--epochs", "2"],
            env=cold_env(workspace, server.uri, light),
        )
        assert done.returncode == 0, done.stderr
        assert "trained" in done.stdout
        from mlflow.tracking import MlflowClient

        client = MlflowClient(server.uri)
        (run,) = [
            r
            for r in client.search_runs([client.get_experiment_by_name("light-same").experiment_id])
            if r.info.run_id not in {x.info.run_id for x in runs.values()}
        ]
        runs[light] = run
    light, heavy = runs[True], runs[False]
    assert light.info.run_name == heavy.info.run_name == "same"
    assert light.info.user_id == heavy.info.user_id
    assert light.info.status == heavy.info.status == "FINISHED"
    assert light.data.params == heavy.data.params
    assert light.data.params["lr"] == "0.1"
    assert set(light.data.tags) == set(heavy.data.tags)
    for key in ("mlflow.user", "mlflow.source.name", "radt.command", "radt.listeners"):
        assert light.data.tags[key] == heavy.data.tags[key], key
    assert set(light.data.metrics) == set(heavy.data.metrics)
    assert any(key.startswith("system/") for key in light.data.metrics)


@pytest.mark.parametrize("light", [True, False], ids=["light", "through-mlflow"])
def test_mlflow_is_imported_only_once_the_command_runs(server, workspace, light):
    """With the light path radT's first import of MLflow comes from its background thread,
    the command already started (it waits for that import before it goes on); without it,
    from the main thread before any command."""
    (workspace.root / "hook.py").write_text(HOOK)
    args = ["hook.py", "-e", f"light-import-{light}", "-l", "none", "--"]
    done = run_script(
        workspace, [*args, sys.executable, "-c", WAITER], cold_env(workspace, server.uri, light)
    )
    assert done.returncode == 0, done.stderr
    assert "went on" in done.stdout
    first = json.loads((workspace.root / "first-import.json").read_text())
    if light:
        assert first["thread"] == "radt-mlflow-import", first
        assert any("hooked" in command for command in first["children"]), first
    else:
        assert first["thread"] == "MainThread", first
        assert first["children"] == [], first
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name(f"light-import-{light}")
    (run,) = client.search_runs([experiment.experiment_id])  # the run is whole either way
    assert run.info.status == "FINISHED"


PLAN = """\
Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params
light-plan, w0, , , 0, naive, waiter.py, top,
light-plan, w0, , , 0, naive, waiter.py, top,
"""


def test_a_plan_imports_mlflow_only_once_its_commands_run(server, workspace):
    """A cold plan (a Slurm task's) makes its workload's runs over REST: MLflow's first
    import comes from a thread of its own, both commands already started."""
    (workspace.root / "hook.py").write_text(HOOK)
    (workspace.root / "waiter.py").write_text(WAITER)
    (workspace.root / "plan.csv").write_text(PLAN)
    env = cold_env(workspace, server.uri, light=True)
    done = run_script(workspace, ["hook.py", "plan.csv"], env, timeout=180)
    assert done.returncode == 0, done.stderr
    first = json.loads((workspace.root / "first-import.json").read_text())
    assert first["thread"] != "MainThread", first
    assert sum("waiter.py" in command for command in first["children"]) == 2, first
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("light-plan")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.status for r in runs) == ["FINISHED"] * 3  # the workload and its two
    rows = [r for r in runs if "radt.command" in r.data.params]
    assert len(rows) == 2
    assert all(any(k.startswith("system/") for k in r.data.metrics) for r in rows)


def test_an_unreachable_server_reads_the_same_either_way(workspace):
    """A refused light call is made again through MLflow: the same one line, the same code."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    answers = {}
    for light in (True, False):
        env = {**cold_env(workspace, uri, light), "MLFLOW_HTTP_REQUEST_TIMEOUT": "5"}
        done = workspace.run(["-l", "none", "--", "true"], env=env)
        assert "Traceback" not in done.stderr, done.stderr
        answers[light] = (done.returncode, done.stderr.strip().splitlines()[-1])
    assert answers[True] == answers[False]
    assert answers[True][0] != 0
    assert "cannot reach the tracking store" in answers[True][1]


@pytest.mark.parametrize(
    ("uri", "env", "expected"),
    [
        ("http://127.0.0.1:5000", {}, True),
        ("https://mlflow.example.org", {}, True),
        ("sqlite:///mlflow.db", {}, False),
        ("postgresql://u@h/db", {}, False),
        ("http://127.0.0.1:5000", {"RADT_LIGHT": "0"}, False),
        ("http://127.0.0.1:5000", {"MLFLOW_TRACKING_AUTH": "kubernetes"}, False),
        ("http://127.0.0.1:5000", {"MLFLOW_TRACKING_INSECURE_TLS": "true"}, False),
        ("http://127.0.0.1:5000", {"MLFLOW_TRACKING_SERVER_CERT_PATH": "/ca.pem"}, False),
        ("http://127.0.0.1:5000", {"MLFLOW_WORKSPACE": "team-a"}, False),
    ],
)
def test_the_light_path_only_where_it_sends_what_mlflow_sends(uri, env, expected):
    probe = "import sys; from radt.restclient import applies; print(applies(sys.argv[1]))"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    done = subprocess.run(
        [sys.executable, "-c", probe, uri],
        env={**clean, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == str(expected)


def test_no_light_path_once_mlflow_is_imported():
    import mlflow  # noqa: F401

    from radt.restclient import applies

    assert not applies("http://127.0.0.1:5000", {})


class Recording(BaseHTTPRequestHandler):
    """Answers every POST with an empty search and keeps its Authorization header."""

    seen: list[str | None] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recording.seen.append(self.headers.get("Authorization"))
        body = b'{"experiments": []}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize(
    "credentials",
    [
        {"MLFLOW_TRACKING_USERNAME": "ana", "MLFLOW_TRACKING_PASSWORD": "s3cr:t"},
        {"MLFLOW_TRACKING_TOKEN": "tok-123"},
        {
            "MLFLOW_TRACKING_TOKEN": "tok",
            "MLFLOW_TRACKING_USERNAME": "a",
            "MLFLOW_TRACKING_PASSWORD": "b",
        },
        {},
    ],
    ids=["basic", "token", "both", "none"],
)
def test_credentials_sent_as_mlflows_client_sends_them(monkeypatch, credentials):
    """The Authorization header of a light call is the one MLflow's own client sends."""
    from mlflow.store.tracking.rest_store import RestStore
    from mlflow.utils.credentials import get_default_host_creds

    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{httpd.server_address[1]}"
    Recording.seen = []
    try:
        LightClient(uri).search_experiments(max_results=1)
        RestStore(lambda: get_default_host_creds(uri)).search_experiments(max_results=1)
    finally:
        httpd.shutdown()
        httpd.server_close()
    light, mlflows = Recording.seen
    assert light == mlflows
    assert (light is None) == (not credentials)


def test_light_calls_answer_as_mlflows_client_does(server):
    """Each light call against a real server: the experiment missing (None), made, found by
    name and by id, a run made with its tags and params; a call the server refuses goes
    through MLflow's client, which raises MLflow's error."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = LightClient(server.uri)
    assert client.get_experiment_by_name("light-calls") is None
    made = client.create_experiment("light-calls")
    found = client.get_experiment_by_name("light-calls")
    assert (found.experiment_id, found.name, found.lifecycle_stage) == (
        made,
        "light-calls",
        "active",
    )
    assert client.get_experiment(made).name == "light-calls"
    run = client.create_run(made, tags={"mlflow.user": "ana", "k": "v"}, run_name="r1")
    assert run.data.tags == {"mlflow.user": "ana", "k": "v"}
    client.log_params(run.info.run_id, {"lr": "0.1", "radt.command": "python train.py"})
    assert client.light_calls == 5  # every call above (but the missing one) over REST
    stored = MlflowClient(server.uri).get_run(run.info.run_id)
    assert stored.info.run_name == "r1"
    assert stored.info.user_id == "ana"
    assert stored.info.start_time == run.info.start_time
    assert stored.info.status == run.info.status == "RUNNING"
    assert stored.data.tags["k"] == "v"
    assert stored.data.params == {"lr": "0.1", "radt.command": "python train.py"}
    with pytest.raises(MlflowException) as refused:
        client.create_experiment("light-calls")
    assert refused.value.error_code == "RESOURCE_ALREADY_EXISTS"
    client.set_terminated(run.info.run_id, "FINISHED")  # any other call: MLflow's client
    assert MlflowClient(server.uri).get_run(run.info.run_id).info.status == "FINISHED"


LOOK = """\
import json, sys
import radt.analysis.prefetch as prefetch
from radt.analysis.summary import summary

taken = []
take = prefetch.take


def spy(*args, **kwargs):
    answer = take(*args, **kwargs)
    taken.append(answer is not None)
    return answer


prefetch.take = spy
frame = summary(sys.argv[1], tracking_uri=sys.argv[2])
frame = frame.sort_values("run_id").reset_index(drop=True)
print(json.dumps({"taken": taken, "frame": frame.to_json(), "mlflow": "mlflow" in sys.modules}))
"""


def test_a_fresh_looks_search_is_asked_while_mlflow_is_imported(server, workspace, tmp_path):
    """``radt.summary`` in a new process asks for the experiment's runs in the background
    from its start and uses that answer; its rows are those of the look without it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.uri)
    experiment = client.create_experiment("light-look")
    for index in range(3):
        run = client.create_run(experiment, run_name=f"r{index}", tags={"mlflow.user": "ana"})
        client.log_metric(run.info.run_id, "examples", 10.0 * (index + 1))
        client.set_terminated(run.info.run_id, "FINISHED")
    (workspace.root / "look.py").write_text(LOOK)
    looks = {}
    for light in (True, False):
        env = {**workspace.env, "RADT_LIGHT": "1" if light else "0"}
        env["RADT_HOME"] = str(tmp_path / f"home-{light}")
        done = run_script(workspace, ["look.py", "light-look", server.uri], env)
        assert done.returncode == 0, done.stderr
        looks[light] = json.loads(done.stdout.strip().splitlines()[-1])
    assert looks[True]["taken"] == [True]
    assert looks[False]["taken"] == [False]
    assert looks[True]["frame"] == looks[False]["frame"]
    assert len(json.loads(looks[True]["frame"])["run_id"]) == 3


ASK = """\
import json, sys
from radt.analysis.prefetch import first_page, take

uri, experiment_id = sys.argv[1], sys.argv[2]
order = ["attributes.start_time ASC"]
seen = {}
with first_page(uri, "light-ask", 100, order):
    seen["other filter"] = take(uri, [experiment_id], "tags.x = '1'", 100, order)
    seen["other size"] = take(uri, [experiment_id], "", 50, order)
    answer = take(uri, [experiment_id], "", 100, order)
    seen["runs"] = sorted(run["info"]["run_name"] for run in answer["runs"])
    seen["again"] = take(uri, [experiment_id], "", 100, order)
with first_page(uri, "no-such-experiment", 100, order):
    seen["missing"] = take(uri, [experiment_id], "", 100, order)
seen["outside"] = take(uri, [experiment_id], "", 100, order)
print(json.dumps(seen))
"""


def test_an_answer_asked_ahead_serves_only_its_own_search_once(server, workspace):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(server.uri)
    experiment = client.create_experiment("light-ask")
    for name in ("b", "a"):
        client.create_run(experiment, run_name=name)
    (workspace.root / "ask.py").write_text(ASK)
    done = run_script(workspace, ["ask.py", server.uri, experiment], workspace.env)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "other filter": None,
        "other size": None,
        "runs": ["a", "b"],
        "again": None,
        "missing": None,
        "outside": None,
    }

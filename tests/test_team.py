"""A team's deployment, for real: PostgreSQL, an `mlflow server` on it, several radT hosts.

The module starts a real PostgreSQL cluster on loopback (``tests/postgres.py``)
and one real ``mlflow server --backend-store-uri postgresql+psycopg2://…
--workers 1`` on it (the database password reaches the server through
``PGPASSWORD``, never its command line), as docs/deployment.md sets a team up.
radT runs as real processes, each "host" with a folder and a radT home of its
own. The ``counter`` test listener makes every sample countable (0, 1, 2, …),
so a lost or doubled sample shows as a gap or a repeat; the fake pynvml stands
in for the GPUs.

Without PostgreSQL's server binaries (or psycopg2) the module is skipped,
unless ``CI`` is set: CI installs them (`.ci/run`), and there that is a failure.
"""

from __future__ import annotations

import csv
import io
import os
import re
import resource
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIXTURES, PLUGINS, REPO, Workspace, wait_for
from mlflow_server import MlflowServer, ensure_running
from postgres import PostgresServer, missing_reason
from test_outage import (
    COUNTER,
    Radt,
    assert_counter_complete,
    counter_points,
    expected_points,
    key_rows,
    ride_out,
    samples_artifact,
    summary_stat,
    wait_streamed,
)

# Starting the server (the first test's setup) and the load test take minutes on a busy
# 2-core machine: more than the suite's default of 300 s per test.
pytestmark = [pytest.mark.postgres, pytest.mark.timeout(600)]

FAKE_PYNVML = REPO / "tests" / "fakes" / "pynvml"
NVML_SCENARIO = FIXTURES / "nvml_h100.json"
NVML_KEY = "nvml/gpu0/power_w"
HEADER = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, Env\n"

# The plans' training command: says which row it is, holds MEM_MB of memory, sleeps SLEEP s.
JOB = """
import os, sys, time
held = b"x" * (int(os.environ.get("MEM_MB", "0")) << 20)
print("job", os.environ.get("RADT_RUN_ID"), *sys.argv[1:], flush=True)
time.sleep(float(os.environ.get("SLEEP", "1")))
print("job done", len(held), flush=True)
"""

# Trains until the file `stop` appears in the working folder (at most MAX_S seconds),
# so that the test decides when the run ends.
TRAIN = """
import os, time
from pathlib import Path
print("training starts", os.getpid(), flush=True)
deadline = time.monotonic() + float(os.environ.get("MAX_S", "150"))
while not Path("stop").exists() and time.monotonic() < deadline:
    time.sleep(0.05)
print("training done", flush=True)
"""

# A script that logs through MLflow itself, as real training scripts do.
MLFLOW_TRAIN = """
import mlflow
mlflow.log_metric("loss", 0.5)
mlflow.log_param("lr", 0.1)
print("trained with mlflow", flush=True)
"""


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    reason = missing_reason()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the team tests: {reason}")
        pytest.skip(reason)
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="module")
def team_server(postgres, tmp_path_factory) -> Iterator[MlflowServer]:
    """``mlflow server`` with runs and metrics in PostgreSQL, artifacts in a folder."""
    with MlflowServer(tmp_path_factory.mktemp("team-server"), database=postgres) as server:
        yield server


@pytest.fixture
def server(team_server: MlflowServer, postgres: PostgresServer) -> MlflowServer:
    """The module's server and database, running (a test before may have stopped them)."""
    if not postgres.running:
        postgres.start()
    return ensure_running(team_server)


# --------------------------------------------------------------------------- hosts


def host(base: Path, server: MlflowServer, name: str = "host") -> Workspace:
    """A GPU host of the team: a folder and radT home of its own, pointed at the server.

    Its GPU is the fake pynvml; the test listeners are installed.
    """
    root = base / name
    root.mkdir(parents=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_", "RADT_", "FAKE_", "CUDA_", "PG", "AWS_"))
    }
    path = os.pathsep.join([str(PLUGINS), str(FAKE_PYNVML), env.get("PYTHONPATH", "")])
    env.update(
        MLFLOW_TRACKING_URI=server.uri,
        RADT_HOME=str(root / "radt-home"),
        PYTHONPATH=path.rstrip(os.pathsep),
        FAKE_PYNVML_SCENARIO=str(NVML_SCENARIO),
        MLFLOW_DISABLE_TELEMETRY="true",
        PYTHONUNBUFFERED="1",
    )
    ws = Workspace(root, env)
    ws.script("job.py", JOB)
    ws.script("train.py", TRAIN)
    return ws


def unique(name: str) -> str:
    """An experiment name that no other test uses."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def plan_rows(
    experiment: str,
    workload: str,
    count: int,
    mode: str = "naive",
    listeners: str = "counter+top+nvml",
    env: str = "SLEEP=8",
    file: str = "job.py",
    first: int = 1,
) -> str:
    return "".join(
        f"{experiment}, {workload}, , , -, {mode}, {file}, {listeners}, --row {i}, {env}\n"
        for i in range(first, first + count)
    )


def read_csv(path: Path) -> list[dict[str, str]]:
    rows = csv.DictReader(io.StringIO(path.read_text()), skipinitialspace=True)
    return [{k.strip(): (v or "").strip() for k, v in row.items()} for row in rows]


def runs_of(client, experiment: str) -> list:
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment}"
    return client.search_runs([found.experiment_id], max_results=1000)


def stopped(radt: Radt, timeout: float) -> int:
    """Wait for radT to end; kill it (and so its training) if it does not."""
    try:
        return radt.wait(timeout=timeout)
    finally:
        radt.kill()


def recorded(radt: Radt) -> int:
    """The sample count radT reports at the end of a single run."""
    line = radt.wait_said(" recorded", timeout=5)
    return int(re.search(r"([\d,]+) samples? recorded", line)[1].replace(",", ""))


def nothing_to_sync(ws: Workspace) -> None:
    runs = ws.home / "runs"
    assert not runs.exists() or not list(runs.iterdir()), list(runs.iterdir())


def assert_stream_matches(client, run, table, key: str = COUNTER) -> None:
    """MLflow's history of ``system/<key>`` is exactly radT's decimation of the samples
    artifact: one point per 1-s window that has samples, with the window's mean and its
    last sample's timestamp, none missing, none extra, none twice.

    Unlike ``assert_history_matches`` it does not require every window from the first
    to the last: on a saturated machine (2 cores, 11 training processes, 3 radTs, the
    server and the database) a sampler thread may miss a whole second, which is no
    loss between radT and MLflow.
    """
    history = client.get_metric_history(run.info.run_id, "system/" + key)
    steps = [point.step for point in history]
    assert len(steps) == len(set(steps)), f"duplicate steps in the history: {sorted(steps)}"
    got = {point.step: (point.value, point.timestamp) for point in history}
    expected = expected_points(table, key, run.info.start_time)
    assert sorted(got) == sorted(expected), f"MLflow {sorted(got)} != samples {sorted(expected)}"
    for step, (mean, last_ms) in expected.items():
        assert got[step] == (pytest.approx(mean), last_ms), (run.info.run_name, step)


def assert_counters_arrived(client, runs: list, tmp_path: Path) -> None:
    """Every counter sample of a workload's runs reached its run's artifact and MLflow.

    Per run: MLflow's history of ``system/counter/seq/n`` is exactly the decimation
    of the run's samples artifact (``assert_stream_matches``), and the max in ``radt/summary.csv``
    is the artifact's maximum. Over the workload: the values cover 0..max without a gap. A workload
    of one run must count 0..n-1 exactly.

    (Checked over the workload rather than "each run counts 0..n-1" because the
    runs of one workload share listener instances today: see
    ``test_each_run_of_a_workload_observes_its_own_process``.)
    """
    seen: set[float] = set()
    for run in runs:
        table = samples_artifact(client, run.info.run_id, tmp_path / run.info.run_id)
        values = key_rows(table, COUNTER)["value"].to_pylist()
        assert len(values) >= 5, (run.info.run_name, len(values))
        if len(runs) == 1:
            assert_counter_complete(table, at_least=5)
        assert_stream_matches(client, run, table)
        stat = summary_stat(client, run.info.run_id, COUNTER, "max", tmp_path / run.info.run_id)
        assert stat == max(values)
        assert any(k.startswith("system/top/proc/") for k in run.data.metrics), run.info.run_name
        seen.update(values)
    assert seen == {float(i) for i in range(int(max(seen)) + 1)}, "counter samples missing"


def assert_plan_recorded(
    client, experiment: str, plan: Path, workloads: dict[str, int], tmp_path: Path
) -> list:
    """Every workload of ``plan`` ran in ``experiment`` and FINISHED, in MLflow and the CSV."""
    runs = runs_of(client, experiment)
    assert [r.info.run_name for r in runs if r.info.status != "FINISHED"] == []
    parents = {r.info.run_name: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(parents) == sorted(workloads)
    names = [r.info.run_name for r in runs]
    assert len(names) == len(set(names)), f"run names clash: {sorted(names)}"
    for workload, count in workloads.items():
        parent_id = parents[workload].info.run_id
        mine = [r for r in children if r.data.tags["mlflow.parentRunId"] == parent_id]
        letters = sorted(r.data.tags["radt.letter"] for r in mine)
        assert letters == [chr(ord("A") + i) for i in range(count)], (workload, letters)
        assert sorted(r.info.run_name for r in mine) == [f"{workload}-{x}" for x in letters]
        assert all(r.data.tags["radt.workload"] == workload for r in mine)
        assert_counters_arrived(client, mine, tmp_path)
    by_line = {r.data.tags["radt.plan_line"]: r for r in children}
    rows = read_csv(plan)
    assert len(rows) == len(children)
    for line, row in enumerate(rows, start=2):
        run = by_line[str(line)]
        assert (row["Status"], row["Run"]) == ("FINISHED", run.info.run_id), (plan.name, row)
        assert run.data.tags["radt.workload"] == row["Workload"]
    for run in parents.values():
        if "nvml" in run.data.tags["radt.listeners"]:
            table = samples_artifact(client, run.info.run_id, tmp_path / run.info.run_id)
            assert_stream_matches(client, run, table, key=NVML_KEY)
    return runs


# --------------------------------------------------------------------------- load


def test_load_two_hosts_and_two_processes_on_one_plan(server, tmp_path):
    """8 collocated runs (counter+top at 10 Hz, nvml in their workload run), a second
    workload of the same CSV run at the same time by a second radT (`--modes`), and a
    second host's plan in another experiment, all at once against the one server."""
    a, b = host(tmp_path, server, "host-a"), host(tmp_path, server, "host-b")
    exp_a, exp_b = unique("team-a"), unique("team-b")
    plan_a = a.root / "plan.csv"
    plan_a.write_text(
        HEADER
        + plan_rows(exp_a, "load", 8)
        + plan_rows(exp_a, "solo", 1, mode="none", listeners="counter+top", first=9)
    )
    plan_b = b.root / "plan.csv"
    plan_b.write_text(HEADER + plan_rows(exp_b, "load", 2))
    procs = {
        "a/naive": Radt(a.start(["--interval", "0.1", "--modes", "naive", str(plan_a)])),
        "b": Radt(b.start(["--interval", "0.1", str(plan_b)])),
    }
    try:
        # The second process on plan A starts once the first made the experiment: two
        # radTs creating one experiment at once is a race of its own (see
        # test_two_hosts_creating_one_experiment_at_once_both_get_it).
        procs["a/naive"].wait_said("parent run", timeout=120)
        procs["a/none"] = Radt(a.start(["--interval", "0.1", "--modes", "none", str(plan_a)]))
        codes = {name: radt.wait(timeout=300) for name, radt in procs.items()}
    finally:
        for radt in procs.values():
            radt.kill()
    for name, radt in procs.items():
        assert codes[name] == 0, f"{name}:\n{radt.stderr()}"
        assert not radt.said("not answering"), radt.stderr()
        assert not radt.said("radt sync"), radt.stderr()
        assert not radt.said("listener"), radt.stderr()  # none failed or stopped
    done = [line for line in procs["a/naive"].out if re.match(r"^\[[A-H]\] job done", line)]
    assert len(done) == 8, procs["a/naive"].out
    client = server.client()
    assert_plan_recorded(client, exp_a, plan_a, {"load": 8, "solo": 1}, tmp_path / "a")
    assert_plan_recorded(client, exp_b, plan_b, {"load": 2}, tmp_path / "b")
    nothing_to_sync(a)
    nothing_to_sync(b)


def test_each_run_of_a_workload_observes_its_own_process(server, tmp_path):
    """Run A holds 200 MiB, run B nothing: each run's top/proc series must be its own."""
    ws = host(tmp_path, server)
    exp = unique("own-listeners")
    plan = ws.root / "plan.csv"
    plan.write_text(
        HEADER
        + plan_rows(exp, "pair", 1, listeners="counter+top", env="SLEEP=4 MEM_MB=200")
        + plan_rows(exp, "pair", 1, listeners="counter+top", env="SLEEP=4", first=2)
    )
    radt = Radt(ws.start(["--interval", "0.1", str(plan)]))
    assert stopped(radt, timeout=180) == 0, radt.stderr()
    client = server.client()
    runs = {r.data.tags.get("radt.letter"): r for r in runs_of(client, exp)}
    for letter in "AB":
        table = samples_artifact(client, runs[letter].info.run_id, tmp_path / letter)
        assert_counter_complete(table, at_least=20)
    rss = "top/proc/rss_mib"
    assert summary_stat(client, runs["A"].info.run_id, rss, "max", tmp_path / "A") >= 200
    assert summary_stat(client, runs["B"].info.run_id, rss, "max", tmp_path / "B") < 150


SLOW_COLLECT_PLUGIN = """
import time
from radt.listener import Listener


class SlowCollect(Listener):
    \"\"\"A wrapping listener whose report takes 3 s to collect after the command, as
    nsys and ncu reports take seconds.\"\"\"

    name = "slowcollect"
    on_by_default = False

    def start(self, run):
        pass

    def stop(self):
        pass

    def collect(self, run):
        time.sleep(3)
"""


def install_slow_collect(ws: Workspace) -> None:
    folder = ws.root / "plugins"
    (folder / "slowcollect-0.1.dist-info").mkdir(parents=True)
    (folder / "slowcollect.py").write_text(SLOW_COLLECT_PLUGIN)
    (folder / "slowcollect-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: slowcollect\nVersion: 0.1\n"
    )
    (folder / "slowcollect-0.1.dist-info" / "entry_points.txt").write_text(
        "[radt.listeners]\nslowcollect = slowcollect:SlowCollect\n"
    )
    ws.env["PYTHONPATH"] = f"{folder}{os.pathsep}{ws.env['PYTHONPATH']}"


def test_each_run_lasts_as_long_as_its_command(server, tmp_path):
    """Time per example and slowdown divide by the run's duration in MLflow: it must be
    the command's, not the command's plus whatever radT did after it."""
    ws = host(tmp_path, server)
    install_slow_collect(ws)
    ws.script(
        "timed.py",
        "import time\nstart = time.time()\ntime.sleep(2)\nprint('times', start, time.time())\n",
    )
    exp = unique("durations")
    plan = ws.root / "plan.csv"
    plan.write_text(
        HEADER
        + plan_rows(exp, "pair", 2, listeners="counter+slowcollect", file="timed.py", env="-")
    )
    radt = Radt(ws.start([str(plan)]))
    assert stopped(radt, timeout=180) == 0, radt.stderr()
    times = {}
    for line in radt.out:
        match = re.match(r"^\[([AB])\] times (\S+) (\S+)$", line)
        if match:
            times[match[1]] = (float(match[2]), float(match[3]))
    runs = {r.data.tags.get("radt.letter"): r for r in runs_of(server.client(), exp)}
    for letter, (began, ended) in sorted(times.items()):
        run = runs[letter].info
        took = (run.end_time - run.start_time) / 1000
        assert took <= ended - began + 1.5, (
            f"run {letter} lasted {took:.1f} s for {ended - began:.1f} s"
        )
    assert sorted(times) == ["A", "B"], radt.out


def test_two_hosts_creating_one_experiment_at_once_both_get_it(server):
    """The race, made certain: the lookup answers "no such experiment", and another host
    creates it before this one does (as two `radt plan.csv` started together do)."""
    from mlflow.tracking import MlflowClient

    from radt.tracking import experiment_id

    name = unique("created-twice")

    class RacedClient(MlflowClient):
        raced = False

        def get_experiment_by_name(self, wanted):
            found = super().get_experiment_by_name(wanted)
            if not self.raced:
                self.raced = True
                MlflowClient(server.uri).create_experiment(wanted)  # the other host wins
            return found

    other = experiment_id(RacedClient(server.uri), name)
    assert other == server.client().get_experiment_by_name(name).experiment_id


# --------------------------------------------------------------------------- faults


def test_server_killed_mid_plan_and_restarted_loses_nothing(server, tmp_path):
    ws = host(tmp_path, server)
    exp = unique("server-outage")
    plan = ws.root / "plan.csv"
    plan.write_text(
        HEADER
        + plan_rows(exp, "outage", 1, mode="none", file="train.py", env="MAX_S=150")
        + plan_rows(exp, "after", 1, mode="none", listeners="counter+top", env="SLEEP=2", first=2)
    )
    client = server.client()
    radt = Radt(ws.start(["--interval", "0.1", str(plan)]))

    def streaming() -> None:
        child = wait_for(lambda: _child_of(client, exp, "outage"), timeout=120)
        wait_streamed(client, child)

    returncode = ride_out(
        ws, radt, before=streaming, fault=server.kill, recovery=server.start, timeout=240
    )
    child = _child_of(client, exp, "outage")
    assert returncode == 0, radt.stderr()
    # One warning and one all-clear, though the workload run and its run both saw it.
    assert len(radt.said("tracking server not answering")) == 1, radt.stderr()
    assert len(radt.said("answers again")) == 1, radt.stderr()
    assert not radt.said("radt sync"), radt.stderr()
    assert "[A] training done" in radt.out
    runs = assert_plan_recorded(client, exp, plan, {"outage": 1, "after": 1}, tmp_path)
    outage = next(r for r in runs if r.info.run_id == child)
    assert outage.data.tags["radt.exit_code"] == "0"
    nothing_to_sync(ws)


def _child_of(client, experiment: str, workload: str) -> str | None:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return None
    for run in client.search_runs([found.experiment_id]):
        tags = run.data.tags
        if tags.get("radt.workload") == workload and "mlflow.parentRunId" in tags:
            return run.info.run_id
    return None


def test_postgres_restarted_mid_run_loses_nothing(server, postgres, tmp_path):
    """A fast restart of the database, then the database down for seconds: every sample
    of the run reaches the artifact and MLflow's history, exactly as counted."""
    ws = host(tmp_path, server)
    radt = Radt(ws.start(["-e", unique("db-outage"), "-l", "counter+top+nvml", "train.py"]))
    client = server.client()

    def database_down() -> None:
        postgres.restart(mode="fast")  # connections dropped; the server reconnects
        wait_streamed(client, radt.run_id, more_than=3, timeout=30)
        postgres.stop(mode="fast")  # the next test's `server` fixture starts it if need be

    returncode = ride_out(
        ws,
        radt,
        before=lambda: wait_streamed(client, radt.run_id),
        fault=database_down,
        recovery=postgres.start,
    )
    run_id = radt.run_id
    assert returncode == 0, radt.stderr()
    assert len(radt.said("tracking server not answering")) == 1, radt.stderr()
    assert len(radt.said("answers again")) == 1, radt.stderr()
    assert not radt.said("radt sync"), radt.stderr()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    table = samples_artifact(client, run_id, tmp_path)
    assert table.num_rows == recorded(radt)
    n = assert_counter_complete(table, at_least=40)
    assert_stream_matches(client, run, table)
    assert_stream_matches(client, run, table, key=NVML_KEY)
    assert summary_stat(client, run_id, COUNTER, "max", tmp_path) == n - 1
    nothing_to_sync(ws)


def _spool_of_new_run(ws: Workspace, radt: Radt) -> Path:
    """The spool folder of radT's run as soon as it exists (before the first flush)."""

    def spool() -> Path | None:
        folders = list((ws.home / "runs").glob("*/spool"))
        return folders[0] if folders else None

    try:
        return wait_for(spool, timeout=120, interval=0.002)
    except AssertionError:
        raise AssertionError(f"no spool folder appeared; radT said:\n{radt.stderr()}") from None


def test_disk_full_while_spooling_warns_once_and_training_goes_on(server, tmp_path):
    """Every spool chunk is /dev/full (every write fails with ENOSPC) for the whole run.

    The writer gives a failed chunk up and tries the next one at its next flush, as it
    would on a disk that filled: here the next one is full too."""
    ws = host(tmp_path, server)
    radt = Radt(ws.start(["-e", unique("disk-full"), "-l", "counter+top", "train.py"]))
    client = server.client()
    spool = None

    def fill_the_disk() -> None:
        nonlocal spool
        spool = _spool_of_new_run(ws, radt)
        time.sleep(0.05)  # past the writer's count of existing chunks, before its first flush
        assert not list(spool.iterdir()), "radT spooled before the disk could fill"
        for number in range(1, 1000):  # about one a second is tried, and given up
            (spool / f"chunk-{number:06d}.arrows").symlink_to("/dev/full")

    returncode = ride_out(
        ws,
        radt,
        fault=fill_the_disk,
        warning="cannot write the spool",
        after=lambda: wait_streamed(client, radt.run_id, more_than=4),
    )
    run_id = radt.run_id
    assert returncode == 0, radt.stderr()
    assert "training done" in radt.out
    warnings = radt.said("cannot write the spool")
    assert len(warnings) == 1, radt.stderr()
    assert "No space left on device" in warnings[0] and str(spool) in warnings[0]
    assert "training goes on" in warnings[0]
    # Every sample was held in memory and said so; none reached the spool.
    held = re.search(r"([\d,]+) samples? could not be written to the spool", radt.stderr())
    assert held and int(held[1].replace(",", "")) == recorded(radt) > 0, radt.stderr()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["radt.exit_code"] == "0"
    # The live stream has the run: one mean point per second of a counter that only grows.
    history = sorted(client.get_metric_history(run_id, "system/" + COUNTER), key=lambda p: p.step)
    steps = [point.step for point in history]
    assert len(steps) == len(set(steps)) >= 5 and steps[-1] - steps[0] >= 4, steps
    means = [point.value for point in history]
    assert means == sorted(means) and means[-1] > means[0], means
    assert any(key.startswith("system/top/") for key in run.data.metrics)


def test_disk_full_then_freed_mid_chunk_loses_nothing(server, tmp_path):
    """The spool's file reaches the size limit in the middle of a chunk (a write cut
    short, as on a full disk), then the limit is lifted: nothing may be lost."""
    ws = host(tmp_path, server)
    limit = 16 * 1024 + 3  # not a multiple of 8: Arrow messages are 8-byte aligned,
    # so the limit always falls inside a message and the write is always cut short

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    argv = ws.argv(["-e", unique("disk-freed"), "-l", "counter", "--interval", "0.01", "train.py"])
    process = subprocess.Popen(
        argv,
        cwd=ws.root,
        env=ws.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=small_files,
    )
    radt = Radt(process)
    client = server.client()

    def lift_the_limit() -> None:
        infinite = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
        resource.prlimit(process.pid, resource.RLIMIT_FSIZE, infinite)

    def more_arrives() -> None:
        wait_streamed(client, radt.run_id, more_than=counter_points(client, radt.run_id))

    returncode = ride_out(
        ws,
        radt,
        fault=None,  # the file size limit is in place from the start
        warning="cannot write the spool",
        recovery=lift_the_limit,
        all_clear="spool writable again",
        after=more_arrives,
    )
    run_id = radt.run_id
    assert returncode == 0, radt.stderr()
    assert not radt.said("damaged spool chunk"), radt.stderr()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED", radt.stderr()
    table = samples_artifact(client, run_id, tmp_path)
    assert table.num_rows == recorded(radt)
    assert_counter_complete(table, at_least=100)
    assert_stream_matches(client, run, table)


# --------------------------------------------------------------------------- security


def _secrets() -> dict[str, str]:
    token = uuid.uuid4().hex[:12]
    return {
        "MLFLOW_TRACKING_PASSWORD": f"hunter2-mlflow-{token}",
        "PGPASSWORD": f"pg-secret-{token}",
        "AWS_SECRET_ACCESS_KEY": f"aws/secret+{token}",
        "HF_TOKEN": f"hf_{token}",
    }


def _everything_recorded(client, experiments: list[str], dest: Path) -> list[tuple[str, str]]:
    """(where, text) of every param, tag and artifact file of the experiments' runs."""
    found = []
    for experiment in experiments:
        for run in runs_of(client, experiment):
            run_id = run.info.run_id
            for kind, values in (("param", run.data.params), ("tag", run.data.tags)):
                found += [(f"{run_id} {kind} {k}", f"{k}={v}") for k, v in values.items()]
            local = Path(client.download_artifacts(run_id, "", str(dest / run_id)))
            files = [p for p in local.rglob("*") if p.is_file()]
            assert any(p.name == "environment.json" for p in files), files
            for path in files:
                text = path.read_bytes().decode("utf-8", errors="replace")
                found.append((f"{run_id} artifact {path.relative_to(local)}", text))
    return found


def _leaks(places: list[tuple[str, str]], secrets: dict[str, str]) -> list[str]:
    return [
        f"{name} in {where}"
        for where, text in places
        for name, secret in secrets.items()
        if secret in text
    ]


def test_credentials_never_reach_params_tags_artifacts_or_output(server, postgres, tmp_path):
    """Credentials the team's docs prescribe (MLflow's own variables, PGPASSWORD, cloud
    keys, a secret in a plan's Env cell), and a direct PostgreSQL URI with its password:
    none of them may reach MLflow or radT's output."""
    ws = host(tmp_path, server)
    secrets = _secrets()
    plan_secret = f"wandb-{uuid.uuid4().hex[:12]}"
    ws.env.update(secrets, MLFLOW_TRACKING_USERNAME="alice")
    ws.script("mlflow_train.py", MLFLOW_TRAIN)
    single, planned, direct = unique("secrets-run"), unique("secrets-plan"), unique("secrets-db")
    plan = ws.root / "plan.csv"
    plan.write_text(
        HEADER
        + plan_rows(
            planned,
            "w",
            1,
            mode="none",
            listeners="counter+top+nvml",
            env=f"SLEEP=1 WANDB_API_KEY={plan_secret}",
        )
    )
    outputs = []
    done = ws.run(["-e", single, "-l", "counter+top+nvml", "mlflow_train.py"], timeout=180)
    outputs.append(("single run", done))
    outputs.append(("plan", ws.run(["--interval", "0.1", str(plan)], timeout=180)))
    # A host that talks to the database directly: the password is in the URI.
    db_env = {**ws.env, "MLFLOW_TRACKING_URI": postgres.uri_with_password}
    db_run = ws.run(["-e", direct, "-l", "counter", "mlflow_train.py"], timeout=180, env=db_env)
    outputs.append(("direct database", db_run))
    for name, result in outputs:
        assert result.returncode == 0, f"{name}:\n{result.stderr}"
    assert "trained with mlflow" in done.stdout
    secrets = {**secrets, "WANDB_API_KEY": plan_secret, "database password": postgres.password}
    places = _everything_recorded(server.client(), [single, planned, direct], tmp_path / "a")
    places += [(f"radT stdout ({n})", r.stdout) for n, r in outputs]
    places += [(f"radT stderr ({n})", r.stderr) for n, r in outputs]
    assert _leaks(places, secrets) == []
    # The environment was captured, with the secrets masked rather than dropped.
    environments = [text for where, text in places if where.endswith("environment.json")]
    assert len(environments) == 4  # the single run, the plan's two runs, the direct run
    for text in environments:
        assert '"PGPASSWORD": "***"' in text and '"AWS_SECRET_ACCESS_KEY": "***"' in text
    runs = runs_of(server.client(), single)
    assert runs[0].data.params["lr"] == "0.1"  # the script's own MLflow calls went through


def test_a_password_in_the_tracking_uri_stays_secret(server, tmp_path):
    ws = host(tmp_path, server)
    secret = f"uri-secret-{uuid.uuid4().hex[:12]}"
    uri = server.uri.replace("http://", f"http://alice:{secret}@")
    ws.script("mlflow_train.py", MLFLOW_TRAIN)
    experiment = unique("secret-uri")
    done = ws.run(["--tracking-uri", uri, "-e", experiment, "-l", "counter", "mlflow_train.py"])
    assert done.returncode == 0, done.stderr
    places = _everything_recorded(server.client(), [experiment], tmp_path / "a")
    places += [("radT stdout", done.stdout), ("radT stderr", done.stderr)]
    assert _leaks(places, {"the URI's password": secret}) == []

"""A new SQLite store opened by many radT at once (issue 30, item 7): the first makes MLflow's
tables under the lock beside the store, the others wait and then open it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import default_signals, kill_quietly, wait_for

from radt.errors import RadtError, TrackingUnreachable
from radt.tracking import LOCK_SUFFIX, connect, schema_is_current, store_lock

# Each process: its imports (PRELUDE), then it says it is ready and waits for the go file,
# then runs its BODY.
BARRIER = """
here = pathlib.Path(sys.argv[1])
(here / f"ready-{sys.argv[2]}").touch()
while not (here / "go").exists():
    time.sleep(0.01)
"""


def start_together(
    tmp_path: Path, count: int, body: str, prelude: str = "", env=None
) -> list[subprocess.Popen]:
    """``count`` Python processes that each run ``body`` at the same moment: all wait on the
    file ``go``, made once every one has said it is ready (after ``prelude``, its imports)."""
    code = "\n".join(
        ["import pathlib, sys, time", prelude, textwrap.dedent(BARRIER), textwrap.dedent(body)]
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(tmp_path), str(k)],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_signals,
        )
        for k in range(count)
    ]
    try:
        wait_for(lambda: all((tmp_path / f"ready-{k}").exists() for k in range(count)), 300)
        (tmp_path / "go").touch()
    except BaseException:
        for process in processes:
            kill_quietly(process.pid)
        raise
    return processes


def outcomes(processes: list[subprocess.Popen], timeout: float = 800) -> list[tuple]:
    """Each process's exit code, stdout and stderr, once all have ended."""
    try:
        return [(p.wait(timeout=timeout), *p.communicate()) for p in processes]
    finally:
        for process in processes:
            kill_quietly(process.pid)


def test_the_store_lock_lets_one_process_in_at_a_time(tmp_path):
    """Four processes enter the lock of a store that does not exist yet at the same moment;
    the log they write inside it shows each one in and out before the next comes in."""
    database = tmp_path / "data" / "mlflow.db"
    body = f"""
    import os
    from radt.tracking import store_lock
    log = here / "log"
    with store_lock("sqlite:///{database}"):
        with open(log, "a") as f:
            f.write(f"in {{os.getpid()}}\\n")
        time.sleep(0.2)  # a long stay inside, so that anyone else let in would show
        with open(log, "a") as f:
            f.write(f"out {{os.getpid()}}\\n")
    """
    results = outcomes(start_together(tmp_path, 4, body))
    assert [code for code, _, _ in results] == [0] * 4, results
    lines = (tmp_path / "log").read_text().split()
    words, pids = lines[0::2], lines[1::2]
    assert words == ["in", "out"] * 4
    assert pids[0::2] == pids[1::2]  # who went in came out next
    assert len(set(pids)) == 4
    assert (tmp_path / "data" / f"mlflow.db{LOCK_SUFFIX}").exists()  # its folder was made


@pytest.mark.slow
@pytest.mark.timeout(600)  # four MLflow imports at once on a loaded machine
def test_four_processes_connecting_at_once_make_one_store(tmp_path):
    database = tmp_path / "new.db"
    body = f"""
    client = connect("sqlite:///{database}")
    print(client.get_experiment_by_name("Default").experiment_id)
    """
    prelude = "import mlflow.tracking\nfrom radt.tracking import connect"
    results = outcomes(start_together(tmp_path, 4, body, prelude))
    assert [(code, out.strip()) for code, out, _ in results] == [(0, "0")] * 4, results
    assert schema_is_current(database)
    assert not (tmp_path / f"new.db{LOCK_SUFFIX}").exists()


def test_the_lock_file_goes_once_the_store_is_made(tmp_path, template_db):
    database = tmp_path / "mlflow.db"
    with store_lock(f"sqlite:///{database}"):
        assert (tmp_path / f"mlflow.db{LOCK_SUFFIX}").exists()
        shutil.copy(template_db, database)  # the store MLflow makes
    assert not (tmp_path / f"mlflow.db{LOCK_SUFFIX}").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]


def test_a_store_at_the_newest_schema_is_opened_without_the_lock(store, tmp_path):
    _, uri = store
    database = tmp_path / "mlflow.db"
    assert schema_is_current(database)
    with store_lock(uri):
        pass
    connect(uri)
    assert not (tmp_path / f"mlflow.db{LOCK_SUFFIX}").exists()


def test_stores_that_are_not_current(tmp_path):
    assert not schema_is_current(tmp_path / "missing.db")
    (tmp_path / "empty.db").touch()
    assert not schema_is_current(tmp_path / "empty.db")
    (tmp_path / "text.db").write_text("not a database")
    assert not schema_is_current(tmp_path / "text.db")


def test_a_file_that_is_no_store_cannot_be_opened_not_reached(tmp_path):
    (tmp_path / "text.db").write_text("not a database, but more than a header of text " * 20)
    with pytest.raises(RadtError) as caught:
        connect(f"sqlite:///{tmp_path / 'text.db'}")
    assert not isinstance(caught.value, TrackingUnreachable)
    assert str(caught.value) == (
        f"cannot open the tracking store {tmp_path / 'text.db'} (file is not a database); "
        "check the file and its folder, or point MLFLOW_TRACKING_URI at another store"
    )


def test_a_store_whose_folder_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    database = tmp_path / "file" / "mlflow.db"  # under a file: no folder can be made there
    with pytest.raises(RadtError) as caught:
        connect(f"sqlite:///{database}")
    message = str(caught.value)
    assert not isinstance(caught.value, TrackingUnreachable)
    assert message.startswith(f"cannot make the tracking store {database} (")
    assert message.endswith("point MLFLOW_TRACKING_URI at another store")
    assert "\n" not in message


@pytest.mark.slow
@pytest.mark.timeout(900)  # eight radT at once on a loaded machine
def test_eight_radt_started_at_once_on_a_new_store_all_record(workspace, tmp_path):
    """Eight `python -m radt -l none -- python -c …` released at the same moment (each has
    imported MLflow and waits on a file) on a SQLite file that does not exist yet."""
    database = tmp_path / "new" / "mlflow.db"
    env = {**workspace.env, "MLFLOW_TRACKING_URI": f"sqlite:///{database}"}
    body = """
    sys.argv = ["radt", "-l", "none", "--", sys.executable, "-c", f"print('task', {sys.argv[2]})"]
    runpy.run_module("radt", run_name="__main__", alter_sys=True)
    """
    prelude = "import runpy\nimport mlflow.tracking\nimport radt.cli"  # so they open together
    results = outcomes(start_together(tmp_path, 8, body, prelude, env=env))
    assert [code for code, _, _ in results] == [0] * 8, [err for _, _, err in results]
    assert all("radt: error" not in err for _, _, err in results)
    assert sorted(out.split("task ")[1].split()[0] for _, out, _ in results) == list("01234567")
    from mlflow.tracking import MlflowClient

    runs = MlflowClient(env["MLFLOW_TRACKING_URI"]).search_runs(["0"])
    assert [run.info.status for run in runs] == ["FINISHED"] * 8
    assert not (database.parent / f"mlflow.db{LOCK_SUFFIX}").exists()  # no lock left behind

"""What a newcomer runs first: examples/train.py's MLflow calls, and radT's opening line."""

from __future__ import annotations

from conftest import REPO


def test_train_logs_to_mlflow_once_per_epoch_not_per_step(workspace):
    """Two epochs of 20 steps each: ``loss`` and ``examples_per_s`` have one point per epoch
    (steps 0 and 1), so the steps' time holds no MLflow call."""
    done = workspace.run(
        [
            "-l",
            "none",
            str(REPO / "examples" / "train.py"),
            "--epochs",
            "2",
            "--examples",
            "1280",
            "--batch-size",
            "64",
            "--threads",
            "1",
        ],
        timeout=280,
    )
    assert done.returncode == 0, done.stderr
    run = workspace.only_run()
    client = workspace.client()
    for key in ("loss", "examples_per_s"):
        history = client.get_metric_history(run.info.run_id, key)
        assert sorted(point.step for point in history) == [0, 1], key
    assert run.data.metrics["examples"] == 2560


def test_the_opening_line_names_the_experiment(workspace):
    workspace.script("quick.py", "print('hi')\n")
    done = workspace.run(["-e", "radt-demo", "-l", "none", "quick.py"])
    assert done.returncode == 0, done.stderr
    exp_id = workspace.client().get_experiment_by_name("radt-demo").experiment_id
    opening = [line for line in done.stderr.splitlines() if " in experiment " in line]
    assert len(opening) == 1
    assert opening[0].endswith(f" in experiment radt-demo (id {exp_id})")

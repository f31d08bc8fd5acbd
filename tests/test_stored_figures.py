"""A run's window figures are computed when it completes and read back at every look;
the runs grid and ``radt runs`` show a run's Slurm job and node when runs have them.

Runs recorded through radT's recorder and closing steps (test_windows' ``Study``) carry
their figures in the tag ``radt.figures``; the summary then reads no samples, and its
table equals the one computed from the samples once the tags are gone.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
from radt.frontend.pages.runs import COLUMNS as GRID_COLUMNS
from radt.frontend.pages.runs import grid_columns, grid_rows
from test_windows import (
    COMMAND,
    Study,
    gpu,
    lone_job,
    pair_job,
    recorded_store,
    row_of,
    script,
)

import radt.analysis.summary as summary_module
from radt.analysis.stored import VERSION
from radt.analysis.summary import summary
from radt.cli.runs import run_runs
from radt.tags import RADT_FIGURES


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, template_db):
    """A lone run, a collocated pair and a workload of one run, closed by radT."""
    with recorded_store(tmp_path_factory, template_db, "stored") as (client, uri):
        s = Study(client, uri)
        ids = {"alone": lone_job(s, "alone", 250.0, 7777.7)}
        ids["pair"], (ids["a"], ids["b"]) = pair_job(s)
        ids["single"], (ids["only"],) = s.workload(
            "single",
            gpu(0.0, 12.6, 150.0, 0.0),
            12.6,
            [(COMMAND, script(2.0, 12.0, 50.0, epochs=(4.0, 8.0, 12.0)), (0.0, 12.5))],
        )
        yield client, s, ids


def spy_on_samples(monkeypatch) -> list[str]:
    """The ids of the runs whose samples the summary reads (artifact or metric history)."""
    read: list[str] = []
    real = summary_module.prepare

    def prepare(client, selected, *args, **kwargs):
        read.extend(run.info.run_id for run in selected)
        return real(client, selected, *args, **kwargs)

    monkeypatch.setattr(summary_module, "prepare", prepare)
    return read


def test_every_run_of_a_family_carries_its_figures(recorded):
    client, _, ids = recorded
    for name, run_id in ids.items():
        state = json.loads(client.get_run(run_id).data.tags[RADT_FIGURES])
        assert state["version"] == VERSION, name
    pair = json.loads(client.get_run(ids["pair"]).data.tags[RADT_FIGURES])
    assert pair["level"] == "provider"
    assert pair["family"] == sorted([ids["pair"], ids["a"], ids["b"]])
    # the overlap 8 → 15 s holds 700 of A's examples and 350 of B's
    assert pair["kid_examples"] == {ids["a"]: pytest.approx(700.0), ids["b"]: pytest.approx(350.0)}
    assert json.loads(client.get_run(ids["alone"]).data.tags[RADT_FIGURES])["family"] == [
        ids["alone"]
    ]


def test_looks_read_the_stored_figures_not_the_samples(recorded, monkeypatch):
    client, s, ids = recorded
    read = spy_on_samples(monkeypatch)
    frame = summary("study", tracking_uri=s.uri)
    assert read == []
    assert row_of(frame, ids["pair"])["examples_per_s"] == pytest.approx(150.0)
    assert row_of(frame, ids["pair"])["energy_per_example_nj"] == pytest.approx(2e9)
    assert row_of(frame, ids["alone"])["energy_j"] == pytest.approx(1600.0)
    # A against the lone run's 4 ms, at look time
    assert row_of(frame, ids["a"])["slowdown"] == pytest.approx(10.0 / 4.0)
    assert row_of(frame, ids["pair"])["time_per_example_norm"] == pytest.approx(
        (1e9 * 7.0 / 1050) / 4e6
    )
    # chosen runs read nothing either: their workload's figures are stored with them
    read.clear()
    summary(runs=[ids["a"]], tracking_uri=s.uri)
    assert read == []


def test_stored_and_recomputed_figures_agree(recorded, monkeypatch):
    client, s, ids = recorded
    stored = summary("study", tracking_uri=s.uri)
    tags = {run_id: client.get_run(run_id).data.tags[RADT_FIGURES] for run_id in ids.values()}
    try:
        for run_id in ids.values():
            client.delete_tag(run_id, RADT_FIGURES)
        read = spy_on_samples(monkeypatch)
        recomputed = summary("study", tracking_uri=s.uri)
        assert sorted(read) == sorted(ids.values())
    finally:
        for run_id, value in tags.items():
            client.set_tag(run_id, RADT_FIGURES, value)
    pd.testing.assert_frame_equal(stored, recomputed)


def test_a_family_that_changed_since_is_computed_from_its_samples(recorded, monkeypatch):
    client, s, ids = recorded
    # a workload gains a run after it completed: its stored family no longer holds
    late = client.create_run(
        s.exp, tags={"mlflow.parentRunId": ids["single"], "radt.letter": "B"}, run_name="late"
    )
    try:
        read = spy_on_samples(monkeypatch)
        summary("study", tracking_uri=s.uri)
        assert sorted(read) == sorted([ids["single"], ids["only"], late.info.run_id])
    finally:
        client.delete_run(late.info.run_id)


def test_the_runs_grid_and_radt_runs_show_the_slurm_job_and_node_only_when_runs_have_them(
    recorded, capsys
):
    client, s, ids = recorded

    def shown() -> tuple[dict, list[dict]]:
        rows = grid_rows(summary("study", tracking_uri=s.uri))
        hidden = {c["field"]: c.get("hide", False) for c in grid_columns(rows)}
        return hidden, rows

    hidden, _ = shown()
    assert hidden["slurm_job_id"] and hidden["slurm_node"]
    assert [c["field"] for c in grid_columns([])] == [c["field"] for c in GRID_COLUMNS]
    assert run_runs(["-e", "study", "--tracking-uri", s.uri]) == 0
    assert "slurm job" not in capsys.readouterr().out
    slurm = {"radt.slurm.job_id": "4242", "radt.slurm.node": "gpu-node-07"}
    for run_id in (ids["pair"], ids["a"], ids["b"]):
        for key, value in slurm.items():
            client.set_tag(run_id, key, value)
    try:
        hidden, rows = shown()
        assert not hidden["slurm_job_id"] and not hidden["slurm_node"]
        by_id = {row["run_id"]: row for row in rows}
        assert by_id[ids["a"]]["slurm_job_id"] == "4242"
        assert by_id[ids["a"]]["slurm_node"] == "gpu-node-07"
        assert by_id[ids["alone"]]["slurm_job_id"] is None
        assert run_runs(["-e", "study", "--tracking-uri", s.uri]) == 0
        out = capsys.readouterr().out.splitlines()
        assert out[0].split()[-2:] == ["slurm", "job"]
        assert next(line for line in out if line.startswith("pair ")).endswith("4242")
        assert next(line for line in out if line.startswith("alone ")).endswith("-")
    finally:
        for run_id in (ids["pair"], ids["a"], ids["b"]):
            for key in slurm:
                client.delete_tag(run_id, key)

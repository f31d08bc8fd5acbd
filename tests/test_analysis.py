"""radt.load, radt.summary and the export CLI on real SQLite MLflow stores.

Synthetic runs are built directly with MlflowClient, their samples written as
``radt/samples.parquet`` through radt.record.compact, exactly as radT leaves them,
so every expected figure can be computed by hand.
"""

from __future__ import annotations

import math
import sys

import mlflow
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from radt.analysis.figures import integrate_power
from radt.analysis.load import TIDY_COLUMNS, load, load_wide
from radt.analysis.loadsamples import describe_key
from radt.analysis.summary import baseline_spread_flagged, baseline_spread_pct, summary
from radt.analysis.windows import summarize_samples
from radt.cli.export import run_export
from radt.cli.runs import run_runs
from radt.errors import AnalysisError, UsageError
from radt.record.compact import write_samples
from radt.record.spool import SCHEMA

T0 = 1_700_000_000.0
"""Start of the synthetic runs (epoch seconds)."""
COMMAND = "examples/train.py --epochs 1"


def samples_frame(points) -> pd.DataFrame:
    """``[(seconds from T0, key, value)]`` as a tidy frame with UTC timestamps."""
    seconds, keys, values = zip(*points, strict=True) if points else ((), (), ())
    return pd.DataFrame(
        {
            "timestamp": pd.to_datetime([T0 + s for s in seconds], unit="s", utc=True),
            "key": list(keys),
            "value": np.asarray(values, float),
        }
    )


def steady(key: str, watts: float, begin: float, end: float, every: float = 0.1, offset=0.0):
    """Samples of ``key`` every ``every`` s from ``begin`` to ``end`` (both included).

    With ``offset`` the value is a counter: offset + watts × (t − begin).
    """
    count = round((end - begin) / every)
    times = [begin + i * every for i in range(count + 1)]
    if offset:
        return [(t, key, offset + watts * (t - begin)) for t in times]
    return [(t, key, watts) for t in times]


def make_run(
    client,
    experiment_id,
    tmp_path,
    points,
    *,
    name="run",
    start=0.0,
    end=10.0,
    examples=None,
    tags=None,
    params=None,
    parent=None,
    status="FINISHED",
    artifact=True,
):
    """A run as radT leaves it; ``points`` are (seconds from T0, key, value)."""
    tags = dict(tags or {})
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(
        experiment_id, start_time=round((T0 + start) * 1000), tags=tags, run_name=name
    )
    run_id = run.info.run_id
    if params:
        client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()])
    if artifact:
        table = pa.table(
            {
                "timestamp": pa.array([round((T0 + p[0]) * 1e6) for p in points], pa.int64()),
                "key": pa.array([p[1] for p in points], pa.string()),
                "value": pa.array([p[2] for p in points], pa.float64()),
            }
        ).cast(SCHEMA)
        folder = tmp_path / "artifacts" / run_id
        folder.mkdir(parents=True)
        write_samples(table, folder / "samples.parquet")
        client.log_artifact(run_id, str(folder / "samples.parquet"), "radt")
    elif points:
        metrics = [
            Metric(f"system/{key}", value, round((T0 + t) * 1000), i)
            for i, (t, key, value) in enumerate(points)
        ]
        for first in range(0, len(metrics), 1000):
            client.log_batch(run_id, metrics=metrics[first : first + 1000])
    if examples is not None:
        client.log_metric(run_id, "examples", examples / 2, round((T0 + start) * 1000) + 1, 1)
        client.log_metric(run_id, "examples", examples, round((T0 + end) * 1000), 2)
    if status != "RUNNING":
        client.set_terminated(run_id, status, end_time=round((T0 + end) * 1000))
    return run_id


def experiment(client, name="study"):
    return client.create_experiment(name)


def row_of(frame: pd.DataFrame, run_id: str) -> pd.Series:
    rows = frame[frame["run_id"] == run_id]
    assert len(rows) == 1, frame[["run_id", "level"]]
    return rows.iloc[0]


# --------------------------------------------------------------------------- energy, exactly


def test_constant_100_w_for_10_s_and_1000_examples(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0)
    run_id = make_run(
        client,
        exp,
        tmp_path,
        points,
        examples=1000,
        tags={"radt.collocation": "none", "radt.command": COMMAND},
    )
    row = row_of(summary("study", tracking_uri=uri), run_id)
    assert row["level"] == "run"
    assert row["energy_method"] == "integrated_power"
    assert row["energy_j"] == pytest.approx(1000.0, rel=1e-12)
    assert row["energy_per_example_nj"] == pytest.approx(1e9, rel=1e-12)
    assert row["duration_s"] == pytest.approx(10.0)
    assert row["examples"] == 1000
    assert row["examples_per_s"] == pytest.approx(100.0)
    assert row["time_per_example_ns"] == pytest.approx(1e7)
    assert row["power_mean_w"] == pytest.approx(100.0)
    assert row["power_max_w"] == pytest.approx(100.0)
    assert row["slowdown"] == pytest.approx(1.0)  # its own baseline
    assert row["baseline_run_id"] == run_id


def test_energy_counter_with_an_arbitrary_offset_is_exact(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/energy_j", 100.0, 0.0, 10.0, offset=12345.6)
    # power that disagrees: the counter wins
    points += steady("nvml/gpu0/power_w", 80.0, 0.0, 10.0)
    run_id = make_run(client, exp, tmp_path, points, examples=1000)
    row = row_of(summary(exp, tracking_uri=uri), run_id)
    assert row["energy_method"] == "counter"
    assert abs(row["energy_j"] - 1000.0) < 1e-9
    assert row["energy_per_example_nj"] == pytest.approx(1e9, rel=1e-12)
    assert row["power_mean_w"] == pytest.approx(80.0)


def test_nvml_energy_that_the_listener_integrated_is_reported_as_such(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/energy_j", 100.0, 0.0, 10.0, offset=0.5)
    run_id = make_run(
        client,
        exp,
        tmp_path,
        points,
        tags={"radt.nvml.energy_method.gpu0": "integrated_power"},
    )
    row = row_of(summary(exp, tracking_uri=uri), run_id)
    assert row["energy_method"] == "integrated_power"
    assert row["energy_j"] == pytest.approx(1000.0)


def test_a_gap_in_sampling_is_not_integrated():
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0, every=1.0)
    points += steady("nvml/gpu0/power_w", 100.0, 40.0, 50.0, every=1.0)  # 30 s without samples
    figures = summarize_samples(samples_frame(points))
    assert figures["energy_j"] == pytest.approx(2000.0)
    # a counter covers the same gap exactly
    counter = steady("nvml/gpu0/energy_j", 100.0, 0.0, 10.0, every=1.0, offset=7.0)
    counter += [(t, k, v + 4000.0) for t, k, v in steady("x", 100.0, 40.0, 50.0, 1.0, 7.0)]
    counter = [(t, "nvml/gpu0/energy_j", v) for t, _, v in counter]
    assert summarize_samples(samples_frame(counter))["energy_j"] == pytest.approx(5000.0)


def test_na_stretches_are_missing_samples_bridged_when_short():
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0)  # every 0.1 s
    # N/A for 0.3 s (4.1 to 4.3): missing samples; the 0.4 s hole is under 5 × 0.1 s: bridged
    short = [p for p in points if not 4.05 < p[0] < 4.35]
    assert summarize_samples(samples_frame(short))["energy_j"] == pytest.approx(1000.0)
    # a NaN value (how plain MLflow may hold an N/A) is a missing sample too
    nan = [(t, k, math.nan if 4.05 < t < 4.35 else v) for t, k, v in points]
    figures = summarize_samples(samples_frame(nan))
    assert figures["energy_j"] == pytest.approx(1000.0)
    assert figures["power_mean_w"] == pytest.approx(100.0)
    # N/A from 3 s to 8 s: a gap, not integrated (3 s + 2 s remain)
    long = [p for p in points if not 3.05 < p[0] < 7.95]
    assert summarize_samples(samples_frame(long))["energy_j"] == pytest.approx(500.0)


def test_integrate_power_and_two_gpus():
    assert math.isnan(integrate_power([0.0], [100.0]))
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0)
    points += steady("nvml/gpu1/power_w", 50.0, 0.0, 10.0)
    points += steady("nvml/gpu0/util_pct", 80.0, 0.0, 10.0)
    points += steady("nvml/gpu1/util_pct", 40.0, 0.0, 10.0)
    points += steady("dcgm/gpu0/smact_ratio", 0.5, 0.0, 10.0)
    points += steady("nvml/gpu0/mem_used_mib", 1000.0, 0.0, 10.0)
    points += steady("nvml/gpu1/mem_used_mib", 3000.0, 0.0, 10.0)
    points += steady("nvml/gpu0/mig1/mem_used_mib", 9999.0, 0.0, 10.0)  # not a GPU figure
    points += steady("top/proc/rss_mib", 512.0, 0.0, 10.0)
    figures = summarize_samples(samples_frame(points), examples=1000, duration_s=10.0)
    assert figures["energy_j"] == pytest.approx(1500.0)
    assert figures["power_mean_w"] == pytest.approx(150.0)
    assert figures["power_max_w"] == pytest.approx(150.0)  # both GPUs at once
    assert figures["util_mean_pct"] == pytest.approx(60.0)
    assert figures["smact_mean_ratio"] == pytest.approx(0.5)
    assert figures["gpu_mem_peak_mib"] == pytest.approx(4000.0)  # both GPUs' memory
    assert figures["host_mem_peak_mib"] == pytest.approx(512.0)
    assert figures["energy_per_example_nj"] == pytest.approx(1.5e9)
    assert figures["time_per_example_ns"] == pytest.approx(1e7)
    empty = summarize_samples(samples_frame([]))
    assert all(math.isnan(v) for v in empty.values())


# --------------------------------------------------------------------------- providers and clients


def build_study(client, tmp_path):
    """An older and a newer baseline workload (one run alone each) and a two-client workload."""
    exp = experiment(client)
    other = f"{COMMAND} --seed 1"
    ids = {}

    def workload(name, start, end, mode, clients, watts):
        tags = {
            "radt.workload": name,
            "radt.collocation": mode,
            "radt.mig_profile": "-",
            "radt.power_limit_w": "-",
            "radt.workload_runs": str(len(clients)),
        }
        parent = make_run(
            client,
            exp,
            tmp_path,
            steady("nvml/gpu0/power_w", watts, start, end),
            name=name,
            start=start,
            end=end,
            tags=tags,
        )
        kids = []
        for letter, (command, begin, finish, examples, status) in zip("ABC", clients, strict=False):
            kids.append(
                make_run(
                    client,
                    exp,
                    tmp_path,
                    steady("top/proc/rss_mib", 100.0 if letter == "A" else 300.0, begin, finish),
                    name=f"{name}-{letter}",
                    start=begin,
                    end=finish,
                    examples=examples,
                    tags={**tags, "radt.letter": letter, "radt.command": command},
                    params={"epochs": "1", "radt.command": command},
                    parent=parent,
                    status=status,
                )
            )
        return parent, kids

    # the older baseline: 12 s for 1000 examples
    ids["old"], [ids["old_a"]] = workload(
        "alone-old", 0.0, 13.0, "none", [(COMMAND, 0.5, 12.5, 1000, "FINISHED")], 150.0
    )
    # the baseline: 9 s for 1000 examples (the most recent FINISHED one)
    ids["alone"], [ids["alone_a"]] = workload(
        "alone", 20.0, 30.0, "none", [(COMMAND, 20.5, 29.5, 1000, "FINISHED")], 150.0
    )
    # a failed run alone, newer still: never a baseline
    ids["failed"], [ids["failed_a"]] = workload(
        "alone-failed", 35.0, 37.0, "none", [(COMMAND, 35.5, 36.5, 1000, "FAILED")], 150.0
    )
    ids["pair"], [ids["a"], ids["b"]] = workload(
        "pair",
        40.0,
        60.0,
        "naive",
        [(COMMAND, 40.5, 58.5, 1000, "FINISHED"), (other, 41.0, 59.0, 3000, "FINISHED")],
        200.0,
    )
    return exp, ids


@pytest.mark.slow
def test_provider_and_client_rows_agree_with_hand_computed_figures(store, tmp_path):
    client, uri = store
    exp, ids = build_study(client, tmp_path)
    frame = summary("study", tracking_uri=uri)
    assert len(frame) == 4 + 5  # four workloads, five clients
    assert list(frame["level"]) == ["provider", "client"] * 3 + ["provider", "client", "client"]

    pair = row_of(frame, ids["pair"])
    assert pair["level"] == "provider"
    assert pair["workload"] == "pair" and pair["collocation"] == "naive"
    assert pair["duration_s"] == pytest.approx(20.0)
    assert pair["examples"] == 4000
    assert pair["time_per_example_ns"] == pytest.approx(1e9 * 20.0 / 4000)
    assert pair["examples_per_s"] == pytest.approx(4000 / 20.0)
    assert pair["energy_j"] == pytest.approx(200.0 * 20.0)
    assert pair["energy_per_example_nj"] == pytest.approx(1e9 * 4000.0 / 4000)
    assert pair["host_mem_peak_mib"] == pytest.approx(100.0 + 300.0)
    assert math.isnan(pair["slowdown"])

    a, b = row_of(frame, ids["a"]), row_of(frame, ids["b"])
    assert a["level"] == "client" and a["parent_run_id"] == ids["pair"] and a["letter"] == "A"
    assert a["time_per_example_ns"] == pytest.approx(1e9 * 18.0 / 1000)
    assert b["time_per_example_ns"] == pytest.approx(1e9 * 18.0 / 3000)
    # collocated: the GPU's energy is not attributed to either client
    assert math.isnan(a["energy_j"]) and a["energy_method"] == "none"
    assert math.isnan(a["energy_per_example_nj"])
    assert a["host_mem_peak_mib"] == pytest.approx(100.0)
    # runs with only the MLflow metric `examples` (recorded before windows): the whole run
    assert (frame["basis"] == "examples_lifetime").all() and (frame["warmup"] == "lifetime").all()
    assert a["window_s"] == pytest.approx(18.0) and a["examples"] == 1000
    # slowdown against the mean of the Job's FINISHED none runs (the failed one is no
    # baseline): 18 ms / mean(12 ms, 9 ms)
    assert a["slowdown"] == pytest.approx(18.0 / 10.5)
    assert a["baseline_run_id"] == f"{ids['old_a']} {ids['alone_a']}"
    # the repeats spread: sample std of (12, 9) ms = 2.121 ms over 10.5 ms = 20.2 %
    assert a["baseline_cv_pct"] == pytest.approx(20.203, abs=1e-3)
    # --seed 1 is the same job: 6 ms / 10.5 ms
    assert b["job"] == a["job"] == COMMAND
    assert b["slowdown"] == pytest.approx(6.0 / 10.5)
    assert b["baseline_run_id"] == a["baseline_run_id"]
    # normalised at the default power limit: the same baseline here
    assert a["time_per_example_norm"] == pytest.approx(18.0 / 10.5)
    assert a["examples_per_s_norm"] == pytest.approx(10.5 / 18.0)
    # the provider: 20 s for 4000 examples against the 4000 × 10.5 ms the baseline would take
    assert pair["time_per_example_norm"] == pytest.approx(20.0 / (4000 * 10.5e-3))
    # energy per example of the baseline: 1500 J / 1000 (alone) and 1950 J / 1000 (old)
    assert pair["energy_per_example_norm"] == pytest.approx(4000.0 / (4000 * 1.725))
    assert pair["configuration"] == "naive x2" and a["configuration"] == "naive x2"
    assert pair["job"] == COMMAND  # one job, whatever the seed

    # the sole client of a workload gets the workload's energy
    alone = row_of(frame, ids["alone_a"])
    assert alone["energy_j"] == pytest.approx(150.0 * 10.0)
    assert alone["energy_method"] == "integrated_power"
    assert alone["energy_per_example_nj"] == pytest.approx(1e9 * 1500.0 / 1000)
    assert alone["slowdown"] == pytest.approx(9.0 / 10.5)
    assert alone["configuration"] == "none"
    assert row_of(frame, ids["old_a"])["slowdown"] == pytest.approx(12.0 / 10.5)
    assert row_of(frame, ids["failed_a"])["status"] == "FAILED"


def test_baseline_spread_is_the_coefficient_of_variation_of_its_repeats():
    # docs/analysis.md: 2,630 and 1,633 examples/s are 380.2 and 612.4 µs per example;
    # mean 496.3, sample std 164.1: 33.1 %
    issue = baseline_spread_pct([1e9 / 2630, 1e9 / 1633])
    assert issue == pytest.approx(33.07, abs=0.01) and baseline_spread_flagged(issue)
    steady = baseline_spread_pct([100e6, 105e6])
    assert steady == pytest.approx(3.449, abs=1e-3) and not baseline_spread_flagged(steady)
    assert math.isnan(baseline_spread_pct([4e6]))  # one repeat has no spread
    assert math.isnan(baseline_spread_pct([4e6, math.nan]))
    assert not baseline_spread_flagged(None) and not baseline_spread_flagged(math.nan)


@pytest.mark.slow
def test_summary_of_chosen_runs_adds_their_workload(store, tmp_path):
    client, uri = store
    _, ids = build_study(client, tmp_path)
    frame = summary(runs=[ids["a"]], tracking_uri=uri)
    assert list(frame["run_id"]) == [ids["pair"], ids["a"]]
    provider = row_of(frame, ids["pair"])
    assert provider["examples"] == 4000  # the other client counts, though not chosen
    assert provider["host_mem_peak_mib"] == pytest.approx(400.0)
    assert row_of(frame, ids["a"])["slowdown"] == pytest.approx(18.0 / 10.5)  # baselines found


# --------------------------------------------------------------------------- loading


@pytest.mark.slow
def test_load_reads_the_artifact_with_run_columns(store, tmp_path):
    client, uri = store
    exp, ids = build_study(client, tmp_path)
    frame = load("study", tracking_uri=uri)
    assert list(frame.columns) == list(TIDY_COLUMNS)
    assert str(frame["timestamp"].dtype) == "datetime64[us, UTC]"
    assert frame.attrs["radt.source"][ids["pair"]] == "artifact"
    pair = frame[frame["run_id"] == ids["pair"]]
    assert set(pair["key"].astype(str)) == {"nvml/gpu0/power_w"}
    assert set(pair["listener"].astype(str)) == {"nvml"}
    assert set(pair["entity"].astype(str)) == {"gpu0"}
    assert len(pair) == 201
    assert (pair["workload"] == "pair").all() and (pair["collocation"] == "naive").all()
    assert pair["mig_profile"].isna().all()  # "-" is missing
    a = frame[frame["run_id"] == ids["a"]]
    # the script's metric is loaded too, from MLflow, with listener "mlflow"
    assert list(a.loc[a["key"] == "examples", "value"]) == [500.0, 1000.0]
    assert set(a.loc[a["key"] == "examples", "listener"].astype(str)) == {"mlflow"}
    assert (a["letter"] == "A").all() and (a["parent_run_id"] == ids["pair"]).all()
    assert a["timestamp"].is_monotonic_increasing


def test_keys_globs_and_time_bounds(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0)
    points += steady("nvml/gpu1/power_w", 100.0, 0.0, 10.0)
    points += steady("nvml/gpu0/util_pct", 50.0, 0.0, 10.0)
    points += steady("top/proc/rss_mib", 50.0, 0.0, 10.0)
    run_id = make_run(client, exp, tmp_path, points, examples=10)
    power = load(exp, keys=["nvml/*/power_w"], tracking_uri=uri)
    assert set(power["key"].astype(str)) == {"nvml/gpu0/power_w", "nvml/gpu1/power_w"}
    assert len(power) == 2 * 101
    exact = load(runs=[run_id], keys=["system/top/proc/rss_mib", "examples"], tracking_uri=uri)
    assert set(exact["key"].astype(str)) == {"top/proc/rss_mib", "examples"}
    none = load(exp, keys=["smi/*"], tracking_uri=uri)
    assert none.empty and list(none.columns) == list(TIDY_COLUMNS)
    # numbers are seconds from the run's start; strings absolute times (UTC)
    window = load(exp, keys=["nvml/gpu0/power_w"], start=2, end=4.0, tracking_uri=uri)
    assert len(window) == 21
    assert window["timestamp"].min() == pd.Timestamp(T0 + 2, unit="s", tz="UTC")
    iso = pd.Timestamp(T0 + 9, unit="s", tz="UTC").tz_localize(None).isoformat()
    late = load(exp, keys=["nvml/gpu0/power_w"], start=iso, tracking_uri=uri)
    assert len(late) == 11


def test_load_wide(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 2.95, every=0.05)
    points += [(t, "nvml/gpu0/util_pct", 10.0 * t) for t in (0.25, 0.75, 1.5)]
    run_id = make_run(client, exp, tmp_path, points, end=3.0)
    wide = load_wide(exp, keys=["nvml/*"], freq="1s", tracking_uri=uri)
    assert wide.index.names == ["run_id", "elapsed_s"]
    assert list(wide.columns) == ["timestamp", "nvml/gpu0/power_w", "nvml/gpu0/util_pct"]
    assert list(wide.loc[run_id].index) == [0.0, 1.0, 2.0]
    assert list(wide.loc[run_id, "nvml/gpu0/power_w"]) == [100.0, 100.0, 100.0]
    util = wide.loc[run_id, "nvml/gpu0/util_pct"]
    assert util.iloc[0] == pytest.approx(5.0) and util.iloc[1] == 15.0 and math.isnan(util.iloc[2])
    assert wide.loc[(run_id, 1.0), "timestamp"] == pd.Timestamp(T0 + 1, unit="s", tz="UTC")


@pytest.mark.slow
def test_fallback_reads_plain_mlflow_metrics(store, tmp_path):
    client, uri = store
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("plain")
        with mlflow.start_run() as run:
            for i in range(11):
                stamp = round((T0 + i) * 1000)
                mlflow.log_metric("system/nvml/gpu0/power_w", 100.0, step=i, timestamp=stamp)
                mlflow.log_metric("system/gpu_0_power_usage_watts", 99.0, step=i, timestamp=stamp)
                mlflow.log_metric("loss", 1.0 / (i + 1), step=i, timestamp=stamp)
            mlflow.log_metric("examples", 1000, step=1, timestamp=round((T0 + 10) * 1000))
    finally:
        mlflow.set_tracking_uri(None)
    frame = load("plain", tracking_uri=uri)
    assert list(frame.columns) == list(TIDY_COLUMNS)
    assert frame.attrs["radt.source"] == {run.info.run_id: "metrics"}
    by_key = {k: g for k, g in frame.groupby(frame["key"].astype(str))}
    assert set(by_key) == {"nvml/gpu0/power_w", "gpu_0_power_usage_watts", "loss", "examples"}
    power = by_key["nvml/gpu0/power_w"]
    assert len(power) == 11 and set(power["listener"].astype(str)) == {"nvml"}
    assert set(power["entity"].astype(str)) == {"gpu0"}
    assert set(by_key["loss"]["listener"].astype(str)) == {"mlflow"}
    assert set(by_key["gpu_0_power_usage_watts"]["listener"].astype(str)) == {"system"}
    assert str(frame["timestamp"].dtype) == "datetime64[us, UTC]"
    assert power["timestamp"].iloc[0] == pd.Timestamp(T0, unit="s", tz="UTC")
    (row,) = summary("plain", tracking_uri=uri).itertuples()
    assert row.energy_j == pytest.approx(1000.0) and row.examples == 1000


def test_describe_key():
    assert describe_key("system/nvml/gpu0/mig1/mem_used_mib") == (
        "nvml/gpu0/mig1/mem_used_mib",
        "nvml",
        "gpu0/mig1",
    )
    assert describe_key("system/SMI - Power Draw") == ("SMI - Power Draw", "smi", "")
    assert describe_key("loss") == ("loss", "mlflow", "")


def test_a_running_run_reads_its_metric_history(store, tmp_path):
    client, uri = store
    exp = experiment(client)
    points = steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0, every=1.0)
    run_id = make_run(client, exp, tmp_path, points, status="RUNNING", artifact=False)
    frame = load(exp, tracking_uri=uri, cache_dir=tmp_path / "cache")
    assert frame.attrs["radt.source"] == {run_id: "metrics"}
    assert len(frame) == 11 and (frame["status"] == "RUNNING").all()
    assert not (tmp_path / "cache" / run_id / "samples.parquet").exists()
    (row,) = summary(exp, tracking_uri=uri).itertuples()
    assert math.isnan(row.duration_s) and row.energy_j == pytest.approx(1000.0)


def test_the_artifact_is_downloaded_once(store, tmp_path, monkeypatch):
    client, uri = store
    exp = experiment(client)
    run_id = make_run(client, exp, tmp_path, steady("nvml/gpu0/power_w", 100.0, 0.0, 10.0))
    calls = []
    original = MlflowClient.download_artifacts

    def counting(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MlflowClient, "download_artifacts", counting)
    first = load(exp, tracking_uri=uri)
    cached = tmp_path / "home" / "cache" / run_id / "samples.parquet"
    assert cached.is_file() and len(calls) == 1
    mtime = cached.stat().st_mtime_ns
    second = load(exp, tracking_uri=uri)
    summary(exp, tracking_uri=uri)
    assert len(calls) == 1 and cached.stat().st_mtime_ns == mtime
    pd.testing.assert_frame_equal(first, second)
    assert not [p for p in cached.parent.iterdir() if p.name != "samples.parquet"]


# --------------------------------------------------------------------------- errors and CLI


def test_unknown_experiment_and_run(store, tmp_path):
    client, uri = store
    with pytest.raises(AnalysisError, match=r"no experiment named 'nope'.*radt runs"):
        load("nope", tracking_uri=uri)
    with pytest.raises(AnalysisError, match="no experiment named 'nope'"):
        run_export(["-e", "nope", "--tracking-uri", uri, "-o", str(tmp_path / "x.csv")])
    with pytest.raises(AnalysisError, match="no experiment named 'nope'"):
        run_runs(["-e", "nope", "--tracking-uri", uri])
    with pytest.raises(AnalysisError, match="no run with id 'f00'"):
        summary(runs=["f00"], tracking_uri=uri)
    with pytest.raises(AnalysisError, match="name an experiment"):
        load(tracking_uri=uri)


def test_no_store_is_an_error_not_an_empty_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(AnalysisError, match="no tracking store"):
        load("study")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_export_csv_and_parquet(store, tmp_path, capsys):
    client, uri = store
    _, ids = build_study(client, tmp_path)
    at = ["--tracking-uri", uri]
    target = tmp_path / "s.csv"
    assert run_export(["--summary", "-e", "study", "--format", "csv", "-o", str(target), *at]) == 0
    rows = pd.read_csv(target)
    assert len(rows) == 9  # one per run and one per workload
    assert sorted(rows["level"].value_counts().items()) == [("client", 5), ("provider", 4)]
    assert "energy_per_example_nj" in rows and "time_per_example_ns" in rows
    pair = rows[rows["run_id"] == ids["pair"]].iloc[0]
    assert pair["time_per_example_ns"] == pytest.approx(5e6)

    target = tmp_path / "samples.parquet"
    run_export(["-e", "study", "--keys", "nvml/*", "-o", str(target), "--tracking-uri", uri])
    samples = pd.read_parquet(target)
    assert list(samples.columns) == list(TIDY_COLUMNS)
    assert len(samples) == 131 + 101 + 21 + 201  # the four workload parents sample power
    assert set(samples["key"].astype(str)) == {"nvml/gpu0/power_w"}

    target = tmp_path / "a.csv"
    run_export(["-e", "study", "--runs", ids["a"], "--format", "csv", "-o", str(target), *at])
    samples = pd.read_csv(target)
    assert set(samples["run_id"]) == {ids["a"], ids["pair"]}  # the client and its workload
    assert "wrote" in capsys.readouterr().err

    target = tmp_path / "wide.parquet"
    run_export(["-e", "study", "--wide", "1s", "--keys", "nvml/*", "-o", str(target), *at])
    wide = pd.read_parquet(target)
    assert list(wide.columns[:3]) == ["run_id", "elapsed_s", "timestamp"]

    with pytest.raises(UsageError, match="--format"):
        run_export(["-e", "study", "-o", str(tmp_path / "x.txt"), "--tracking-uri", uri])


def test_runs_table(store, tmp_path, capsys):
    client, uri = store
    _, ids = build_study(client, tmp_path)
    assert run_runs(["-e", "study", "--tracking-uri", uri]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0].split() == [
        "name",
        "status",
        "configuration",
        "workload",
        "duration",
        "window",
        "examples/s",
        "ms/example",
        "energy/example",
        "est.",  # the collocated clients' estimates (equal split: no SM samples)
        "energy/example",
        "slowdown",
        "basis",
        "run",
        "id",
    ]
    assert len(out) == 1 + 9
    pair = next(line for line in out if line.startswith("pair "))
    assert "naive x2" in pair and "0:20" in pair and "200.0" in pair and "1 J" in pair
    assert "20.0s" in pair and "5.000" in pair and "examples_lifetime" in pair
    assert any(line.startswith("  A: pair-A") and "1.71 *" in line for line in out)
    at = out[0].index("slowdown")
    assert pair[at : at + len("slowdown")].strip() == ""  # a workload has none: blank, not "-"
    assert "nan" not in captured.out
    assert all("(equal)" in line for line in out if line.startswith(("  A: pair", "  B: pair")))
    # the baseline's repeats (12 and 9 ms per example) spread 20.2 %: flagged, with the spread
    assert "baseline repeats spread over 10 %" in captured.err
    assert "pair-A: slowdown 1.71 against 2 baseline repeats that spread 20.2 %" in captured.err
    assert run_runs(["--tracking-uri", uri]) == 0
    assert "study" in capsys.readouterr().out


def test_runs_table_shows_the_swept_params_as_columns_and_leaves_constant_ones_out(
    store, tmp_path, capsys
):
    """A study's workloads of runs whose batch size and learning rate differ (its epochs and data
    folder do not): one column per swept param, between the workload and the figures; a
    workload's row shows what its runs share, blank where they differ."""
    client, uri = store
    exp = experiment(client, "swept")
    ids = {}

    def workload(name, start, mode, clients):
        tags = {"radt.workload": name, "radt.collocation": mode, "radt.power_limit_w": "-"}
        points = steady("nvml/gpu0/power_w", 100.0, start, start + 10.0)
        parent = make_run(
            client, exp, tmp_path, points, name=name, start=start, end=start + 10.0, tags=tags
        )
        for letter, (batch, lr) in zip("AB", clients, strict=False):
            command = f"job.py --epochs 3 --data 'my data' --batch-size {batch} --lr {lr}"
            ids[f"{name}-{letter}"] = make_run(
                client,
                exp,
                tmp_path,
                steady("top/proc/rss_mib", 100.0, start + 0.5, start + 9.5),
                name=f"{name}-{letter}",
                start=start + 0.5,
                end=start + 9.5,
                examples=1000,
                tags={**tags, "radt.letter": letter, "radt.command": command},
                params={
                    "epochs": "3",
                    "data": "my data",
                    "batch-size": str(batch),
                    "lr": str(lr),
                    "radt.command": command,
                },
                parent=parent,
            )

    workload("001-none", 0.0, "none", [(64, 0.005)])
    workload("002-naive", 20.0, "naive", [(64, 0.01), (64, 0.01)])
    workload("003-naive", 40.0, "naive", [(128, 0.005), (128, 0.01)])
    assert run_runs(["-e", "swept", "--tracking-uri", uri]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:7] == [
        "name",
        "status",
        "configuration",
        "workload",
        "batch-size",
        "lr",
        "duration",
    ]
    at, to = out[0].index("batch-size"), out[0].index("duration")

    def params(name):
        line = next(line for line in out if line.strip().startswith(name))
        return line[at:to].split()

    assert params("001-none ") == ["64", "0.005"]
    assert params("A: 001-none-A") == ["64", "0.005"]
    assert params("002-naive ") == ["64", "0.01"]
    assert params("A: 002-naive-A") == params("B: 002-naive-B") == ["64", "0.01"]
    assert params("003-naive ") == ["128"]  # its runs' learning rates differ: blank
    assert params("A: 003-naive-A") == ["128", "0.005"]
    assert params("B: 003-naive-B") == ["128", "0.01"]
    assert "epochs" not in out[0] and "data" not in out[0] and "my data" not in "\n".join(out)


# --------------------------------------------------------------------------- end to end

SCRIPT = """
import time, mlflow
done = 0
for step in range(8):
    time.sleep(0.25)
    done += 64
    mlflow.log_metric("examples", done, step=step)
"""


@pytest.mark.slow
def test_end_to_end_with_a_real_radt_run(workspace, tmp_path):
    workspace.script("tiny.py", SCRIPT)
    done = workspace.run(["-e", "e2e", "-l", "top", "--interval", "0.1", "tiny.py", "--lr", "1"])
    assert done.returncode == 0, done.stderr
    uri = workspace.uri
    cache = tmp_path / "cache"
    frame = load("e2e", tracking_uri=uri, cache_dir=cache)
    run_id = workspace.only_run("e2e").info.run_id
    assert frame.attrs["radt.source"] == {run_id: "artifact"}
    keys = set(frame["key"].astype(str))
    assert {"top/proc/rss_mib", "top/host/mem_used_mib", "examples"} <= keys
    assert (frame["collocation"] == "none").all()
    rss = frame[frame["key"] == "top/proc/rss_mib"]
    assert len(rss) >= 10  # full rate, not the 1/s MLflow stream
    rows = summary("e2e", tracking_uri=uri, cache_dir=cache)
    (row,) = rows.itertuples()
    assert row.level == "run" and row.status == "FINISHED"
    assert row.examples == 512
    assert row.duration_s > 2.0
    # the script logs `examples` itself (no counter samples): over its whole command
    assert row.basis == "examples_lifetime" and 2.0 < row.window_s <= row.duration_s
    assert row.time_per_example_ns == pytest.approx(1e9 * row.window_s / 512)
    assert row.host_mem_peak_mib > 1.0
    assert row.energy_method == "none" and math.isnan(row.energy_per_example_nj)
    assert row.command.endswith("tiny.py --lr 1") and row.params == "lr=1"
    assert row.slowdown == pytest.approx(1.0)
    target = workspace.root / "s.csv"
    code = run_export(["--summary", "-e", "e2e", "-o", str(target), "--tracking-uri", uri])
    assert code == 0 and len(pd.read_csv(target)) == 1
    assert sys.executable  # the run used this interpreter

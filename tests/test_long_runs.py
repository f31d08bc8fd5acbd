"""Long runs: streaming compaction, the key-sorted artifact and its reader, batches from
listeners, the streamed resend, bounded loads and the UI's window reads.

Spools are written with the real SpoolWriter, artifacts by the real compaction, runs
live in real SQLite MLflow stores; the end-to-end test runs radT as a process with a
plug-in listener that hands over ``SampleBatch`` objects.
"""

from __future__ import annotations

import filecmp
import json
import math
import shutil

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import KeptPoints
from mlflow.tracking import MlflowClient

from radt.analysis.artifact import Artifact
from radt.analysis.load import TIDY_COLUMNS, load, load_wide
from radt.analysis.loadsamples import KeyFilter, read_samples
from radt.errors import AnalysisError
from radt.listener import Sample, SampleBatch
from radt.record import finalize
from radt.record.compact import INDEX_KEY, LAYOUT, LAYOUT_KEY, compact, write_samples
from radt.record.decimate import Decimator
from radt.record.recorder import Recorder
from radt.record.runfolder import RunFolder, RunState
from radt.record.spool import CHUNK_GLOB, SCHEMA, SpoolWriter, iter_spool, read_spool

T0_US = 1_700_000_000_000_000
KEYS = [
    f"{lst}/gpu{g}/{q}"
    for lst in ("nvml", "dcgm")
    for g in range(3)
    for q in ("power_w", "util_pct")
]


def spool_table(rows: int, seed: int, keys=KEYS) -> pa.Table:
    """Samples in arrival order: time mostly rising with jitter, some late ones, and
    repeated (key, timestamp) pairs with different values, so ties must keep their order."""
    rng = np.random.default_rng(seed)
    names = np.array(keys)[rng.integers(0, len(keys), rows)]
    micros = T0_US + np.arange(rows) * 10_000 + rng.integers(-3_000, 3_000, rows)
    late = rng.random(rows) < 0.02
    micros[late] -= 5_000_000
    repeat = rng.random(rows) < 0.05
    micros[1:][repeat[1:]] = micros[:-1][repeat[1:]]
    names[1:][repeat[1:]] = names[:-1][repeat[1:]]
    values = rng.normal(100.0, 30.0, rows)
    return pa.table(
        [pa.array(micros).cast(SCHEMA.field("timestamp").type), pa.array(names), values],
        schema=SCHEMA,
    )


def write_spool(folder, table: pa.Table, batch_rows=997, chunk_batches=7) -> None:
    writer = SpoolWriter(folder, chunk_s=1e9)
    for i, first in enumerate(range(0, table.num_rows, batch_rows)):
        if i and i % chunk_batches == 0:
            writer._rotate()
        writer.append(table.slice(first, batch_rows))
    writer.close()


def reference(table: pa.Table) -> pa.Table:
    """What the artifact must hold: a stable sort by key, then time."""
    return table.sort_by([("key", "ascending"), ("timestamp", "ascending")])


def assert_same_rows(artifact: pa.Table, expected: pa.Table) -> None:
    assert artifact.column("key").to_pylist() == expected.column("key").to_pylist()
    assert artifact.column("timestamp").to_pylist() == expected.column("timestamp").to_pylist()
    assert artifact.column("value").to_pylist() == expected.column("value").to_pylist()


# --------------------------------------------------------------------------- compaction


def test_compaction_beyond_the_memory_budget_gives_the_bytes_of_the_in_memory_path(tmp_path):
    table = spool_table(40_000, seed=1)
    write_spool(tmp_path / "spool", table)
    merged = tmp_path / "merged.parquet"
    whole = tmp_path / "whole.parquet"
    rows, problems = compact(tmp_path / "spool", merged, memory_rows=1_500, row_group_rows=4096)
    assert (rows, problems) == (40_000, [])
    assert compact(tmp_path / "spool", whole, memory_rows=10**9, row_group_rows=4096)[0] == rows
    assert filecmp.cmp(merged, whole, shallow=False)
    assert_same_rows(pq.read_table(merged), reference(table))
    # the scratch runs are gone, and nothing but the two artifacts is left beside them
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "merged.parquet",
        "spool",
        "whole.parquet",
    ]
    # the same bytes as writing the table in memory
    write_samples(table, tmp_path / "direct.parquet", row_group_rows=4096)
    assert filecmp.cmp(merged, tmp_path / "direct.parquet", shallow=False)


def test_the_artifact_layout_key_index_row_groups_and_text_columns(tmp_path):
    table = spool_table(20_000, seed=2)
    write_samples(table, tmp_path / "s.parquet", row_group_rows=1000)
    parquet = pq.ParquetFile(tmp_path / "s.parquet")
    meta = parquet.metadata
    assert meta.num_row_groups == 20
    extra = meta.metadata
    assert extra[LAYOUT_KEY.encode()] == LAYOUT.encode()
    index = json.loads(extra[INDEX_KEY.encode()])
    full = pq.read_table(tmp_path / "s.parquet")
    assert [entry[0] for entry in index] == sorted(KEYS)
    for key, first, rows, first_us, last_us, crossings in index:
        part = full.slice(first, rows)
        assert set(part.column("key").to_pylist()) == {key}
        micros = pc.cast(part.column("timestamp"), pa.int64()).to_pylist()
        assert (micros[0], micros[-1]) == (first_us, last_us)
        # the key's time at each row-group start within it
        group_starts = range((first // 1000 + 1) * 1000, first + rows, 1000)
        assert crossings == [micros[start - first] for start in group_starts]
    assert sum(entry[2] for entry in index) == full.num_rows
    # text columns: strings to Arrow (statistics usable by pyarrow.dataset filters),
    # dictionary pages in the file, listener and entity parsed from the key
    assert full.schema.field("key").type == pa.string()
    assert "RLE_DICTIONARY" in meta.row_group(0).column(1).encodings
    assert meta.row_group(3).column(1).statistics.has_min_max
    row = full.slice(0, 1).to_pylist()[0]
    assert (row["listener"], row["entity"]) == tuple(row["key"].split("/")[:2])


def test_a_damaged_chunk_in_the_middle_keeps_every_whole_batch(tmp_path):
    table = spool_table(12_000, seed=3)
    write_spool(tmp_path / "spool", table, batch_rows=500, chunk_batches=6)
    chunks = sorted((tmp_path / "spool").glob(CHUNK_GLOB))
    assert len(chunks) == 4
    middle = chunks[1]
    data = middle.read_bytes()
    middle.write_bytes(data[: len(data) * 2 // 3])
    kept, problems = read_spool(tmp_path / "spool")
    assert len(problems) == 1 and middle.name in problems[0]
    assert "skipped the rest" in problems[0]
    # whole batches only: chunk 2 lost its last batches, the chunks after it are all there
    assert 12_000 - 3_000 < kept.num_rows < 12_000 and kept.num_rows % 500 == 0
    rows, streamed = compact(tmp_path / "spool", tmp_path / "s.parquet", memory_rows=1_000)
    assert (rows, streamed) == (kept.num_rows, problems)
    assert_same_rows(pq.read_table(tmp_path / "s.parquet"), reference(kept))


def test_an_empty_spool_gives_an_empty_artifact_that_loads(tmp_path):
    SpoolWriter(tmp_path / "spool").close()
    assert compact(tmp_path / "spool", tmp_path / "s.parquet") == (0, [])
    assert Artifact(tmp_path / "s.parquet").keys() == []
    assert read_samples(tmp_path / "s.parquet", KeyFilter(None)).num_rows == 0


# --------------------------------------------------------------------------- reading


@pytest.fixture
def artifact(tmp_path):
    """Samples as an artifact in small row groups; returns (path, all samples)."""
    table = spool_table(30_000, seed=4)
    path = tmp_path / "samples.parquet"
    write_samples(table, path, row_group_rows=1024)
    return path, table


def full_read_filtered(table: pa.Table, keys: KeyFilter, lo_us, hi_us) -> pa.Table:
    """What a full read and a filter give, in the order radt.load promises (time, key)."""
    frame = table.to_pandas()
    frame["micros"] = pc.cast(table.column("timestamp"), pa.int64()).to_numpy()
    keep = frame["key"].map(keys).astype(bool)
    if lo_us is not None:
        keep &= frame["micros"] >= lo_us
    if hi_us is not None:
        keep &= frame["micros"] <= hi_us
    frame = frame[keep]
    return frame.sort_values(["micros", "key"], kind="stable")


@pytest.mark.parametrize(
    "keys, window",
    [
        (None, None),
        (["nvml/gpu1/power_w"], None),
        (["nvml/*/util_pct", "dcgm/gpu2/power_w"], None),
        (["nvml/gpu0/*"], (1_000_000, 1_000_000 + 2_345_678)),
        (None, (250_000 + 17, 250_000 + 17 + 10_000)),
        (["dcgm/*"], (None, 40_000)),
        (["nvml/gpu2/power_w"], (299_000_000, None)),
        (["smi/*"], None),
        (["nvml/gpu0/power_w"], (10**12, None)),
    ],
)
def test_key_and_time_filters_return_exactly_the_rows_of_a_full_read(artifact, keys, window):
    path, table = artifact
    wanted = KeyFilter(keys)
    lo_us = hi_us = None
    if window is not None:
        lo_us = None if window[0] is None else T0_US + window[0]
        hi_us = None if window[1] is None else T0_US + window[1]
    lo = None if lo_us is None else pd.Timestamp(lo_us * 1000, tz="UTC")
    hi = None if hi_us is None else pd.Timestamp(hi_us * 1000, tz="UTC")
    # bounds that fall exactly on samples are inclusive
    expected = full_read_filtered(table, wanted, lo_us, hi_us)
    got = read_samples(path, wanted, lo, hi)
    got_sorted = got.to_pandas()
    got_sorted["micros"] = pc.cast(got.column("timestamp"), pa.int64()).to_numpy()
    got_sorted = got_sorted.sort_values(["micros", "key"], kind="stable")
    assert got_sorted["key"].astype(str).tolist() == expected["key"].tolist()
    assert got_sorted["micros"].tolist() == expected["micros"].tolist()
    assert got_sorted["value"].tolist() == expected["value"].tolist()
    assert got.schema.field("key").type == pa.dictionary(pa.int32(), pa.string())


def row_groups_read(monkeypatch) -> list[int]:
    """The row groups every ParquetFile reads from now on; reading a whole file fails the test."""
    groups_read: list[int] = []
    original = pq.ParquetFile.read_row_groups

    def spy(self, row_groups, *args, **kwargs):
        groups_read.extend(row_groups)
        return original(self, row_groups, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", spy)
    monkeypatch.setattr(pq.ParquetFile, "read", lambda *a, **k: pytest.fail("read the whole file"))
    return groups_read


def test_one_key_reads_only_its_row_groups(tmp_path, monkeypatch):
    table = spool_table(60_000, seed=5)
    path = tmp_path / "s.parquet"
    write_samples(table, path, row_group_rows=2048)
    groups_read = row_groups_read(monkeypatch)
    artifact = Artifact(path)
    (entry,) = [e for e in artifact.index if e.key == "dcgm/gpu1/util_pct"]
    first_group = entry.first_row // 2048
    last_group = (entry.first_row + entry.rows - 1) // 2048
    got = artifact.read(KeyFilter(["dcgm/gpu1/util_pct"]))
    assert got.num_rows == entry.rows
    assert groups_read == list(range(first_group, last_group + 1))
    assert len(groups_read) < artifact.file.metadata.num_row_groups / 5
    # a time window inside the key: only the groups whose statistics overlap it
    groups_read.clear()
    lo = entry.first_us + (entry.last_us - entry.first_us) // 2
    window = artifact.read(KeyFilter(["dcgm/gpu1/util_pct"]), lo_us=lo, hi_us=lo + 100_000)
    assert 0 < window.num_rows < 20 and len(groups_read) <= 2
    assert set(groups_read) <= set(range(first_group, last_group + 1))


def test_load_wide_averages_what_load_gives_into_time_bins(tmp_path, template_db, monkeypatch):
    db = tmp_path / "mlflow.db"
    shutil.copy(template_db, db)
    monkeypatch.setenv("RADT_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    exp = client.create_experiment("bins")
    run = client.create_run(exp, start_time=T0_US // 1000, run_name="one")
    write_samples(spool_table(20_000, seed=6), tmp_path / "samples.parquet")
    client.log_artifact(run.info.run_id, str(tmp_path / "samples.parquet"), "radt")
    client.set_terminated(run.info.run_id, "FINISHED", end_time=T0_US // 1000 + 400_000)
    for keys, start, end in [
        (None, None, None),
        (["nvml/*"], 10.0, 20.5),
        ("dcgm/gpu0/util_pct", None, 3),
    ]:
        frame = load(runs=[run.info.run_id], keys=keys, start=start, end=end, tracking_uri=uri)
        assert len(frame) > 0
        assert list(frame.columns) == list(TIDY_COLUMNS)
        assert frame["timestamp"].is_monotonic_increasing
    wide = load_wide(
        runs=[run.info.run_id], keys=["nvml/*"], freq="10s", tracking_uri=uri
    ).reset_index(level="run_id", drop=True)
    tidy_frame = load(runs=[run.info.run_id], keys=["nvml/*"], tracking_uri=uri)
    offsets = tidy_frame["timestamp"] - pd.Timestamp(T0_US // 1000, unit="ms", tz="UTC")
    tidy_frame["elapsed_s"] = (offsets // pd.Timedelta("10s")) * 10.0
    by_hand = tidy_frame.pivot_table(
        index="elapsed_s", columns="key", values="value", aggfunc="mean", observed=True
    )
    for key in by_hand.columns:
        np.testing.assert_allclose(wide[str(key)].to_numpy(), by_hand[key].to_numpy())


def test_an_artifact_without_a_key_index_is_one_line_saying_to_record_again(tmp_path):
    path = tmp_path / "samples.parquet"
    samples = spool_table(100, seed=1)
    text = pa.array(["nvml"] * 100, pa.string()).dictionary_encode()
    old = samples.append_column("listener", text).append_column("entity", text)
    pq.write_table(old, path)  # time-sorted, as radT 0.3.0.dev wrote it: no key index
    with pytest.raises(AnalysisError, match="no key index") as refused:
        read_samples(path, KeyFilter(None))
    assert "\n" not in str(refused.value) and "record the run again" in str(refused.value)


def test_a_load_larger_than_memory_says_how_to_ask_for_less(tmp_path, template_db, monkeypatch):
    db = tmp_path / "mlflow.db"
    shutil.copy(template_db, db)
    monkeypatch.setenv("RADT_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("big"), start_time=T0_US // 1000)
    write_samples(spool_table(50_000, seed=7), tmp_path / "samples.parquet")
    client.log_artifact(run.info.run_id, str(tmp_path / "samples.parquet"), "radt")
    client.set_terminated(run.info.run_id, "FINISHED")
    monkeypatch.setenv("RADT_LOAD_LIMIT_MIB", "1")  # 50,000 samples need about 3 MiB
    with pytest.raises(AnalysisError) as refused:
        load("big", tracking_uri=uri)
    message = str(refused.value)
    assert "\n" not in message and "50,000 samples" in message
    for advice in ("keys=", "start=", "load_wide", "RADT_LOAD_LIMIT_MIB", "12 keys, e.g. 'dcgm"):
        assert advice in message
    # asking for less works under the same limit
    assert len(load("big", keys=["nvml/gpu0/power_w"], tracking_uri=uri)) > 0
    with pytest.raises(AnalysisError, match="freq="):
        load_wide("big", freq="1us", tracking_uri=uri)
    assert len(load_wide("big", freq="10s", tracking_uri=uri)) > 0


# --------------------------------------------------------------------------- decimation


def reference_points(samples, window_s, origin_s):
    """The decimated stream as the per-sample decimator computed it (the definition)."""
    window_us = max(1, round(window_s * 1e6))
    origin = round(origin_s * 1e6) // window_us
    open_: dict[str, list] = {}
    points = []
    for timestamp, key, value in samples:
        micros = round(timestamp * 1e6)
        bucket = micros // window_us
        window = open_.get(key)
        if window is None or window[0] != bucket:
            if window is not None:
                points.append((key, window))
            window = open_[key] = [bucket, [], 0]
        window[1].append(value)
        window[2] = max(window[2], micros // 1000)
    points += list(open_.items())
    return sorted(
        (f"system/{key}", bucket - origin, last_ms, math.fsum(values) / len(values))
        for key, (bucket, values, last_ms) in points
    )


def test_decimation_is_the_same_however_the_samples_are_cut(tmp_path):
    rng = np.random.default_rng(8)
    table = spool_table(20_000, seed=8)
    samples = [
        Sample(t.timestamp(), k, v)
        for t, k, v in zip(
            table.column("timestamp").to_pylist(),
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    ]
    samples.append(Sample(samples[0].timestamp, "bad|key", 1.0))
    cuts = np.sort(rng.choice(len(samples), 60, replace=False))
    live = Decimator(0.5, T0_US / 1e6)
    points = []
    for piece in np.split(np.arange(len(samples)), cuts):
        chunk = [samples[i] for i in piece]
        points += live.add(chunk if len(chunk) % 2 else SampleBatch.from_arrow(_table(chunk)))
    points += live.flush()
    assert set(live.rejected) == {"bad|key"}
    whole = Decimator(0.5, T0_US / 1e6)
    again = whole.add(table) + whole.flush()
    assert sorted((p.key, p.step, p.timestamp, p.value) for p in points) == sorted(
        (p.key, p.step, p.timestamp, p.value) for p in again
    )
    expected = reference_points(samples[:-1], 0.5, T0_US / 1e6)
    got = sorted((p.key, p.step, p.timestamp, p.value) for p in points)
    assert [g[:3] for g in got] == [e[:3] for e in expected]
    for (*_, value), (*_, mean) in zip(got, expected, strict=True):
        assert value == pytest.approx(mean, rel=1e-12)


def test_run_api_samples_are_points_of_plain_metrics_in_batches_too():
    from radt.record.events import EPOCH_KEY, EXAMPLES_KEY, WINDOW_KEY

    dec = Decimator(1.0, 100.0)
    points = dec.add(
        SampleBatch(
            [100.25, 100.5, 100.5, 101.5, 101.75],
            [EXAMPLES_KEY, "g/gpu0/power_w", EPOCH_KEY, "g/gpu0/power_w", WINDOW_KEY],
            [64.0, 100.0, 1.0, 200.0, 1.0],
        )
    )
    points += dec.add([Sample(102.5, EXAMPLES_KEY, 128.0)]) + dec.flush()
    assert sorted((p.key, p.value, p.timestamp, p.step) for p in points) == [
        ("epoch", 1.0, 100_500, 1),
        ("examples", 64.0, 100_250, 0),
        ("examples", 128.0, 102_500, 2),
        ("system/g/gpu0/power_w", 100.0, 100_500, 0),
        ("system/g/gpu0/power_w", 200.0, 101_500, 1),
    ]
    assert dec.rejected == {}


def _table(samples) -> pa.Table:
    return pa.table(
        [
            pa.array([round(s.timestamp * 1e6) for s in samples]).cast(SCHEMA.field(0).type),
            pa.array([s.key for s in samples]),
            pa.array([s.value for s in samples], pa.float64()),
        ],
        schema=SCHEMA,
    )


def test_resend_streams_the_spool_and_sends_the_live_points(tmp_path, template_db, monkeypatch):
    db = tmp_path / "mlflow.db"
    shutil.copy(template_db, db)
    client = MlflowClient(f"sqlite:///{db}")
    run = client.create_run(client.create_experiment("resend"), start_time=T0_US // 1000)
    table = spool_table(30_000, seed=9)
    write_spool(tmp_path / "run" / "spool", table)
    state = RunState(run.info.run_id, "0", "", 0, T0_US / 1e6, 1.0)
    sent = []
    monkeypatch.setattr(finalize, "RESEND_ROWS", 3_000)
    monkeypatch.setattr(
        finalize, "_log_points", lambda client, run_id, points: sent.extend(points) or len(points)
    )
    count = finalize.resend_metrics(client, RunFolder(tmp_path / "run"), state)
    live = Decimator(1.0, T0_US / 1e6)
    expected = live.add(table) + live.flush()
    assert count == len(sent) == len(expected)
    assert sorted(p.to_proto().SerializeToString() for p in sent) == sorted(
        p.to_proto().SerializeToString() for p in expected
    )


# --------------------------------------------------------------------------- batches


def test_sample_batch_columns_missing_values_and_checks():
    batch = SampleBatch(1.5, ["a/x/v_pct", "a/y/v_pct", "a/z/v_pct"], [1.0, float("nan"), 3])
    assert list(batch) == [Sample(1.5, "a/x/v_pct", 1.0), Sample(1.5, "a/z/v_pct", 3.0)]
    assert len(batch) == 2 and batch.table.schema == SCHEMA
    stamps = SampleBatch(np.array([1.0000004, 2.0000006]), pa.array(["k/e/a", "k/e/b"]), [1, 2])
    assert pc.cast(stamps.table.column("timestamp"), pa.int64()).to_pylist() == [
        1_000_000,
        2_000_001,
    ]
    with pytest.raises(ValueError, match="2 keys but 3 values"):
        SampleBatch(1.0, ["a", "b"], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="timestamps"):
        SampleBatch([1.0], ["a", "b"], [1.0, 2.0])


def test_recorder_keeps_the_order_of_samples_and_batches_it_is_handed(tmp_path):
    writer = KeptPoints()
    recorder = Recorder(SpoolWriter(tmp_path / "spool"), writer, Decimator(1.0, 0.0), print, 60)
    recorder.emit([Sample(1.0, "s/e/a_pct", 1.0), Sample(1.1, "s/e/a_pct", 2.0)])
    recorder.emit(SampleBatch(1.2, ["b/e/x_pct", "b/e/y_pct"], [3.0, 4.0]))
    recorder.emit(iter([Sample(1.3, "s/e/a_pct", 5.0)]))
    recorder.emit(SampleBatch(pa.array([1.4]).to_numpy(), ["b/e/x_pct"], [6.0]))
    recorder.emit([])
    recorder.start()
    assert recorder.close(1.0) == 0
    assert recorder.received == 6
    table, problems = read_spool(tmp_path / "spool")
    assert problems == []
    assert table.column("value").to_pylist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert table.column("key").to_pylist() == [
        "s/e/a_pct", "s/e/a_pct", "b/e/x_pct", "b/e/y_pct", "s/e/a_pct", "b/e/x_pct",
    ]  # fmt: skip
    means = {(p.key, p.step): p.value for p in writer.points}
    assert means == {
        ("system/s/e/a_pct", 1): pytest.approx(8.0 / 3),
        ("system/b/e/x_pct", 1): 4.5,
        ("system/b/e/y_pct", 1): 4.0,
    }


@pytest.mark.slow
def test_a_batch_listener_run_by_radt_records_exactly_what_it_handed_over(workspace, tmp_path):
    log = tmp_path / "handed.jsonl"
    env = {**workspace.env, "RADT_TEST_BATCH_LOG": str(log)}
    workspace.script("nap.py", "import time\ntime.sleep(1.5)\n")
    done = workspace.run(["-e", "batches", "-l", "batch+counter", "nap.py"], env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    run = workspace.only_run("batches")
    handed = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(handed) >= 10
    keys = [f"batch/dev{i % 4}/q{i:02d}_pct" for i in range(40)]  # the listener's keys
    expected = sorted(
        (round(now * 1e6), key, value)
        for now, values in handed
        for key, value in zip(keys, values, strict=True)
        if not math.isnan(value)
    )
    frame = load(
        runs=[run.info.run_id],
        keys=["batch/*", "counter/*"],
        tracking_uri=workspace.uri,
        cache_dir=tmp_path / "cache",
    )
    batch = frame[frame["listener"] == "batch"]
    micros = batch["timestamp"].astype("int64").to_numpy()  # datetime64[us]: microseconds
    got = sorted(zip(micros.tolist(), batch["key"].astype(str), batch["value"], strict=True))
    assert got == expected
    assert set(batch["entity"].astype(str)) == {"dev0", "dev1", "dev2", "dev3"}
    counter = frame.loc[frame["key"] == "counter/seq/n", "value"].tolist()
    assert counter == [float(i) for i in range(len(counter))] and len(counter) >= 10
    # the decimated stream in MLflow holds the batch keys too
    history = workspace.client().get_metric_history(run.info.run_id, "system/batch/dev3/q07_pct")
    assert history and all(point.value % 1 == 0.125 for point in history)


# --------------------------------------------------------------------------- the UI


def test_ui_reads_only_the_zoomed_window_of_a_long_selection(tmp_path, template_db, monkeypatch):
    from radt.frontend.data import Store

    db = tmp_path / "mlflow.db"
    shutil.copy(template_db, db)
    monkeypatch.setenv("RADT_HOME", str(tmp_path / "home"))
    uri = f"sqlite:///{db}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("ui"), start_time=T0_US // 1000)
    table = spool_table(40_000, seed=10)
    write_samples(table, tmp_path / "samples.parquet", row_group_rows=1024)
    client.log_artifact(run.info.run_id, str(tmp_path / "samples.parquet"), "radt")
    client.set_terminated(run.info.run_id, "FINISHED")
    store = Store(uri, full_rows=1_000)
    (info,) = store.runs([run.info.run_id]).values()
    first = store.samples([info], ["nvml/gpu0/power_w"])
    assert first.attrs["radt.window"] is False
    everything = table.filter(pc.equal(table.column("key"), "nvml/gpu0/power_w"))
    assert len(first) == everything.num_rows > 1_000
    zoomed = store.samples([info], ["nvml/gpu0/power_w"], window=(100.0, 120.0))
    assert zoomed.attrs["radt.window"] is True
    seconds = (zoomed["timestamp"] - pd.Timestamp(T0_US // 1000, unit="ms", tz="UTC")).dt
    assert seconds.total_seconds().between(99.0, 121.0).all()
    assert 0 < len(zoomed) < len(first) / 10
    # the same window again comes from memory
    assert store.samples([info], ["nvml/gpu0/power_w"], window=(100.0, 120.0)) is zoomed
    wall = store.samples(
        [info],
        ["nvml/gpu0/power_w"],
        window=tuple(
            str(pd.Timestamp((T0_US // 1000 + s * 1000), unit="ms").tz_localize(None))
            for s in (100, 120)
        ),
        relative=False,
    )
    pd.testing.assert_frame_equal(wall, zoomed)


def test_iter_spool_reads_one_batch_at_a_time(tmp_path):
    write_spool(tmp_path / "spool", spool_table(5_000, seed=11), batch_rows=1000, chunk_batches=2)
    problems: list[str] = []
    sizes = [batch.num_rows for batch in iter_spool(tmp_path / "spool", problems)]
    assert sizes == [1000] * 5 and problems == []


# --------------------------------------------------------------------------- summary


def test_summary_figures_read_a_piece_at_a_time_equal_those_of_the_whole_run(tmp_path, monkeypatch):
    from radt.analysis.closing import key_table
    from radt.analysis.figures import device_series
    from radt.analysis.loadsamples import file_pieces
    from radt.analysis.summary import SUMMARY_KEYS, run_series
    from radt.analysis.windows import timeline

    keys = [*KEYS, "nvml/gpu0/energy_j", "nvml/gpu1/temp_c", "script/run/examples"]
    table = spool_table(30_000, seed=11, keys=keys)
    path = tmp_path / "s.parquet"
    write_samples(table, path, row_group_rows=1024)
    tags = {"radt.command_start_s": str(T0_US / 1e6), "radt.command_end_s": str(T0_US / 1e6 + 300)}
    whole = read_samples(path, KeyFilter(None)).to_pandas()
    expected_series, expected_timeline = device_series(whole), timeline(whole, tags)

    groups_read = row_groups_read(monkeypatch)
    pieces = list(file_pieces(path, KeyFilter(SUMMARY_KEYS), max_rows=700))
    assert len(pieces) > 10
    series, got_timeline = run_series(iter(pieces), tags)
    # only the row groups of the keys the figures use (not the temperature's)
    wanted = [e for e in Artifact(path).index if KeyFilter(SUMMARY_KEYS)(e.key)]
    needed = {
        g
        for e in wanted
        for g in range(e.first_row // 1024, (e.first_row + e.rows - 1) // 1024 + 1)
    }
    assert set(groups_read) == needed
    assert len(needed) < pq.ParquetFile(path).metadata.num_row_groups
    assert "nvml/gpu1/temp_c" not in {"/".join(name) for name in series}
    expected_series.pop(("nvml", "gpu1", "temp_c"))
    assert sorted(series) == sorted(expected_series)
    for name, (seconds, values) in expected_series.items():
        assert np.array_equal(series[name][0], seconds)
        assert np.array_equal(series[name][1], values)
    assert np.array_equal(got_timeline.counter_s, expected_timeline.counter_s)
    assert np.array_equal(got_timeline.counter, expected_timeline.counter)
    assert got_timeline.command_end_s == expected_timeline.command_end_s

    # the per-key table from pieces: counts, minima and maxima exactly, means to rounding
    streamed = key_table(file_pieces(path, KeyFilter(None), max_rows=700)).to_pandas()
    direct = key_table(pq.read_table(path)).to_pandas()
    assert streamed["key"].tolist() == direct["key"].tolist() == sorted(keys)
    for column in ("count", "min", "max"):
        assert streamed[column].tolist() == direct[column].tolist()
    assert np.allclose(streamed["mean"], direct["mean"], rtol=1e-12, atol=0)
    assert key_table(iter([])).num_rows == 0

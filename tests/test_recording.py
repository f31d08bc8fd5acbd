"""Spool, decimation and the registry, without processes."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from radt.errors import UsageError
from radt.launch.registry import Discovered, parse_names, select
from radt.listener import Sample, samples_from
from radt.record.compact import compact
from radt.record.decimate import Decimator
from radt.record.spool import SpoolWriter, read_spool


def stream(n: int, keys=("a/x/v_pct", "b/y/w_w"), start=1000.0, step=0.1):
    return [Sample(start + i * step, key, float(i)) for i in range(n) for key in keys]


def test_decimator_gives_one_mean_point_per_key_and_window():
    dec = Decimator(window_s=1.0, origin_s=1000.0)
    points = dec.add(stream(25)) + dec.flush()
    a = sorted((p for p in points if p.key == "system/a/x/v_pct"), key=lambda p: p.step)
    assert [p.step for p in a] == [0, 1, 2]
    assert [p.value for p in a] == [4.5, 14.5, 22.0]
    assert a[0].timestamp == 1000_900 and a[2].timestamp == 1002_400


def test_decimator_closes_windows_only_when_the_next_begins():
    dec = Decimator(window_s=1.0, origin_s=1000.0)
    assert dec.add(stream(10)) == []
    assert len(dec.add(stream(1, start=1001.0))) == 2


def test_decimated_points_are_the_same_from_the_spool(tmp_path):
    samples = stream(50, start=1000.03, step=0.0999999)
    live = Decimator(1.0, 1000.0)
    points = []
    writer = SpoolWriter(tmp_path / "spool")
    for first in range(0, len(samples), 7):
        batch = samples[first : first + 7]
        writer.append(batch)
        points += live.add(batch)
    writer.close()
    points += live.flush()
    table, problems = read_spool(tmp_path / "spool")
    assert problems == []
    again = Decimator(1.0, 1000.0)
    rows = [
        Sample(ts.timestamp(), key, value)
        for ts, key, value in zip(
            table["timestamp"].to_pylist(),
            table["key"].to_pylist(),
            table["value"].to_pylist(),
            strict=True,
        )
    ]
    replay = again.add(rows) + again.flush()
    assert sorted(map(tuple, (p.to_proto().SerializeToString() for p in points))) == sorted(
        map(tuple, (p.to_proto().SerializeToString() for p in replay))
    )


def test_spool_rotates_chunks_and_compacts_to_tidy_parquet(tmp_path):
    writer = SpoolWriter(tmp_path / "spool", chunk_s=0.0)
    writer.append([Sample(2.0, "nvml/gpu0/mig1/mem_used_mib", 5.0)])
    writer.append([Sample(1.0, "top/proc/cpu_pct", 50.0), Sample(1.5, "short", 1.0)])
    writer.append([Sample(0.5, "top/proc/cpu_pct", 40.0)])
    writer.close()
    assert len(list((tmp_path / "spool").glob("chunk-*.arrows"))) == 3
    rows, problems = compact(tmp_path / "spool", tmp_path / "s.parquet")
    assert (rows, problems) == (4, [])
    frame = pq.read_table(tmp_path / "s.parquet").to_pandas()
    # sorted by key, then time
    assert frame.key.astype(str).tolist() == [
        "nvml/gpu0/mig1/mem_used_mib",
        "short",
        "top/proc/cpu_pct",
        "top/proc/cpu_pct",
    ]
    assert frame.value.tolist() == [5.0, 1.0, 40.0, 50.0]
    assert frame.entity.astype(str).tolist() == ["gpu0/mig1", "", "proc", "proc"]
    assert frame.listener.astype(str).tolist() == ["nvml", "short", "top", "top"]
    assert str(frame.timestamp.dtype) == "datetime64[us, UTC]"


def test_damaged_chunk_keeps_its_whole_batches_and_reports_the_rest(tmp_path):
    writer = SpoolWriter(tmp_path / "spool", chunk_s=1e9)
    for i in range(3):
        writer.append([Sample(float(i), "k/e/v_pct", float(i))])
    writer.close()
    chunk = next((tmp_path / "spool").glob("chunk-*.arrows"))
    data = chunk.read_bytes()
    chunk.write_bytes(data[: len(data) - 60])
    table, problems = read_spool(tmp_path / "spool")
    assert 1 <= table.num_rows < 3
    assert len(problems) == 1 and chunk.name in problems[0] and "skipped the rest" in problems[0]


SHORT_WRITES = """
import resource, sys
from pathlib import Path
from radt.listener import Sample
from radt.record.spool import SpoolWriter

folder, limit = Path(sys.argv[1]), int(sys.argv[2])
writer = SpoolWriter(folder, chunk_s=1e9)
failed = 0
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
for i in range(400):
    if i == 300:  # the disk has room again
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
    batch = [Sample(float(i), "k/e/v_pct", float(i))]
    try:
        writer.append(held + batch if failed else batch)
        held = []
    except OSError:
        held = (held if failed else []) + batch
        failed += 1
    else:
        failed = 0
writer.close()
print(failed)
"""


def test_a_write_cut_short_by_a_full_disk_loses_no_written_batch(tmp_path):
    """A file-size limit that falls inside a message cuts a real write short (as a full
    disk does); once there is room again, every sample is read back, none twice."""
    import subprocess
    import sys

    limit = 4 * 1024 + 3  # Arrow messages are 8-byte aligned: the limit tears one
    done = subprocess.run(
        [sys.executable, "-c", SHORT_WRITES, str(tmp_path / "spool"), str(limit)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "0", done.stderr
    table, problems = read_spool(tmp_path / "spool")
    assert problems == []
    assert sorted(table["value"].to_pylist()) == [float(i) for i in range(400)]


def test_samples_from_leaves_out_missing_values():
    got = samples_from(1.0, "smi/gpu0", {"power_w": 1, "util_pct": None, "temp_c": float("nan")})
    assert got == [Sample(1.0, "smi/gpu0/power_w", 1.0)]


def test_listener_names_split_on_plus_or_comma():
    assert parse_names("top+iostat, nvml+top") == ["top", "iostat", "nvml"]


def test_select_picks_available_by_default_and_refuses_unknown():
    class Dummy:
        name = "x"
        on_by_default = True

    class Profiler(Dummy):
        on_by_default = False

    found = {
        "ok": Discovered("ok", "m:Ok", Dummy(), None),
        "gone": Discovered("gone", "m:Gone", Dummy(), "tool missing"),
        "prof": Discovered("prof", "m:Prof", Profiler(), None),
    }
    assert select(None, found) == [found["ok"].listener]
    assert select("prof", found) == [found["prof"].listener]
    assert select("none", found) == []
    assert select(" None ") == []  # no listener is loaded nor asked (discovery takes ~0.4 s)
    with pytest.raises(UsageError, match="unknown listener nope; known listeners: ok, gone, prof"):
        select("ok+nope", found)
    with pytest.raises(UsageError, match=r"gone \(tool missing\)"):
        select("gone", found)

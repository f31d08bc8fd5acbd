"""Reading one run's samples: ``radt.load`` (samples artifact) vs MLflow's metric history.

    python benchmarks/load.py                    # 1,000,000 points: ~2-4 min to log them
    python benchmarks/load.py --points 100000    # quicker

One run in a fresh SQLite store holds the same points twice, as radT would
record them at full rate: as its ``radt/samples.parquet`` artifact (written by
radt.record.compact.write_samples, as the end of a radT run writes it) and as MLflow
metrics ``system/<key>`` (``log_batch``, which is how they would have to be
stored without the artifact). ``--keys`` keys (default 20: 4 GPUs × 5
quantities) share the points, sampled at 10 Hz.

Measured, in this process, after one call has opened the store:
- ``get_metric_history``: every key one after the other, as a user would
  read the run with ``MlflowClient`` (once, it is slow; ``--repeats`` applies
  to the others);
- ``radt.load`` cold: the artifact downloaded into an empty cache, then read;
- ``radt.load`` warm: the cached artifact read again;
- ``radt.load`` of one key (warm): what the key filter saves;
- ``radt.summary`` (warm): the figures of the run from the same cache.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
from _common import arguments, median, results, scratch, sqlite_store

GPUS = 4
QUANTITIES = ("power_w", "energy_j", "util_pct", "mem_used_mib", "sm_clock_mhz")
T0_MS = 1_700_000_000_000
HZ = 10


def keys_for(count: int) -> list[str]:
    """``count`` realistic keys, ``nvml/gpu{i}/{quantity}`` first."""
    keys = [f"nvml/gpu{g}/{q}" for g in range(GPUS) for q in QUANTITIES]
    keys += [f"nvml/gpu{g}/extra{i}_pct" for i in range(count) for g in range(GPUS)]
    return keys[:count]


def values_for(key: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if key.endswith("energy_j"):
        return 5000.0 + np.cumsum(rng.uniform(10.0, 30.0, n))  # a counter, 100-300 W at 10 Hz
    return np.round(rng.uniform(0.0, 300.0, n), 2)


def build(client, experiment_id: str, folder: Path, points: int, key_count: int) -> str:
    """Create the run with both copies of the points; return its id."""
    from mlflow.entities import Metric

    from radt.record.compact import write_samples
    from radt.record.spool import SCHEMA

    keys = keys_for(key_count)
    per_key = points // len(keys)
    rng = np.random.default_rng(0)
    millis = T0_MS + np.arange(per_key, dtype=np.int64) * (1000 // HZ)
    run = client.create_run(
        experiment_id, start_time=int(millis[0]), run_name="load-benchmark",
        tags={"radt.collocation": "none", "radt.command": "train.py"},
    )  # fmt: skip
    run_id = run.info.run_id
    columns: dict[str, list] = {"timestamp": [], "key": [], "value": []}
    began = time.perf_counter()
    logged = 0
    for key in keys:
        values = values_for(key, per_key, rng)
        columns["timestamp"].append(millis * 1000)
        columns["key"].append(np.full(per_key, key, dtype=object))
        columns["value"].append(values)
        batch = [
            Metric(f"system/{key}", float(v), int(t), i)
            for i, (t, v) in enumerate(zip(millis.tolist(), values.tolist(), strict=True))
        ]
        for first in range(0, len(batch), 10_000):
            client.log_batch(run_id, metrics=batch[first : first + 10_000], synchronous=True)
        logged += len(batch)
        rate = logged / (time.perf_counter() - began)
        print(
            f"  logged {logged:,}/{per_key * len(keys):,} points as MLflow metrics ({rate:,.0f}/s)",
            file=sys.stderr,
            flush=True,
        )
    raw = pa.table(
        {
            "timestamp": pa.array(np.concatenate(columns["timestamp"]), pa.int64()),
            "key": pa.array(np.concatenate(columns["key"]), pa.string()),
            "value": pa.array(np.concatenate(columns["value"]), pa.float64()),
        }
    ).cast(SCHEMA)
    target = folder / "samples.parquet"
    write_samples(raw, target)
    client.log_artifact(run_id, str(target), "radt")
    client.set_terminated(run_id, "FINISHED", end_time=int(millis[-1]) + 100)
    size = target.stat().st_size
    print(
        f"  artifact: {raw.num_rows:,} points, {size / 1e6:.1f} MB "
        f"({size / raw.num_rows:.1f} bytes/point)",
        file=sys.stderr,
    )
    return run_id


def timed(call) -> tuple[float, object]:
    began = time.perf_counter()
    result = call()
    return time.perf_counter() - began, result


def main() -> int:
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workdir", type=Path, help="where the temporary store goes (default: the temp folder)"
    )
    args = parser.parse_args()
    with scratch("load", args.keep, parent=args.workdir) as folder:
        print(measure(args, folder))
    return 0


def measure(args: argparse.Namespace, folder: Path) -> str:
    """Build the run in a store under ``folder``, time the readers; return the results."""
    from mlflow.tracking import MlflowClient

    from radt.analysis.load import load as radt_load
    from radt.analysis.summary import summary

    uri = sqlite_store(folder)
    cache = folder / "cache"
    client = MlflowClient(uri)
    experiment_id = client.create_experiment("load-benchmark")
    print(f"building the run in {folder} …", file=sys.stderr)
    run_id = build(client, experiment_id, folder, args.points, args.keys)
    names = sorted(k for k in client.get_run(run_id).data.metrics if k.startswith("system/"))

    def history() -> int:
        return sum(len(client.get_metric_history(run_id, name)) for name in names)

    def load(keys=None):
        return radt_load(runs=[run_id], keys=keys, tracking_uri=uri, cache_dir=cache)

    rows = []
    seconds, count = timed(history)
    baseline = seconds
    rows.append(("`MlflowClient.get_metric_history`, every key in turn", [seconds], count))

    cold = []
    for _ in range(args.repeats):
        shutil.rmtree(cache, ignore_errors=True)
        seconds, frame = timed(load)
        cold.append(seconds)
    assert frame.attrs["radt.source"] == {run_id: "artifact"}, frame.attrs
    rows.append(("`radt.load` cold (download + read)", cold, len(frame)))
    warm = [timed(load)[0] for _ in range(args.repeats)]
    rows.append(("`radt.load` warm (cached artifact)", warm, len(frame)))
    one = [timed(lambda: load(["nvml/gpu0/power_w"])) for _ in range(args.repeats)]
    rows.append(("`radt.load` one key, warm", [s for s, _ in one], len(one[0][1])))
    figures = [timed(lambda: summary(runs=[run_id], tracking_uri=uri, cache_dir=cache))]
    figures += [timed(lambda: summary(runs=[run_id], tracking_uri=uri, cache_dir=cache))]
    rows.append(("`radt.summary` of the run, warm", [s for s, _ in figures[1:]], 1))
    if count != len(frame):
        print(f"warning: {count:,} points in MLflow, {len(frame):,} loaded", file=sys.stderr)

    table_rows = []
    for label, times, n in rows:
        value = median(times)
        ratio = baseline / value if value > 0 else float("nan")
        table_rows.append([label, f"{value:.3f}", f"{n:,}", f"{ratio:,.0f}×"])
    notes = (
        f"One run with {len(frame):,} points ({len(names)} keys × "
        f"{len(frame) // max(len(names), 1):,} samples at {HZ} Hz), stored both as the "
        "samples artifact and as MLflow metrics in a local SQLite store. Median of "
        f"{args.repeats} (`get_metric_history` once)."
    )
    return results(
        "radt.load vs MLflow metric history (one run, SQLite)",
        notes,
        ["method", "seconds", "rows", "faster than history"],
        table_rows,
    )


if __name__ == "__main__":
    sys.exit(main())

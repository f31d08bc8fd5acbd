"""Long runs: a day on 8 GPUs recorded, finished, loaded and plotted — before and after.

    python benchmarks/long_runs.py --sizes 1M,10M --before /tmp/radt-before
    python benchmarks/long_runs.py --sizes 170M --only after --steps compact,load_one,ui_one,resend
    python benchmarks/long_runs.py --ingest --before /tmp/radt-before

A run of 8 GPUs × 25 keys at 10 Hz makes 2,000 samples a second: 7.2 M an hour,
~170 M in 24 h. For each size the spool of such a run is written directly with
``SpoolWriter`` (one append per second of samples, a chunk per 30 s, as the
recorder does), and then each step runs in a child process of its own, so its
peak RSS is its own (``wait4``), measured against radT's code *before*
(``--before``: a checkout of the commit this work started from, e.g.
``git archive 198cb4b radt listeners frontend | tar -x -C /tmp/radt-before`` plus
the links ``radt/frontend -> ../frontend`` and ``radt/listeners -> ../listeners``)
and *after* (this tree):

- ``append``: the spool written from ``Sample`` lists (the recorder's old and
  still supported path); the sizes above ``--append-max`` are written from
  Arrow batches instead (the new path), timed separately;
- ``compact``: the end of the run: the spool into ``samples.parquet``;
- ``load_one``, ``load_all``: ``radt.load`` of one key and of every key of the
  run, warm (the artifact already in the cache; a run in a SQLite store);
- ``summary``: ``radt.summary`` of the run, warm;
- ``ui_one``: the UI's first draw of one key: ``Store.samples`` and the
  time-series figure (MinMaxLTTB to 2,000 points);
- ``resend``: ``radt sync``'s re-send of the decimated stream from the spool
  (``resend_metrics``) to a client that counts the points and drops them: the
  work in radT's process, not the tracking server's.

``--ingest`` measures sustained live ingest instead: one polled plug-in listener
with 2,496 keys at a given rate through the real sampler, recorder, spool and
decimator, with the decimated stream going to a SQLite store (1 s windows);
before: its samples as ``Sample`` lists (all there was); after: as one
``SampleBatch`` per poll, and as ``Sample`` lists too.

Seconds are the step alone (imports, process start and opening the store
excluded), median of ``--repeats``; RSS is the child's peak (``VmHWM``), imports
included (``baseline``: a child that only imports); in brackets, the cores other
processes used meanwhile (the machine is shared; ``--quiet`` waits for it to be
quiet before each step).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
GPUS = 8
QUANTITIES = (
    "power_w", "energy_j", "util_pct", "smact_ratio", "mem_used_mib",
    "mem_free_mib", "mem_util_pct", "temp_c", "mem_temp_c", "sm_clock_mhz",
    "mem_clock_mhz", "gr_clock_mhz", "video_clock_mhz", "pstate", "power_limit_w",
    "fan_pct", "pcie_tx_mib_s", "pcie_rx_mib_s", "enc_util_pct", "dec_util_pct",
    "throttle_reasons", "ecc_errors", "nvlink_tx_mib_s", "nvlink_rx_mib_s", "tensor_ratio",
)  # fmt: skip
KEYS = [f"nvml/gpu{g}/{q}" for g in range(GPUS) for q in QUANTITIES]
HZ = 10
PER_SECOND = len(KEYS) * HZ  # 2,000 samples a second
T0_S = 1_700_000_000
CHUNK_S = 30
STEPS = ("append", "compact", "load_one", "load_all", "summary", "ui_one", "resend")
ONE_KEY = "nvml/gpu0/power_w"
MACHINE = argparse.Namespace(quiet=False, max_other=0.15, max_wait=300.0)
"""The shared-machine options (``--quiet`` …) the children are run under."""


# --------------------------------------------------------------------------- synthetic run


def second_of(second: int):
    """The samples of one second of the run: timestamps (µs), key indices, values."""
    import numpy as np

    rng = np.random.default_rng(second)
    n_keys = len(KEYS)
    micros = (
        (T0_S + second) * 1_000_000
        + np.repeat(np.arange(HZ, dtype=np.int64) * (1_000_000 // HZ), n_keys)
        + np.tile(np.arange(n_keys, dtype=np.int64) * 7, HZ)  # keys read one after another
    )
    key_index = np.tile(np.arange(n_keys), HZ)
    quantity = key_index % len(QUANTITIES)
    values = np.round(rng.uniform(0.0, 100.0, len(micros)), 1)
    power = quantity == 0
    values[power] = np.round(rng.uniform(100.0, 300.0, power.sum()), 2)
    energy = quantity == 1
    values[energy] = 1e6 + (second * HZ + np.repeat(np.arange(HZ), GPUS)) * 20.0
    return micros, key_index, values


def write_spool(folder: Path, rows: int, as_samples: bool) -> None:
    """``rows`` samples of the run into a spool, one append per second of samples."""
    import numpy as np
    import pyarrow as pa

    from radt.listener import Sample
    from radt.record.spool import SCHEMA, SpoolWriter

    writer = SpoolWriter(folder, chunk_s=1e12)
    keys = np.array(KEYS, dtype=object)
    seconds = -(-rows // PER_SECOND)
    for second in range(seconds):
        if second and second % CHUNK_S == 0:
            writer._rotate()
        micros, key_index, values = second_of(second)
        take = min(PER_SECOND, rows - second * PER_SECOND)
        micros, key_index, values = micros[:take], key_index[:take], values[:take]
        if as_samples:
            writer.append(
                [
                    Sample(m / 1e6, k, v)
                    for m, k, v in zip(
                        micros.tolist(), keys[key_index], values.tolist(), strict=True
                    )
                ]
            )
        else:
            writer.append(
                pa.table(
                    [
                        pa.array(micros).cast(SCHEMA.field("timestamp").type),
                        pa.array(keys[key_index], pa.string()),
                        pa.array(values),
                    ],
                    schema=SCHEMA,
                )
            )
    writer.close()


# --------------------------------------------------------------------------- child steps


def _compact(spool: Path, target: Path) -> int:
    try:
        from radt.record.compact import compact
    except ImportError:  # before: compaction lived in the spool module
        from radt.record.spool import compact
    return compact(spool, target)[0]


class CountingClient:
    """What ``resend_metrics`` needs of an MlflowClient; counts the points and drops them."""

    def __init__(self) -> None:
        self.points = 0

    def log_batch(self, run_id, metrics=(), synchronous=True, **_):
        self.points += len(metrics)


def child(step: str, args: dict) -> dict:
    """One measured step, in this (child) process; returns its seconds and a count."""
    import radt

    result: dict = {"radt": radt.__file__}
    began = time.perf_counter()
    if step == "baseline":
        import mlflow  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401
        import radt.frontend.data  # noqa: F401
        import radt.frontend.series  # noqa: F401

        import radt.analysis.load  # noqa: F401

        began = time.perf_counter()
        result["count"] = 0
    elif step in ("append", "append_batches"):
        write_spool(Path(args["spool"]), args["rows"], as_samples=step == "append")
        result["count"] = args["rows"]
    elif step == "compact":
        result["count"] = _compact(Path(args["spool"]), Path(args["target"]))
    elif step in ("load_one", "load_all"):
        from radt.analysis.load import load

        keys = [ONE_KEY] if step == "load_one" else None
        # warm: the store opened (SQLAlchemy's schema check takes seconds), MLflow imported
        load(runs=[args["run_id"]], keys=["no/such/key"], tracking_uri=args["uri"],
             cache_dir=args["cache"])  # fmt: skip
        began = time.perf_counter()
        frame = load(runs=[args["run_id"]], keys=keys, tracking_uri=args["uri"],
                     cache_dir=args["cache"])  # fmt: skip
        result["count"] = len(frame)
    elif step == "summary":
        from radt.analysis.load import load
        from radt.analysis.summary import summary

        load(runs=[args["run_id"]], keys=["no/such/key"], tracking_uri=args["uri"],
             cache_dir=args["cache"])  # fmt: skip
        began = time.perf_counter()
        frame = summary(runs=[args["run_id"]], tracking_uri=args["uri"], cache_dir=args["cache"])
        result["count"] = len(frame)
        result["energy_j"] = float(frame["energy_j"].iloc[0])
    elif step == "ui_one":
        os.environ["RADT_HOME"] = args["home"]
        from plotly.subplots import make_subplots
        from radt.frontend.data import Store
        from radt.frontend.series import RunLabel, timeseries_figure

        store = Store(args["uri"])
        runs = store.runs([args["run_id"]])  # warm: the store opened, plotly's figures loaded
        make_subplots(rows=1, cols=1).add_scatter(x=[0, 1], y=[0, 1])
        began = time.perf_counter()
        runs = store.runs([args["run_id"]])
        frame = store.samples(list(runs.values()), [ONE_KEY])
        labels = {r.run_id: RunLabel(r.run_id, r.name, r.start_us) for r in runs.values()}
        _, stats = timeseries_figure(frame, labels, [ONE_KEY])
        result["count"] = stats.samples
        result["shown"] = stats.shown
    elif step == "resend":
        from radt.record.finalize import resend_metrics
        from radt.record.runfolder import RunFolder, RunState

        client = CountingClient()
        state = RunState("run", "0", "", 0, float(T0_S), 1.0)
        began = time.perf_counter()
        resend_metrics(client, RunFolder(Path(args["folder"])), state)
        result["count"] = client.points
    elif step == "ingest":
        result.update(ingest(args))
        result["hwm_mib"] = peak_rss_mib()
        return result
    else:
        raise SystemExit(f"unknown step {step}")
    result["seconds"] = time.perf_counter() - began
    result["hwm_mib"] = peak_rss_mib()
    return result


def peak_rss_mib() -> float:
    """This process's peak resident memory since it started its program (VmHWM).

    Not ``wait4``'s ``ru_maxrss``: on Linux that includes the RSS of the parent the child
    was forked from, as it was at the ``exec``.
    """
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def run_child(step: str, args: dict, tree: Path | None, timeout: float = 1800) -> dict:
    """Run ``step`` in a fresh interpreter (``tree``: radT's source to import, else this
    one); return its result with ``rss_mib``, its peak resident memory."""
    from _common import busy_cpu_s, wait_quiet

    if MACHINE.quiet:
        wait_quiet(MACHINE.max_other, max_wait_s=MACHINE.max_wait)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    env.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    handle, out_name = tempfile.mkstemp(suffix=".json")
    os.close(handle)
    argv = [sys.executable, str(Path(__file__)), "--child", step, json.dumps(args), out_name]
    busy, began = busy_cpu_s(), time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=tempfile.gettempdir())
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            process.kill()
            pid, status, usage = os.wait4(process.pid, 0)
            break
        time.sleep(0.05)
    process.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - began
    others = max(0.0, busy_cpu_s() - busy - usage.ru_utime - usage.ru_stime) / max(wall, 1e-6)
    try:
        text = Path(out_name).read_text()
    finally:
        os.unlink(out_name)
    if process.returncode != 0 or not text:
        return {"error": f"exit {process.returncode}", "rss_mib": usage.ru_maxrss / 1024}
    result = json.loads(text)
    result["rss_mib"] = result.get("hwm_mib", usage.ru_maxrss / 1024)
    result["other_cores"] = others
    return result


# --------------------------------------------------------------------------- ingest


def ingest(args: dict) -> dict:
    """One polled listener with ``keys`` keys at ``hz`` for ``seconds`` through the real
    sampler, recorder, spool and decimator (decimated stream into a SQLite store)."""
    import numpy as np
    import pyarrow as pa
    from mlflow.tracking import MlflowClient

    from radt.listener import PolledListener, RunContext, Sample
    from radt.record.decimate import Decimator
    from radt.record.recorder import Recorder
    from radt.record.sampler import Sampler
    from radt.record.spool import SpoolWriter, read_spool
    from radt.record.writer import BatchWriter

    try:
        from radt.listener import SampleBatch
    except ImportError:
        SampleBatch = None  # noqa: N806 - before: no batches
    names = [f"plug/dev{i // 48}/q{i % 48}_pct" for i in range(args["keys"])]
    key_array = pa.array(names, pa.string())
    as_batch = args["mode"] == "batch"

    class Wide(PolledListener):
        name = "wide"

        def open(self, run) -> None:
            self.rng = np.random.default_rng(0)
            self.polls = 0

        def poll(self):
            now = time.time()
            values = self.rng.uniform(0.0, 100.0, len(names))
            self.polls += 1
            if as_batch:
                return SampleBatch(now, key_array, values)
            return [Sample(now, k, v) for k, v in zip(names, values.tolist(), strict=True)]

    folder = Path(args["folder"])
    uri = args["uri"]
    client = MlflowClient(uri)
    run = client.create_run("0", run_name=f"ingest-{args['mode']}-{args['hz']}")
    warnings: list[str] = []
    recorder = Recorder(
        SpoolWriter(folder / "spool"),
        BatchWriter(client, run.info.run_id, warnings.append),
        Decimator(1.0, time.time()),
        warnings.append,
    )
    listener = Wide()
    context = RunContext(run.info.run_id, os.getpid(), folder, recorder.emit,
                         interval_s=1.0 / args["hz"], warn=warnings.append)  # fmt: skip
    recorder.start()
    sampler = Sampler(listener, context)
    cpu0 = time.process_time()
    began = time.perf_counter()
    sampler.start()
    time.sleep(args["seconds"])
    sampler.stop()
    polled_s = time.perf_counter() - began
    stop = time.perf_counter()
    unsent = recorder.close(60.0)
    drain_s = time.perf_counter() - stop
    cpu = time.process_time() - cpu0
    table, problems = read_spool(folder / "spool")
    return {
        "mode": args["mode"],
        "hz": args["hz"],
        "polls": listener.polls,
        "offered_per_s": round(args["hz"] * len(names)),
        "spooled": table.num_rows,
        "spooled_per_s": table.num_rows / polled_s,
        "drain_s": drain_s,
        "cpu_cores": cpu / (polled_s + drain_s),
        "unsent": unsent,
        "problems": problems,
        "warnings": warnings[:3],
    }


# --------------------------------------------------------------------------- driver


def parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 1_000, "M": 1_000_000}.get(text[-1], 1)
    return int(float(text.rstrip("KM")) * scale)


def make_run(uri: str, artifact: Path, name: str, rows: int) -> str:
    """A FINISHED run whose ``radt/samples.parquet`` is ``artifact``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    # the Default experiment: init_store put its artifacts beside the store
    run = client.create_run("0", start_time=T0_S * 1000, run_name=name,
                            tags={"radt.collocation": "none"})  # fmt: skip
    folder = artifact.parent / f"upload-{name}"
    folder.mkdir()
    os.link(artifact, folder / "samples.parquet")
    client.log_artifact(run.info.run_id, str(folder / "samples.parquet"), "radt")
    shutil.rmtree(folder)
    end_ms = (T0_S + -(-rows // PER_SECOND)) * 1000
    client.set_terminated(run.info.run_id, "FINISHED", end_time=end_ms)
    return run.info.run_id


def fmt_result(results: list[dict]) -> str:
    good = [r for r in results if "seconds" in r]
    if not good:
        return results[0].get("error", "–") if results else "–"
    seconds = sorted(r["seconds"] for r in good)
    mid = seconds[len(seconds) // 2]
    rss = max(r["rss_mib"] for r in good)
    low, high = seconds[0], seconds[-1]
    spread = f" ({low:.2f}–{high:.2f})" if len(seconds) > 1 and high > low * 1.1 else ""
    others = max(r.get("other_cores", 0.0) for r in good)
    return f"{mid:.2f} s{spread}, {rss:,.0f} MiB [{others:.1f}]"


def measure_size(rows: int, args, trees: dict[str, Path | None]) -> dict[str, dict[str, str]]:
    """Every step for one size; {step: {version: "seconds, MiB [other cores]"}}."""
    from _common import sqlite_store, workspace

    work = workspace(f"long-{rows}", args.workdir)
    cells: dict[str, dict[str, str]] = {}
    notes: dict[str, str] = {}

    def say(text: str) -> None:
        print(f"  [{rows:,}] {text}", file=sys.stderr, flush=True)

    try:
        spool = work / "run" / "spool"
        if rows <= args.append_max and "append" in args.steps:
            for version, tree in trees.items():
                shutil.rmtree(spool, ignore_errors=True)
                result = run_child("append", {"spool": str(spool), "rows": rows}, tree)
                cells.setdefault("append", {})[version] = fmt_result([result])
                say(f"append {version}: {cells['append'][version]}")
        shutil.rmtree(spool, ignore_errors=True)
        payload = {"spool": str(spool), "rows": rows}
        result = run_child("append_batches", payload, trees.get("after"))
        notes["append_batches"] = fmt_result([result])
        say(f"spool from batches: {notes['append_batches']}")
        size = sum(p.stat().st_size for p in spool.iterdir())
        notes["spool_bytes"] = f"{size / 2**30:.2f} GiB"
        uri = sqlite_store(work)
        run_ids = {}
        for version, tree in trees.items():
            if version == "before" and rows > args.before_max:
                continue
            target = work / f"samples-{version}.parquet"
            results = []
            for _ in range(args.repeats if "compact" in args.steps else 1):
                target.unlink(missing_ok=True)
                results.append(
                    run_child("compact", {"spool": str(spool), "target": str(target)}, tree)
                )
                if "error" in results[-1]:
                    break
            if "compact" in args.steps:
                cells.setdefault("compact", {})[version] = fmt_result(results)
                say(f"compact {version}: {cells['compact'][version]}")
            if not target.exists():
                continue
            notes[f"artifact_{version}"] = f"{target.stat().st_size / 2**20:,.0f} MiB"
            run_ids[version] = make_run(uri, target, version, rows)
            target.unlink()
        for step in ("load_one", "load_all", "summary", "ui_one"):
            if step not in args.steps:
                continue
            for version, tree in trees.items():
                if version not in run_ids:
                    continue
                largest = args.before_max if version == "before" else args.load_all_max
                if step == "load_all" and rows > largest:
                    continue
                cache = work / f"cache-{version}"
                payload = {"run_id": run_ids[version], "uri": uri, "cache": str(cache),
                           "home": str(work / f"home-{version}")}  # fmt: skip
                run_child(step, payload, tree)  # warm: the artifact into the cache
                results = [run_child(step, payload, tree) for _ in range(args.repeats)]
                cells.setdefault(step, {})[version] = fmt_result(results)
                say(f"{step} {version}: {cells[step][version]} ({results[0].get('count')} rows)")
        if "resend" in args.steps:
            for version, tree in trees.items():
                if version == "before" and rows > args.before_max:
                    continue
                payload = {"folder": str(work / "run")}
                results = [run_child("resend", payload, tree) for _ in range(args.repeats)]
                cells.setdefault("resend", {})[version] = fmt_result(results)
                points = results[0].get("count")
                say(f"resend {version}: {cells['resend'][version]} ({points} points)")
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    cells["notes"] = notes
    return cells


def measure_ingest(args, trees) -> list[list[str]]:
    from _common import sqlite_store, workspace

    rows = []
    for hz in args.rates:
        for version, tree in trees.items():
            modes = ["samples"] if version == "before" else ["batch", "samples"]
            for mode in modes:
                work = workspace("ingest", args.workdir)
                try:
                    uri = sqlite_store(work)
                    payload = {
                        "folder": str(work),
                        "uri": uri,
                        "hz": hz,
                        "mode": mode,
                        "keys": args.ingest_keys,
                        "seconds": args.ingest_seconds,
                    }
                    r = run_child("ingest", payload, tree)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                if "error" in r:
                    rows.append([version, mode, f"{hz:g}", "–", r["error"], "", "", "", "", ""])
                    continue
                print(f"  ingest {version} {mode} {hz} Hz: {r['spooled_per_s']:,.0f}/s",
                      file=sys.stderr, flush=True)  # fmt: skip
                rows.append([
                    version, "`SampleBatch`" if mode == "batch" else "`Sample` list", f"{hz:g}",
                    f"{r['offered_per_s']:,}", f"{r['spooled_per_s']:,.0f}", f"{r['drain_s']:.2f}",
                    f"{r['cpu_cores']:.2f}", f"{r['rss_mib']:,.0f}", f"{r['other_cores']:.2f}",
                    f"{r['unsent']}" + (f" ({'; '.join(r['warnings'])})" if r["warnings"] else ""),
                ])  # fmt: skip
    return rows


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, payload, out = sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
        result = child(step, payload)
        Path(out).write_text(json.dumps(result))
        return 0
    sys.path.insert(0, str(HERE))
    from _common import arguments, command_line, header, table

    parser = arguments(__doc__)
    parser.add_argument("--sizes", default="1M,10M", help="samples per run, e.g. 1M,10M,170M")
    parser.add_argument("--before", type=Path, help="radT source of the commit to compare with")
    parser.add_argument("--only", choices=("before", "after"), help="measure one side only")
    parser.add_argument("--steps", default=",".join(STEPS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--append-max",
        type=parse_size,
        default=parse_size("10M"),
        help="largest size whose spool is also written from Sample lists",
    )
    parser.add_argument(
        "--before-max",
        type=parse_size,
        default=parse_size("10M"),
        help="largest size measured with the code before (its memory grows with the run)",
    )
    parser.add_argument("--load-all-max", type=parse_size, default=parse_size("50M"))
    parser.add_argument("--ingest", action="store_true", help="measure sustained ingest instead")
    parser.add_argument("--rates", default="20,60,100", help="ingest: polls per second")
    parser.add_argument("--ingest-keys", type=int, default=2496)
    parser.add_argument("--ingest-seconds", type=float, default=20.0)
    parser.add_argument("--workdir", type=Path, default=None, help="where the runs go")
    args = parser.parse_args()
    args.steps = [s for s in args.steps.split(",") if s]
    args.rates = [float(r) for r in args.rates.split(",")]
    MACHINE.quiet, MACHINE.max_other, MACHINE.max_wait = args.quiet, args.max_other, args.max_wait

    trees: dict[str, Path | None] = {}
    if args.before and args.only != "after":
        trees["before"] = args.before.resolve()
    if args.only != "before":
        trees["after"] = None
    baseline = {v: run_child("baseline", {}, t) for v, t in trees.items()}
    print(header("Long runs: recorded, finished, loaded and plotted", command_line()))
    print(f"- `uptime` at start: {os.getloadavg()[0]:.2f} (1-min load average)")
    for version, result in baseline.items():
        print(f"- baseline RSS ({version}: imports of mlflow, pandas, pyarrow, radt): "
              f"{result['rss_mib']:,.0f} MiB ({result.get('radt')})")  # fmt: skip
    print()
    if args.ingest:
        rows = measure_ingest(args, trees)
        print(
            table(
                ["radT", "listener hands over", "polls/s", "offered/s", "spooled/s",
                 "drain s", "CPU cores", "peak RSS MiB", "others (cores)", "points unsent"],
                rows,
            )
        )  # fmt: skip
        print(f"\nOne listener, {args.ingest_keys:,} keys per poll, {args.ingest_seconds:g} s "
              "per condition; load average at the end "
              f"{os.getloadavg()[0]:.2f}.")  # fmt: skip
        return 0
    for text in args.sizes.split(","):
        rows = parse_size(text)
        print(f"measuring {rows:,} samples …", file=sys.stderr, flush=True)
        cells = measure_size(rows, args, trees)
        notes = cells.pop("notes")
        lines = []
        for step in STEPS:
            if step in cells:
                lines.append([step] + [cells[step].get(v, "–") for v in trees])
        print(f"### {rows:,} samples ({rows / PER_SECOND / 3600:.1f} h at {PER_SECOND:,}/s)\n")
        print(table(["step", *trees], lines))
        print(
            "\nspool "
            + notes.get("spool_bytes", "?")
            + "; spool written from Arrow batches: "
            + notes.get("append_batches", "?")
            + "; artifact "
            + ", ".join(f"{k[9:]} {v}" for k, v in notes.items() if k.startswith("artifact_"))
            + f"; load average now {os.getloadavg()[0]:.2f}\n",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

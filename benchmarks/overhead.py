"""Training-throughput overhead: plain vs radT vs MLflow system metrics vs radT 0.2.30.

    python benchmarks/overhead.py                 # defaults: 4 rounds x 4 conditions, ~7 min
    python benchmarks/overhead.py --repeats 3 --epochs 4

Every condition runs ``examples/train.py`` (a small CNN on synthetic CIFAR-shaped
data, CPU) with the same arguments; the throughput of one run is all examples
of epochs 1.. divided by their time (epoch 0 is warm-up), parsed from the
script's lines ``epoch N: loss X, Y examples/s``. Conditions run interleaved
round-robin (the order rotates every round) so that drift of the machine hits
all of them alike. Reported: median throughput, the median of the per-round
ratios to plain (each round's run against the plain run of the same round),
wall time, CPU seconds of the whole process tree (orphans included: the
benchmark is a child subreaper), the monitor's share of it (tree minus the
training process, followed through /proc), and the cores other processes on
the machine used meanwhile. See BENCHMARKS.md for results and how to read them.

Conditions:
- ``plain``: ``python examples/train.py ...`` logging to a SQLite store;
- ``radt``: ``radt --interval 0.1 examples/train.py ...``: every available
  listener (here ``top`` and ``iostat``) at 10 Hz;
- ``mlflow-sysmetrics``: MLflow's own system metrics
  (``mlflow.enable_system_metrics_logging()``, sampler thread inside the
  training process) at ``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL=1`` s
  (its default is 10 s);
- ``radt-0.2.30``: the original radT from PyPI in ``benchmarks/.venv-radt0230``
  (``bash benchmarks/setup_radt0230.sh`` makes it), direct (non-conda) mode,
  with its default listeners that work without a GPU: ``top+iostat+free`` at its
  fixed 1 Hz;
- optional ``radt-none`` (``radt -l none``: the launcher without listeners) and
  ``radt-default`` (listeners at their default 0.5 s).

Torch is pinned to ``--threads`` (default 1) intra-op threads so that on a
2-core machine one core is left to the monitor and the OS; oversubscribing
both cores measures the scheduler more than the monitor.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    BENCH,
    CLOCK_TICKS,
    OLD_VENV,
    REPO,
    Disturbance,
    Priority,
    arguments,
    base_env,
    become_subreaper,
    chosen,
    descendants,
    init_store,
    median,
    old_radt_bin,
    python_bin,
    radt_bin,
    reap_orphans,
    results,
    rotated,
    scratch,
    spread,
    undisturbed,
)

EPOCH_LINE = re.compile(r"epoch (\d+): loss \S+, (\d+) examples/s")
ALL_CONDITIONS = ("plain", "radt", "mlflow-sysmetrics", "radt-0.2.30", "radt-none", "radt-default")
DEFAULT_CONDITIONS = "plain,radt,mlflow-sysmetrics,radt-0.2.30"
OLD_LISTENERS = "top+iostat+free"


@dataclass
class Result:
    throughput: float  # examples/s over epochs 1..
    warmup: float  # examples/s of epoch 0
    wall_s: float
    cpu_s: float
    other_cores: float = 0.0  # CPU used by other processes on the machine meanwhile
    training_cpu_s: float | None = None  # CPU of the training process alone


@dataclass
class Condition:
    name: str
    label: str
    results: list[Result] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    disturbed: int = 0


def train_args(args: argparse.Namespace) -> list[str]:
    return [
        "--epochs",
        str(args.epochs),
        "--examples",
        str(args.examples),
        "--threads",
        str(args.threads),
        "--batch-size",
        str(args.batch_size),
    ]


def prepare(name: str, root: Path, args: argparse.Namespace) -> tuple[list[str], dict, Path]:
    """Command, environment and working folder of one condition."""
    folder = root / name
    folder.mkdir()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    env = base_env(folder, uri)
    script = str(REPO / "examples" / "train.py")
    targs = train_args(args)
    py = python_bin()
    if name == "plain":
        argv = [py, script, *targs]
    elif name == "radt":
        argv = [radt_bin(), "--interval", str(args.interval), script, *targs]
    elif name == "radt-none":
        argv = [radt_bin(), "-l", "none", script, *targs]
    elif name == "radt-default":
        argv = [radt_bin(), script, *targs]
    elif name == "mlflow-sysmetrics":
        env["MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL"] = str(args.mlflow_interval)
        argv = [py, str(BENCH / "_mlflow_sysmetrics.py"), script, *targs]
    elif name == "radt-0.2.30":
        old = old_radt_bin(Path(args.venv))
        if old is None:
            raise FileNotFoundError(
                f"{args.venv}/bin/radt not found; run `bash benchmarks/setup_radt0230.sh`"
            )
        # 0.2.30 writes MLproject and radtlock files beside the script and runs
        # it with `python` from PATH: give it a copy in the temp folder and its venv first.
        (folder / "train.py").write_text(without_run_api(Path(script).read_text()))
        data = Path(script).with_name("synthetic_data.py")  # train.py imports its data module
        (folder / data.name).write_text(data.read_text())
        env["PATH"] = f"{old.parent}:{env.get('PATH', '')}"
        env.pop("PYTHONHOME", None)
        argv = [str(old), "-l", args.old_listeners, "train.py", *targs]
    else:
        raise ValueError(name)
    init_store(uri)
    return argv, env, folder


class TrainingCpu:
    """Follows the CPU time of the training process among the run's descendants.

    Polls ``/proc`` every 0.25 s; the training process is the one running the
    script (``python train.py``, 0.2.30's ``python -m radt run ... -c train.py``,
    or the MLflow wrapper) whose parent does not run it too (0.2.30's listeners
    are forks of it with the same command line). The last reading may miss up
    to 0.25 s of CPU at the very end.
    """

    def __init__(self) -> None:
        self.seen: dict[int, tuple[int, bool, float]] = {}  # pid -> (ppid, trains, cpu_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TrainingCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.25):
            for pid in descendants(me):
                reading = _read_proc(pid)
                if reading is None:
                    continue
                # A process that has exited but is not reaped yet (a zombie) shows an
                # empty command line: keep what was seen of it while it ran.
                before = self.seen.get(pid)
                if before is not None:
                    reading = (reading[0], reading[1] or before[1], max(reading[2], before[2]))
                self.seen[pid] = reading

    def training_cpu_s(self) -> float | None:
        trains = {pid for pid, (_, t, _) in self.seen.items() if t}
        roots = [pid for pid in trains if self.seen[pid][0] not in trains]
        if len(roots) != 1:
            return None
        return self.seen[roots[0]][2]


def _read_proc(pid: int) -> tuple[int, bool, float] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    ppid = int(fields[1])
    cpu_s = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    script = argv[1] if len(argv) > 1 else ""
    trains = (
        script.endswith("train.py")
        or script.endswith("_mlflow_sysmetrics.py")
        or ("-c" in argv[:-1] and argv[argv.index("-c") + 1] == "train.py")
    )
    return ppid, trains, cpu_s


RUN_API_STUB = (
    "class radt:  # radT 0.2.30 has no run API (log_examples/log_epoch): no-ops, as "
    "without radT\n"
    "    log_examples = log_epoch = staticmethod(lambda *args, **kwargs: None)\n"
)


def without_run_api(source: str) -> str:
    """The training script for radT 0.2.30, whose ``radt`` package lacks the new run API.

    ``import radt`` would import 0.2.30 itself there; the calls become no-ops,
    which is what they are in the plain condition too.
    """
    return re.sub(r"^import radt$", RUN_API_STUB.rstrip("\n"), source, flags=re.MULTILINE)


def run_once(argv: list[str], env: dict, cwd: Path, timeout_s: float) -> tuple[Result, str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    with Disturbance() as disturbance, TrainingCpu() as training:
        done = subprocess.run(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
        )
        wall = time.perf_counter() - began
        reap_orphans()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    epochs = {int(m.group(1)): float(m.group(2)) for m in EPOCH_LINE.finditer(done.stdout)}
    if done.returncode != 0 or len(epochs) < 2:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"exit code {done.returncode}, {len(epochs)} epochs seen:\n{tail}")
    measured = [rate for epoch, rate in epochs.items() if epoch >= 1]
    # Equal examples per epoch: overall throughput is the harmonic mean of the epoch rates.
    throughput = len(measured) / sum(1.0 / r for r in measured)
    other = disturbance.other_cores()
    train_cpu = training.training_cpu_s()
    result = Result(throughput, epochs.get(0, float("nan")), wall, cpu, other, train_cpu)
    return result, done.stdout


def monitor_cpu(name: str, results: list[Result]) -> str:
    """CPU of everything but the training process: launcher, listeners, tools, uploads."""
    if name == "mlflow-sysmetrics":
        return "in process"
    pairs = [
        (r.cpu_s - r.training_cpu_s, r.wall_s) for r in results if r.training_cpu_s is not None
    ]
    if not pairs:
        return "–"
    cpu = median([c for c, _ in pairs])
    cores = median([c / w for c, w in pairs])
    return f"{max(cpu, 0.0):.1f} ({max(cores, 0.0):.2f})"


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--repeats", type=int, default=4, help="rounds (default 4)")
    parser.add_argument("--epochs", type=int, default=5, help="epochs per run (default 5)")
    parser.add_argument("--examples", type=int, default=4096, help="examples per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--interval", type=float, default=0.1, help="radT interval (0.1 s)")
    parser.add_argument(
        "--mlflow-interval", type=float, default=1.0, help="MLflow sampling interval (1 s)"
    )
    parser.add_argument(
        "--conditions",
        default=DEFAULT_CONDITIONS,
        help=f"comma-separated, from {', '.join(ALL_CONDITIONS)} (default: {DEFAULT_CONDITIONS})",
    )
    parser.add_argument("--venv", default=str(OLD_VENV))
    parser.add_argument("--old-listeners", default=OLD_LISTENERS)
    parser.add_argument("--timeout", type=float, default=600, help="per run, seconds")
    parser.add_argument("--no-warmup", action="store_true", help="skip the unmeasured warm-up")
    args = parser.parse_args()
    names = chosen(parser, args.conditions, ALL_CONDITIONS, first="plain")

    become_subreaper()
    with Priority(args.nice) as priority, scratch("overhead", args.keep) as root:
        print(f"workspace: {root}; {priority.how}", file=sys.stderr)
        conditions = measure_all(args, names, root)
    print()
    print(report(args, conditions, priority.how))
    return 0


def measure_all(args: argparse.Namespace, names: list[str], root: Path) -> dict[str, Condition]:
    """Every condition's runs, interleaved round-robin; a condition that cannot be set up
    here (radT 0.2.30 not installed) is left out."""
    labels = {
        "plain": "plain `python train.py`",
        "radt": f"radT, default listeners @ {args.interval:g} s",
        "radt-none": "radT `-l none`",
        "radt-default": "radT, default listeners @ their default 0.5 s",
        "mlflow-sysmetrics": f"MLflow system metrics @ {args.mlflow_interval:g} s",
        "radt-0.2.30": f"radT 0.2.30 `-l {args.old_listeners}` @ 1 s",
    }
    conditions: dict[str, Condition] = {}
    setups = {}
    for name in names:
        try:
            setups[name] = prepare(name, root, args)
            conditions[name] = Condition(name, labels[name])
        except (FileNotFoundError, OSError) as exc:
            print(f"skipping {name}: {exc}", file=sys.stderr)
    if not args.no_warmup:
        argv, env, cwd = setups["plain"]
        warm = list(argv)
        warm[warm.index("--epochs") + 1] = "1"
        print("warm-up run (not measured)", file=sys.stderr)
        subprocess.run(warm, cwd=cwd, env=env, capture_output=True, timeout=args.timeout)

    for round_no, condition in rotated(list(conditions.values()), args.repeats):
        measure_one(args, round_no, condition, setups[condition.name])
    return conditions


def measure_one(
    args: argparse.Namespace, round_no: int, condition: Condition, setup: tuple
) -> None:
    """One run of ``condition`` (again while disturbed, with --quiet), said on stderr."""
    argv, env, cwd = setup

    def said(result: Result, again: bool) -> None:
        print(
            f"round {round_no + 1}/{args.repeats} {condition.name:18s} "
            f"{result.throughput:7.0f} ex/s  epoch0 {result.warmup:5.0f}  "
            f"wall {result.wall_s:5.1f} s  cpu {result.cpu_s:5.1f} s  "
            f"training cpu {result.training_cpu_s or float('nan'):5.1f} s  "
            f"others {result.other_cores:4.2f} cores" + ("  (disturbed, again)" * again),
            file=sys.stderr,
            flush=True,
        )
        condition.disturbed += again

    try:
        result = undisturbed(args, lambda: run_once(argv, env, cwd, args.timeout)[0], said)
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        condition.failures.append(str(exc))
        print(f"round {round_no + 1} {condition.name}: FAILED {exc}", file=sys.stderr)
        return
    condition.results.append(result)


def report(args: argparse.Namespace, conditions: dict[str, Condition], how: str) -> str:
    """The results table and the notes under it."""
    plain = conditions["plain"].results
    rows = []
    for cond in conditions.values():
        res = cond.results
        if not res:
            rows.append([cond.label, "failed", "–", "–", "–", "–", "–", "–", "–"])
            continue
        thr = [r.throughput for r in res]
        # Per-round ratio: each run against the plain run of the same round.
        ratios = [r.throughput / p.throughput for r, p in zip(res, plain, strict=False)]
        rows.append(
            [
                cond.label,
                f"{median(thr):,.0f}",
                spread(thr),
                f"{median(ratios):.3f}" if cond.name != "plain" else "1.000",
                f"{(1 - median(ratios)) * 100:+.1f} %" if cond.name != "plain" else "–",
                f"{median([r.wall_s for r in res]):.1f}",
                f"{median([r.cpu_s for r in res]):.1f}",
                monitor_cpu(cond.name, res),
                f"{max(r.other_cores for r in res):.2f}",
            ]
        )
    notes = (
        f"train.py {' '.join(train_args(args))}; {args.repeats} interleaved rounds; "
        f"throughput over epochs 1–{args.epochs - 1} (epoch 0 is warm-up); "
        f"{how}; 'others' = cores used by other processes on the machine "
        "during the run (max over the rounds)."
    )
    columns = [
        "condition",
        "examples/s (median)",
        "min–max",
        "ratio vs plain",
        "slowdown",
        "wall s",
        "CPU s (tree)",
        "monitor CPU s (cores)",
        "others (max cores)",
    ]
    out = [results("Training overhead (examples/train.py)", notes, columns, rows)]
    failed = {c.name: len(c.failures) for c in conditions.values() if c.failures}
    if failed:
        out.append(f"\nfailed runs: {failed}")
    disturbed = {c.name: c.disturbed for c in conditions.values() if c.disturbed}
    if disturbed:
        out.append(
            f"\nruns repeated because other processes used > {args.max_other:g} cores: {disturbed}"
        )
    if args.quiet:
        kept = {
            c.name: sum(r.other_cores > args.max_other for r in c.results)
            for c in conditions.values()
        }
        if any(kept.values()):
            out.append(f"runs kept although disturbed (retries spent): {kept}")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

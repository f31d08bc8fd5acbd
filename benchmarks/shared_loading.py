"""Shared data loading: CPU per example and throughput, own loaders vs one shared loader.

    python benchmarks/shared_loading.py                  # 2 and 3 trainings, 2 rounds, ~12 min
    python benchmarks/shared_loading.py --trainings 3 --rounds 3 --epochs 3

Each condition is one radT plan workload of N collocated trainings of
``examples/train.py`` (``naive``, on the CPU): *own*, where every training
augments its own data (``--augment``), and *shared*, where one
``examples/loader.py`` (a TensorSocket producer, ``Role=loader``) augments each
batch once and feeds the N trainings (``--shared-loader``). Conditions run
interleaved round-robin, the order rotating every round.

Measured per run:
- CPU core-seconds of each training and of the loader: the kernel's account of
  each process tree at its end (``benchmarks/_rusage.py`` runs the script as its
  child and reads ``RUSAGE_CHILDREN``), start-up included; radT's own process
  and listeners are not counted;
- CPU per example: all of that over every example the trainings processed;
- throughput: the workload's examples over its wall time (first training start
  to last training end, start-up included), and each training's own examples/s
  over epochs 1.. (epoch 0 holds the start-up and the wait for the loader), from
  the script's lines ``epoch N: loss X, Y examples/s`` (the median training).
The machine's load (``uptime``) and the cores other processes used during each
run are reported with the results.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    BENCH,
    REPO,
    Disturbance,
    Priority,
    arguments,
    base_env,
    become_subreaper,
    median,
    python_bin,
    radt_bin,
    reap_orphans,
    results,
    rotated,
    scratch,
    spread,
    sqlite_store,
    undisturbed,
)

EXAMPLES = REPO / "examples"
EPOCH_LINE = re.compile(r"^\[([A-Z]+)\] epoch (\d+): loss \S+, (\d+) examples/s", re.MULTILINE)
HEADER = "Experiment, Workload, Status, Run, Devices, Collocation, File, Listeners, Params, Role\n"


@dataclass
class Result:
    cpu_trainings_s: float
    cpu_loader_s: float
    examples: int
    steady_examples_s: float  # the median training's examples/s over epochs 1..
    wall_examples_s: float  # all examples over first start to last end
    wall_s: float
    other_cores: float = 0.0
    load1: float = 0.0

    @property
    def cpu_s(self) -> float:
        return self.cpu_trainings_s + self.cpu_loader_s

    @property
    def cpu_ms_per_example(self) -> float:
        return self.cpu_s / self.examples * 1000


@dataclass
class Condition:
    name: str
    trainings: int
    shared: bool
    results: list[Result] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    disturbed: int = 0

    @property
    def label(self) -> str:
        how = "one shared loader" if self.shared else "own loaders"
        return f"{self.trainings} trainings, {how}"


def data_args(args: argparse.Namespace) -> str:
    return (
        f"--epochs {args.epochs} --examples {args.examples} --batch-size {args.batch_size} "
        f"--augment {args.augment}"
    )


def plan_text(condition: Condition, args: argparse.Namespace) -> str:
    """The one-workload plan of a condition; every script runs under _rusage.py."""
    wrap = f"{python_bin()} {BENCH / '_rusage.py'}"
    train = f"{wrap} {EXAMPLES / 'train.py'}"
    rows = []
    if condition.shared:
        loader = f"{wrap} {EXAMPLES / 'loader.py'}"
        params = data_args(args)
        rows.append(f"bench, {condition.name}, , , , naive, {loader}, none, {params}, loader")
    for index in range(condition.trainings):
        mode = "--shared-loader" if condition.shared else ""
        params = f"{data_args(args)} {mode} --threads {args.threads} --seed {index}"
        rows.append(f"bench, {condition.name}, , , , naive, {train}, none, {params},")
    return HEADER + "".join(row + "\n" for row in rows)


def run_once(condition: Condition, args: argparse.Namespace, folder: Path) -> Result:
    """One run of the condition's plan under radT, in a fresh folder."""
    folder.mkdir(parents=True)
    notes = folder / "rusage"
    notes.mkdir()
    (folder / "plan.csv").write_text(plan_text(condition, args))
    env = base_env(folder, sqlite_store(folder / "store"))
    env["RUSAGE_DIR"] = str(notes)
    load1 = os.getloadavg()[0]
    with Disturbance() as disturbance:
        done = subprocess.run(
            [radt_bin(), "-l", "none", "plan.csv"],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=args.timeout,
        )
        reap_orphans()
    if done.returncode != 0:
        tail = "\n".join(done.stdout.strip().splitlines()[-15:])
        raise RuntimeError(f"radT exit code {done.returncode}:\n{tail}")
    used = [json.loads(path.read_text()) for path in notes.glob("*.json")]
    trains = [u for u in used if u["script"] == "train.py"]
    loaders = [u for u in used if u["script"] == "loader.py"]
    if len(trains) != condition.trainings or len(loaders) != int(condition.shared):
        raise RuntimeError(f"expected {condition.trainings} trainings' notes, found {used}")
    rates: dict[str, list[float]] = {}
    for letter, epoch, rate in EPOCH_LINE.findall(done.stdout):
        if int(epoch) >= 1:
            rates.setdefault(letter, []).append(float(rate))
    if len(rates) != condition.trainings:
        raise RuntimeError(f"epoch lines of {sorted(rates)} only:\n{done.stdout[-2000:]}")
    # Equal examples per epoch: a training's rate is the harmonic mean of its epochs' rates.
    steady = median([len(r) / sum(1 / x for x in r) for r in rates.values()])
    examples = condition.trainings * args.epochs * args.examples
    span = max(u["ended"] for u in trains) - min(u["began"] for u in trains)
    return Result(
        cpu_trainings_s=sum(u["cpu_s"] for u in trains),
        cpu_loader_s=sum(u["cpu_s"] for u in loaders),
        examples=examples,
        steady_examples_s=steady,
        wall_examples_s=examples / span,
        wall_s=disturbance.wall_s,
        other_cores=disturbance.other_cores(),
        load1=load1,
    )


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--trainings", default="2,3", help="collocated trainings (default 2,3)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per run (default 3)")
    parser.add_argument("--examples", type=int, default=4096, help="examples per epoch")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--augment", type=int, default=2, help="blur passes per example")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per training")
    parser.add_argument("--timeout", type=float, default=900, help="per run, seconds")
    args = parser.parse_args()
    counts = [int(n) for n in args.trainings.split(",") if n.strip()]
    conditions = [
        Condition(f"{'shared' if shared else 'own'}-x{n}", n, shared)
        for n in counts
        for shared in (False, True)
    ]
    become_subreaper()
    with Priority(args.nice) as priority, scratch("shared-loading", args.keep) as root:
        print(f"workspace: {root}; {priority.how}", file=sys.stderr)
        for round_no, condition in rotated(conditions, args.rounds):
            measure_one(args, round_no, condition, root)
    print()
    print(report(args, conditions, priority.how))
    return 0


def measure_one(args: argparse.Namespace, round_no: int, condition: Condition, root: Path) -> None:
    """One run of ``condition`` (again while disturbed, with --quiet), said on stderr."""
    tries = iter(range(1000))

    def said(result: Result, again: bool) -> None:
        print(
            f"round {round_no + 1}/{args.rounds} {condition.name:10s} "
            f"cpu {result.cpu_s:6.1f} s (loader {result.cpu_loader_s:5.1f}) "
            f"{result.cpu_ms_per_example:5.2f} ms/example  "
            f"{result.wall_examples_s:6.0f} ex/s wall  "
            f"{result.steady_examples_s:6.0f} ex/s per training  "
            f"load {result.load1:4.2f}  others {result.other_cores:4.2f} cores"
            + ("  (disturbed, again)" * again),
            file=sys.stderr,
            flush=True,
        )
        condition.disturbed += again

    def measure() -> Result:
        return run_once(condition, args, root / f"{condition.name}-{round_no}-{next(tries)}")

    try:
        condition.results.append(undisturbed(args, measure, said))
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        condition.failures.append(str(exc))
        print(f"round {round_no + 1} {condition.name}: FAILED {exc}", file=sys.stderr)


def report(args: argparse.Namespace, conditions: list[Condition], how: str) -> str:
    """The results table (own and shared side by side per N) and the notes under it."""
    rows = []
    own: dict[int, float] = {}
    for cond in conditions:
        res = cond.results
        if not res:
            rows.append([cond.label, "failed", *["–"] * 8])
            continue
        per_example = [r.cpu_ms_per_example for r in res]
        if not cond.shared:
            own[cond.trainings] = median(per_example)
        saved = (
            f"{(1 - median(per_example) / own[cond.trainings]) * 100:+.0f} %"
            if cond.shared and cond.trainings in own
            else "–"
        )
        rows.append(
            [
                cond.label,
                f"{median(per_example):.2f}",
                spread(per_example, ".2f"),
                saved,
                f"{median([r.cpu_trainings_s for r in res]):.1f}",
                f"{median([r.cpu_loader_s for r in res]):.1f}" if cond.shared else "–",
                f"{median([r.wall_examples_s for r in res]):,.0f}",
                f"{median([r.steady_examples_s for r in res]):,.0f}",
                f"{max(r.load1 for r in res):.2f}",
                f"{max(r.other_cores for r in res):.2f}",
            ]
        )
    notes = (
        f"train.py/loader.py {data_args(args)}, trainings with --threads {args.threads}; "
        f"{args.rounds} interleaved rounds, medians; {how}. CPU = every training's and the "
        "loader's process tree, start-up included (not radT's); 'saved' = CPU per example "
        "of the shared condition against own loaders with the same number of trainings; "
        "'load' = uptime's 1-min load when the run started, 'others' = cores other processes "
        "used during the run (max over the rounds)."
    )
    columns = [
        "condition",
        "CPU ms/example",
        "min–max",
        "saved",
        "CPU s trainings",
        "CPU s loader",
        "examples/s (wall)",
        "examples/s per training (steady)",
        "load (max)",
        "others (max cores)",
    ]
    out = [results("Shared data loading (examples/loader.py)", notes, columns, rows)]
    failed = {c.name: len(c.failures) for c in conditions if c.failures}
    if failed:
        out.append(f"\nfailed runs: {failed}")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())

"""Distributed jobs: the start-up cost of joining a group, and a 2-node job's examples/s
against the ranks' own printed rates.

    python benchmarks/groups.py                  # defaults: 5 rounds + 1 job, ~2 min on 2 cores
    python benchmarks/groups.py --repeats 10 --steps 600

Start-up: each round starts, interleaved (the order rotated every round), a lone run
``radt -l none -- python -c "print('first')"``, two lone runs of it started at once, and a
group of two nodes of the same command started at once (``--group``, ``RADT_NODE_RANK`` 0 and 1,
``RADT_NODES=2``): rank 0 creates the job run and its node run, rank 1 creates its node run,
starts its command and finds the job run beside it; and such a group whose rank 0 starts
``LATE_S`` after rank 1 (timed from rank 1's own start); and, as on two hosts, a lone run on one
CPU and a group whose nodes each have a CPU of their own (``sched_setaffinity``, as ``taskset``
starts them; the warm launcher's run takes its caller's CPUs). The figure is the time from
starting radT to the command's first line, median over the rounds, and its ratio to the lone
run's and to one of the pair's (what joining a group adds before training starts, apart from two
radT sharing this host's cores, which a cluster's nodes do not); "total" is until radT exits
(the node that ends last also ends the job run and stores its figures).

Rates: one job of ``examples/ddp_train.py`` on two local nodes (``torchrun --nnodes 2
--nproc-per-node 1``, gloo on 127.0.0.1), each under its own radT. Each rank prints its own
rate (examples from its second step to its last, over that time); their sum is the job's rate
as the ranks see it; the job run's ``radt/examples_per_s`` (examples inside the job window over
its length, docs/analysis.md "Distributed jobs") must be within 2 % of it.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _common import (
    Disturbance,
    Priority,
    arguments,
    base_env,
    init_store,
    median,
    python_bin,
    radt_bin,
    reap_orphans,
    results,
    rotated,
    scratch,
    spread,
)

LINE = "print('first', flush=True)"
LATE_S = 0.5
"""How much later rank 0 starts than rank 1 in the staggered group (its host slower to start,
or Slurm starting its task later)."""
TRAIN = Path(__file__).resolve().parents[1] / "examples" / "ddp_train.py"
RATE = re.compile(r"rank (\d+) examples (\d+) rate ([0-9.]+)/s")


def first_line_s(
    argv: list[str], env: dict[str, str], cwd: Path, cpus: set[int] | None = None
) -> tuple[float, float]:
    """Start ``argv`` (on ``cpus`` when given); (seconds to its ``first`` line, seconds until
    it exits)."""
    began = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=pinned(cpus),
    )
    return _timed(proc, began)


def pinned(cpus: set[int] | None):
    """A ``preexec_fn`` that runs the child on ``cpus`` (None: wherever this process runs)."""
    if cpus is None:
        return None
    return lambda: os.sched_setaffinity(0, cpus)


def _timed(proc: subprocess.Popen, began: float) -> tuple[float, float]:
    first = None
    assert proc.stdout is not None
    for line in proc.stdout:
        if first is None and line.strip() == "first":
            first = time.perf_counter() - began
    code = proc.wait(timeout=300)
    if first is None or code != 0:
        raise RuntimeError(f"exit code {code}, first line {'seen' if first else 'not seen'}")
    return first, time.perf_counter() - began


def group_start(
    root: Path,
    env: dict[str, str],
    name: str | None,
    late_s: float = 0.0,
    cpus: tuple[set[int], set[int]] | None = None,
) -> list[tuple[float, float]]:
    """Two nodes of group ``name`` started at once, or rank 0 ``late_s`` after rank 1 (without
    a name: two lone runs started at once), rank r on ``cpus[r]`` when given: (first line s,
    total s) of rank 0 and of rank 1, each from its own start."""
    group = ["--group", name] if name else []
    argv = [radt_bin(), "-l", "none", *group, "--", python_bin(), "-c", LINE]
    timed = {}
    # each node's output read as it comes, from its start: reading one to its end first, or
    # only once both run, would time a first line when it is read, not when it was printed
    with ThreadPoolExecutor(2) as pool:
        for rank in (1, 0) if late_s else (0, 1):
            if rank == 0 and late_s:
                time.sleep(late_s)
            began = time.perf_counter()
            proc = subprocess.Popen(
                argv,
                cwd=root,
                env={**env, "RADT_NODES": "2", "RADT_NODE": f"n{rank}", "RADT_NODE_RANK": str(rank)}
                if name
                else env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                text=True,
                preexec_fn=pinned(cpus[rank] if cpus else None),
            )
            timed[rank] = pool.submit(_timed, proc, began)
        return [timed[rank].result() for rank in (0, 1)]


def startup(args, root: Path) -> tuple[str, list[list[object]]]:
    """The start-up rounds; the table's rows."""
    uri = f"sqlite:///{root / 'mlflow.db'}"
    init_store(uri)
    env = base_env(root, uri)
    lone: list[tuple[float, float]] = []
    pair: list[tuple[float, float]] = []
    nodes: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    late: list[tuple[float, float]] = []
    lone_apart: list[tuple[float, float]] = []
    apart: dict[int, list[tuple[float, float]]] = {0: [], 1: []}
    others: list[float] = []
    conditions = ["lone", "pair", "group", "late"]
    mine = sorted(os.sched_getaffinity(0))
    cpus = ({mine[0]}, {mine[1]}) if len(mine) > 1 else None
    if cpus:
        conditions += ["lone apart", "group apart"]
    for round_no, condition in rotated(conditions, args.repeats):
        with Disturbance() as dist:
            if condition == "lone":
                argv = [radt_bin(), "-l", "none", "--", python_bin(), "-c", LINE]
                lone.append(first_line_s(argv, env, root))
            elif condition == "pair":
                pair.extend(group_start(root, env, None))
            elif condition == "late":
                late.append(group_start(root, env, f"late{round_no}", LATE_S)[1])
            elif condition == "lone apart":
                argv = [radt_bin(), "-l", "none", "--", python_bin(), "-c", LINE]
                lone_apart.append(first_line_s(argv, env, root, cpus[1]))
            elif condition == "group apart":
                started = group_start(root, env, f"a{round_no}", cpus=cpus)
                for rank, timing in enumerate(started):
                    apart[rank].append(timing)
            else:
                for rank, timing in enumerate(group_start(root, env, f"g{round_no}")):
                    nodes[rank].append(timing)
            reap_orphans()
        others.append(dist.other_cores())
        print(f"round {round_no + 1}/{args.repeats} {condition} done", file=sys.stderr)
    base = median([t[0] for t in lone])
    base_pair = median([t[0] for t in pair])
    rows = []
    shown = [
        ("lone run", lone, base),
        ("two lone runs started at once (each)", pair, base),
        ("node rank 0 (creates the job run)", nodes[0], base),
        ("node rank 1 (joins it)", nodes[1], base),
        (f"node rank 1, rank 0 started {LATE_S:g} s later", late, base),
    ]
    if cpus:
        base_apart = median([t[0] for t in lone_apart])
        shown += [
            ("lone run on one CPU", lone_apart, base_apart),
            ("node rank 0, a CPU of its own", apart[0], base_apart),
            ("node rank 1, a CPU of its own (to the lone run on one CPU)", apart[1], base_apart),
        ]
    for label, timings, to in shown:
        firsts = [t[0] for t in timings]
        rows.append(
            [
                label,
                f"{median(firsts):.2f}",
                spread(firsts, ".2f"),
                f"{median(firsts) / to:.2f}",
                f"{median(firsts) / base_pair:.2f}",
                f"{median([t[1] for t in timings]):.2f}",
            ]
        )
    return f"{max(others):.2f}", rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rates(args, root: Path) -> list[list[object]]:
    """One 2-node job; the table's rows (per rank, their sum, the job run's figure)."""
    from mlflow.tracking import MlflowClient

    folder = root / "ddp"
    folder.mkdir()
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    init_store(uri)
    env = base_env(folder, uri)
    port = free_port()
    procs = []
    for rank in (0, 1):
        argv = [radt_bin(), "-l", "none", "--group", "ddp", "--", python_bin()]
        argv += ["-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(rank)]
        argv += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1"]
        argv += ["--master-port", str(port), str(TRAIN), "--steps", str(args.steps)]
        argv += ["--step-s", str(args.step_s)]
        node_env = {**env, "RADT_NODE": f"n{rank}", "RADT_NODE_RANK": str(rank)}
        procs.append(
            subprocess.Popen(
                argv, cwd=folder, env=node_env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
            )
        )
    outputs = [proc.communicate(timeout=600)[0].decode() for proc in procs]
    if any(proc.returncode for proc in procs):
        raise RuntimeError(f"exit codes {[proc.returncode for proc in procs]}")
    printed = {int(r): float(rate) for text in outputs for r, _, rate in RATE.findall(text)}
    client = MlflowClient(uri)
    (job,) = [r for r in client.search_runs(["0"]) if r.data.tags.get("radt.group.role") == "job"]
    recorded = job.data.metrics["radt/examples_per_s"]
    total = sum(printed.values())
    rows: list[list[object]] = [
        [f"rank {r} (printed)", f"{v:.1f}", "–"] for r, v in sorted(printed.items())
    ]
    rows.append(["sum of the ranks' rates", f"{total:.1f}", "–"])
    deviation = (recorded - total) / total * 100
    within = "within 2 %" if abs(deviation) <= 2 else "NOT within 2 %"
    rows.append(
        ["job run radt/examples_per_s", f"{recorded:.1f}", f"{deviation:+.2f} % ({within})"]
    )
    return rows


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="start-up rounds (default 5)")
    parser.add_argument("--steps", type=int, default=300, help="steps per rank (default 300)")
    parser.add_argument(
        "--step-s", type=float, default=0.02, help="sleep per step (default 0.02 s)"
    )
    args = parser.parse_args()
    with Priority(args.nice) as priority, scratch("groups", args.keep) as root:
        print(f"workspace: {root}; {priority.how}", file=sys.stderr)
        others, start_rows = startup(args, root)
        rate_rows = rates(args, root)
    notes = (
        f"Start-up: median of {args.repeats} interleaved rounds, seconds from starting radT to "
        "the command's first line; to lone = over a lone run's; to a pair's = over one of two "
        "lone runs started at once (the same two radT on this host's cores as a group's two "
        "nodes, whose own hosts they would be on a cluster); total = until radT exits. "
        f"Priority: {priority.how}; other processes used up to {others} cores meanwhile."
    )
    print()
    print(
        results(
            "Joining a group",
            notes,
            ["condition", "first line s", "min–max", "to lone", "to a pair's", "total s"],
            start_rows,
        )
    )
    print()
    print(
        results(
            "A 2-node job's examples/s",
            f"One job, {args.steps} steps per rank, {args.step_s} s sleep per step, gloo, "
            "two local nodes of one rank each.",
            ["figure", "examples/s", "vs the ranks' sum"],
            rate_rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

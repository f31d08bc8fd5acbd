"""Cost of ``radt.phase`` per block, and training throughput with phases and with the ``torch``
listener against plain training, side by side in one run.

    python benchmarks/phases.py                       # ~10 min on 2 busy cores
    python benchmarks/phases.py --calls 100000 --rounds 1 --steps 40   # a smoke run

**Per block.** Each condition runs in a fresh Python process that times ``--calls``
consecutive ``with ...: pass`` blocks with ``time.perf_counter`` after 1,000 untimed ones:

- *empty context manager*: a class whose ``__enter__``/``__exit__`` do nothing (the floor of
  any ``with`` block);
- *radt.phase, no radT*: without ``RADT_EVENTS`` (nothing recorded);
- *radt.phase, radT drained*: ``RADT_EVENTS`` names a real
  :class:`radt.record.events.EventReceiver` (with its phase writer) in another process, which
  counts the intervals it stored;
- *@radt.phase function, radT drained*: calls of a decorated no-op function, less a plain call.

**Throughput.** ``radt`` runs a training loop (examples/train.py's small CNN on synthetic
CIFAR-sized batches, one torch thread, ``--steps`` steps of 64 examples) that times its own
loop; conditions: *plain* (``-l none``, no phases), *phases* (``-l none``, the four
``radt.phase`` blocks of examples/train.py per step), *phases + torch listener* (``-l torch``,
its default schedule: skip 10 steps, warm up 1, record 5). Figures are examples/s over the whole
loop, every step included. Conditions run interleaved, round after round; medians over rounds.
"""

from __future__ import annotations

import json
import subprocess
import sys

from _common import (
    REPO,
    arguments,
    base_env,
    clean_env,
    median,
    python_json,
    radt_bin,
    results,
    rotated,
    scratch,
    spread,
    sqlite_store,
    table,
    with_receiver,
)

BLOCKS = r"""
import json, sys, time
calls, mode = int(sys.argv[1]), sys.argv[2]
import radt
class Empty:
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return None
def run(n):
    if mode == "empty":
        for _ in range(n):
            with Empty():
                pass
    elif mode == "decorated":
        work = radt.phase("work")(lambda: None)
        for _ in range(n):
            work()
    elif mode == "plain call":
        work = lambda: None
        for _ in range(n):
            work()
    else:
        for _ in range(n):
            with radt.phase("work"):
                pass
if mode.startswith("paced"):
    rate, seconds = (float(x) for x in mode.split(":")[1:])
    gap, made = 1.0 / rate, 0
    began = time.perf_counter()
    due = began
    while due - began < seconds:
        with radt.phase("work"):
            pass
        made += 1
        due += gap
        while time.perf_counter() < due:
            pass
    print(json.dumps({"made": made, "seconds": time.perf_counter() - began}), flush=True)
    sys.exit(0)
run(1000)
began = time.perf_counter()
run(calls)
took = time.perf_counter() - began
print(json.dumps({"us_per_call": took / calls * 1e6, "seconds": took}), flush=True)
"""

RECEIVER = r"""
import json, sys, tempfile
from pathlib import Path
from radt.record.events import EventReceiver
from radt.record.phases import PhaseWriter
folder = Path(tempfile.mkdtemp(prefix="radt-bench-phases-"))
writer = PhaseWriter(folder, print)
receiver = EventReceiver(sys.argv[1], lambda samples: None, print, writer)
print(receiver.variable, flush=True)
sys.stdin.read()
receiver.close()
print(json.dumps({"stored": writer.rows, "lost": sum(receiver.phases_lost.values())}), flush=True)
"""

TRAIN = r"""
import contextlib, json, os, sys, time
import torch
from torch import nn
import radt
sys.path.insert(0, os.environ["EXAMPLES"])
from train import small_cnn, synthetic_cifar
torch.set_num_threads(1)
torch.manual_seed(0)
steps, batch = int(os.environ["STEPS"]), 64
images, labels = synthetic_cifar(steps * batch, 0)
model = small_cnn()
optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
phase = radt.phase if os.environ["PHASES"] == "1" else (lambda name: contextlib.nullcontext())
began, cpu = time.perf_counter(), time.process_time()
for first in range(0, steps * batch, batch):
    with phase("data"):
        x, y = images[first : first + batch], labels[first : first + batch]
    with phase("forward"):
        loss = loss_fn(model(x), y)
    with phase("backward"):
        optimiser.zero_grad()
        loss.backward()
    with phase("step"):
        optimiser.step()
    radt.log_examples(batch)
took, cpu = time.perf_counter() - began, time.process_time() - cpu
print("RESULT " + json.dumps({"examples_per_s": steps * batch / took, "seconds": took,
                              "examples_per_cpu_s": steps * batch / cpu}))
"""
PACED = (20_000, 100_000)
"""Phase blocks per second for the capacity check: does radT store every one?"""

TRAINING = {
    "plain": ("none", "0"),
    "phases": ("none", "1"),
    "phases + torch listener": ("torch", "1"),
}


def blocks(calls: int, mode: str, env: dict[str, str]) -> dict:
    return python_json(BLOCKS, str(calls), mode, env=env)


def drained(calls: int, mode: str) -> dict:
    result, received = with_receiver(RECEIVER, lambda env: blocks(calls, mode, env))
    return {**result, **received}


def paced(rate: int, seconds: float) -> dict:
    """``rate`` blocks a second for ``seconds`` against a drained receiver."""
    return drained(0, f"paced:{rate}:{seconds}")


def profiler_cost(uri: str) -> dict[str, float]:
    """``torch/capture/start_ms`` and ``write_ms`` of the listener's runs (medians)."""
    from mlflow.tracking import MlflowClient

    found: dict[str, list[float]] = {"start_ms": [], "write_ms": []}
    for run in MlflowClient(uri).search_runs(["0"]):
        for name in found:
            value = run.data.metrics.get(f"system/torch/capture/{name}")
            if value is not None:
                found[name].append(value)
    return {name: median(values) for name, values in found.items()}


def train(folder, uri: str, listener: str, phases: str, steps: int) -> dict:
    env = {
        **base_env(folder, uri),
        "EXAMPLES": str(REPO / "examples"),
        "STEPS": str(steps),
        "PHASES": phases,
    }
    script = folder / "bench_train.py"
    script.write_text(TRAIN)
    done = subprocess.run(
        [radt_bin(), "-l", listener, str(script)],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
    )
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"training under radT failed ({done.returncode}):\n{done.stderr}")
    return json.loads(found[-1][len("RESULT ") :])


NOTES = """Per block: µs per ``with`` block (or decorated call), medians over the rounds;
*over the floor* subtracts the empty context manager (the plain call for the decorated form);
*stored* is what radT's phase writer kept for the whole run (timed and untimed blocks, so
calls + 1,000): a tight loop of empty blocks makes them faster than radT takes them, and
the ones over the limit are dropped and reported. *Paced*: blocks at a fixed rate, all of which
must be stored. Throughput: examples/s of the training loop as it timed itself (wall clock, and per
second of the process's own CPU time, which other processes on a busy machine disturb less),
medians over the rounds, and the change against *plain*."""


def main() -> None:
    """Run both parts, interleaved round after round, and print the two tables."""
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--calls", type=int, default=1_000_000, help="timed blocks per run")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paced-s", type=float, default=3.0, help="seconds of each paced run")
    args = parser.parse_args()
    block_conditions = {
        "empty context manager": lambda: blocks(args.calls, "empty", clean_env()),
        "radt.phase, no radT": lambda: blocks(args.calls, "phase", clean_env()),
        "radt.phase, radT drained": lambda: drained(args.calls, "phase"),
        "plain call": lambda: blocks(args.calls, "plain call", clean_env()),
        "@radt.phase function, radT drained": lambda: drained(args.calls, "decorated"),
    }
    for rate in PACED:
        block_conditions[f"paced {rate:,}/s for {args.paced_s:g} s, radT drained"] = (
            lambda rate=rate: paced(rate, args.paced_s)
        )
    per_block: dict[str, list[dict]] = {name: [] for name in block_conditions}
    per_run: dict[str, list[dict]] = {name: [] for name in TRAINING}
    with scratch("phases", keep=args.keep) as folder:
        uri = sqlite_store(folder / "store")
        everything = [("block", n) for n in block_conditions] + [("train", n) for n in TRAINING]
        for round_no, (kind, name) in rotated(everything, args.rounds):
            if kind == "block":
                per_block[name].append(block_conditions[name]())
            else:
                listener, phases = TRAINING[name]
                per_run[name].append(train(folder, uri, listener, phases, args.steps))
            print(f"round {round_no + 1}: {name} done", file=sys.stderr, flush=True)
        cost = profiler_cost(uri)
    floor = median([r["us_per_call"] for r in per_block["empty context manager"]])
    call = median([r["us_per_call"] for r in per_block["plain call"]])
    rows, capacity = [], []
    for name, done in per_block.items():
        if name.startswith("paced"):
            made = [r["made"] for r in done]
            stored = [r["stored"] for r in done]
            capacity.append(
                [
                    name,
                    f"{median(made):,.0f}",
                    f"{median(stored):,.0f}",
                    f"{median([r['lost'] for r in done]):,.0f}",
                    f"{min(s / m for s, m in zip(stored, made, strict=True)) * 100:.1f} %",
                ]
            )
            continue
        us = [r["us_per_call"] for r in done]
        base = call if "function" in name or name == "plain call" else floor
        stored = [r["stored"] for r in done if "stored" in r]
        rows.append(
            [
                name,
                f"{median(us):.3f}",
                spread(us, ".3f"),
                f"{median(us) - base:.3f}",
                f"{median(stored):,.0f}" if stored else "–",
            ]
        )
    text = results(
        "radt.phase: cost per block, and training throughput",
        NOTES,
        ["condition", "µs/block (median)", "min–max", "µs over the floor", "stored"],
        rows,
    )
    text += "\n\n" + table(
        ["paced run", "blocks made", "stored (median)", "reported lost", "stored, worst round"],
        capacity,
    )
    plain = median([r["examples_per_s"] for r in per_run["plain"]])
    plain_cpu = median([r["examples_per_cpu_s"] for r in per_run["plain"]])
    rows = []
    for name, done in per_run.items():
        rates = [r["examples_per_s"] for r in done]
        cpu = [r["examples_per_cpu_s"] for r in done]
        rows.append(
            [
                name,
                f"{median(rates):,.0f}",
                spread(rates, ",.0f"),
                f"{(median(rates) / plain - 1) * 100:+.1f} %",
                f"{median(cpu):,.0f}",
                f"{(median(cpu) / plain_cpu - 1) * 100:+.1f} %",
                f"{median([r['seconds'] for r in done]):.1f}",
            ]
        )
    columns = [
        "training (under radT)",
        "examples/s (median)",
        "min–max",
        "vs plain",
        "examples per CPU s",
        "vs plain",
        "loop s",
    ]
    text += "\n\n" + table(columns, rows)
    text += (
        "\n\nThe torch listener's one-off cost in the training process (medians): starting "
        f"the profiler {cost['start_ms']:,.0f} ms, writing the trace and table "
        f"{cost['write_ms']:,.0f} ms."
    )
    print(text)


if __name__ == "__main__":
    main()

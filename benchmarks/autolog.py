"""Training throughput with examples counted three ways: not at all, by ``radt --autolog``, by
the script's own ``radt.log_examples`` calls.

    python benchmarks/autolog.py                 # ~2 min on 2 busy cores
    python benchmarks/autolog.py --rounds 1 --steps 40   # a smoke run

The training is ``examples/train.py``'s: its small CNN on synthetic CIFAR-shaped data, with the
batches from a ``torch.utils.data.DataLoader`` (what ``--autolog`` reads) and an SGD step per
batch, run under ``radt -l none`` in every condition:

- *plain*: nothing counts the examples (the floor);
- *autolog*: the unmodified loop under ``radt --autolog``;
- *own calls*: the loop calls ``radt.log_examples(len(x))`` after each step.

The loop times itself (wall clock, and its own CPU time, which the other processes of a busy
machine disturb less) after a first epoch left out as warm-up. Conditions run interleaved, the
order rotated each round; figures are medians over rounds, as ratios to *own calls*. radT's own
figure (``radt/examples_per_s``, over the run's window) is shown for the two counted conditions.
"""

from __future__ import annotations

import json
import subprocess

from _common import (
    REPO,
    arguments,
    base_env,
    median,
    radt_bin,
    results,
    rotated,
    scratch,
    spread,
    sqlite_store,
)

TRAIN = r"""
import json, os, sys, time
sys.path.insert(0, os.environ["EXAMPLES"])
import torch
from torch.utils.data import DataLoader, TensorDataset
from synthetic_data import synthetic_cifar
from train import small_cnn

torch.manual_seed(0)
torch.set_num_threads(1)
steps, batch, mode = int(os.environ["STEPS"]), 32, os.environ["MODE"]
if mode == "own":
    import radt
images, labels = synthetic_cifar(steps * batch, 0)
loader = DataLoader(TensorDataset(images, labels), batch_size=batch, shuffle=True)
model = small_cnn()
optimiser = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
for epoch in range(3):  # the first epoch is warm-up
    began, cpu, seen = time.perf_counter(), time.process_time(), 0
    for x, y in loader:
        loss = loss_fn(model(x), y)
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        if mode == "own":
            radt.log_examples(len(x))
        seen += len(x)
    took, cpu = time.perf_counter() - began, time.process_time() - cpu
    if mode == "own":
        radt.log_epoch(epoch)
print("RESULT " + json.dumps({"examples_per_s": seen / took, "examples_per_cpu_s": seen / cpu}))
"""

CONDITIONS = {
    "plain": ("plain", []),
    "autolog": ("plain", ["--autolog"]),
    "own calls": ("own", []),
}


def train(folder, uri: str, name: str, steps: int) -> dict:
    """One training under radT in condition ``name``: its throughput and radT's figure."""
    mode, flags = CONDITIONS[name]
    env = {**base_env(folder, uri), "EXAMPLES": str(REPO / "examples"), "STEPS": str(steps)}
    env["MODE"] = mode
    script = folder / "bench_autolog.py"
    script.write_text(TRAIN)
    done = subprocess.run(
        [radt_bin(), "-l", "none", "--run-name", name, *flags, str(script)],
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
    )
    found = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise SystemExit(f"training under radT failed ({done.returncode}):\n{done.stderr}")
    result = json.loads(found[-1][len("RESULT ") :])
    from mlflow.tracking import MlflowClient

    (run,) = MlflowClient(uri).search_runs(["0"], max_results=1, order_by=["start_time DESC"])
    result["radt_examples_per_s"] = run.data.metrics.get("radt/examples_per_s")
    result["examples"] = run.data.metrics.get("examples")
    return result


NOTES = """Medians over the rounds of the loop's own examples/s (wall clock and per CPU second)
in the last of three epochs, and their ratio to *own calls*; *radT examples/s*: radT's figure
over the run's window (from the first counted example); *examples*: what radT counted."""


def main() -> None:
    """Run the three conditions interleaved and print the table."""
    parser = arguments(__doc__, machine=False)
    parser.add_argument("--steps", type=int, default=100, help="batches of 32 per epoch")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    done: dict[str, list[dict]] = {name: [] for name in CONDITIONS}
    with scratch("autolog", keep=args.keep) as folder:
        uri = sqlite_store(folder / "store")
        for _, name in rotated(list(CONDITIONS), args.rounds):
            done[name].append(train(folder, uri, name, args.steps))
    own = median([r["examples_per_s"] for r in done["own calls"]])
    own_cpu = median([r["examples_per_cpu_s"] for r in done["own calls"]])
    rows = []
    for name, rounds in done.items():
        rates = [r["examples_per_s"] for r in rounds]
        cpu = [r["examples_per_cpu_s"] for r in rounds]
        figure = [r["radt_examples_per_s"] for r in rounds if r["radt_examples_per_s"]]
        counted = {r["examples"] for r in rounds}
        rows.append(
            [
                name,
                f"{median(rates):,.0f}",
                spread(rates, ",.0f"),
                f"{median(rates) / own:.3f}",
                f"{median(cpu):,.0f}",
                f"{median(cpu) / own_cpu:.3f}",
                f"{median(figure):,.0f}" if figure else "–",
                ", ".join(f"{c:,.0f}" for c in counted if c) or "–",
            ]
        )
    columns = [
        "training (under radT)",
        "examples/s",
        "min–max",
        "÷ own calls",
        "per CPU s",
        "÷ own calls",
        "radT examples/s",
        "examples",
    ]
    print(
        results("Counting examples: --autolog against the script's own calls", NOTES, columns, rows)
    )


if __name__ == "__main__":
    main()

"""Train a small CNN on synthetic CIFAR-shaped data; logs its loss with plain MLflow.

Runs on a CPU in seconds. Under radT (``radt examples/train.py --epochs 1``)
the loss lands in the run radT created, through ``MLFLOW_RUN_ID``, and
``radt.log_examples``/``radt.log_epoch`` record examples and epochs for the
time- and energy-per-example summaries, and ``radt.phase`` marks the phases of
each step (data, forward, backward, step) for ``radt.phases`` (time and energy
share per phase; with ``-l torch`` they show in the profiler's trace too). On
its own it makes a run of its own.
"""

from __future__ import annotations

import argparse
import time

import mlflow
import torch
from torch import nn

import radt


def parse_args() -> argparse.Namespace:
    """Read the training options."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--examples", type=int, default=4096, help="examples per epoch")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return parser.parse_args()


def synthetic_cifar(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``n`` 3x32x32 images with 10 learnable classes (class-dependent means)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=generator)
    centres = torch.randn(10, 3, 1, 1, generator=generator)
    images = torch.randn(n, 3, 32, 32, generator=generator) * 0.5 + centres[labels]
    return images, labels


def small_cnn() -> nn.Module:
    """A CIFAR-sized convolutional network, small enough for a CPU."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def main() -> None:
    """Train, logging loss per step and throughput per epoch."""
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    images, labels = synthetic_cifar(args.examples, args.seed)
    model = small_cnn().to(args.device)
    optimiser = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    for epoch in range(args.epochs):
        began = time.perf_counter()
        order = torch.randperm(args.examples)
        for first in range(0, args.examples, args.batch_size):
            with radt.phase("data"):
                index = order[first : first + args.batch_size]
                x, y = images[index].to(args.device), labels[index].to(args.device)
            with radt.phase("forward"):
                loss = loss_fn(model(x), y)
            with radt.phase("backward"):
                optimiser.zero_grad()
                loss.backward()
            with radt.phase("step"):
                optimiser.step()
            radt.log_examples(len(index))
            if step % 10 == 0:
                mlflow.log_metric("loss", loss.item(), step=step)
            step += 1
        seconds = time.perf_counter() - began
        throughput = args.examples / seconds
        mlflow.log_metric("examples_per_s", throughput, step=epoch)
        print(f"epoch {epoch}: loss {loss.item():.4f}, {throughput:.0f} examples/s", flush=True)
        radt.log_epoch(epoch)


if __name__ == "__main__":
    main()

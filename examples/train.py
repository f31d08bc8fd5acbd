"""Train a small CNN on synthetic CIFAR-shaped data; logs its loss with plain MLflow.

Runs on a CPU in seconds. Under radT (``radt examples/train.py --epochs 1``)
the loss lands in the run radT created, through ``MLFLOW_RUN_ID``: one
``mlflow.log_metrics`` call per epoch (its mean loss and examples/s), never
inside the steps, whose time would then measure MLflow (a first call takes about
a second, later ones ~0.1 s); and
``radt.log_examples``/``radt.log_epoch`` record examples and epochs for the
time- and energy-per-example summaries (its last line, ``steady state: N examples/s``, is
measured over the span of radT's default window, from the end of epoch 0 to the last batch,
so that it is the figure ``radt runs`` shows), and ``radt.phase`` marks the phases of
each step (data, forward, backward, step) for ``radt.phases`` (time and energy
share per phase; with ``-l torch`` they show in the profiler's trace too). On
its own it makes a run of its own.

``--augment N`` loads through a DataLoader that augments every example (N blur
passes: CPU-costly, like decoding real images); ``--shared-loader`` takes its
batches from a shared loader instead (``examples/loader.py``, a TensorSocket
producer that radT starts for a plan row with ``Role=loader``). A training that
waits longer than ``--loader-timeout`` seconds for the loader exits with code 3
and says why.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import math
import os
import sys
import threading
import time
from collections.abc import Iterator

import mlflow
import torch
from synthetic_data import (
    augmented_loader,
    import_tensorsocket,
    loader_ports,
    synthetic_cifar,
)
from torch import nn

import radt

LOADER_EXIT_CODE = 3


def parse_args() -> argparse.Namespace:
    """Read the training options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--examples", type=int, default=4096, help="examples per epoch")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--augment", type=int, default=0, help="augment each example with N blur passes"
    )
    parser.add_argument(
        "--shared-loader", action="store_true", help="take batches from a shared loader"
    )
    parser.add_argument(
        "--loader-timeout",
        type=float,
        default=300.0,
        help="seconds to wait for the shared loader before giving up (default 300)",
    )
    return parser.parse_args()


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


class Watchdog:
    """Ends the process (exit code 3, one line on stderr) when a wait lasts too long."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._since: float | None = None
        self._what = ""
        threading.Thread(target=self._watch, daemon=True).start()

    @contextlib.contextmanager
    def waiting(self, what: str) -> Iterator[None]:
        """Time the block: if it lasts longer than the timeout, say ``what`` and exit."""
        self._what, self._since = what, time.monotonic()
        try:
            yield
        finally:
            self._since = None

    def _watch(self) -> None:
        while True:
            since = self._since
            if since is not None and time.monotonic() - since > self.timeout_s:
                print(
                    f"train.py: error: {self._what} for {self.timeout_s:g} s; giving up",
                    file=sys.stderr,
                    flush=True,
                )
                os._exit(LOADER_EXIT_CODE)
            time.sleep(0.1)


def own_batches(args: argparse.Namespace) -> Iterator[Iterator[tuple]]:
    """Each epoch's batches from this process: plain indexing, or an augmenting DataLoader."""
    if args.augment:
        loader = augmented_loader(args.examples, args.batch_size, args.seed, args.augment)
        for _ in range(args.epochs):
            yield iter(loader)
        return
    images, labels = synthetic_cifar(args.examples, args.seed)
    for _ in range(args.epochs):
        order = torch.randperm(args.examples)
        yield (
            (images[index], labels[index])
            for index in (
                order[first : first + args.batch_size]
                for first in range(0, args.examples, args.batch_size)
            )
        )


def shared_batches(args: argparse.Namespace) -> Iterator[Iterator[tuple]]:
    """Each epoch's batches from the shared loader (a ``tensorsocket.TensorConsumer``)."""
    TensorConsumer = import_tensorsocket().TensorConsumer  # noqa: N806 - a class

    ports = loader_ports("train.py")
    watchdog = Watchdog(args.loader_timeout)
    with watchdog.waiting(f"no answer from the shared loader on 127.0.0.1:{ports.port}"):
        consumer = TensorConsumer(
            ports.port, ports.ack_port, ports.heart_ports, batch_size=args.batch_size
        )

    def epoch() -> Iterator[tuple]:
        while True:
            with watchdog.waiting(f"no batch from the shared loader on 127.0.0.1:{ports.port}"):
                try:
                    batch = next(consumer)
                except StopIteration:
                    return
            yield batch

    for _ in range(args.epochs):
        yield epoch()


class SteadyState:
    """The training's examples/s over the span radT's default window covers, to compare with
    ``radt runs``: from the end of epoch 0 (with one epoch: from the first batch, which it leaves
    out) to the last batch; what the script does after its last batch (logging, printing) is not
    in it. The per-epoch rates also hold each epoch's first batch and none of its tail."""

    def __init__(self, epochs: int) -> None:
        self.from_epoch = epochs >= 2  # radT's warm-up: the first epoch when there are two
        self.start_t = self.end_t = math.nan
        self.start_n = self.n = 0

    def counted(self, n: int) -> None:
        """After each ``radt.log_examples(n)`` call."""
        self.n += n
        self.end_t = time.time()
        if not self.from_epoch and self.n == n:  # the first batch ends the warm-up
            self.start_t, self.start_n = self.end_t, self.n

    def epoch_end(self, epoch: int) -> None:
        """Just before ``radt.log_epoch(epoch)``."""
        if self.from_epoch and epoch == 0:
            self.start_t, self.start_n = time.time(), self.n

    def line(self) -> str:
        """What the script prints at its end."""
        seconds, examples = self.end_t - self.start_t, self.n - self.start_n
        span = "the end of epoch 0" if self.from_epoch else "the first batch"
        if not seconds > 0 or not examples:
            return f"steady state: no examples after {span} (radT's window is empty too)"
        return (
            f"steady state: {examples / seconds:.0f} examples/s ({examples} examples in "
            f"{seconds:.2f} s, from {span} to the last batch: radT's default window)"
        )


def main() -> None:
    """Train, logging the mean loss and the throughput once per epoch."""
    args = parse_args()
    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = small_cnn().to(args.device)
    optimiser = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    epochs = shared_batches(args) if args.shared_loader else own_batches(args)
    steps = math.ceil(args.examples / args.batch_size)  # batches per epoch, either way
    steady = SteadyState(args.epochs)
    for epoch, batches in enumerate(epochs):
        began = time.perf_counter()
        seen = 0
        loss_sum = torch.zeros((), device=args.device)  # summed on the device: no sync per step
        batches = iter(batches)
        for index in itertools.count():
            # fetching a batch (and augmenting it, or waiting for the shared loader) is the
            # "data" phase; the fetch that finds the epoch's end is no step's
            loading = radt.phase("data") if index < steps else contextlib.nullcontext()
            with loading:
                batch = next(batches, None)
                if batch is None:
                    break
                x, y = batch[0].to(args.device), batch[1].to(args.device)
            with radt.phase("forward"):
                loss = loss_fn(model(x), y)
            with radt.phase("backward"):
                optimiser.zero_grad()
                loss.backward()
            with radt.phase("step"):
                optimiser.step()
            radt.log_examples(len(y))
            steady.counted(len(y))
            seen += len(y)
            loss_sum += loss.detach()
        seconds = time.perf_counter() - began
        throughput = seen / seconds
        mean_loss = loss_sum.item() / max(index, 1)
        mlflow.log_metrics({"loss": mean_loss, "examples_per_s": throughput}, step=epoch)
        print(
            f"epoch {epoch}: loss {mean_loss:.4f}, {throughput:.0f} examples/s ({seen} examples)",
            flush=True,
        )
        steady.epoch_end(epoch)
        radt.log_epoch(epoch)
    print(steady.line(), flush=True)


if __name__ == "__main__":
    main()

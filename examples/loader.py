"""One shared data loader for collocated trainings: examples/train.py's data over TensorSocket.

In a radT plan this is the workload's ``Role=loader`` row: radT starts it first,
hands it and every training the ports (``RADT_LOADER_*``) and the number of
trainings (``RADT_LOADER_CONSUMERS``), and starts the trainings
(``examples/train.py --shared-loader``) once it listens. It decodes and augments
each batch once (the same synthetic data and CPU-costly augmentation as
``train.py --augment``) and sends it to every training: a
``tensorsocket.TensorProducer`` around a DataLoader.

What tensorsocket 0.0.5 needs, and what this script does about it:
- every consumer must be connected before the first epoch starts (one that joins
  later is ignored until the next epoch, and then misses one): it waits for
  ``--consumers`` of them (at most ``--wait`` seconds);
- each epoch it sends the batches in windows of ``producer_batch_size`` loader
  batches and never sends the window that holds the loader's last batch: the
  window size here divides the epoch's batch count and one spare batch ends each
  epoch, so every batch is delivered (the spare never is);
- batches must all have the same size: the last partial batch is dropped;
- a consumer that misses one 0.5 s heartbeat is dropped and loses its place in
  the epoch: here it is dropped only after ``MISSED_BEATS`` missed beats in a row;
- between epochs the producer waits for every consumer in a busy loop, and for a
  dead one forever: this script waits for the live ones, sleeping;
- on a CPU, each message would carry its whole window (the slice's storage):
  batches are sent as compact copies instead.
It binds to 127.0.0.1 only (tensorsocket binds every interface by default), and
keeps the logging that importing tensorsocket turns on for everything (DEBUG, on
stdout) off.
After the last epoch it stays until its trainings have gone (radT ends it with
SIGTERM once they have ended); SIGTERM ends it cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

import torch
from synthetic_data import augmented_loader, import_tensorsocket, loader_ports

tensorsocket = import_tensorsocket()
TensorProducer = tensorsocket.TensorProducer

MISSED_BEATS = 20
"""Heartbeats (0.5 s each) a consumer may miss in a row before it counts as gone."""
MAX_WINDOW = 8
"""tensorsocket's default ``producer_batch_size``."""


def parse_args() -> argparse.Namespace:
    """Read the loader's options (the data options are train.py's)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--examples", type=int, default=4096, help="examples per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--augment", type=int, default=2, help="blur passes per example")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads (default 1; 0: torch's default)"
    )
    parser.add_argument(
        "--consumers",
        type=int,
        default=int(os.environ.get("RADT_LOADER_CONSUMERS", "1")),
        help="trainings to wait for before the first epoch (default: $RADT_LOADER_CONSUMERS)",
    )
    parser.add_argument(
        "--wait", type=float, default=300.0, help="seconds to wait for them (default 300)"
    )
    return parser.parse_args()


class SpareEnd:
    """A loader that yields one spare batch after its last one (see the module notes)."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader) + 1

    def __iter__(self):
        batch = None
        for batch in self.loader:
            yield batch
        yield batch


def window_for(batches: int) -> int:
    """The largest window of at most ``MAX_WINDOW`` loader batches that divides ``batches``."""
    return max(size for size in range(1, MAX_WINDOW + 1) if batches % size == 0)


def compact(data: tuple) -> tuple:
    """Each tensor of a batch as a copy of its own, so that pickling sends only the slice."""
    return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in data)


def tolerate_missed_beats(producer: TensorProducer, beats: int) -> None:
    """Drop a consumer only after ``beats`` missed heartbeats in a row, not after one."""
    monitor = producer.hb
    missed: dict[bytes, int] = {}
    drop, accept = monitor.handle_heart_failure, monitor.handle_pong

    def on_pong(message: list) -> None:
        missed.pop(message[0], None)
        accept(message)

    def on_failure(heart: bytes) -> None:
        missed[heart] = missed.get(heart, 0) + 1
        if missed[heart] >= beats:
            del missed[heart]
            drop(heart)

    monitor.handle_heart_failure = on_failure
    monitor.pongstream.on_recv(on_pong)


def wait_for_consumers(producer: TensorProducer, count: int, timeout_s: float) -> None:
    """Block until ``count`` consumers answer the heartbeat; exit 3 after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while len(producer.hb.consumers) < count:
        if time.monotonic() > deadline:
            found = len(producer.hb.consumers)
            print(
                f"loader.py: error: only {found} of {count} trainings connected within "
                f"{timeout_s:g} s",
                file=sys.stderr,
                flush=True,
            )
            sys.exit(3)
        time.sleep(0.05)


def wait_for_epoch_end(producer: TensorProducer) -> None:
    """Sleep until every live consumer has finished the previous epoch; forget dead ones."""
    while True:
        live = set(producer.hb.consumers)
        for consumer in [c for c in producer.consumers if c not in live]:
            producer.consumers.pop(consumer)
        progress = producer.hb.heart_progress
        if all(progress.get(consumer, 0) == 0 for consumer in producer.consumers):
            return
        time.sleep(0.02)


def wait_until_alone(producer: TensorProducer) -> None:
    """Block until no consumer answers the heartbeat any more."""
    while producer.hb.consumers:
        time.sleep(0.1)


def close(producer: TensorProducer) -> None:
    """Stop the heartbeat and flush what is still queued for the consumers."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    producer.join()
    for sock in (producer.socket, producer.ack_socket):
        sock.close(linger=5000)
    producer.context.term()


def main() -> None:
    """Serve ``--epochs`` epochs to ``--consumers`` trainings, then end."""
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    ports = loader_ports("loader.py")
    loader = augmented_loader(
        args.examples, args.batch_size, args.seed, args.augment, drop_last=True
    )
    batches = len(loader)
    if batches == 0:
        sys.exit(f"loader.py: error: --examples {args.examples} < --batch-size {args.batch_size}")
    tensorsocket.producer.LOCALHOST = "tcp://127.0.0.1"
    extra = {} if torch.cuda.is_available() else {"pack_fn": compact}
    producer = TensorProducer(
        SpareEnd(loader),
        ports.port,
        ports.ack_port,
        ports.heart_ports,
        producer_batch_size=window_for(batches),
        **extra,
    )
    tolerate_missed_beats(producer, MISSED_BEATS)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        served = batches * args.batch_size
        print(
            f"loader.py: listening on 127.0.0.1:{ports.port} (ack {ports.ack_port}, heartbeat "
            f"{ports.heart_ports[0]},{ports.heart_ports[1]}); {served} examples per epoch "
            f"in {batches} batches, waiting for {args.consumers} training(s)",
            flush=True,
        )
        wait_for_consumers(producer, args.consumers, args.wait)
        for epoch in range(args.epochs):
            began = time.perf_counter()
            wait_for_epoch_end(producer)
            for _ in producer:
                pass
            seconds = time.perf_counter() - began
            print(
                f"epoch {epoch}: served {served} examples to "
                f"{len(producer.consumers)} training(s), {served / seconds:.0f} examples/s",
                flush=True,
            )
        wait_until_alone(producer)
    finally:
        close(producer)


if __name__ == "__main__":
    main()

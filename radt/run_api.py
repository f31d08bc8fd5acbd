"""The run API for training scripts: examples, epochs and the window start, cheap, and harmless
without radT.

Under radT the launcher names, in ``RADT_EVENTS``, a Unix datagram socket it listens on
(``@radt-<run_id>``: Linux's abstract namespace). Each process of the command reports there, in
small text records (``radt1 <pid> <time> <kind> <value>``, one per line):

- ``examples``: the process's cumulative example count at ``time``, sent at once for the first
  :func:`log_examples` call, then at most once a second, and at :func:`log_epoch`,
  :func:`start_window` and interpreter exit, always with the time of the last
  :func:`log_examples` call it includes (or of the epoch / window call);
- ``epoch``: the epoch just finished, at the time of :func:`log_epoch`;
- ``window``: a :func:`start_window` mark.

``time`` is the script's own ``time.time()``, read once per call. Sending never blocks: when radT
cannot take a record now (its queue is full) the record is kept and goes with the next one; at
exit radT gets a moment to drain. Nothing here talks to MLflow. Without radT every call is a
no-op after a one-time notice, so one script works both ways.
"""

from __future__ import annotations

import atexit
import collections
import os
import socket
import sys
import threading
import time
from typing import Any

PROTOCOL = "radt1"
SEND_EVERY_S = 1.0
"""Between the exact moments, a process sends its counter at most this often."""
EXIT_WAIT_S = 1.0
"""At exit, how long a process waits for radT to make room for its last records."""
MAX_PENDING = 10_000
"""Unsent records a process keeps (the oldest go first beyond this)."""
MAX_DATAGRAM_B = 16_384


class _Channel:
    """One process's counter and its way to radT; re-made in a forked child."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.on = False
        self.decided = False
        self.noticed = False
        self.pid = os.getpid()
        self.total = 0
        self.calls = 0
        self.last_t = 0.0
        """Time of the last log_examples call."""
        self.sent_t = float("-inf")
        """Time carried by the last counter record made (the once-a-second clock)."""
        self.sent_total = 0
        self.pending: collections.deque[str] = collections.deque(maxlen=MAX_PENDING)
        self.address: str = ""
        self.sock: socket.socket | None = None
        self.max_steps = 0
        """``RADT_MAX_STEPS``: end the script after this many log_examples calls (0: never)."""

    def start(self) -> bool:
        """Decide once per process whether radT listens; True when it does."""
        with self.lock:
            if self.decided:
                return self.on
            self.decided = True
            name = os.environ.get("RADT_EVENTS", "")
            steps = os.environ.get("RADT_MAX_STEPS", "")
            self.max_steps = int(steps) if steps.isdigit() else 0
            if name:
                try:
                    self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self.sock.setblocking(False)
                except (OSError, AttributeError):  # no Unix sockets here
                    self.sock = None
                else:
                    self.address = "\0" + name[1:] if name.startswith("@") else name
                    self.on = True
                    atexit.register(_at_exit)
                    return True
        if not self.noticed:
            self.noticed = True
            print(
                "radt: not running under radT; radt.log_examples/log_epoch/start_window do "
                "nothing (run the script as `radt script.py` to record them)",
                file=sys.stderr,
            )
        return False

    def after_fork(self) -> None:
        """In a forked child: a fresh counter of its own, nothing inherited to send."""
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.total = self.calls = self.sent_total = 0
        self.last_t = 0.0
        self.sent_t = float("-inf")
        self.pending = collections.deque(maxlen=MAX_PENDING)

    def counter(self, t: float) -> None:
        """Queue the counter at ``t`` (lock held)."""
        self.pending.append(f"{PROTOCOL} {self.pid} {t!r} examples {self.total}\n")
        self.sent_t, self.sent_total = t, self.total

    def mark(self, t: float, kind: str, value: float | int) -> None:
        """Queue a mark at ``t`` (lock held)."""
        self.pending.append(f"{PROTOCOL} {self.pid} {t!r} {kind} {value!r}\n")

    def send(self, wait_s: float = 0.0) -> None:
        """Send what is queued (lock held); keep what radT cannot take now.

        ``wait_s`` > 0 retries a full queue for that long (at exit only).
        """
        if self.sock is None:
            return
        deadline = time.monotonic() + wait_s if wait_s else 0.0
        while self.pending:
            chunk, size = [], 0
            for line in self.pending:
                if chunk and size + len(line) > MAX_DATAGRAM_B:
                    break
                chunk.append(line)
                size += len(line)
            try:
                self.sock.sendto("".join(chunk).encode(), self.address)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return
                time.sleep(0.005)
                continue
            except OSError:  # radT is gone (or never listened): nothing will take them
                return
            for _ in chunk:
                self.pending.popleft()


_channel = _Channel()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_channel.after_fork)


def _at_exit() -> None:
    channel = _channel
    if channel.pid != os.getpid():
        return
    # A timeout, not a deadlock, if a signal handler ended the process inside a call.
    locked = channel.lock.acquire(timeout=EXIT_WAIT_S)
    try:
        if channel.calls and channel.total != channel.sent_total:
            channel.counter(channel.last_t)
        channel.send(EXIT_WAIT_S)
    finally:
        if locked:
            channel.lock.release()


def log_examples(n: int) -> None:
    """Count ``n`` more examples processed (call after each batch; cheap: no system call).

    The first call, then the running total at most once a second, reach radT. Under a
    batch-size probe (``RADT_MAX_STEPS=N``, set by a study) the script ends cleanly (status 0)
    after the N-th call.
    """
    channel = _channel
    if not channel.on and (channel.decided or not channel.start()):
        return
    t = time.time()
    lock = channel.lock
    lock.acquire()  # not a system call unless another thread holds it
    try:
        channel.total += int(n)
        channel.calls += 1
        channel.last_t = t
        done = 0 < channel.max_steps <= channel.calls
        if not done and channel.calls > 1 and 0.0 <= t - channel.sent_t < SEND_EVERY_S:
            return
        channel.counter(t)
        channel.send()
    finally:
        lock.release()
    if done:
        print(
            f"radt: RADT_MAX_STEPS={channel.max_steps} steps done (a batch-size probe); "
            "ending the run",
            file=sys.stderr,
            flush=True,
        )
        sys.exit(0)


def _marked(kind: str, value: float | int) -> None:
    channel = _channel
    if not channel.on and not channel.start():
        return
    t = time.time()
    with channel.lock:
        if channel.calls:
            channel.counter(t)
        channel.mark(t, kind, value)
        channel.send()


def log_epoch(epoch: int) -> None:
    """Mark the end of epoch ``epoch`` (0-based, the one just finished), with the count so far.

    Under a plan or ``radt --max-epochs N``, the script exits cleanly (status
    0) once N epochs are done, as the original radT does.
    """
    _marked("epoch", int(epoch))
    if not _channel.on:
        return
    limit = os.environ.get("RADT_MAX_EPOCHS")
    if limit and int(epoch) + 1 >= int(limit):
        print(f"radt: --max-epochs {limit} reached; ending the run", file=sys.stderr, flush=True)
        sys.exit(0)


def start_window() -> None:
    """Mark the start of the steady state: the run's window begins here, not at the first epoch.

    Call it once warm-up is over (caches filled, compilation done); what comes before is left
    out of the per-example figures.
    """
    _marked("window", 1)


def flush() -> None:
    """Send the running total now (``radt.Run`` does this on leaving its ``with`` block)."""
    channel = _channel
    if not channel.on:
        return
    with channel.lock:
        if channel.calls and channel.total != channel.sent_total:
            channel.counter(channel.last_t)
        channel.send()


class Run:
    """``with radt.Run() as run:`` — the run API plus MLflow's logging calls on radT's run.

    Without radT, ``log_examples``/``log_epoch`` do nothing and MLflow's calls
    behave as plain MLflow (they log to MLflow's own active run).
    """

    def __enter__(self) -> Run:
        if not _channel.on:
            _channel.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        flush()

    @property
    def run_id(self) -> str | None:
        """radT's run id, or None without radT."""
        return os.environ.get("RADT_RUN_ID")

    log_examples = staticmethod(log_examples)
    log_epoch = staticmethod(log_epoch)
    start_window = staticmethod(start_window)

    def log_metric(self, key: str, value: float, step: int | None = None) -> None:
        """``mlflow.log_metric`` into this run."""
        import mlflow

        mlflow.log_metric(key, value, step=step, run_id=self.run_id)

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """``mlflow.log_metrics`` into this run."""
        import mlflow

        mlflow.log_metrics(metrics, step=step, run_id=self.run_id)

    def log_param(self, key: str, value: Any) -> None:
        """``mlflow.log_param`` into this run."""
        import mlflow

        if self.run_id:
            mlflow.MlflowClient().log_param(self.run_id, key, value)
        else:
            mlflow.log_param(key, value)

"""The run API for training scripts: examples, epochs, the window start, steps and phases, cheap,
and harmless without radT.

Under radT the launcher names, in ``RADT_EVENTS``, a Unix datagram socket it listens on
(``@radt-<run_id>``: Linux's abstract namespace). Each process of the command reports there, in
small text records (``radt1 <pid> <time> <kind> <value>``, one per line):

- ``examples``: the process's cumulative example count at ``time``, sent at once for the first
  :func:`log_examples` call, then at most once a second, and at :func:`log_epoch`,
  :func:`start_window` and interpreter exit, always with the time of the last
  :func:`log_examples` call it includes; at an epoch or window mark the same count is sent
  again with the mark's time (nothing was counted in between: the counter's value there);
- ``epoch``: the epoch just finished, at the time of :func:`log_epoch`;
- ``window``: a :func:`start_window` mark;
- ``source``: who counts the process's examples from now on (value = 1 ``autolog``,
  2 ``callback``, 3 ``script``), sent when that changes: a script's own :func:`log_examples`
  calls win over a framework callback (:mod:`radt.autologging.transformers`,
  :mod:`radt.autologging.lightning`), which wins over
  ``radt --autolog`` (:mod:`radt.autologging`); the winner's count replaces the others';
- ``phase``: one finished :func:`phase` interval, in a record of six fields,
  ``radt1 <pid> <start> phase <end> <name>`` (the name percent-encoded), sent in batches at most
  once a second and at exit; ``phases_lost``: how many intervals a process had to drop because
  radT could not take them (value = the count).

``time`` is the script's own ``time.time()``, read once per call. Sending never blocks: when radT
cannot take a record now (its queue is full) the record is kept and goes with the next one; at
exit radT gets a moment to drain. Nothing here talks to MLflow. Without radT every call is a
no-op after a one-time notice, so one script works both ways.

:func:`step` (and :func:`log_examples`) also advance the PyTorch profiler when radT's ``torch``
listener asked for it through the environment (``RADT_IN_PROCESS`` names the listener's
in-process part); without that variable nothing of the profiler is imported.
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import os
import pkgutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from radt.console import install_lines
from radt.listener import IN_PROCESS_ENV

log = logging.getLogger(__name__)

T = TypeVar("T")

PROTOCOL = "radt1"
SEND_EVERY_S = 1.0
"""Between the exact moments, a process sends its counter at most this often."""
EXIT_WAIT_S = 1.0
"""At exit, how long a process waits for radT to make room for its last records."""
MAX_PENDING = 10_000
"""Unsent records a process keeps (the oldest go first beyond this)."""
MAX_DATAGRAM_B = 60_000
"""Records per datagram up to this size (radT reads up to 64 KiB)."""
RETRY_S = 0.05
"""Phase records radT could not take yet are tried again this much later."""
MAX_PHASES_PENDING = 200_000
"""Finished phase intervals a process keeps unsent (beyond this the newest are dropped and
counted: ``phases_lost``)."""


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
        self.phases: list[tuple[str, float, float]] = []
        """Finished phase intervals not yet formatted: ``(name, start, end)``."""
        self.phase_lines: collections.deque[str] = collections.deque()
        self.phases_lost = 0
        self.phases_sent_t = 0.0
        """When the phase intervals were last formatted and sent (the once-a-second clock)."""
        self.address: str = ""
        self.sock: socket.socket | None = None
        self.max_steps = 0
        """``RADT_MAX_STEPS``: end the script after this many log_examples calls (0: never)."""
        self.source = 0
        """Who counts this process's examples (an index of :data:`SOURCES`; 0: nobody yet)."""
        self.script_epochs = False
        """Whether the script marks its own epochs (:func:`log_epoch`)."""

    def start(self) -> bool:
        """Decide once per process whether radT listens; True when it does."""
        with self.lock:
            if self.decided:
                return self.on
            self.decided = True
            install_lines()  # this process's lines from radT (the notice, the epoch limit)
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
                    _start_profiler()
                    return True
        if not self.noticed:
            self.noticed = True
            log.warning(
                "not running under radT; radt.log_examples/log_epoch/start_window/phase "
                "record nothing (run the script as `radt script.py` to record them)"
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
        self.phases = []
        self.phase_lines = collections.deque()
        self.phases_lost = 0
        self.phases_sent_t = 0.0
        self.source = 0
        self.script_epochs = False
        global _profiler
        _profiler = None  # the parent's profiler is the parent's

    def counter(self, t: float) -> None:
        """Queue the counter at ``t`` (lock held)."""
        self.pending.append(f"{PROTOCOL} {self.pid} {t!r} examples {self.total}\n")
        self.sent_t, self.sent_total = t, self.total

    def mark(self, t: float, kind: str, value: float | int) -> None:
        """Queue a mark at ``t`` (lock held)."""
        self.pending.append(f"{PROTOCOL} {self.pid} {t!r} {kind} {value!r}\n")

    def format_phases(self, t: float) -> None:
        """Turn the finished phase intervals into records (lock held)."""
        self.phases_sent_t = t
        count = len(self.phases)
        if not count:
            return
        done = self.phases[:count]
        del self.phases[:count]  # intervals other threads add meanwhile stay for the next time
        room = MAX_PHASES_PENDING - len(self.phase_lines)
        if len(done) > room:
            self.phases_lost += len(done) - max(room, 0)
            done = done[: max(room, 0)]
        head = f"{PROTOCOL} {self.pid} "
        names = _phase_names
        self.phase_lines.extend(
            f"{head}{start!r} phase {end!r} {names.get(name) or _encode(name)}\n"
            for name, start, end in done
        )

    def send(self, wait_s: float = 0.0) -> None:
        """Send what is queued (lock held), counter and marks first; keep what radT cannot take.

        ``wait_s`` > 0 retries a full queue for that long (at exit only).
        """
        if self.sock is None:
            return
        deadline = time.monotonic() + wait_s if wait_s else 0.0
        for queue in (self.pending, self.phase_lines):
            while queue:
                chunk, size = [], 0
                for line in queue:
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
                    queue.popleft()


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
        now = time.time()
        channel.format_phases(now)
        if channel.phases_lost:
            channel.mark(now, "phases_lost", channel.phases_lost)
        channel.send(EXIT_WAIT_S)
    finally:
        if locked:
            channel.lock.release()


SOURCES = ("", "autolog", "callback", "script")
"""Who counted a process's examples, by rising precedence (the ``source`` record's value)."""
SCRIPT = SOURCES.index("script")


def log_examples(n: int) -> None:
    """Count ``n`` more examples processed (call after each batch; cheap: no system call).

    The first call, then the running total at most once a second, reach radT. Under a
    batch-size probe (``RADT_MAX_STEPS=N``, set by a study) the script ends cleanly (status 0)
    after the N-th call. The script's own calls replace what ``radt --autolog`` or a framework
    callback counted in this process.
    """
    count_examples(n, SCRIPT)


def count_examples(n: int, source: int) -> None:
    """Count ``n`` more examples on behalf of ``source`` (an index of :data:`SOURCES`).

    A count from a lower source than the process's current one is left out; the first count
    from a higher one restarts the process's total from it (said in one line when another
    source had counted).
    """
    channel = _channel
    if not channel.on and (channel.decided or not channel.start()):
        return
    t = time.time()
    if source != channel.source and not _take_over(channel, source, t):
        return
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
        profiler = _profiler
        if profiler is not None:
            profiler.step(explicit=False)
    if done:
        log.info(
            f"RADT_MAX_STEPS={channel.max_steps} steps done (a batch-size probe); ending the run"
        )
        sys.exit(0)


def _take_over(channel: _Channel, source: int, t: float) -> bool:
    """``source`` counts from now on when it ranks above the current one; False when it does not."""
    with channel.lock:
        if source < channel.source:
            return False
        if source == channel.source:
            return True
        before = channel.source
        channel.source = source
        channel.total = channel.calls = 0
        channel.sent_t = float("-inf")
        channel.mark(t, "source", source)
    if before:
        print(
            f"radt: {_SAYS[source]}: what {SOURCES[before]} counted in this process is left out "
            "(each example is counted once)",
            file=sys.stderr,
            flush=True,
        )
    return True


_SAYS = {
    2: "a framework callback (radt.autologging) counts the examples",
    3: "the script counts its own examples (radt.log_examples)",
}


def claim_examples(source: int) -> None:
    """Let ``source`` count this process's examples from now on, before its first count (a
    framework callback does so when training begins, so that ``--autolog`` stands down)."""
    channel = _channel
    if (channel.on or (not channel.decided and channel.start())) and source != channel.source:
        _take_over(channel, source, time.time())


def _marked(kind: str, value: float | int) -> None:
    channel = _channel
    if not channel.on and not channel.start():
        return
    t = time.time()
    with channel.lock:
        if channel.calls:
            if channel.total != channel.sent_total:  # the last call's count at the call's time
                channel.counter(channel.last_t)
            channel.counter(t)  # nothing counted since: the same count at the mark
        channel.mark(t, kind, value)
        channel.send()


def log_epoch(epoch: int) -> None:
    """Mark the end of epoch ``epoch`` (0-based, the one just finished), with the count so far.

    Under a plan or ``radt --max-epochs N``, the script exits cleanly (status
    0) once N epochs are done, as the original radT does. Once the script marks an epoch itself,
    ``radt --autolog`` marks none in this process.
    """
    _channel.script_epochs = True
    mark_epoch(epoch)


def mark_epoch(epoch: int) -> None:
    """:func:`log_epoch` without claiming the epochs for the script (autolog's and callbacks')."""
    _marked("epoch", int(epoch))
    if not _channel.on:
        return
    limit = os.environ.get("RADT_MAX_EPOCHS")
    if limit and int(epoch) + 1 >= int(limit):
        log.info(f"--max-epochs {limit} reached; ending the run")
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
        channel.format_phases(time.time())
        channel.send()


# --------------------------------------------------------------------------- steps and phases

_profiler: Any = None
"""The in-process part of a wrapping listener in this process (the torch listener's step
profiler), when the run has one: :attr:`radt.listener.WrappingListener.in_process`."""
_phase_names: dict[str, str] = {}
"""Phase names as sent (percent-encoded), by name."""
_nvtx: Any = None
"""``torch.cuda.nvtx`` when this process uses CUDA; None otherwise (decided at the first phase)."""
_nvtx_decided = False


def _start_profiler() -> None:
    """Make the in-process part a wrapping listener of the run declared (``RADT_IN_PROCESS``)."""
    global _profiler
    named = os.environ.get(IN_PROCESS_ENV, "")
    if not named:
        return
    try:
        _profiler = pkgutil.resolve_name(named).from_environment(os.environ)
    except Exception as exc:  # the training goes on without a profile
        log.warning(f"{named} cannot profile this process: {exc}")
        _profiler = None


def step() -> None:
    """Mark the end of a training step (call it after each optimizer step; cheap).

    Only the ``torch`` listener's profiler uses it: it skips the first steps and then records
    ``-o torch.steps=N`` of them. Without :func:`step`, each :func:`log_examples` call counts as
    a step; once a process calls :func:`step`, only :func:`step` does (counting from its first
    call).
    """
    channel = _channel
    if not channel.on and (channel.decided or not channel.start()):
        return
    profiler = _profiler
    if profiler is not None:
        profiler.step(explicit=True)


def _encode(name: str) -> str:
    from urllib.parse import quote

    encoded = quote(name, safe="")
    if len(_phase_names) < 10_000:
        _phase_names[name] = encoded
    return encoded


def _decide_nvtx() -> None:
    """NVTX ranges only where the script itself loaded torch and CUDA is there."""
    global _nvtx, _nvtx_decided
    _nvtx_decided = True
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_available():
            _nvtx = torch.cuda.nvtx
    except Exception:  # a broken CUDA set-up: no ranges, the training goes on
        _nvtx = None


class phase:  # noqa: N801 - used like a function: ``with radt.phase("forward"):``
    """Mark a phase of training: ``with radt.phase("forward"):`` or ``@radt.phase("step")``.

    Under radT each interval (its ``time.time()`` at entry and exit) is kept in the process and
    sent at most once a second and at exit (radT stores them in the artifact
    ``radt/phases.parquet``; :func:`radt.phases` gives each phase's time and energy share).
    When the script uses CUDA the interval is also an NVTX range (nsys and ncu show it), and
    while the ``torch`` listener's profiler records, a ``record_function`` range in its trace.
    Phases may nest; an interval is recorded when its block ends (also by an exception).
    One object times one block at a time: use a fresh ``radt.phase(...)`` for a nested block of
    the same name (the decorator does so on every call).
    """

    __slots__ = ("name", "started", "ranges")

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"radt.phase needs a non-empty name (a str), not {name!r}")
        self.name = name
        self.started = 0.0
        self.ranges: Any = None

    def __enter__(self) -> phase:
        if not _nvtx_decided:
            _decide_nvtx()
        if _nvtx is not None:
            _nvtx.range_push(self.name)
        profiler = _profiler
        if profiler is not None and profiler.recording:
            self.ranges = profiler.range(self.name)
        self.started = time.time()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        ended = time.time()
        if self.ranges is not None:
            self.ranges.__exit__(None, None, None)
            self.ranges = None
        if _nvtx is not None:
            _nvtx.range_pop()
        channel = _channel
        if not channel.on and (channel.decided or not channel.start()):
            return
        channel.phases.append((self.name, self.started, ended))
        if ended - channel.phases_sent_t >= SEND_EVERY_S:
            with channel.lock:
                channel.format_phases(ended)
                channel.send()
                if channel.phase_lines:  # radT's queue was full: try again soon
                    channel.phases_sent_t = ended - SEND_EVERY_S + RETRY_S

    def __call__(self, function: Callable[..., T]) -> Callable[..., T]:
        """Use as a decorator: every call of ``function`` is one interval of this phase."""
        name = self.name

        @functools.wraps(function)
        def timed(*args: Any, **kwargs: Any) -> T:
            with phase(name):
                return function(*args, **kwargs)

        return timed


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
    step = staticmethod(step)
    phase = phase

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

"""What a listener is: the protocol every source of samples follows.

A listener never talks to MLflow. It is handed a :class:`RunContext` on
``start`` and pushes :class:`Sample` tuples, or one :class:`SampleBatch` of
many samples as columns, through ``run.emit``; the recorder does the rest.
Three shapes exist (DESIGN.md), each a public base here, and a listener imports
nothing else of radT's: *polled* listeners (:class:`PolledListener`) implement
:meth:`PolledListener.poll` and are driven by the shared sampler; *streamed*
listeners (:class:`StreamedListener`) own a tool process and emit as lines
arrive; *wrapping* listeners (:class:`WrappingListener`) change the command
before it starts (:meth:`Listener.wrap`) and collect their report after it ends
(:meth:`Listener.collect`).
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from radt.quantities import (
    GPU_ENERGY,
    GPU_MEMORY,
    GPU_POWER,
    GPU_POWER_AVERAGED,
    GPU_SM_ACTIVITY,
    GPU_UTILISATION,
    HOST_CPU,
    HOST_ENERGY,
    Provides,
    per_gpu,
)
from radt.tags import capture_tag

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "GPU_ENERGY",
    "GPU_MEMORY",
    "GPU_POWER",
    "GPU_POWER_AVERAGED",
    "GPU_SM_ACTIVITY",
    "GPU_UTILISATION",
    "HOST_CPU",
    "HOST_ENERGY",
    "Client",
    "DeviceListener",
    "Listener",
    "Option",
    "PolledListener",
    "Provides",
    "RunContext",
    "Sample",
    "SampleBatch",
    "StreamedListener",
    "WrappingListener",
    "per_gpu",
    "samples_from",
]


class Sample(NamedTuple):
    """One measurement: wall-clock seconds since the epoch, metric key, value.

    The key has no ``system/`` prefix: ``top/proc/cpu_pct``,
    ``nvml/gpu0/power_w``. A value the source reports as N/A is never
    emitted (missing, not zero).
    """

    timestamp: float
    key: str
    value: float


@functools.cache
def sample_schema() -> pa.Schema:
    """The columns samples are held in, by a :class:`SampleBatch` and in the spool
    (:mod:`radt.record.spool`): ``timestamp`` (µs, UTC), ``key``, ``value``. Made on first use,
    so that importing the kit imports no pyarrow."""
    import pyarrow as pa

    return pa.schema(
        [
            ("timestamp", pa.timestamp("us", tz="UTC")),
            ("key", pa.string()),
            ("value", pa.float64()),
        ]
    )


class SampleBatch:
    """Many samples as columns: what a listener with many keys or a high rate hands over.

    ``timestamps`` are wall-clock seconds since the epoch: one number for every
    sample, or one per sample (a sequence or numpy array). ``keys`` are the
    metric keys (a sequence of str, or a pyarrow string or dictionary array),
    ``values`` the values (a sequence or numpy array of numbers). A value that
    is NaN is missing and left out, as a :class:`Sample` would never be
    emitted for it. Timestamps are kept in whole microseconds, as the spool
    keeps them. Iterating gives :class:`Sample` tuples.

    The recorder spools and decimates a batch as arrays, without a Python
    object per sample: a listener that produces thousands of samples per poll
    should return one (``poll()`` may return a ``SampleBatch``).
    """

    __slots__ = ("table",)

    def __init__(
        self,
        timestamps: float | Sequence[float] | Any,
        keys: Sequence[str] | Any,
        values: Sequence[float] | Any,
    ) -> None:
        import numpy as np
        import pyarrow as pa

        schema = sample_schema()
        if not isinstance(keys, (pa.Array, pa.ChunkedArray)):
            keys = pa.array(keys, pa.string())
        elif pa.types.is_dictionary(keys.type):
            keys = keys.cast(pa.string())
        number = np.asarray(values, dtype=np.float64)
        if number.ndim != 1 or len(number) != len(keys):
            raise ValueError(f"{len(keys)} keys but {number.size} values")
        if np.ndim(timestamps) == 0:
            micros = np.full(len(number), round(float(timestamps) * 1e6), np.int64)
        else:
            seconds = np.asarray(timestamps, dtype=np.float64)
            if seconds.shape != number.shape:
                raise ValueError(f"{len(keys)} keys but {seconds.size} timestamps")
            micros = np.rint(seconds * 1e6).astype(np.int64)
        table = pa.table(
            [pa.array(micros).cast(schema.field("timestamp").type), keys, pa.array(number)],
            schema=schema,
        )
        missing = np.isnan(number)
        self.table: pa.Table = table.filter(pa.array(~missing)) if missing.any() else table
        """The samples in the spool's columns (``timestamp``, ``key``, ``value``)."""

    @classmethod
    def from_arrow(cls, data: pa.RecordBatch | pa.Table) -> SampleBatch:
        """A batch of a table or record batch with the columns ``timestamp`` (a timestamp
        type, or seconds as numbers), ``key`` and ``value``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        stamps = data.column("timestamp")
        if pa.types.is_timestamp(stamps.type):
            seconds = pc.divide(pc.cast(stamps.cast(pa.timestamp("us")), pa.int64()), 1e6)
        else:
            seconds = stamps.cast(pa.float64())
        return cls(seconds.to_numpy(), data.column("key"), data.column("value").to_numpy())

    def __len__(self) -> int:
        return self.table.num_rows

    def __iter__(self) -> Iterator[Sample]:
        micros = self.table.column("timestamp").cast("int64").to_pylist()
        keys = self.table.column("key").to_pylist()
        values = self.table.column("value").to_pylist()
        for micro, key, value in zip(micros, keys, values, strict=True):
            yield Sample(micro / 1e6, key, value)

    def __repr__(self) -> str:
        return f"SampleBatch({len(self)} samples)"


Samples = Iterable[Sample] | SampleBatch
"""What ``emit`` takes: :class:`Sample` tuples, or a :class:`SampleBatch`."""
Emit = Callable[[Samples], None]


class Client(NamedTuple):
    """A run of a workload, as a device-scope listener sees it: a client of the device."""

    run_id: str
    pid: int
    """Process id of the run's root process (its training command)."""
    emit: Emit
    """Hands samples to that run's recorder; thread-safe."""


@dataclass
class RunContext:
    """Everything a listener may need to know about the run it observes."""

    run_id: str
    pid: int
    """Process id of the run's root process (the training command)."""
    workdir: Path
    """A folder of the run's own where a listener may keep files."""
    emit: Emit
    """Hands samples (an iterable of :class:`Sample`, or a :class:`SampleBatch`) to the
    recorder; thread-safe."""
    interval_s: float | None = None
    """Sampling interval asked for on the command line; None: the listener's default."""
    devices: Sequence[str] = field(default_factory=tuple)
    """GPU indices, GPU UUIDs or MIG UUIDs of the run; empty: all."""
    warn: Callable[[str], None] = print
    """Reports a problem to the user in one line."""
    attach: Callable[[Path, str], None] = lambda path, folder: None
    """Keeps a file as an artifact of the run, in the given artifact folder."""
    set_tag: Callable[[str, str], None] = lambda key, value: None
    """Sets a tag on the run (e.g. which energy method a listener used)."""
    options: dict[str, str] = field(default_factory=dict)
    """Options from ``-o LISTENER.KEY=VALUE`` for this listener, as ``{KEY: VALUE}``."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables the command gets on top of its own: a wrapping listener that instructs code
    inside the command (``torch``) sets them in :meth:`Listener.wrap`. Shared by the contexts
    of one run."""
    clients: Sequence[Client] = ()
    """In a workload, its runs: a device-scope listener (which records in the workload's run)
    gives each run the series of its own processes through ``Client.emit``. Empty outside a
    workload, where the run itself (``pid``, ``emit``) is the only client."""


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")
IN_PROCESS_ENV = "RADT_IN_PROCESS"
"""The variable naming the in-process part (``module:Class``) of a run's wrapping listener:
:attr:`WrappingListener.in_process` (one per run)."""
DEFAULT_RANGE = "profile"
"""The NVTX range a profiler's ``capture=nvtx`` records by default."""
CAPTURES = ("all", "nvtx", "none")
"""The words ``-o NAME.capture=`` takes."""
KINDS = {bool: "yes/no", int: "whole number", float: "number", str: "text"}


@dataclass(frozen=True)
class Option:
    """One ``-o LISTENER.KEY=VALUE`` a listener takes: its key, type, default and meaning."""

    name: str
    kind: type
    """``bool`` (1/0, true/false, yes/no, on/off), ``int``, ``float`` or ``str``."""
    default: str
    help: str
    """One line: what the option changes."""
    least: float | None = None
    """The smallest number allowed (``int`` and ``float``)."""
    positive: bool = False
    """Only numbers above 0 (``float``)."""
    choices: tuple[str, ...] = ()
    """The words allowed (``str``); empty: any text."""

    @property
    def form(self) -> str:
        """What a value looks like, in words: ``whole number ≥ 1``, ``all|nvtx``."""
        if self.choices:
            return "|".join(self.choices)
        if self.positive:
            return f"positive {KINDS[self.kind]}"
        least = "" if self.least is None else f" ≥ {self.least:g}"
        return KINDS[self.kind] + least

    @property
    def shown_default(self) -> str:
        """The default in the words of :attr:`form` (a ``bool``'s ``0`` is ``no``); ``-``
        where there is none."""
        if self.kind is bool:
            return "yes" if self.default.strip().lower() in TRUE_WORDS else "no"
        return self.default or "-"

    def problem(self, raw: str) -> str | None:
        """What is wrong with ``raw`` as this option's value; None when it is fine."""
        text = raw.strip().lower()
        if self.kind is bool:
            if text in TRUE_WORDS + FALSE_WORDS:
                return None
            return f"takes {self.form} (1/0, on/off and true/false too)"
        if self.kind in (int, float):
            try:
                number = self.kind(text)
            except ValueError:
                return f"takes a {self.form}"
            low = (self.least is not None and number < self.least) or (
                self.positive and not number > 0
            )
            if low:
                return f"takes a {self.form}"
            return None
        if self.choices and text not in self.choices:
            return f"takes one of {', '.join(self.choices)}"
        return None


def option_problem(listener: str, options: Sequence[Option], key: str, raw: str) -> str | None:
    """One line for ``-o LISTENER.KEY=VALUE`` when the key is unknown or the value wrong."""
    known = {option.name: option for option in options}
    given = f"-o {listener}.{key}={raw}"
    if key not in known:
        names = ", ".join(known) or "none"
        return (
            f"{given}: {listener} has no option {key}; its options: {names} "
            f"(`radt listeners {listener}` says what they do)"
        )
    problem = known[key].problem(raw)
    if problem is None:
        return None
    return f"{given}: {key} {problem} (`radt listeners {listener}` says what it does)"


class Listener(ABC):
    """A source of samples. Subclasses set ``name`` and implement the verbs."""

    name: ClassVar[str]
    declared_options: ClassVar[tuple[Option, ...] | None] = None
    """The ``-o`` options it takes; radT refuses any other key and a wrong value before the
    run starts. None (a plugin that declares none): its options are not checked."""
    default_interval_s: ClassVar[float] = 0.5
    on_by_default: ClassVar[bool] = True
    """Whether radT runs it when ``-l`` is not given (wrapping profilers are opt-in)."""
    records: ClassVar[str] = ""
    """What it records, in a few words (``radt listeners``; default: the class docstring's
    first line)."""
    cost: ClassVar[str] = ""
    """What running it costs the command, for an opt-in listener (``radt listeners``)."""
    provides: ClassVar[tuple[Provides, ...]] = ()
    """The quantities the analysis reads from it: ``(quantity, key pattern, priority)``, e.g.
    ``(GPU_POWER, "mylistener/gpu*/power_w", 5)``; a lower priority is preferred when several
    listeners provide one (radT's own: 10 and up). See :mod:`radt.quantities`."""
    scope: ClassVar[str] = "run"
    """``run``: it observes one command; ``device``: it observes GPUs or the host, so in a
    workload it runs once, in the workload's parent run."""

    def configure(self, options: dict[str, str]) -> None:  # noqa: B027 - optional hook
        """Take this listener's ``-o`` options before ``available()`` is asked.

        Only a listener whose availability depends on an option needs it (``rapl.root``);
        ``start`` gets the same options in ``run.options``.
        """

    def available(self) -> str | None:
        """Return None when this listener can run here, else why not, in a few words."""
        return None

    @abstractmethod
    def start(self, run: RunContext) -> None:
        """Begin observing ``run``; samples go to ``run.emit``."""

    @abstractmethod
    def stop(self) -> None:
        """Stop observing and release every resource; safe to call twice."""

    def wrap(self, argv: list[str], run: RunContext) -> list[str]:
        """Return the command to run instead of ``argv`` (wrapping listeners).

        It may also set variables for the command in ``run.env``.
        """
        return argv

    def collect(self, run: RunContext) -> None:  # noqa: B027 - optional hook
        """After the command ended: gather reports, emit or attach results."""

    def interval(self, run: RunContext) -> float:
        """The sampling interval in seconds for ``run``."""
        return run.interval_s if run.interval_s else self.default_interval_s


class DeviceListener(Listener):
    """A listener that observes GPUs or the host, not one command (``scope = "device"``).

    Named before its kind (``class PowerMeter(DeviceListener, PolledListener)``). It takes
    no ``-o`` options unless it declares some in ``declared_options``.
    """

    scope = "device"
    declared_options: ClassVar[tuple[Option, ...] | None] = ()


class PolledListener(Listener):
    """A listener read at a fixed interval by the shared sampler."""

    final_poll = False
    """Whether the sampler polls once more when it stops (at the command's end), so that
    the samples reach it however the last tick fell."""

    def __init__(self) -> None:
        self.run: RunContext | None = None

    def start(self, run: RunContext) -> None:
        self.run = run
        self.open(run)

    def open(self, run: RunContext) -> None:  # noqa: B027 - optional hook
        """Prepare handles before the first poll."""

    def stop(self) -> None:
        self.close()

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release handles after the last poll."""

    @abstractmethod
    def poll(self) -> list[Sample] | SampleBatch:
        """Return the samples of this instant: a list of :class:`Sample`, or a
        :class:`SampleBatch` when there are many."""


class StreamedListener(Listener):
    """Owns one tool process (``nvidia-smi -lms``, ``dcgmi dmon``) and always reaps it.

    Subclasses give the :meth:`command` and :meth:`parse` one line of its
    output into samples. A line that cannot be parsed (``parse`` raises) is
    skipped and counted: one warning at the first, the count at the end. A
    tool that exits on its own is reported with the end of its stderr.
    """

    stop_timeout_s: float = 3.0

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.run: RunContext | None = None
        self._reader: threading.Thread | None = None
        self._errors: threading.Thread | None = None
        self._stderr: deque[str] = deque(maxlen=20)
        self._stopping = threading.Event()
        self.lines = 0
        self.skipped = 0
        self._last_line = ""
        self._skips_reported = 0

    @abstractmethod
    def command(self, run: RunContext) -> list[str]:
        """The tool's argv."""

    @abstractmethod
    def parse(self, line: str) -> list[Sample]:
        """Samples in one line of the tool's output (may keep state, e.g. a header)."""

    def start(self, run: RunContext) -> None:
        self.run = run
        self._stopping.clear()
        self.process = subprocess.Popen(
            self.command(run),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"radt-{self.name}", daemon=True)
        self._reader.start()
        self._errors = threading.Thread(target=self._drain_stderr, daemon=True)
        self._errors.start()

    def stop(self) -> None:
        self._stopping.set()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(self.stop_timeout_s)
        if self.skipped > self._skips_reported and self.run is not None:
            self._skips_reported = self.skipped
            self.run.warn(
                f"listener {self.name}: skipped {self.skipped} of {self.lines} output lines"
            )

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        assert self.run is not None
        warned = False
        for line in self.process.stdout:
            self.lines += 1
            self._last_line = line.strip() or self._last_line
            try:
                samples = self.parse(line.rstrip("\n"))
            except Exception as exc:
                self.skipped += 1
                if not warned:
                    warned = True
                    self.run.warn(
                        f"listener {self.name}: skipping unreadable output {line!r} ({exc})"
                    )
                continue
            if samples:
                self.run.emit(samples)
        code = self.process.wait()
        if self._errors is not None:
            self._errors.join(1.0)
        if not self._stopping.is_set():
            # nvidia-smi and dcgmi print their errors on stdout.
            tail = " | ".join(self._stderr) or self._last_line or "no output"
            self.run.warn(f"listener {self.name}: its tool exited with code {code} ({tail})")

    def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            if line.strip():
                self._stderr.append(line.strip())


class WrappingListener(Listener):
    """A listener that changes the command before it starts and collects after it ends.

    Subclasses implement :meth:`Listener.wrap` and :meth:`Listener.collect`; nothing
    runs beside the command, so ``start`` only notes the time and ``stop`` does nothing.
    A profiler that is a tool (``nsys``, ``ncu``) names it in :attr:`tool` and the
    suffixes of the report it writes in :attr:`report_suffixes`; :meth:`report_base`,
    :meth:`capture` and :meth:`find_report` are the steps such a wrapper shares. A
    listener whose other half runs inside the training process (``torch``) names that
    half in :attr:`in_process`.
    """

    on_by_default = False  # a profiler changes the run: only with -l
    tool: ClassVar[str] = ""
    """The executable put in front of the command; ``available()`` says when it is missing."""
    report_suffixes: ClassVar[tuple[str, ...]] = ()
    """The suffixes of the report the tool writes after :meth:`report_base`, preferred first."""
    in_process: ClassVar[str] = ""
    """``module:Class`` of the part that runs inside the training process, or empty.

    The class has ``from_environment(env)`` (it reads what :meth:`wrap` put in ``run.env``)
    and the methods ``step(explicit)``, ``range(name)`` and the attribute ``recording``;
    the run API (:mod:`radt.run_api`) makes one at its first call when the run has it.
    """

    def __init__(self) -> None:
        self.base: Path | None = None
        self.capture_range: str | None = None
        self.started_s: float | None = None

    def available(self) -> str | None:
        if self.tool and shutil.which(self.tool) is None:
            return f"{self.tool} not found"
        return None

    def start(self, run: RunContext) -> None:
        """Nothing runs beside the command: note when it started."""
        self.started_s = time.time()

    def stop(self) -> None:
        """Nothing runs beside the command."""

    def declare_in_process(self, run: RunContext) -> None:
        """Tell the run API, through ``run.env``, to make :attr:`in_process` in the command."""
        if not self.in_process:
            return
        other = run.env.get(IN_PROCESS_ENV, self.in_process)
        if other != self.in_process:
            run.warn(f"listener {self.name}: the run already has an in-process part ({other})")
            return
        run.env[IN_PROCESS_ENV] = self.in_process

    def report_base(self, run: RunContext) -> Path:
        """The report's path without its suffix, in the run's folder ``<name>/`` (made)."""
        folder = run.workdir / self.name
        folder.mkdir(parents=True, exist_ok=True)
        self.base = folder / "report"
        return self.base

    def capture(self, run: RunContext, otherwise: str) -> str | None:
        """The NVTX range of ``-o NAME.capture=nvtx`` (``range``, default ``profile``), or None.

        Sets the tag ``radt.NAME.capture``; an unknown ``capture`` warns once that the
        listener does ``otherwise`` instead.
        """
        capture = run.options.get("capture", "all").strip().lower()
        self.capture_range = None
        if capture == "nvtx":
            self.capture_range = run.options.get("range", DEFAULT_RANGE).strip() or DEFAULT_RANGE
        elif capture not in ("all", "none", ""):
            run.warn(f"listener {self.name}: unknown capture={capture!r}; {otherwise}")
        tag = f"nvtx:{self.capture_range}" if self.capture_range else "all"
        run.set_tag(capture_tag(self.name), tag)
        return self.capture_range

    def find_report(self) -> Path | None:
        """The report the tool wrote (the first of :attr:`report_suffixes` found), or None."""
        if self.base is None:
            return None
        for suffix in self.report_suffixes:
            path = self.base.with_name(self.base.name + suffix)
            if path.is_file():
                return path
        return None

    def report_or_warn(self, run: RunContext, why: str) -> Path | None:
        """The report the tool wrote (:meth:`find_report`), or None after a warning that it
        wrote none: ``why``, and under ``capture=nvtx`` whether the range was ever opened."""
        report = self.find_report()
        if report is None:
            opened = (
                f"; was the NVTX range {self.capture_range!r} ever opened?"
                if self.capture_range
                else ""
            )
            run.warn(f"listener {self.name}: {self.tool} wrote no report ({why}{opened})")
        return report


def samples_from(timestamp: float, prefix: str, values: dict[str, float | None]) -> list[Sample]:
    """Build samples ``prefix/quantity`` at one instant, leaving out missing values."""
    return [
        Sample(timestamp, f"{prefix}/{quantity}", float(value))
        for quantity, value in values.items()
        if value is not None and not (isinstance(value, float) and math.isnan(value))
    ]

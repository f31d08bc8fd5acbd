"""``torch``: the PyTorch profiler inside the training process, on a schedule of steps.

A *wrapping* listener (DESIGN.md) whose other half runs in the script: :meth:`TorchListener.wrap`
leaves the command as it is and tells the script, through the environment, what to record and
where (``RADT_TORCH_DIR``, ``RADT_TORCH_SKIP``, ``RADT_TORCH_STEPS``, ``RADT_TORCH_TOP``).
It declares :class:`StepProfiler` as its in-process part (``in_process``): the run API
(:mod:`radt.run_api`) makes one from them at its first call and drives it: at the first
:func:`radt.step` (or :func:`radt.log_examples`) it starts ``torch.profiler.profile`` with
CPU and, when CUDA is available, CUDA activities; it skips ``skip`` steps (the warm-up), warms up
for one step and records ``steps`` steps. Then it writes, in ``<RADT_TORCH_DIR>/<pid>/``:

- ``trace.json.gz``: the Chrome trace (``export_chrome_trace``), gzipped; ``radt.phase`` blocks
  appear in it as ``user_annotation`` ranges;
- ``ops.csv``: the operators with the most self CPU time and, with CUDA, the most self CUDA time
  (up to ``top`` of each), in µs;
- ``totals.json``: what the listener logs.

Steps end at :func:`radt.step` calls; a script that never calls it has a step per
:func:`radt.log_examples` call. Once a process calls :func:`radt.step`, ``log_examples`` no longer
counts, and a profile that ``log_examples`` calls had started starts again at that first
:func:`radt.step` (the skipped steps absorb it).

Without ``RADT_TORCH_DIR`` the run API imports nothing of the profiler. After the command
ended, :meth:`TorchListener.collect` keeps the files as the artifacts ``radt/torch/trace.json.gz``
and ``radt/torch/ops.csv`` (``radt/torch/<pid>/...`` for each process when several recorded) and
emits, summed over the processes:

- ``torch/capture/steps``: steps recorded; ``torch/capture/wall_ms``: their wall time;
- ``torch/ops/self_cpu_time_ms``: self CPU time of every operator in them;
- ``torch/ops/self_cuda_time_ms``: self CUDA time (only when CUDA was recorded);
- ``torch/ops/calls`` and ``torch/ops/unique``: operator calls and distinct operators;
- ``torch/capture/start_ms`` and ``torch/capture/write_ms``: what starting the profiler and
  writing its files cost the training process (once each; the steps in between run slower
  too, as any profiled code does).

Options (``-o torch.KEY=VALUE``): ``steps`` (default 5), ``skip`` (default 10), ``top``
(default 30). A command that ends before the recorded steps are done keeps what was recorded
(with a warning); one that never calls ``radt.step``/``radt.log_examples`` has no profile.
"""

from __future__ import annotations

import atexit
import contextlib
import csv
import importlib.util
import json
import logging
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from radt.listener import Option, RunContext, WrappingListener, samples_from
from radt.tags import RADT_TORCH_ACTIVITIES, RADT_TORCH_PROCESSES, RADT_TORCH_SCHEDULE

log = logging.getLogger(__name__)

ARTIFACT_DIR = "radt/torch"
TRACE = "trace.json.gz"
OPS = "ops.csv"
TOTALS = "totals.json"
DEFAULTS = {"steps": 5, "skip": 10, "top": 30}
LEAST = {"steps": 1, "skip": 0, "top": 1}
ENV = {
    "dir": "RADT_TORCH_DIR",
    "steps": "RADT_TORCH_STEPS",
    "skip": "RADT_TORCH_SKIP",
    "top": "RADT_TORCH_TOP",
}
STEP_EVENT = "ProfilerStep"
"""``ProfilerStep#N`` ranges (``ProfilerStep*`` in ``key_averages``): steps, not operators."""
OPS_COLUMNS = (
    "name",
    "calls",
    "self_cpu_time_us",
    "cpu_time_total_us",
    "self_cuda_time_us",
    "cuda_time_total_us",
)


def _options(options: Mapping[str, str]) -> tuple[dict[str, int], str | None]:
    """The schedule options as numbers, and what is wrong with them (None when nothing)."""
    values = dict(DEFAULTS)
    for key, raw in options.items():
        if key not in DEFAULTS:
            return values, f"unknown option torch.{key} (known: {', '.join(DEFAULTS)})"
        try:
            value = int(raw)
        except ValueError:
            value = -1
        if value < LEAST[key]:
            return values, f"torch.{key}={raw!r} is not a whole number ≥ {LEAST[key]}"
        values[key] = value
    return values, None


# --------------------------------------------------------------------------- in the script


class StepProfiler:
    """The profiler in one training process, advanced once per step (see the module docstring)."""

    def __init__(self, folder: Path, skip: int, steps: int, top: int) -> None:
        self.folder = folder
        self.skip, self.steps, self.top = skip, steps, top
        self.profile: Any = None
        self.explicit = False
        """Whether the script calls radt.step() (then log_examples no longer advances)."""
        self.done = False
        self.stepped = 0
        self.recording = False
        """Whether the profiler records now (phases then open record_function ranges)."""
        self.record_started_s: float | None = None
        self.last_step_s: float | None = None
        self.cuda = False
        self.ranges: set[str] = set()
        """Names of the radt.phase ranges opened in the trace (not operators)."""
        self.discard = False
        self.registered = False
        self.start_ms = 0.0
        """Time the training process spent starting the profiler."""

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> StepProfiler:
        """The profiler radT asked for in ``env``; ValueError when the variables are wrong."""
        values, problem = _options(
            {key: env[name] for key, name in ENV.items() if key != "dir" and name in env}
        )
        if problem:
            raise ValueError(problem)
        folder = Path(env[ENV["dir"]]) / str(os.getpid())
        return cls(folder, values["skip"], values["steps"], values["top"])

    def step(self, explicit: bool) -> None:
        """One step ended (``explicit``: by radt.step(), else by radt.log_examples())."""
        restart = False
        if explicit and not self.explicit:
            self.explicit = True
            # log_examples calls came first: the steps count from this radt.step() on
            restart = self.profile is not None and not self.done
        elif not explicit and self.explicit:
            return
        if self.done:
            if self.profile is not None:
                self._stop()
            return
        try:
            if restart:
                self._restart()
                return
            if self.profile is None:
                self._start()
                return
            self.stepped += 1
            self.last_step_s = time.time()
            if self.stepped == self.skip + 1:
                self.record_started_s = self.last_step_s
            self.profile.step()
            self.recording = self.skip + 1 <= self.stepped < self.skip + 1 + self.steps
        except Exception as exc:  # a profiler failure never stops the training
            self._give_up(f"profiling failed: {exc}")

    def range(self, name: str) -> Any:
        """A ``record_function`` range named ``name``, entered (the caller exits it)."""
        from torch.profiler import record_function

        self.ranges.add(name)
        context = record_function(name)
        context.__enter__()
        return context

    def _start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        began = time.perf_counter()
        self.cuda = bool(torch.cuda.is_available())
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        self.folder.mkdir(parents=True, exist_ok=True)
        self.profile = profile(
            activities=activities,
            schedule=schedule(skip_first=self.skip, wait=0, warmup=1, active=self.steps, repeat=1),
            on_trace_ready=self._ready,
        )
        self.profile.start()
        self.start_ms += (time.perf_counter() - began) * 1e3
        if not self.registered:
            self.registered = True
            atexit.register(self.finish)

    def _restart(self) -> None:
        """Drop the profile that log_examples calls started and start again at this step."""
        profile, self.profile = self.profile, None
        self.discard = True
        try:
            profile.stop()
        finally:
            self.discard = False
        self.stepped = 0
        self.recording = False
        self.record_started_s = self.last_step_s = None
        self._start()

    def _ready(self, profile: Any) -> None:
        """The recorded steps are over: write the trace, the operator table and the totals."""
        if self.discard:
            return
        self.done = True
        self.recording = False
        # Steps end at radt.step() calls; stopped early (at exit), the step in progress is in
        # the trace but not counted, and the wall time ends at the last step.
        recorded = min(max(self.stepped - self.skip - 1, 0), self.steps)
        complete = recorded == self.steps
        ended = time.time() if complete else self.last_step_s
        if not recorded:
            self._note("the command ended before the profiler recorded a whole step")
            return
        writing = time.perf_counter()
        profile.export_chrome_trace(str(self.folder / TRACE))
        rows = operator_rows(profile.key_averages(), self.cuda, leave_out=self.ranges)
        write_ops(self.folder / OPS, top_operators(rows, self.top, self.cuda))
        totals = {
            "pid": os.getpid(),
            "steps": recorded,
            "steps_asked": self.steps,
            "skip": self.skip,
            "cuda": self.cuda,
            "ended_s": ended,
            "wall_ms": (ended - self.record_started_s) * 1e3
            if ended and self.record_started_s
            else None,
            "self_cpu_time_ms": sum(r["self_cpu_time_us"] for r in rows) / 1e3,
            "self_cuda_time_ms": (
                sum(r["self_cuda_time_us"] for r in rows) / 1e3 if self.cuda else None
            ),
            "calls": sum(r["calls"] for r in rows),
            "unique": len(rows),
            "start_ms": self.start_ms,
            "write_ms": (time.perf_counter() - writing) * 1e3,
        }
        (self.folder / TOTALS).write_text(json.dumps(totals))

    def _stop(self) -> None:
        profile, self.profile = self.profile, None
        self.recording = False
        try:
            profile.stop()
        except Exception as exc:
            self._give_up(f"stopping the profiler failed: {exc}")

    def finish(self) -> None:
        """At exit: stop the profiler; steps recorded so far are kept."""
        if self.profile is not None:
            self._stop()
        if not self.done:
            self._note("the command ended before the profiler recorded a whole step")

    def _give_up(self, reason: str) -> None:
        self.done = True
        self.recording = False
        profile, self.profile = self.profile, None
        if profile is not None:
            with contextlib.suppress(Exception):
                profile.stop()
        self._note(reason)

    def _note(self, reason: str) -> None:
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            (self.folder / TOTALS).write_text(
                json.dumps({"pid": os.getpid(), "steps": 0, "problem": reason})
            )
        log.warning(f"torch profiler: {reason}")


def operator_rows(
    events: Any, cuda: bool, leave_out: set[str] | frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """One row per operator of ``profile.key_averages()``, times in µs.

    Step ranges and the ranges named in ``leave_out`` (radt.phase blocks) are not operators.
    """
    rows = []
    for event in events:
        if event.key.startswith(STEP_EVENT) or event.key in leave_out:
            continue
        rows.append(
            {
                "name": event.key,
                "calls": int(event.count),
                "self_cpu_time_us": float(event.self_cpu_time_total),
                "cpu_time_total_us": float(event.cpu_time_total),
                "self_cuda_time_us": float(event.self_device_time_total) if cuda else None,
                "cuda_time_total_us": float(event.device_time_total) if cuda else None,
            }
        )
    return rows


def top_operators(rows: list[dict[str, Any]], top: int, cuda: bool) -> list[dict[str, Any]]:
    """The ``top`` rows by self CPU time and, with ``cuda``, the ``top`` by self CUDA time.

    Ordered by self CUDA time (with ``cuda``), then self CPU time, most first.
    """
    chosen = sorted(rows, key=lambda r: -r["self_cpu_time_us"])[:top]
    if cuda:
        chosen += sorted(rows, key=lambda r: -(r["self_cuda_time_us"] or 0.0))[:top]
    unique = {id(r): r for r in chosen}.values()
    return sorted(
        unique, key=lambda r: (-(r["self_cuda_time_us"] or 0.0), -r["self_cpu_time_us"], r["name"])
    )


def write_ops(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write the operator table (CUDA columns empty without CUDA)."""
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, OPS_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


# --------------------------------------------------------------------------- in radT


class TorchListener(WrappingListener):
    """Asks the run API to profile training steps; collects the trace and operator table."""

    name = "torch"
    declared_options = (
        Option("skip", int, str(DEFAULTS["skip"]), "steps to leave out first", least=LEAST["skip"]),
        Option("steps", int, str(DEFAULTS["steps"]), "steps to record", least=LEAST["steps"]),
        Option("top", int, str(DEFAULTS["top"]), "operators kept in the table", least=LEAST["top"]),
    )
    in_process = f"{__name__}:StepProfiler"
    records = (
        "the PyTorch profiler's trace and operator table over a few training steps "
        "(skip 10, record 5; -o torch.skip/steps)"
    )
    cost = (
        "the recorded steps run slower and writing the trace takes ~0.2 s, once: "
        "~7 % of the CPU time of 200 small steps (BENCHMARKS.md, 9)"
    )

    def __init__(self) -> None:
        super().__init__()
        self.folder: Path | None = None
        self.options = dict(DEFAULTS)
        self.problem: str | None = None

    def configure(self, options: dict[str, str]) -> None:
        self.options, self.problem = _options(options)

    def available(self) -> str | None:
        if self.problem:
            return self.problem
        if importlib.util.find_spec("torch") is None:
            return "PyTorch is not installed"
        return super().available()

    def wrap(self, argv: list[str], run: RunContext) -> list[str]:
        self.options, problem = _options(run.options)
        if problem:  # configure() saw the same options; a listener made without it lands here
            run.warn(f"listener torch: {problem}; using the defaults")
        self.folder = run.workdir / "torch"
        self.folder.mkdir(parents=True, exist_ok=True)
        run.env[ENV["dir"]] = str(self.folder)
        for key in DEFAULTS:
            run.env[ENV[key]] = str(self.options[key])
        schedule = f"skip {self.options['skip']}, record {self.options['steps']}"
        run.set_tag(RADT_TORCH_SCHEDULE, schedule)
        return argv

    def collect(self, run: RunContext) -> None:
        folder = self.folder or run.workdir / "torch"
        found = sorted(
            (p for p in folder.glob(f"*/{TOTALS}") if p.parent.name.isdigit()),
            key=lambda p: int(p.parent.name),
        )
        if not found:
            run.warn(
                "listener torch: no profile (the script never called radt.step() or "
                "radt.log_examples(), or it does not import radt); see radt/output.log"
            )
            return
        totals = []
        for path in found:
            try:
                totals.append((path.parent, json.loads(path.read_text())))
            except (OSError, ValueError):
                run.warn(f"listener torch: unreadable {path.name} of process {path.parent.name}")
        profiled = [(d, t) for d, t in totals if t.get("steps")]
        for _, t in totals:
            if t.get("problem"):
                run.warn(f"listener torch: process {t.get('pid')}: {t['problem']}")
            elif t.get("steps", 0) < t.get("steps_asked", 0):
                run.warn(
                    f"listener torch: process {t['pid']} recorded {t['steps']} of "
                    f"{t['steps_asked']} steps (the command ended first)"
                )
        if not profiled:
            return
        several = len(profiled) > 1
        for directory, _ in profiled:
            target = f"{ARTIFACT_DIR}/{directory.name}" if several else ARTIFACT_DIR
            for name in (TRACE, OPS):
                if (directory / name).is_file():
                    run.attach(directory / name, target)
        cuda = any(t.get("cuda") for _, t in profiled)
        run.set_tag(RADT_TORCH_ACTIVITIES, "cpu,cuda" if cuda else "cpu")
        run.set_tag(RADT_TORCH_PROCESSES, " ".join(d.name for d, _ in profiled))

        def total(field: str) -> float | None:
            values = [t.get(field) for _, t in profiled]
            values = [float(v) for v in values if v is not None]
            return sum(values) if values else None

        values: dict[str, float | None] = {
            "capture/steps": total("steps"),
            "capture/wall_ms": total("wall_ms"),
            "ops/self_cpu_time_ms": total("self_cpu_time_ms"),
            "ops/self_cuda_time_ms": total("self_cuda_time_ms") if cuda else None,
            "ops/calls": total("calls"),
            "ops/unique": float(max(t.get("unique", 0) for _, t in profiled)),
            "capture/start_ms": total("start_ms"),
            "capture/write_ms": total("write_ms"),
        }
        when = max(float(t.get("ended_s") or time.time()) for _, t in profiled)
        run.emit(samples_from(when, self.name, values))

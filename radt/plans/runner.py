"""Running a plan: the runs of each workload start together under their collocation.

A workload is a parent MLflow run that records the device-wide listeners;
each row of the plan is a child run with its own command and run-scoped
listeners. The collocation backends set the devices up, and their teardown
always runs, whatever happens to the commands or to radT. A workload with a
loader row starts its shared loader first (see :mod:`radt.plans.loader`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from radt import collocation
from radt.errors import RadtError, UsageError
from radt.launch.child import Child
from radt.launch.command import resolve_argv
from radt.launch.job import JobInputs
from radt.launch.launcher import child_env, open_store, run_params, run_tags
from radt.launch.registry import Discovered, check_options, discover, select
from radt.launch.session import RecordedRun, start_run
from radt.launch.supervise import Outcome, Supervisor, ended
from radt.listener import Client, Listener
from radt.plans import columns
from radt.plans.loader import LoaderPorts, SharedLoader
from radt.plans.model import FAILED, FINISHED, Plan, PlanError, Row, Workload, format_problems
from radt.plans.read import read_plan
from radt.plans.workdir import absolute_store, place
from radt.plans.writeback import write_results
from radt.restclient import LightClient
from radt.tags import (
    RADT_COLLOCATION,
    RADT_DEVICES,
    RADT_EXIT_CODE,
    RADT_GPU_CLOCK_MHZ,
    RADT_LETTER,
    RADT_LISTENERS,
    RADT_LOADER,
    RADT_LOADER_PORTS,
    RADT_MIG_PROFILE,
    RADT_PLAN,
    RADT_PLAN_LINE,
    RADT_POWER_LIMIT_W,
    RADT_ROLE,
    RADT_SIGNAL,
    RADT_STOP_REASON,
    RADT_TEARDOWN_FAILED,
    RADT_WORKDIR,
    RADT_WORKLOAD,
    RADT_WORKLOAD_RUNS,
)
from radt.tracking import experiment_id
from radt.words import count

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from radt.slurm.dispatch import SlurmRequest

COLOURS = ("36", "33", "35", "32", "34", "31")
LOADER_COLOUR = "90"
SEVERITY = {"FINISHED": 0, "FAILED": 1, "KILLED": 2}


@dataclass
class PlanOptions:
    """What the command line asked for, for a plan."""

    path: Path
    rerun: bool = False
    listeners: str | None = None
    listener_options: dict[str, dict[str, str]] = field(default_factory=dict)
    interval_s: float | None = None
    max_time_min: float | None = None
    grace_s: float = 10.0
    window_s: float = 1.0
    tracking_uri: str | None = None
    power_limit_w: float | None = None
    max_epochs: int | None = None
    autolog: bool = False
    """``--autolog``: every row counts its examples as the Autolog column's ``yes`` does."""
    modes: set[str] | None = None
    """Run only workloads whose every row's collocation mode is in this set."""
    job: JobInputs = field(default_factory=JobInputs)
    """``--job-ignore`` and the warm-up options: defaults under each row's own columns."""
    rerun_all: bool = False
    """Run every workload again, FINISHED ones too."""
    workdir: str = "script"
    """``script``: each row runs in its script's folder (as the original radT); ``here``."""
    parent_run_id: str | None = None
    """A run to nest every workload run under (a study's run, a batch search's run)."""
    tags: dict[str, str] = field(default_factory=dict)
    """Tags for every workload run and run (a batch-size probe's)."""
    loader_timeout_s: float = 300.0
    """How long a workload's shared loader may take to be ready."""
    slurm: SlurmRequest | None = None
    """``--slurm``: every workload a Slurm job (:mod:`radt.slurm.dispatch`)."""


def run_plan(options: PlanOptions) -> int:
    """Run every pending workload of the plan in order; return the worst exit code."""
    try:
        plan, problems = read_plan(options.path), []
    except PlanError as exc:
        if exc.partial is None:
            raise
        plan = exc.partial
        problems = [format_problems(options.path, [p]).splitlines()[1] for p in exc.problems]
    pending = _selected(plan, options)
    found = discover(options.listener_options)
    problems += check_plan(plan, pending, options, found, read_gpus=options.slurm is None)
    if problems:
        raise UsageError(_report(options.path, problems))
    for note in plan.notes:
        log.info(note)
    if options.slurm is not None:
        from radt.slurm.dispatch import run_on_slurm
        from radt.slurm.options import slurm_options

        return run_on_slurm(
            options.path,
            lambda fresh: _selected(fresh, options),
            slurm_options(None, options.slurm.overrides),
            options.slurm,
            (None, "", {}) if options.slurm.dry_run else open_store(options.tracking_uri),
        )
    skipped = _skipped(plan, pending, options)
    if not pending:
        log.info(f"nothing to run in {options.path}: {skipped}")
        return 0
    if len(pending) < len(plan.workloads):
        log.info(f"skipping {skipped}")
    store = open_store(options.tracking_uri, light=True)
    return run_workloads(plan, pending, options, found, store)


def run_workloads(
    plan: Plan,
    pending: list[Workload],
    options: PlanOptions,
    found: dict[str, Discovered],
    store: tuple,
    after: Callable[[WorkloadRunner], None] | None = None,
) -> int:
    """Run ``pending`` in order on ``store`` (what ``open_store`` returns); return the worst
    exit code. ``after`` sees each workload's runner once it ended (a study records it)."""
    client, uri, original_env = store
    worst = 0
    interrupt_on_signals()
    for workload in pending:
        runner = WorkloadRunner(plan, workload, options, found, client, uri, original_env)
        code = runner.run()
        worst = worst or code
        if after is not None:
            after(runner)
        if runner.interrupted:
            log.info("interrupted; the remaining workloads run the next time the plan runs")
            break
    return worst


def _skipped(plan: Plan, pending: list[Workload], options: PlanOptions) -> str:
    """Which workloads will not run, why, and how to run them: ``2 workloads (2 FINISHED); …``."""
    left = [w for w in plan.workloads if w not in pending]
    finished = sum(w.status == FINISHED for w in left)
    failed = sum(w.status == FAILED and not options.rerun for w in left)
    other = len(left) - finished - failed
    why = [f"{finished} FINISHED"] * bool(finished) + [f"{failed} FAILED"] * bool(failed)
    why += [f"{other} not among --modes {'+'.join(sorted(options.modes or ()))}"] * bool(other)
    how = []
    if failed:
        how.append("--rerun runs FAILED workloads again")
    if finished:
        how.append("--rerun-all runs every workload again (new runs)")
    return f"{count(len(left), 'workload')} ({', '.join(why)})" + "".join(f"; {h}" for h in how)


def interrupt_on_signals() -> None:
    """SIGTERM and SIGHUP outside a running workload (e.g. during MIG setup) must still
    reach the teardown: they interrupt like Ctrl-C."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is not signal.SIG_IGN:  # `nohup`: stays ignored
            signal.signal(signum, _interrupt)


def _report(path: Path, problems: list[str]) -> str:
    """All problems, ordered by their first line number, under one count line."""

    def first_line(problem: str) -> int:
        match = re.search(r" lines? (\d+)", problem)
        return int(match[1]) if match else 0

    ordered = sorted(dict.fromkeys(problems), key=first_line)
    return f"{path} has {count(len(ordered), 'problem')}; nothing was started:\n" + "\n".join(
        ordered
    )


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP outside a running workload: handled like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"radT received {signal.Signals(signum).name}")
        self.signum = signum


def _interrupt(signum: int, _frame) -> None:
    raise Interrupted(signum)


def check_plan(
    plan: Plan,
    pending: list[Workload],
    options: PlanOptions,
    found: dict[str, Discovered],
    read_gpus: bool = True,
) -> list[str]:
    """Problems with commands, listeners and devices of the pending workloads, one per line.

    Reads the GPU (unless ``read_gpus`` is false: submitting to Slurm, where the node checks
    its own GPUs), changes nothing.
    """
    name = str(plan.path)
    problems = []
    running: list[str] = []
    if not read_gpus:  # whether a loaded listener can run is for the node to say
        found = {
            n: dataclasses.replace(d, reason=None) if d.listener is not None else d
            for n, d in found.items()
        }
    for workload in pending:
        for row in workload.rows:
            try:
                resolve_argv(row.command)
            except UsageError as exc:
                problems.append(f"{name} line {row.line}: {exc}")
            try:
                running += [
                    listener.name for listener in select(row.listeners or options.listeners, found)
                ]
            except UsageError as exc:
                problems.append(f"{name} line {row.line}: {exc}")
        try:
            limits = _power_limits(workload, options.power_limit_w)
            clocks = _gpu_clocks(workload)
        except UsageError as exc:
            problems.append(f"{name} {exc}")
            continue
        if read_gpus:
            problems += collocation.check(_requests(workload), limits, name, gpu_clocks=clocks)
    if pending:
        try:
            check_options(options.listener_options, running)
        except UsageError as exc:
            problems.append(str(exc))
    return problems


def _selected(plan: Plan, options: PlanOptions) -> list[Workload]:
    pending = list(plan.workloads) if options.rerun_all else plan.pending(options.rerun)
    if options.modes is None:
        return pending
    return [w for w in pending if {row.collocation.mode for row in w.trainings} <= options.modes]


def _requests(workload: Workload) -> list[collocation.SlotRequest]:
    return [
        collocation.SlotRequest(
            line=row.line,
            letter=row.letter,
            device=row.devices[0] if row.devices else None,
            mode=row.collocation.mode,
            mps_thread_pct=row.collocation.mps_thread_pct,
            mig_profile=row.collocation.mig_profile,
        )
        for row in workload.trainings
    ]


def _power_limits(workload: Workload, override: float | None) -> dict[int, float]:
    """Watts per GPU index: ``--power-limit`` for every GPU of the workload, else the column."""
    return _per_gpu(
        workload,
        lambda row: override if override is not None else row.power_limit_w,
        "a power limit",
    )


def _gpu_clocks(workload: Workload) -> dict[int, int]:
    """MHz per GPU index from the GpuClock column."""
    return _per_gpu(workload, lambda row: row.gpu_clock_mhz, "a GPU clock")


def _per_gpu(workload: Workload, value_of, what: str) -> dict:
    """A row's value for each GPU index in its Devices (GPU 0 without); UsageError for a
    device that is not an index."""
    values: dict = {}
    for row in workload.rows:
        value = value_of(row)
        if value is None:
            continue
        for device in row.devices or ["0"]:
            if not device.isdigit():
                raise UsageError(
                    f"line {row.line}: {what} needs GPU indices in Devices, not {device}"
                )
            values[int(device)] = value
    return values


def workload_tags(
    workload: Workload, limits: dict[int, float], clocks: dict[int, int] | None = None
) -> dict[str, str]:
    """The tags shared by a workload's parent run and its runs."""
    trainings = workload.trainings
    modes = sorted({row.collocation.mode for row in trainings})
    mode = modes[0] if len(modes) == 1 else "+".join(modes)
    profiles = [row.collocation.mig_profile for row in trainings if row.collocation.mig_profile]
    tags = {
        RADT_WORKLOAD: workload.name,
        RADT_COLLOCATION: mode,
        RADT_MIG_PROFILE: "+".join(profiles) if profiles else "-",
        RADT_POWER_LIMIT_W: "+".join(f"{w:g}" for w in limits.values()) or "-",
        RADT_WORKLOAD_RUNS: str(len(workload.rows)),
        RADT_LOADER: "shared" if workload.loader else "own",
    }
    if clocks:
        tags[RADT_GPU_CLOCK_MHZ] = "+".join(str(mhz) for mhz in clocks.values())
    return tags


class WorkloadRunner:
    """Runs one workload: set up, start every run together, wait, tear down, record."""

    def __init__(
        self,
        plan: Plan,
        workload: Workload,
        options: PlanOptions,
        found: dict[str, Discovered],
        client,
        uri: str,
        original_env: dict[str, str],
    ) -> None:
        self.plan = plan
        self.workload = workload
        self.options = options
        self.client = client
        self.uri = uri
        self.original_env = original_env
        self.limits = _power_limits(workload, options.power_limit_w)
        self.clocks = _gpu_clocks(workload)
        self.experiment_id = experiment_id(client, workload.experiment)
        self.row_listeners = {
            row.line: select(row.listeners or options.listeners, found) for row in workload.rows
        }
        self.teardown = collocation.Teardown()
        self.runs: list[RecordedRun] = []
        self.children: list[Child] = []
        self.slots: list[collocation.Slot] = []
        self.supervisor: Supervisor | None = None
        self.interrupted = False
        self._stopping: list[threading.Thread] = []
        self.loader: SharedLoader | None = None
        self.loader_run: RecordedRun | None = None
        self.loader_env: dict[str, str] = {}
        self._complete: list[RecordedRun] = []
        """Runs closed with their folders kept until the workload run has closed."""

    def run(self) -> int:
        """Run the workload to its end; return its worst exit code."""
        self.parent = self._parent_run()
        log.info(f"workload {self.workload.label}: parent run {self.parent.run_id}")
        codes: list[int] = []
        failure: BaseException | None = None
        try:
            self.slots, artifacts = collocation.setup(
                _requests(self.workload),
                self.limits,
                self.parent.folder.path / "collocation",
                self.teardown,
                log.warning,
                plan_name=self.plan.path.name,
                gpu_clocks=self.clocks,
            )
            self._keep(artifacts)
            if self.workload.loader is not None:
                self._prepare_loader(self.workload.loader)
            trainings = self.workload.trainings
            for index, (row, slot) in enumerate(zip(trainings, self.slots, strict=True)):
                self._prepare(index, row, slot)
            self.supervisor = Supervisor(
                self.children + ([self.loader.child] if self.loader else []),
                log.warning,
                self.options.grace_s,
                self.options.max_time_min,
            )
            with self.supervisor:
                if self.loader is None or self.loader.start(self.supervisor):
                    self._start()
                    codes = self.supervisor.wait(
                        on_exit=self._command_ended,
                        children=self.children,
                        watch=self._watch_loader,
                    )
                    # Device-wide listeners observe the workload: it ends with its last command.
                    self.parent.stop_sampling()
                    self._keep(collocation.after_start(self.slots))
                if self.loader is not None:
                    self.loader.stop(self.supervisor)
        except BaseException as exc:  # noqa: BLE001 - every failure ends in teardown and a record
            failure = exc
        finally:
            self._stop_children()
            for problem in self.teardown.run(log.warning):
                self.parent.state.tags.setdefault(RADT_TEARDOWN_FAILED, problem[:5000])
        return self._close(codes, failure)

    def _parent_run(self) -> RecordedRun:
        device_listeners: dict[str, Listener] = {}
        for chosen in self.row_listeners.values():
            for listener in chosen:
                if listener.scope == "device":
                    device_listeners.setdefault(listener.name, listener)
        devices = sorted({d for row in self.workload.rows for d in row.devices})
        return RecordedRun(
            start_run(
                self.client,
                self.uri,
                self.experiment_id,
                tags={
                    **workload_tags(self.workload, self.limits, self.clocks),
                    RADT_DEVICES: ",".join(devices) or "all",
                    RADT_LISTENERS: "+".join(device_listeners) or "none",
                    RADT_PLAN: str(self.plan.path),
                    **self.options.tags,
                },
                params={},
                run_name=self.workload.name,
                parent_run_id=self.options.parent_run_id,
                window_s=self.options.window_s,
                run_api=False,
            ),
            list(device_listeners.values()),
            interval_s=self.options.interval_s,
            devices=devices,
            listener_options=self.options.listener_options,
        )

    def _prepare(self, index: int, row: Row, slot: collocation.Slot) -> None:
        colour = COLOURS[index % len(COLOURS)]
        run, child = self._recorded(row, slot, colour)
        self.runs.append(run)
        self.children.append(child)

    def _prepare_loader(self, row: Row) -> None:
        """The loader's run and command, and the ports every run of the workload gets."""
        ports = LoaderPorts.pick()
        self.loader_env = ports.env(len(self.workload.trainings))
        devices = {"CUDA_VISIBLE_DEVICES": ",".join(row.devices)} if row.devices else {}
        slot = collocation.Slot(
            env=devices,
            devices=list(row.devices),
            tags={RADT_LOADER_PORTS: ",".join(map(str, ports.all))},
        )
        run, child = self._recorded(row, slot, LOADER_COLOUR)
        self.loader_run = run

        def started(pid: int) -> None:
            run.start_listeners(pid, child.started_s)
            run.capture_environment()

        self.loader = SharedLoader(
            ports,
            child,
            run.output_log,
            started,
            log.warning,
            self.options.grace_s,
            self.options.loader_timeout_s,
        )

    def _watch_loader(self) -> None:
        if self.loader is not None and self.supervisor is not None:
            self.loader.watch(self.supervisor)

    def _recorded(self, row: Row, slot: collocation.Slot, colour: str) -> tuple[RecordedRun, Child]:
        listeners = self.row_listeners[row.line]
        argv, cwd = place(resolve_argv(row.command), self.options.workdir)
        run = RecordedRun(
            start_run(
                self.client,
                self.uri,
                self.experiment_id,
                tags={
                    **run_tags(row.command, listeners, slot.devices),
                    **workload_tags(self.workload, self.limits, self.clocks),
                    **slot.tags,
                    RADT_LETTER: row.letter,
                    RADT_PLAN_LINE: str(row.line),
                    **columns.run_tags(row.values, self.options.job.tags()),
                    RADT_WORKDIR: str(cwd),
                    **self.options.tags,
                    **({RADT_ROLE: row.role} if row.role else {}),
                },
                params=run_params(row.command),
                run_name=row.name or f"{self.workload.name}-{row.letter}",
                parent_run_id=self.parent.run_id,
                window_s=self.options.window_s,
            ),
            # A fresh instance per run: a listener object observes one process tree.
            [type(listener)() for listener in listeners if listener.scope != "device"],
            interval_s=self.options.interval_s,
            devices=slot.devices,
            listener_options=self.options.listener_options,
        )
        env = child_env(
            {**self.original_env, **row.env, **columns.run_env(row.values)},
            absolute_store(self.uri),
            run,
            [],
            self.options.max_epochs,
            **columns.launch_options(row.values, self.options),
        )
        env.update(slot.env)
        env.update(self.loader_env)
        if sys.stdout.isatty():
            prefix = f"\x1b[{colour}m[{row.letter}]\x1b[0m "
        else:
            prefix = f"[{row.letter}] "
        argv = run.wrap(argv)
        env.update(run.command_env)
        return run, Child(argv, env, run.output_log, prefix, cwd)

    def _start(self) -> None:
        for child, run in zip(self.children, self.runs, strict=True):
            try:
                child.start()
            except OSError as exc:
                raise RadtError(f"cannot start {child.argv[0]}: {exc.strerror or exc}") from exc
            run.start_listeners(child.pid, child.started_s)
        for run in self.runs:  # once every command runs: it imports MLflow where not yet
            run.capture_environment()
        # Device-wide listeners see every run: the runs are all descendants of radT; each
        # run gets the per-process series of its own processes (nvml's per-process SM use).
        pairs = list(zip(self.children, self.runs, strict=True))
        if self.loader is not None and self.loader_run is not None:
            pairs.append((self.loader.child, self.loader_run))
        self.parent.context.clients = tuple(
            Client(run.run_id, child.pid, run.context.emit) for child, run in pairs
        )
        self.parent.start_listeners(os.getpid())
        self.parent.capture_environment()
        if isinstance(self.client, LightClient):  # MLflow imported beside the commands
            self.client.prepare()
        self._keep(collocation.after_start(self.slots))

    def _command_ended(self, index: int) -> None:
        """A run's own listeners stop with its command, not with the workload (in the
        background, so that the others' ends are still noticed at once)."""
        stopping = threading.Thread(
            target=self.runs[index].stop_sampling, name="radt-stop-sampling", daemon=True
        )
        stopping.start()
        self._stopping.append(stopping)

    def _stop_children(self) -> None:
        for child in self.children + ([self.loader.child] if self.loader else []):
            if child.process is not None and child.poll() is None:
                child.signal_group(signal.SIGKILL)
                child.process.wait()
                child.poll()  # notes when it ended
            if child.process is not None:
                child.reap_group(grace_s=1.0)
                child.join_output()

    def _keep(self, artifacts: dict[str, str]) -> None:
        folder = self.parent.folder.attachments / "radt" / "collocation"
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in artifacts.items():
            (folder / name).write_text(text)

    def _outcome(self, index: int, codes: list[int], failure: BaseException | None) -> Outcome:
        if failure is None and self.supervisor is not None and index < len(codes):
            outcome = self.supervisor.judge(codes[index])
            if self.loader and self.loader.failure and outcome.status == "KILLED":
                # stopped by radT because the loader failed: a failure, not an interruption
                return Outcome("FAILED", outcome.exit_code, outcome.tags)
            return outcome
        if self.supervisor is not None and self.supervisor.signum is not None:
            signum = self.supervisor.signum
            return ended("KILLED", 128 + signum, self.supervisor.reason, signum)
        if isinstance(failure, KeyboardInterrupt):
            signum = getattr(failure, "signum", signal.SIGINT)
            return ended(
                "KILLED", 128 + signum, f"radT received {signal.Signals(signum).name}", signum
            )
        return ended("FAILED", 1, f"radT could not run it: {failure}")

    def _close_loader(
        self, row: Row, results: dict[int, tuple[str, str]], failure: BaseException | None
    ) -> Outcome:
        """Complete the loader's run; its outcome counts for the workload like a run's."""
        outcome = self.loader.outcome(self.supervisor, failure) if self.loader else None
        if outcome is None:
            outcome = self._outcome(len(self.children), [], failure)
        if self.loader_run is None:
            results[row.line] = (outcome.status, "")
            return outcome
        self.loader_run.state.tags.update(outcome.tags)
        ended_s = self.loader.child.ended_s if self.loader else None
        closed = self.loader_run.close(
            outcome.status, outcome.exit_code, ended_s=ended_s, keep_folder=True
        )
        if closed:
            self._complete.append(self.loader_run)
        results[row.line] = (outcome.status, self.loader_run.run_id)
        return outcome

    def _record(self, results: dict[int, tuple[str, str]]) -> None:
        """Write ``results`` (row line → (status, run id)) back to the plan's file."""
        write_results(self.plan, self.workload, results)

    def _close(self, codes: list[int], failure: BaseException | None) -> int:
        for stopping in self._stopping:
            stopping.join(timeout=60)
        # The workload's device listeners also emit into its runs (per-process series): they
        # stop before any run closes, on every path.
        self.parent.stop_sampling()
        results: dict[int, tuple[str, str]] = {}
        worst = Outcome("FINISHED", 0)
        workload_ended_s = max((c.ended_s for c in self.children if c.ended_s), default=None)
        for index, row in enumerate(self.workload.trainings):
            outcome = self._outcome(index, codes, failure)
            if index < len(self.runs):
                run = self.runs[index]
                run.state.tags.update(outcome.tags)
                child = self.children[index] if index < len(self.children) else None
                ended_s = child and child.ended_s
                if run.close(outcome.status, outcome.exit_code, ended_s=ended_s, keep_folder=True):
                    self._complete.append(run)
                results[row.line] = (outcome.status, run.run_id)
            else:
                results[row.line] = (outcome.status, "")
            if SEVERITY.get(outcome.status, 1) > SEVERITY.get(worst.status, 1):
                worst = Outcome(outcome.status, worst.exit_code)
            worst.exit_code = worst.exit_code or outcome.exit_code
        if self.workload.loader is not None:
            outcome = self._close_loader(self.workload.loader, results, failure)
            if SEVERITY.get(outcome.status, 1) > SEVERITY.get(worst.status, 1):
                worst = Outcome(outcome.status, worst.exit_code)
            worst.exit_code = worst.exit_code or outcome.exit_code
        if failure is not None:
            self.parent.state.note = f"workload stopped: {failure or type(failure).__name__}"
        reason = self.supervisor.reason if self.supervisor is not None else None
        if reason is None and failure is not None:
            reason = self._outcome(0, [], failure).tags.get(RADT_STOP_REASON)
        if reason:
            self.parent.state.tags[RADT_STOP_REASON] = reason
        self.parent.state.tags[RADT_EXIT_CODE] = str(worst.exit_code)
        signum = self.supervisor.signum if self.supervisor is not None else None
        signum = signum or getattr(failure, "signum", None)
        if signum is None and isinstance(failure, KeyboardInterrupt):
            signum = signal.SIGINT
        if signum is not None:
            self.parent.state.tags[RADT_SIGNAL] = signal.Signals(signum).name
        try:
            self.parent.close(worst.status, worst.exit_code, ended_s=workload_ended_s)
        finally:
            for run in self._complete:  # their samples, read by the workload run as it closed
                run.remove_folder()
            self._complete.clear()
        self._record(results)
        log.info(f"workload {self.workload.label}: {worst.status} (exit code {worst.exit_code})")
        self.interrupted = isinstance(failure, KeyboardInterrupt) or (
            self.supervisor is not None and self.supervisor.signum is not None
        )
        if isinstance(failure, RadtError):
            log.warning(f"error: {failure}")
        elif failure is not None and not isinstance(failure, KeyboardInterrupt):
            raise failure
        return worst.exit_code

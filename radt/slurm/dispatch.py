"""A plan's workloads as Slurm job arrays: submit, wait, and write each workload's end back.

One workload is one array task; on the node the task runs radT's own workload
runner for that workload (:mod:`radt.slurm.node`). The submitting radT keeps the
job ids beside the plan (``<plan>.slurm/jobs.json``), writes ``PENDING`` and
``RUNNING`` statuses as Slurm reports them, and, when a task has ended, reads the
workload's runs from MLflow (found by their ``radt.slurm.*`` tags) and writes
their statuses into the plan; Slurm's own endings (TIMEOUT, OUT_OF_MEMORY, …)
are named on those runs. Before anything is created the partition's limits and
``sbatch --test-only`` must accept the jobs; after them a closing job
(``afterany``) runs radT to record their ends and close the study run, so it ends
even when nobody waits or looks again.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from radt.errors import RadtError, UsageError
from radt.plans.model import FAILED, FINISHED, Plan, Workload
from radt.plans.read import read_plan
from radt.plans.writeback import write_results
from radt.slurm import commands
from radt.slurm.commands import ENDINGS_KILLED, WAITING_TURN, TaskState
from radt.slurm.options import SBATCH_FLAGS, SlurmOptions
from radt.tags import (
    JOB_ROLE,
    MLFLOW_PARENT_RUN_ID,
    NODE_ROLE,
    RADT_GROUP_ROLE,
    RADT_PLAN_LINE,
    RADT_SLURM_ARRAY_JOB_ID,
    RADT_SLURM_ARRAY_TASK_ID,
    RADT_SLURM_ATTEMPT,
    RADT_SLURM_STATE,
    RADT_STOP_REASON,
    Mode,
    tag_filter,
)
from radt.tracking import experiment_id, sqlite_path
from radt.words import count

log = logging.getLogger(__name__)

POLL_S = 1.0
StatusHook = Callable[[str, str, str], None]
"""A study's hook: (workload name, status, run id or ``slurm:<job>``) as each one moves on."""


@dataclass
class SlurmRequest:
    """What the command line asked of Slurm for one plan or study."""

    overrides: dict[str, str] = field(default_factory=dict)
    """``--slurm-option KEY=VALUE`` pairs."""
    detach: bool = False
    dry_run: bool = False
    node_args: list[str] = field(default_factory=list)
    """radT's own options, passed on to the radT on the node."""
    again: str = ""
    """The command that goes on where this one left off (``radt study.yaml --slurm …``)."""


def folder_of(plan_path: Path) -> Path:
    """Where the job scripts, task lists, logs and job ids of a plan live."""
    return plan_path.with_name(plan_path.name + ".slurm")


def derived_gres(workload: Workload) -> str | None:
    """``gpu:N`` for a workload on N GPUs (one when it shares GPU 0); None for CPU only."""
    devices = {d for row in workload.rows for d in row.devices}
    if devices:
        return f"gpu:{len(devices)}"
    if any(row.collocation.mode != Mode.NONE for row in workload.trainings):
        return "gpu:1"
    return None


def refusals(plan: Plan, pending: list[Workload], slurm: SlurmOptions) -> list[str]:
    """What Slurm clusters do not allow, one line per workload, before anything is submitted."""
    problems = []
    for workload in pending:
        if not slurm.exclusive and any(r.collocation.mode == Mode.MIG for r in workload.trainings):
            problems.append(
                f"{plan.path}: workload {workload.label} re-partitions MIG, which a Slurm job "
                "may only do with the whole node: set `exclusive: true` under slurm: (the "
                "node's own check then decides), or run on a MIG GPU type (gres: gpu:3g.40gb:1)"
            )
    return problems


def partition_refusals(slurm: SlurmOptions, nodes: int) -> list[str]:
    """What the partition can never give (``scontrol show partition``): more nodes than it
    has, more time than its MaxTime. One line each; empty when Slurm does not say."""
    fields = commands.partition(slurm.partition)
    if not fields:
        return []
    name = fields.get("PartitionName", slurm.partition or "the default partition")
    problems = []
    total = fields.get("TotalNodes", "")
    most = fields.get("MaxNodes", "")
    limits = [int(n) for n in (total, most) if n.isdigit()]
    limit = min(limits) if limits else None
    if limit is not None and nodes > limit:
        problems.append(
            f"nodes: {nodes}, but Slurm partition {name} gives a job at most "
            f"{count(limit, 'node')} (PartitionNodeLimit): lower nodes: or choose a partition "
            "with more nodes (--slurm-option partition=NAME)"
        )
    wanted = commands.minutes(slurm.time or "")
    most_min = commands.minutes(fields.get("MaxTime", ""))
    if wanted is not None and most_min is not None and wanted > most_min:
        problems.append(
            f"time: {slurm.time}, but Slurm partition {name} allows at most "
            f"{fields['MaxTime']} (PartitionTimeLimit): lower time: or choose another partition "
            "(--slurm-option partition=NAME)"
        )
    return problems


def store_warning(uri: str) -> str | None:
    """The one warning for a store that nodes reach only through a shared filesystem."""
    path = sqlite_path(uri)
    if path is not None or uri.startswith("file:") or "://" not in uri:
        where = path if path is not None else uri
        return (
            f"the tracking store {where} is a local file: every node must see it at the same "
            "path on a shared filesystem (an MLflow server is the norm, see docs/deployment.md)"
        )
    return None


class _Left(Exception):
    """SIGTERM or SIGHUP while waiting: leave the jobs running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class Dispatch:
    """Submits, follows and records the workloads of one plan on Slurm."""

    def __init__(
        self,
        plan_path: Path,
        slurm: SlurmOptions,
        request: SlurmRequest,
        client,
        uri: str,
        *,
        parent_run_id: str | None = None,
        tags: dict[str, str] | None = None,
        record: StatusHook | None = None,
        nodes: int = 1,
        target: Path | None = None,
    ) -> None:
        self.plan_path = Path(plan_path).resolve()
        self.target = Path(target).resolve() if target is not None else self.plan_path
        """The file the closing job runs radT on: the study, else the plan."""
        self.cancelled = False
        """Whether the user cancelled the jobs (Ctrl-C)."""
        self.nodes = nodes
        """Above 1: each workload is one training across this many nodes (a study's
        ``nodes:``), one radT per node under one ``srun``."""
        self.slurm = slurm
        self.request = request
        self.client = client
        self.uri = uri
        self.parent_run_id = parent_run_id
        self.tags = tags or {}
        self.record = record
        self.folder = folder_of(self.plan_path)
        self.jobs: dict[str, str] = self._load()
        """Workload label → ``<array job id>_<task>`` of jobs not yet recorded."""
        self.running: set[str] = set()
        self.ended: dict[str, str] = {}
        self.endings: dict[str, str] = {}
        """Workload name → Slurm's state for the jobs that ended other than COMPLETED."""

    # ------------------------------------------------------------------ job ids

    @property
    def _jobs_file(self) -> Path:
        return self.folder / "jobs.json"

    def _load(self) -> dict[str, str]:
        try:
            return dict(json.loads(self._jobs_file.read_text()))
        except (OSError, ValueError):
            return {}

    def _save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self._jobs_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.jobs, indent=1, sort_keys=True))
        os.replace(tmp, self._jobs_file)

    @property
    def _closer_file(self) -> Path:
        return self.folder / "closer.json"

    def closer(self) -> str | None:
        """The job id of the last job that closes the runs when the workloads' jobs end."""
        try:
            return str(json.loads(self._closer_file.read_text())["job"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _states(self) -> dict[tuple[str, int], TaskState]:
        ids = [job.split("_")[0] for job in self.jobs.values()]
        return commands.states(ids) if ids else {}

    @staticmethod
    def _key(job: str) -> tuple[str, int]:
        array_id, _, task = job.partition("_")
        return array_id, int(task or 0)

    # ------------------------------------------------------------------ the whole flow

    def refresh(self) -> list[str]:
        """Record the jobs that ended since the last look; return the labels still in Slurm."""
        known = self._states()
        plan = read_plan(self.plan_path)
        active = []
        for label, job in list(self.jobs.items()):
            state = known.get(self._key(job))
            if state is not None and state.active:
                active.append(label)
                if state.state != "PENDING":
                    self._note_running(plan, label, job)
                continue
            self._finish(plan, label, job, state)
        return active

    def _note_running(self, plan: Plan, label: str, job: str) -> None:
        """A job Slurm runs: RUNNING into the plan once (never PENDING over it)."""
        if label in self.running:
            return
        self.running.add(label)
        workload = self._workload(plan, label)
        if workload is not None and workload.status != "RUNNING":
            self._write_status(plan, workload, "RUNNING", f"slurm:{job}")

    def _asked_nodes(self) -> int:
        """The nodes a job asks for: ``nodes:``, unless an ``extra`` ``--nodes=N[-M]`` (the
        last sbatch flag wins) says otherwise."""
        nodes = self.nodes
        for arg in self.slurm.extra:
            least = arg.removeprefix("--nodes=").split("-")[0]
            if arg.startswith("--nodes=") and least.isdigit():
                nodes = int(least)
        return nodes

    def check(self, plan: Plan, pending: list[Workload]) -> None:
        """Refuse, in one line and before anything is created, what Slurm would never run:
        more nodes or time than the partition has, or what ``sbatch --test-only`` refuses
        (an unknown partition, GPUs no node has, no sbatch on PATH)."""
        commands.require("sbatch")
        groups = {tuple(self._sbatch_args(w)) for w in pending}
        problems = partition_refusals(self.slurm, self._asked_nodes())
        if problems:
            raise UsageError(f"{self.target}: {problems[0]}")
        for args in groups:
            commands.test_only([f"--chdir={Path.cwd()}", *args, "--wrap=true"])

    def submit(self, plan: Plan, pending: list[Workload]) -> list[str]:
        """Submit ``pending`` (one array per set of sbatch options); the sbatch lines when
        a dry run. On an sbatch failure, cancel what this call submitted and raise."""
        groups: dict[tuple[str, ...], list[Workload]] = {}
        for workload in pending:
            groups.setdefault(tuple(self._sbatch_args(workload)), []).append(workload)
        lines, submitted = [], []
        for number, (args, workloads) in enumerate(groups.items()):
            script = self._write_task_files(number, workloads)
            array = f"0-{len(workloads) - 1}"
            if self.slurm.max_parallel:
                array += f"%{self.slurm.max_parallel}"
            argv = [
                f"--job-name=radt-{self.plan_path.stem}",
                f"--array={array}",
                f"--output={self.folder / 'logs' / '%A_%a.out'}",
                f"--chdir={Path.cwd()}",
                *args,
                str(script),
            ]
            if self.request.dry_run:
                lines.append(shlex.join(["sbatch", *argv]))
                continue
            try:
                array_id = commands.sbatch(argv)
            except RadtError:
                commands.scancel([job.split("_")[0] for job in submitted])
                for label in [label for label, job in self.jobs.items() if job in submitted]:
                    del self.jobs[label]
                self._save()
                raise
            for task, workload in enumerate(workloads):
                job = f"{array_id}_{task}"
                submitted.append(job)
                self.jobs[workload.label] = job
                log.info(f"workload {workload.label}: Slurm job {job}")
            self._save()
            for task, workload in enumerate(workloads):
                self._write_status(plan, workload, "PENDING", f"slurm:{array_id}_{task}")
        if submitted:
            self.submit_closer()
        return lines

    def submit_closer(self) -> None:
        """Submit (again) the last job: once every workload job has ended (``afterany``), it
        runs radT to record them and close the runs, so a study run ends even when nobody
        looks again. The one it replaces is cancelled."""
        old = self.closer()
        arrays = sorted({job.split("_")[0] for job in self.jobs.values()})
        if not arrays:
            return
        script = self.folder / "close.sh"
        target = str(self.target)
        self._write_script(
            script,
            f"records the ended Slurm jobs of {self.plan_path} and closes their runs",
            [*self._radt(), target, "--slurm-close", str(self.plan_path), *self.request.node_args],
        )
        argv = [
            f"--job-name=radt-close-{self.plan_path.stem}",
            f"--dependency=afterany:{':'.join(arrays)}",
            f"--output={self.folder / 'logs' / 'close-%j.out'}",
            f"--chdir={Path.cwd()}",
            *[
                f"{flag}={getattr(self.slurm, key)}"
                for key, flag in SBATCH_FLAGS.items()
                if key in ("partition", "account") and getattr(self.slurm, key)
            ],
            "--ntasks=1",
            str(script),
        ]
        job = commands.sbatch(argv)
        tmp = self._closer_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"job": job}))
        os.replace(tmp, self._closer_file)
        if old and old != job:
            commands.scancel([old])
        log.info(f"Slurm job {job} closes the runs when the last workload job ends")

    def cancel_closer(self) -> None:
        """Cancel the closing job (this radT closes the runs itself)."""
        job = self.closer()
        if job:
            commands.scancel([job])
            self._closer_file.unlink(missing_ok=True)

    def wait(self) -> int:
        """Follow the jobs until they end, printing progress; Ctrl-C cancels them, SIGTERM
        and SIGHUP leave them running, as ``--detach`` does (the closing job ends the runs)."""
        started = time.monotonic()
        shown = ""
        previous = {}

        def leave(signum, _frame):
            raise _Left(signum)

        for signum in (signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, leave)
        try:
            while self.jobs:
                shown = self._look(started, shown)
                if self.jobs:
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            return self._cancel(started)
        except _Left as left:
            name = signal.Signals(left.signum).name
            closer = self.closer()
            by = f"Slurm job {closer}" if closer else "the next run of the same command"
            log.info(
                f"{name}: stopped waiting; Slurm goes on with "
                f"{count(len(self.jobs), 'job')} ({' '.join(self.jobs.values())}) and {by} "
                f"closes the runs when they end; `{self.request.again}` shows where they stand"
            )
            return 128 + left.signum
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self._code()

    def go(
        self,
        select: Callable[[Plan], list[Workload]],
        open_parent: Callable[[], str] | None = None,
    ) -> int:
        """Record what ended, refuse what Slurm would never run, then (``open_parent`` giving the
        parent run, after every check) submit what ``select`` picks that is not already in Slurm,
        and unless detached wait for every job; 0 when all finished, 1 if not, 130 on Ctrl-C,
        128+N on signal N (SIGTERM, SIGHUP: the jobs keep running)."""
        request = self.request
        active = set(self.refresh()) if not request.dry_run else set(self.jobs)
        plan = read_plan(self.plan_path)
        pending = [w for w in select(plan) if w.label not in active]
        problems = refusals(plan, pending, self.slurm)
        if problems:
            raise UsageError("\n".join(problems))
        if active:
            log.info(f"{count(len(active), 'workload')} already in Slurm, not submitted again")
        if request.dry_run:
            for line in self.submit(plan, pending):
                print(line, flush=True)
            return 0
        if pending:
            self.check(plan, pending)
        if open_parent is not None and (pending or active):
            self.parent_run_id = open_parent()
        warning = store_warning(self.uri)
        if warning and pending:
            log.warning(f"warning: {warning}")
        self.submit(plan, pending)
        if request.detach:
            if self.jobs:
                log.info(
                    f"detached: {count(len(self.jobs), 'workload')} in Slurm; Slurm job "
                    f"{self.closer() or '(none)'} closes the runs when they end; "
                    f"`{request.again}` shows where they stand"
                )
            return 0
        if not self.jobs:
            log.info("nothing to run")
            return 0
        code = self.wait()
        if not self.jobs:  # this radT recorded every job: the closing job has nothing left
            self.cancel_closer()
        return code

    # ------------------------------------------------------------------ waiting

    def _look(self, started: float, shown: str) -> str:
        known = self._states()
        plan = read_plan(self.plan_path)
        pending = running = 0
        reasons = []
        for label, job in list(self.jobs.items()):
            state = known.get(self._key(job))
            if state is not None and state.active:
                if state.state == "PENDING":
                    pending += 1
                    if state.reason not in WAITING_TURN:
                        reasons.append(f"{job} {state.reason}")
                    continue
                running += 1
                self._note_running(plan, label, job)
                continue
            self._finish(plan, label, job, state)
        finished = sum(s == FINISHED for s in self.ended.values())
        why = f" ({', '.join(reasons)})" if reasons else ""
        line = (
            f"slurm: {pending} pending{why}, {running} running, {finished} finished, "
            f"{len(self.ended) - finished} failed or killed"
        )
        if line != shown:
            elapsed = int(time.monotonic() - started)
            log.info(f"{line} ({elapsed // 60}:{elapsed % 60:02d} elapsed)")
        return line

    def _cancel(self, started: float) -> int:
        jobs = list(self.jobs.values())
        log.info(
            f"interrupted: cancelling {count(len(jobs), 'Slurm job')} ({' '.join(jobs)}); "
            "Ctrl-C again leaves at once"
        )
        commands.scancel(jobs)
        self.cancelled = True
        try:
            shown = ""
            while self.jobs:
                shown = self._look(started, shown)
                if self.jobs:
                    time.sleep(POLL_S)
        except KeyboardInterrupt:
            log.info("left at once: the next run of the same command records the cancelled jobs")
        return 130

    def _code(self) -> int:
        return 0 if all(s == FINISHED for s in self.ended.values()) else 1

    # ------------------------------------------------------------------ recording

    @staticmethod
    def _workload(plan: Plan, label: str) -> Workload | None:
        return next((w for w in plan.workloads if w.label == label), None)

    def _write_status(self, plan: Plan, workload: Workload, status: str, run: str) -> None:
        write_results(plan, workload, {row.line: (status, run) for row in workload.rows})
        if self.record is not None:
            self.record(workload.name, status, run)

    def _runs(self, workload: Workload, job: str) -> tuple[object | None, dict[int, object]]:
        """The workload's latest parent run of this job and its runs by plan line."""
        array_id, task = self._key(job)
        exp = experiment_id(self.client, workload.experiment)
        found = self.client.search_runs(
            [exp],
            filter_string=(
                f"{tag_filter(RADT_SLURM_ARRAY_JOB_ID, array_id)} "
                f"and {tag_filter(RADT_SLURM_ARRAY_TASK_ID, task)}"
            ),
            max_results=1000,
        )
        parents = [
            r
            for r in found
            if RADT_PLAN_LINE not in r.data.tags and r.data.tags.get(RADT_GROUP_ROLE) != NODE_ROLE
        ]
        parent = max(parents, key=_attempt_order, default=None)
        for run in found:  # an earlier attempt of a requeued (e.g. preempted) job
            if parent is not None and run.info.run_id != parent.info.run_id:
                earlier = run.data.tags.get(MLFLOW_PARENT_RUN_ID) != parent.info.run_id
                if earlier and RADT_SLURM_STATE not in run.data.tags:
                    attempt = run.data.tags.get(RADT_SLURM_ATTEMPT, "1")
                    self.client.set_tag(run.info.run_id, RADT_SLURM_STATE, "REQUEUED")
                    self.client.set_tag(
                        run.info.run_id,
                        RADT_STOP_REASON,
                        f"Slurm requeued job {job}: attempt {attempt} ended, a later one ran",
                    )
                    if run.info.status == "RUNNING":
                        self.client.set_terminated(run.info.run_id, "KILLED")
        rows: dict[int, object] = {}
        for run in sorted(found, key=lambda r: r.info.start_time):
            line = run.data.tags.get(RADT_PLAN_LINE)
            belongs = (
                parent is None or run.data.tags.get(MLFLOW_PARENT_RUN_ID) == parent.info.run_id
            )
            if line is not None and line.isdigit() and belongs:
                rows[int(line)] = run
        return parent, rows

    def _name_ending(self, runs: list, state: TaskState, job: str) -> None:
        """Name Slurm's ending on the runs; close those the ending left RUNNING."""
        reason = f"Slurm ended job {job}: {state.state}"
        for run in runs:
            self.client.set_tag(run.info.run_id, RADT_SLURM_STATE, state.state)
            self.client.set_tag(run.info.run_id, RADT_STOP_REASON, reason)
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, "KILLED")

    def _finish(self, plan: Plan, label: str, job: str, state: TaskState | None) -> None:
        """A job that left Slurm's queue: its runs' statuses into the plan, its ending named."""
        workload = self._workload(plan, label)
        self.jobs.pop(label, None)
        self._save()
        if workload is None:
            return
        parent, rows = self._runs(workload, job)
        runs = [r for r in [parent, *rows.values()] if r is not None]
        ending = state.state if state is not None else "gone"
        if ending != "COMPLETED":
            self.endings[workload.name] = ending
        if state is not None and state.state in ENDINGS_KILLED:
            self._name_ending(runs, state, job)
        elif state is None:
            for run in runs:  # Slurm forgot the job (no accounting) while a run was open
                if run.info.status == "RUNNING":
                    self.client.set_tag(
                        run.info.run_id,
                        RADT_STOP_REASON,
                        f"Slurm no longer knows job {job}; the run never ended",
                    )
                    self.client.set_terminated(run.info.run_id, "KILLED")
        if parent is None:
            # cancelled while pending: Slurm keeps no record of an array task that never ran,
            # and such a task wrote no output; it gets no status and is submitted again
            started = (self.folder / "logs" / f"{job}.out").exists()
            never_ran = ending == "CANCELLED" or (state is None and not started)
            status = "" if never_ran else ("KILLED" if ending in ENDINGS_KILLED else FAILED)
            if never_ran:
                self.endings[workload.name] = "CANCELLED"
            if status == FAILED:
                why = self._why(job)
                log.info(f"workload {label}: Slurm job {job} {ending} before radT started: {why}")
            write_results(plan, workload, {row.line: (status, "") for row in workload.rows})
            if self.record is not None:
                self.record(workload.name, status or "", "")
            self.ended[label] = status or "KILLED"
            return
        parent = self.client.get_run(parent.info.run_id)
        results = {}
        for row in workload.rows:
            run = rows.get(row.line)
            if parent.data.tags.get(RADT_GROUP_ROLE) == JOB_ROLE:  # the nodes' job is the row's run
                results[row.line] = (parent.info.status, parent.info.run_id)
            elif run is None:
                results[row.line] = ("KILLED" if ending in ENDINGS_KILLED else FAILED, "")
            else:
                run = self.client.get_run(run.info.run_id)
                results[row.line] = (run.info.status, run.info.run_id)
        write_results(plan, workload, results)
        status = parent.info.status
        if self.record is not None:
            self.record(workload.name, status, parent.info.run_id)
        self.ended[label] = status
        log.info(f"workload {label}: {status} (Slurm job {job} {ending})")

    def _why(self, job: str) -> str:
        """The node's reason for a job that ended before radT ran a workload: radT's error
        line in the job's output, else its last line, else where the output is."""
        output = self.folder / "logs" / f"{job}.out"
        try:
            lines = [line.strip() for line in output.read_text(errors="replace").splitlines()]
        except OSError:
            return f"no output at {output}"
        errors = [line for line in lines if line.startswith("radt: error:")]
        last = errors[-1] if errors else next((line for line in reversed(lines) if line), "")
        return f"{last[:500]} (see {output})" if last else f"see {output}"

    # ------------------------------------------------------------------ job files

    def _sbatch_args(self, workload: Workload) -> list[str]:
        slurm = self.slurm
        args = []
        for key, flag in SBATCH_FLAGS.items():
            value = getattr(slurm, key)
            if key == "gres" and value is None:
                value = derived_gres(workload)
            if value is not None:
                args.append(f"{flag}={value}")
        if slurm.exclusive:
            args.append("--exclusive")
        if self.nodes > 1:
            args += [f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        return args + list(slurm.extra)

    def _write_task_files(self, number: int, workloads: list[Workload]) -> Path:
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        tasks = self.folder / f"tasks-{stamp}-{number}.json"
        script = self.folder / f"job-{stamp}-{number}.sh"
        if self.request.dry_run:
            return script
        tasks.write_text(
            json.dumps(
                {
                    "plan": str(self.plan_path),
                    "workloads": [w.label for w in workloads],
                    "parent_run_id": self.parent_run_id,
                    "tags": self.tags,
                    "nodes": self.nodes,
                },
                indent=1,
            )
        )
        command = [
            *self._radt(),
            str(self.plan_path),
            "--slurm-task",
            str(tasks),
            *self.request.node_args,
        ]
        if self.nodes > 1:  # one radT per node (task): the group is this step
            command = ["srun", *command]
        what = f"task i of this array runs workload i of {tasks.name} in {self.plan_path}"
        self._write_script(script, what, command)
        return script

    def _radt(self) -> list[str]:
        """How a batch script starts radT: by name after the study's setup lines, else with this
        Python."""
        return ["radt"] if self.slurm.setup else [sys.executable, "-m", "radt"]

    def _write_script(self, script: Path, what: str, command: list[str]) -> None:
        """Write the executable batch ``script`` that runs the setup lines, then ``command``."""
        lines = [
            "#!/bin/bash",
            f"# radT: {what}",
            "set -e",
            *self.slurm.setup,
            "exec " + shlex.join(command),
        ]
        script.write_text("\n".join(lines) + "\n")
        script.chmod(0o755)


def _attempt_order(run) -> tuple[int, int]:
    attempt = run.data.tags.get(RADT_SLURM_ATTEMPT, "1")
    return (int(attempt) if attempt.isdigit() else 1, run.info.start_time)


def run_on_slurm(
    plan_path: Path,
    select: Callable[[Plan], list[Workload]],
    slurm: SlurmOptions,
    request: SlurmRequest,
    store: tuple,
    *,
    parent_run_id: str | None = None,
    tags: dict[str, str] | None = None,
    record: StatusHook | None = None,
    nodes: int = 1,
) -> int:
    """Record what ended, submit what ``select`` picks that is not already in Slurm, and
    (unless detached) wait for every job; return 0 when all finished, 1 if not, 130 on Ctrl-C."""
    client, uri, _ = store
    dispatch = Dispatch(
        plan_path,
        slurm,
        request,
        client,
        uri,
        parent_run_id=parent_run_id,
        tags=tags,
        record=record,
        nodes=nodes,
    )
    return dispatch.go(select)


def close_on_slurm(dispatch: Dispatch) -> bool:
    """The closing job's work: record the jobs that ended; True when none is left in Slurm."""
    return not dispatch.refresh()

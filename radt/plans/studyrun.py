"""Running a study, the way itself: read it, check it (:mod:`radt.plans.studycheck`), write
its plan (:mod:`radt.plans.studyplan`), print the dry run's table
(:mod:`radt.plans.studyprogress`) or search the batch sizes and run the plan, recording
progress; and close it (``--slurm-close``).

``radt study.yaml --dry-run`` checks the study against the GPU *model*, not the GPU's current
MIG mode (a MIG study runs in two passes, ``--modes mig`` and ``--modes none+naive+mps``),
prints the workloads and writes the plan CSV. Without ``--dry-run`` the plan is checked as
plans are, a study run is opened (or the one in ``parent:`` reused), the batch sizes are
searched, and the plan runs through the workload runner with every workload run nested under
the study run; after each workload its status goes into the plan CSV and into the study file's
``status:``.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from radt.errors import UsageError
from radt.launch.launcher import open_store
from radt.launch.registry import discover
from radt.plans import batch
from radt.plans.model import FAILED, FINISHED, PlanError, Workload
from radt.plans.read import read_plan
from radt.plans.runner import (
    PlanOptions,
    WorkloadRunner,
    _selected,
    check_plan,
    run_workloads,
)
from radt.plans.study import Study, StudyError, StudyWorkload, read_study
from radt.plans.studycheck import check_study
from radt.plans.studyexpand import expand
from radt.plans.studyfile import write_progress
from radt.plans.studyplan import default_plan_path, old_runs, plan_rows, plan_text, write_plan
from radt.plans.studyprogress import Progress, progress_of, report, status_of
from radt.plans.writeback import write_results
from radt.tags import RADT_STUDY, RADT_STUDY_FILE, RADT_STUDY_PROGRESS, RADT_STUDY_WORKLOADS
from radt.tracking import experiment_id
from radt.words import count

log = logging.getLogger(__name__)


@dataclass
class StudyOptions:
    """What the command line asked for, for a study."""

    path: Path
    plan: PlanOptions
    """The plan options (``path`` is replaced by the plan file's)."""
    plan_path: Path | None = None
    dry_run: bool = False


def run_study(options: StudyOptions) -> int:
    """Check, plan and (unless ``dry_run``) run the study; return the worst exit code."""
    study = read_study(options.path)
    workloads = expand(study)
    plan_path = options.plan_path or default_plan_path(study.path)
    if plan_path.suffix.lower() != ".csv":
        raise UsageError(f"--plan {plan_path}: the plan is a CSV file (e.g. study.plan.csv)")
    found = discover(options.plan.listener_options)
    # Submitting to Slurm: whether a listener can run is the node's to say (see check_plan).
    checked = check_study(study, found, on_this_machine=options.plan.slurm is None)
    if checked.problems:
        raise StudyError(study.path, checked.problems)
    if options.plan.slurm is not None or study.slurm:  # an unknown option: one line first
        from radt.slurm.options import slurm_options

        overrides = options.plan.slurm.overrides if options.plan.slurm is not None else {}
        slurm_options(study.slurm, overrides, f"{study.path}: slurm:")
    for note in checked.notes:
        log.warning(f"warning: {note}")
    progress = progress_of(study)
    rows = plan_rows(study, workloads, progress, {}, old_runs(plan_path))
    write_plan(plan_path, plan_text(study, rows, searched=False))
    try:
        plan = read_plan(plan_path)
    except PlanError as exc:  # the study's checks should have caught it: say where it is
        raise StudyError(
            study.path, [f"{plan_path} (written from it): {p.message}" for p in exc.problems]
        ) from None
    if options.dry_run:
        text = report(study, workloads, progress, plan_path, checked, options.plan.modes)
        try:
            print(text, flush=True)
            if options.plan.slurm is not None:
                _Run(study, workloads, plan_path, options, found, progress).on_slurm((None, "", {}))
        except BrokenPipeError:  # `radt study.yaml --dry-run | head`
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return _Run(study, workloads, plan_path, options, found, progress).run(plan)


def close_study(options: StudyOptions) -> int:
    """The closing Slurm job of a study (``--slurm-close``): record the workload jobs that
    ended and, when none is left in Slurm, end the study run with its workloads' outcome."""
    study = read_study(options.path)
    plan_path = options.plan_path or default_plan_path(study.path)
    if options.plan.slurm is None:
        from radt.slurm.dispatch import SlurmRequest

        options = replace(options, plan=replace(options.plan, slurm=SlurmRequest()))
    run = _Run(study, expand(study), plan_path, options, {}, progress_of(study))
    store = open_store(run.options.tracking_uri)
    dispatch = run.dispatch(store)
    run.endings = dispatch.endings
    left = dispatch.refresh()
    if left:
        log.info(f"{count(len(left), 'workload')} still in Slurm: the study run stays open")
        return 0
    run.settle(store[0])
    return 0


def close_plan(target: Path, plan_path: Path, options, *, study: bool) -> int:
    """The closing job (``radt TARGET --slurm-close PLAN``, submitted with ``afterany`` on the
    workload jobs): record the jobs that ended, their runs closed and Slurm's endings named,
    and for a study end the study run once no workload job is left."""
    from radt.slurm.dispatch import Dispatch, SlurmRequest
    from radt.slurm.options import SlurmOptions

    options = replace(options, slurm=options.slurm or SlurmRequest(), path=plan_path)
    if study:
        return close_study(StudyOptions(target, options, plan_path=plan_path))
    client, uri, _ = open_store(options.tracking_uri)
    left = Dispatch(plan_path, SlurmOptions(), options.slurm, client, uri).refresh()
    if left:
        log.info(f"{count(len(left), 'workload')} still in Slurm")
    return 0


class _Run:
    """One invocation of a study that runs."""

    def __init__(self, study, workloads, plan_path, options, found, progress) -> None:
        self.study: Study = study
        self.workloads: list[StudyWorkload] = workloads
        self.plan_path: Path = plan_path
        self.found = found
        self.progress: dict[str, Progress] = progress
        self.by_name = {w.name: w for w in workloads}
        self.status: dict[int, str] = dict(study.status)
        self.options = replace(options.plan, path=plan_path)
        self.interrupted = False
        self.run_id: str | None = study.parent
        """The study run (until one is opened: the one the study file names, if any)."""
        self.opened = False

    def pending(self, plan) -> list[Workload]:
        return _selected(plan, self.options)

    def run(self, plan) -> int:
        pending = self.pending(plan)
        slurm = self.options.slurm is not None
        if not pending:
            log.info(
                f"nothing to run in {self.study.path}: every workload is finished"
                + (" or not among --modes" if self.options.modes else "")
                + " (--rerun runs FAILED ones again, --rerun-all every one)"
            )
            if not slurm:
                return 0
        problems = check_plan(plan, pending, self.options, self.found, read_gpus=not slurm)
        if self.options.slurm is not None and self.study.batch is not None:
            problems.append(
                f"{self.study.path}: batch_size: the batch-size search runs on one GPU; run it "
                "without --slurm first (its sizes are kept), then the study with --slurm"
            )
        if problems:
            raise StudyError(self.plan_path, problems)
        store = open_store(self.options.tracking_uri)
        client = store[0]
        self.experiment_id = experiment_id(client, self.study.experiment)
        if self.options.slurm is not None:  # the study run opens once Slurm would take the jobs
            return self.on_slurm(store, client)
        self.run_id = self._study_run(client)
        write_progress(self.study.path, self.run_id, self.status, log.warning)
        status, code = "FAILED", 1
        try:
            if self.study.nodes > 1:
                code = self._on_nodes(plan, store)
                return code
            plan = self._batch_sizes(store, plan)
            options = replace(
                self.options,
                parent_run_id=self.run_id,
                tags={**self.options.tags, RADT_STUDY: self.study.name},
            )
            code = run_workloads(
                plan, self.pending(plan), options, self.found, store, after=self._record
            )
            status = "KILLED" if self.interrupted else self._outcome()
        except KeyboardInterrupt:
            status, code = "KILLED", 130
            raise
        finally:
            if self.study.nodes > 1:
                status = "KILLED" if self.interrupted or code == 130 else self._outcome()
            self._close(client, status)
        return code

    def _on_nodes(self, plan, store) -> int:
        """Without Slurm: each pending workload one training on ``nodes`` radT "nodes" of
        this host (:func:`radt.plans.multinode.run_here`, for testing), one after the other."""
        from radt.plans.multinode import run_here

        client, uri, _ = store
        code = 0
        for workload in self.pending(plan):
            status, run_id, interrupted = run_here(
                workload,
                self.study.nodes,
                self.study.name,
                self.run_id,
                client,
                uri,
                self.experiment_id,
                interval_s=self.options.interval_s,
            )
            self.interrupted = self.interrupted or interrupted
            if interrupted and status != FINISHED:
                status = "KILLED"  # runs again, as an interrupted workload does
            write_results(plan, workload, {row.line: (status, run_id) for row in workload.rows})
            self._record_status(workload.name, status, run_id)
            log.info(f"workload {workload.label}: {status} (job run {run_id or 'none'})")
            if self.interrupted:
                return 130
            if status != FINISHED:
                code = 1
        return code

    def dispatch(self, store: tuple):
        """The study's workloads on Slurm, nested under the study run; ``status:`` follows."""
        from radt.slurm.dispatch import Dispatch
        from radt.slurm.options import slurm_options

        request = self.options.slurm
        slurm = slurm_options(self.study.slurm, request.overrides, f"{self.study.path}: slurm:")
        client, uri, _ = store
        return Dispatch(
            self.plan_path,
            slurm,
            request,
            client,
            uri,
            tags={RADT_STUDY: self.study.name},
            record=self._record_status,
            nodes=self.study.nodes,
            target=self.study.path,
        )

    def on_slurm(self, store: tuple, client=None) -> int:
        """Every pending workload a Slurm job nested under the study run, which is opened only
        once Slurm would take the jobs; it ends when the last job ends (here, or by the
        closing job after ``--detach`` or SIGTERM)."""
        dispatch = self.dispatch(store)
        self.endings = dispatch.endings
        if client is None:  # a dry run
            return dispatch.go(self.pending)
        created: list[str] = []

        def open_parent() -> str:
            self.run_id = self._study_run(client)
            self.opened = True
            if self.run_id != self.study.parent:
                created.append(self.run_id)
            write_progress(self.study.path, self.run_id, self.status, log.warning)
            return self.run_id

        try:
            code = dispatch.go(self.pending, open_parent)
        except BaseException:
            if created and not dispatch.jobs:  # sbatch refused after all: nothing was made
                client.delete_run(created[0])
                write_progress(self.study.path, self.study.parent, self.status, log.warning)
            elif self.opened:
                self._close(client, FAILED)
            raise
        if not self.opened:  # nothing submitted, nothing in Slurm
            self.settle(client)
        elif code == 130:
            self._close(client, "KILLED")
        elif code < 128 and not dispatch.jobs:
            self._close(client, self._outcome(dispatch.cancelled))
        return code

    def settle(self, client) -> None:
        """Close the study run a detached submission left RUNNING, once no job is left."""
        parent = self.study.parent
        if not parent:
            return
        try:
            run = client.get_run(parent)
        except Exception:
            return
        if run.info.status != "RUNNING":
            return
        self.run_id = parent
        self._close(client, self._outcome())

    def _study_run(self, client) -> str:
        tags = {
            RADT_STUDY: self.study.name,
            RADT_STUDY_FILE: str(self.study.path),
            RADT_STUDY_WORKLOADS: str(len(self.workloads)),
        }
        if self.study.parent:
            try:
                run = client.get_run(self.study.parent)
            except Exception:
                run = None
            if run is not None and run.info.experiment_id == self.experiment_id:
                client.update_run(run.info.run_id, status="RUNNING")
                log.info(f"study {self.study.name}: going on in run {run.info.run_id}")
                return run.info.run_id
            log.info(
                f"study {self.study.name}: its parent run {self.study.parent} is not in "
                f"experiment {self.study.experiment} of this store; opening a new study run"
            )
        run = client.create_run(self.experiment_id, run_name=self.study.name, tags=tags)
        log.info(f"study {self.study.name}: study run {run.info.run_id}")
        return run.info.run_id

    def _batch_sizes(self, store, plan):
        spec = self.study.batch
        if spec is None:
            return plan
        searcher = batch.Searcher(
            self.study, spec, self.options, self.found, store, self.experiment_id, self.run_id
        )
        sizes: dict[tuple[str, str], int] = {}
        for slot in batch.slots(self.workloads):
            cached = searcher.cached(slot)
            if cached is not None:
                sizes[(slot.job, slot.key)] = cached
        wanted = [self.by_name[w.name] for w in self.pending(plan)]
        for slot in batch.slots(wanted):
            if (slot.job, slot.key) not in sizes:
                sizes[(slot.job, slot.key)] = searcher.search(slot)
        rows = plan_rows(self.study, self.workloads, self.progress, sizes, old_runs(self.plan_path))
        write_plan(self.plan_path, plan_text(self.study, rows, searched=True))
        return read_plan(self.plan_path)

    def _record(self, runner: WorkloadRunner) -> None:
        """After a workload: its status into the study file (as the original writes it)."""
        workload = self.by_name.get(runner.workload.name)
        if runner.interrupted:
            self.interrupted = True
        if workload is None:
            return
        self._record_status(workload.name, runner.workload.status or "KILLED", runner.parent.run_id)

    def _record_status(self, name: str, status: str, run_id: str) -> None:
        """A workload's status and run (or ``slurm:<job>``) into the study file's ``status:``."""
        workload = self.by_name.get(name)
        if workload is None:
            return
        if not status:  # never ran (a job cancelled while pending): no entry, it runs again
            entry = self.progress.pop(workload.descriptor, None)
            if entry is not None:
                self.status.pop(entry.number, None)
                self._write_status()
            return
        entry = self.progress.get(workload.descriptor)
        number = entry.number if entry is not None else max(self.status, default=0) + 1
        new = Progress(number, status, run_id, workload.descriptor)
        self.progress[workload.descriptor] = new
        self.status[number] = new.text
        self._write_status()

    def _write_status(self) -> None:
        try:
            write_progress(self.study.path, self.run_id, self.status, log.warning)
        except Exception as exc:  # a study file made unreadable meanwhile: the plan still has it
            text = getattr(exc, "strerror", None) or str(exc).splitlines()[0]
            log.warning(f"could not write the progress into {self.study.path}: {text}")

    def _considered(self) -> list[StudyWorkload]:
        """The workloads this invocation is about: those among ``--modes`` (every one without)."""
        modes = self.options.modes
        return [w for w in self.workloads if modes is None or w.configuration.mode in modes]

    def _outcome(self, cancelled: bool = False) -> str:
        """FINISHED only when every workload finished; KILLED when the user cancelled (Ctrl-C,
        scancel); otherwise FAILED."""
        statuses = [status_of(w, self.progress) for w in self._considered()]
        if all(s == FINISHED for s in statuses):
            return FINISHED
        endings = getattr(self, "endings", {})
        if cancelled or "CANCELLED" in endings.values():
            return "KILLED"
        return FAILED

    def _others(self) -> str:
        """The workloads that did not finish, counted by Slurm's state (else their status)."""
        endings = getattr(self, "endings", {})
        kinds: dict[str, int] = {}
        for w in self._considered():
            status = status_of(w, self.progress)
            if status != FINISHED:
                kind = endings.get(w.name) or status or "not run"
                if status in (FAILED, "KILLED") and kind not in (FAILED, "KILLED", status):
                    kind = f"{status} ({kind})"
                kinds[kind] = kinds.get(kind, 0) + 1
        return ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))

    def again(self) -> str:
        """The command that goes on where this one left off."""
        if self.options.slurm is not None and self.options.slurm.again:
            return self.options.slurm.again
        return f"radt {self.study.path}"

    def _close(self, client, status: str) -> None:
        done = sum(1 for w in self.workloads if status_of(w, self.progress) == FINISHED)
        left = len(self.workloads) - done
        others = self._others()
        try:
            client.set_tag(self.run_id, RADT_STUDY_PROGRESS, f"{done}/{len(self.workloads)}")
            for path in (self.study.path, self.plan_path):
                client.log_artifact(self.run_id, str(path), "radt/study")
            client.set_terminated(self.run_id, status)
        except Exception as exc:  # the tracking store went away: the files hold the progress
            log.warning(
                f"could not close the study run {self.run_id}: {str(exc).splitlines()[0][:200]}"
            )
        log.info(
            f"study {self.study.name}: {status}, {done} of {len(self.workloads)} workloads "
            "finished"
            + (f" (others: {others})" if others else "")
            + (f"; {left} left: run `{self.again()}` again to go on" if left else "")
        )

"""Running a study: check it, write its plan, search batch sizes, run the plan, record progress.

``radt study.yaml --dry-run`` checks the study against the GPU *model* (its MIG profiles from
``nvidia-smi mig -lgip``, else :mod:`radt.collocation.models`; its power-limit range), not the
GPU's current MIG mode (a MIG study runs in two passes, ``--modes mig`` and ``--modes
none+naive+mps``), prints the workloads and writes the plan CSV. Without ``--dry-run`` the
plan is checked as plans are, a study run is opened (or the one in ``parent:`` reused), the
batch sizes are searched, and the plan runs through the workload runner with every workload
run nested under the study run; after each workload its status goes into the plan CSV and
into the study file's ``status:``.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from radt.collocation import clocks, mig, models, nvsmi, power
from radt.collocation.common import find_gpu, list_gpus, mig_mode, watts
from radt.errors import RadtError, UsageError
from radt.launch.launcher import open_store
from radt.launch.registry import Discovered, discover, select
from radt.plans import batch, columns
from radt.plans.model import FAILED, FINISHED, PlanError, Workload, clean
from radt.plans.read import read_plan
from radt.plans.runner import (
    PlanOptions,
    WorkloadRunner,
    _selected,
    check_plan,
    run_workloads,
)
from radt.plans.scanner import physical_lines, read_text, scan
from radt.plans.study import (
    SHARED_LOADER_FLAG,
    Progress,
    Study,
    StudyError,
    StudyWorkload,
    expand,
    progress_of,
    read_study,
)
from radt.plans.studyfile import write_progress
from radt.plans.writeback import _atomic_write, _locked, _quote, lock_path, write_results
from radt.tags import RADT_STUDY, RADT_STUDY_FILE, RADT_STUDY_PROGRESS, RADT_STUDY_WORKLOADS, Mode
from radt.tracking import experiment_id
from radt.words import count

log = logging.getLogger(__name__)

PLAN_COLUMNS = (
    "Experiment",
    "Workload",
    "Status",
    "Run",
    "Devices",
    "Collocation",
    "File",
    "Listeners",
    "Params",
    "PowerLimit",
    "Job",
)
LOADER_COLUMNS = (*PLAN_COLUMNS, "Role")
"""The plan's columns when the study has a ``loader:`` dimension."""


@dataclass
class StudyOptions:
    """What the command line asked for, for a study."""

    path: Path
    plan: PlanOptions
    """The plan options (``path`` is replaced by the plan file's)."""
    plan_path: Path | None = None
    dry_run: bool = False


def default_plan_path(study_path: Path) -> Path:
    """``study.plan.csv`` beside ``study.yaml``."""
    return study_path.with_name(study_path.stem + ".plan.csv")


# --------------------------------------------------------------------------- checks


@dataclass
class Checked:
    """What checking a study against this machine found."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    gpu: str = ""
    """The GPU the study was checked against, in words."""


def check_study(
    study: Study, found: dict[str, Discovered], *, on_this_machine: bool = True
) -> Checked:
    """Problems with the study on this machine: its GPU model (MIG profiles, placements),
    power limits, devices, listeners and batch flag. Changes nothing; a dry run and a real run
    check the same.

    ``on_this_machine`` False (the workloads run as Slurm jobs on other nodes): a listener
    that cannot run here is a note, since the node decides; an unknown one stays a problem."""
    checked = Checked()
    where = _where(study)
    try:
        select(study.listeners, found)
    except UsageError as exc:
        message = f"{where('listeners')}: listeners: {exc}"
        if on_this_machine or "unknown listener" in str(exc):
            checked.problems.append(message)
        else:
            checked.notes.append(message)
    _check_gpu(study, checked)
    if study.batch is not None:
        problem = batch.check_flag(study, study.batch)
        if problem:
            checked.problems.append(f"{where('batch_size')}: batch_size.flag: {problem}")
    return checked


def _where(study: Study):
    def where(key: str) -> str:
        line = study.lines.get(key) or study.lines.get(key.split("[")[0])
        return f"{study.path} line {line}" if line else str(study.path)

    return where


def _check_gpu(study: Study, checked: Checked) -> None:
    where = _where(study)
    migs = [(i, c) for i, c in enumerate(study.configurations) if c.mode == Mode.MIG]
    caps = [(i, w) for i, w in enumerate(study.power_limits_w) if w is not None]
    devices = [d for d in study.devices.split("+") if d]
    if migs and len(devices) > 1:
        checked.problems.append(
            f"{where('devices')}: devices: MIG configurations need one GPU to partition, "
            f"not {len(devices)}"
        )
        return
    if not nvsmi.available(nvsmi.SMI):
        _check_without_gpu(study, migs, caps, checked)
        return
    try:
        gpus = list_gpus()
    except RadtError as exc:
        checked.problems.append(f"{where('devices')}: {exc}")
        return
    device = devices[0] if devices else "0"
    gpu = find_gpu(device, gpus)
    if gpu is None:
        listed = ", ".join(f"{g.index} ({g.name})" for g in gpus) or "no GPU"
        checked.problems.append(
            f"{where('devices')}: devices: GPU {device} does not exist here; "
            f"nvidia-smi -L lists {listed}"
        )
        return
    checked.gpu = f"GPU {gpu.index}: {gpu.name}"
    for i, mhz in enumerate(study.gpu_clocks_mhz):
        if mhz is not None:
            checked.problems += clocks.check_gpu(gpu, mhz, _item(study, i, "gpu_clock"))
    if migs:
        state, source = _mig_state(gpu)
        if state is None:
            for i, c in migs:
                checked.problems.append(f"{_item(study, i)}: {c.label}: {source}")
        else:
            checked.gpu += f" (MIG profiles from {source})"
            for i, configuration in migs:
                problem = _fit(gpu, state, configuration)
                if problem:
                    checked.problems.append(f"{_item(study, i)}: {configuration.label}: {problem}")
    if caps:
        try:
            readings = power.readings(gpu.index)
        except RadtError as exc:
            checked.problems.append(f"{where('power_limit')}: power_limit: {exc}")
            return
        if readings.min is None or readings.max is None:
            checked.problems.append(
                f"{where('power_limit')}: power_limit: GPU {gpu.index} ({gpu.name}) does not "
                "report a power-limit range, so radT cannot cap it"
            )
            return
        checked.gpu += f", power limit {watts(readings.min)}-{watts(readings.max)} W"
        for i, cap in caps:
            if not readings.min <= cap <= readings.max:
                checked.problems.append(
                    f"{_item(study, i, 'power_limit')}: {watts(cap)} W is outside the range "
                    f"of GPU {gpu.index} ({gpu.name}): {watts(readings.min)} W to "
                    f"{watts(readings.max)} W"
                )


def _item(study: Study, index: int, key: str = "collocation") -> str:
    raw_is_list = f"{key}[0]" in study.lines
    name = f"{key}[{index}]" if raw_is_list else key
    line = study.lines.get(name) or study.lines.get(key)
    return f"{study.path} line {line}: {name}" if line else f"{study.path}: {name}"


def _mig_state(gpu: nvsmi.GpuListing) -> tuple[mig.GpuMig | None, str]:
    """The GPU model's MIG profiles as an empty GPU, and where they come from (or why not)."""
    mode = mig_mode(gpu.index)
    if mode is not None and mode[0].strip("[]") in ("N/A", "Not Supported"):
        return None, f"GPU {gpu.index} ({gpu.name}) does not support MIG"
    if mode is not None and mode[0] == "Enabled":
        try:
            state = mig.read_gpu(gpu.index)
        except RadtError:
            state = None
        if state is not None:
            profiles = [replace(p, free=p.total) for p in state.profiles]
            return mig.GpuMig(profiles, []), "nvidia-smi mig -lgip"
    model = models.model_of(gpu.name)
    if model is None:
        return None, (
            f"GPU {gpu.index} ({gpu.name}) is not a MIG model radT knows "
            f"({models.known_names()}) and its MIG mode is off, so nvidia-smi cannot list its "
            f"profiles; turn MIG mode on (`sudo nvidia-smi -i {gpu.index} -mig 1`) to check"
        )
    return model.state(gpu.index), f"the {model.name} table"


def _fit(gpu: nvsmi.GpuListing, state: mig.GpuMig, configuration) -> str | None:
    profiles = []
    for run in configuration.runs:
        profile = mig.find_profile(run.mig_profile or "", state.profiles)
        if profile is None:
            return (
                f"MIG profile {run.mig_profile} does not exist on GPU {gpu.index} "
                f"({gpu.name}); it offers {state.offers()}"
            )
        profiles.append(profile)
    return mig.fit_problem(gpu, state, profiles)


def _check_without_gpu(study: Study, migs, caps, checked: Checked) -> None:
    checked.gpu = "no nvidia-smi here"
    if migs:
        names = {str(run.mig_profile) for _i, c in migs for run in c.runs}
        offering = models.models_offering(names)
        if not offering:
            checked.notes.append(
                f"{study.path}: no GPU here and no known MIG model ({models.known_names()}) "
                f"offers all of {', '.join(sorted(names))}; the MIG configurations are checked "
                "for compute slices only"
            )
        else:
            model = offering[0]  # every model offering them shares the geometry: one check
            tables = " and ".join(m.name for m in offering)
            checked.gpu += f"; MIG profiles checked against the {tables} table" + (
                "s (the same profiles)" if len(offering) > 1 else ""
            )
            listing = nvsmi.GpuListing(0, model.name, "GPU-model")
            state = model.state()
            for i, configuration in migs:
                problem = _fit(listing, state, configuration)
                if problem:
                    checked.problems.append(f"{_item(study, i)}: {configuration.label}: {problem}")
    if caps:
        checked.notes.append(
            f"{study.path}: no nvidia-smi here, so the power limits are not checked against a "
            "GPU's range"
        )
    if any(mhz is not None for mhz in study.gpu_clocks_mhz):
        checked.notes.append(
            f"{study.path}: no nvidia-smi here, so the GPU clocks are not checked against a "
            "GPU's supported clocks"
        )


# --------------------------------------------------------------------------- the plan


def plan_rows(
    study: Study,
    workloads: list[StudyWorkload],
    progress: dict[str, Progress],
    sizes: dict[tuple[str, str], int],
    old_runs: dict[tuple[str, int], tuple[str, str]],
) -> list[dict[str, str]]:
    """The plan's rows: one per run of every workload, with the study's progress.

    A workload with a shared loader starts with its loader row (``Role`` = loader, the
    study's ``loader_file``, no share of the GPU and no power limit; ``naive`` beside naive
    trainings, else ``-``), and its trainings get ``--shared-loader`` before their params,
    as in examples/shared_loader.csv.
    """
    rows = []
    for workload in workloads:
        entry = progress.get(workload.descriptor)
        status = entry.status if entry is not None else ""
        shared = workload.loader == "shared"
        cells: list[dict[str, str]] = []
        if shared:
            mode = workload.configuration.mode
            cells.append(
                {
                    "Collocation": Mode.NAIVE if mode == Mode.NAIVE else "-",
                    "File": study.loader_file or "-",
                    "Params": "-",
                    "PowerLimit": "-",
                    "GpuClock": "-",
                    "Job": "-",
                    "Role": "loader",
                }
            )
        for position, run in enumerate(workload.configuration.runs):
            params = [SHARED_LOADER_FLAG] if shared else []
            params += workload.argv_params
            size = sizes.get((workload.job, batch.slot_key(workload.configuration, position)))
            if study.batch is not None and size is not None:
                params += [study.batch.flag, str(size)]
            cells.append(
                {
                    "Collocation": run.label,
                    "File": study.file,
                    "Params": shlex.join(params) if params else "-",
                    "PowerLimit": "-"
                    if workload.power_limit_w is None
                    else f"{workload.power_limit_w:g}",
                    "GpuClock": "-"
                    if workload.gpu_clock_mhz is None
                    else str(workload.gpu_clock_mhz),
                    "Job": workload.job,
                    "Role": "-",
                }
            )
        for position, row in enumerate(cells):
            old_status, old_run = old_runs.get((workload.name, position), ("", ""))
            rows.append(
                {
                    "Experiment": study.experiment,
                    "Workload": workload.name,
                    "Status": status,
                    "Run": old_run if status and old_status == status else "",
                    "Devices": study.devices or "-",
                    "Listeners": study.listeners or "-",
                    **columns.study_cells(study.column_values),
                    **row,
                }
            )
    return rows


def plan_text(study: Study, rows: list[dict[str, str]], searched: bool) -> str:
    """The plan CSV: a comment header, the column line, the rows."""
    lines = [
        f"# The plan of study {study.name} ({study.path}), written by radT from the study:",
        "# edit the study, not this file. radT writes Status and Run here after each workload",
        "# and the progress into the study's status:; finished workloads are skipped.",
    ]
    if study.batch is not None and not searched:
        lines.append(
            f"# {study.batch.flag} is added to each row once its slot's largest batch size is "
            "found (when the study runs)."
        )
    if study.nodes > 1:
        lines.append(
            f"# nodes: {study.nodes}: radT runs each workload as one training on "
            f"{study.nodes} nodes (a job run with a node run per node); run the study, not this "
            "plan."
        )
    names = LOADER_COLUMNS if "loader" in study.extended else PLAN_COLUMNS
    if "gpu_clock" in study.extended:
        at = names.index("PowerLimit") + 1
        names = (*names[:at], "GpuClock", *names[at:])
    names = (*names, *columns.study_columns(study.column_values))
    lines.append(", ".join(names))
    for row in rows:
        lines.append(", ".join(_quote(row[name]) for name in names))
    return "\n".join(lines) + "\n"


def old_runs(plan_path: Path) -> dict[tuple[str, int], tuple[str, str]]:
    """(Workload, position) -> (Status, Run) of the plan file as it is now (none if absent)."""
    if not plan_path.exists():
        return {}
    try:
        _, text = read_text(plan_path)
    except (UsageError, OSError):
        return {}
    records, _ = scan(physical_lines(text))
    if not records:
        return {}
    header = [clean(cell).lower() for cell in records[0].cells]
    found: dict[tuple[str, int], tuple[str, str]] = {}
    counts: dict[str, int] = {}

    def cell(cells: list[str], name: str) -> str:
        return (
            clean(cells[header.index(name)])
            if name in header and header.index(name) < len(cells)
            else ""
        )

    for record in records[1:]:
        cells = record.cells
        workload = cell(cells, "workload")
        position = counts.get(workload, 0)
        counts[workload] = position + 1
        status = cell(cells, "status").split()[0].upper() if cell(cells, "status") else ""
        found[(workload, position)] = (status, cell(cells, "run"))
    return found


def write_plan(path: Path, text: str) -> None:
    """Write the plan file atomically, under the plan lock."""
    with _locked(lock_path(path)):
        _atomic_write(path, text.encode("utf-8"))


# --------------------------------------------------------------------------- the report


def report(
    study: Study,
    workloads: list[StudyWorkload],
    progress: dict[str, Progress],
    plan_path: Path,
    checked: Checked,
    modes: set[str] | None,
) -> str:
    """The dry run's table: counts, configurations, caps, repeats, then one line per workload."""
    combos = 1
    for _flag, values in study.parameters:
        combos *= len(values)
    runs = sum(len(w.configuration.runs) + (w.loader == "shared") for w in workloads)
    loaders = "loader" in study.extended
    caps = ", ".join("default" if w is None else f"{w:g} W" for w in study.power_limits_w)

    def n(count: int, word: str) -> str:
        return f"{count} {word}{'' if count == 1 else 's'}"

    out = [
        f"study {study.name} ({study.path}): {n(len(workloads), 'workload')}, {n(runs, 'run')}"
        f" = {n(combos, 'parameter combination')} x {n(len(study.configurations), 'configuration')}"
        f" x {n(len(study.power_limits_w), 'power limit')}"
        + (f" x {n(len(study.loaders), 'loader')}" if loaders else "")
        + f" x {n(study.repeats, 'repeat')}"
        f" ({study.method} order{', seed ' + str(study.seed) if study.method == 'random' else ''})",
        f"experiment: {study.experiment}; command: {study.file}",
        "configurations: " + ", ".join(c.label for c in study.configurations),
        f"power limits: {caps}",
    ]
    if loaders:
        out.append(
            "loaders: "
            + ", ".join(study.loaders)
            + (f"; shared loader: {study.loader_file}" if study.loader_file else "")
        )
    if study.parameters:
        out.append(
            "parameters: "
            + "; ".join(f"{flag} {', '.join(values)}" for flag, values in study.parameters)
        )
    if study.batch is not None:
        keys = list(dict.fromkeys(s.key for s in batch.slots(workloads)))
        out.append(
            f"batch size: the largest {study.batch.flag} that fits "
            f"({study.batch.spec.split(' ', 1)[1]}), searched when the study runs for each of "
            f"{n(len(keys), 'slot')} ({', '.join(keys)}), at most "
            f"{batch.most_probes(study.batch)} probes each"
        )
    if checked.gpu:
        out.append(f"checked against: {checked.gpu}")
    modes_used = {w.configuration.mode for w in workloads}
    if Mode.MIG in modes_used and modes_used - {Mode.MIG}:
        out.append(
            f"two passes: `radt {study.path} --modes mig` with MIG mode on, then "
            f"`radt {study.path} --modes none+naive+mps` with it off"
        )
    done = sum(1 for w in workloads if _status(w, progress) == FINISHED)
    out.append(f"progress: {done} of {len(workloads)} finished; plan: {plan_path}")
    header = ("#", "workload", "configuration", "runs", "power", "repeat", "params", "status")
    if loaders:
        header = (*header[:4], "loader", *header[4:])
    table = [header]
    for w in workloads:
        status = _status(w, progress) or (
            "" if modes is None or w.configuration.mode in modes else "-"
        )
        table.append(
            (
                str(w.index),
                w.name,
                w.configuration.label,
                str(len(w.configuration.runs) + (w.loader == "shared")),
                *([w.loader] if loaders else []),
                "default" if w.power_limit_w is None else f"{w.power_limit_w:g} W",
                str(w.repeat),
                w.params_text or "-",
                status,
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        out.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return "\n".join(out)


def _status(workload: StudyWorkload, progress: dict[str, Progress]) -> str:
    entry = progress.get(workload.descriptor)
    return entry.status if entry is not None else ""


# --------------------------------------------------------------------------- running


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
        statuses = [_status(w, self.progress) for w in self._considered()]
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
            status = _status(w, self.progress)
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
        done = sum(1 for w in self.workloads if _status(w, self.progress) == FINISHED)
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

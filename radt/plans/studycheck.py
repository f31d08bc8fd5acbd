"""Checking a study against this machine before anything runs: the GPU *model* (its MIG
profiles from ``nvidia-smi mig -lgip``, else :mod:`radt.collocation.models`), its power-limit
range and supported clocks, the devices, the listeners and the batch flag. A dry run and a real
run check the same; nothing here changes the machine or the files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from radt.collocation import clocks, mig, models, nvsmi, power
from radt.collocation.common import find_gpu, list_gpus, mig_mode, watts
from radt.errors import RadtError, UsageError
from radt.launch.registry import Discovered, select
from radt.plans import batch
from radt.plans.study import Study
from radt.tags import Mode


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

"""A study expanded into its workloads, in run order: every combination of its parameters and
axes, each with its name in the plan, its Job and the descriptor that identifies it in the study
file's ``status:``.
"""

from __future__ import annotations

import random
import shlex
from itertools import product

from radt.plans.study import Study, StudyWorkload
from radt.plans.studyaxes import Configuration, _cap_text
from radt.tags import Mode


def default_job(study: Study, params: list[tuple[str, str]]) -> str:
    """The Job of a workload: ``job:`` (else the file), then the swept params but seeds."""
    kept = [(flag, value) for flag, value in params if flag.lstrip("-") not in ("seed",)]
    head = study.job or study.file
    return " ".join([head, *(f"{flag} {shlex.quote(value)}" for flag, value in kept)])


def descriptor(
    study: Study,
    params: list[tuple[str, str]],
    configuration: Configuration,
    power_limit_w: float | None,
    repeat: int,
    loader: str = "own",
    gpu_clock_mhz: int | None = None,
) -> str:
    """What identifies a workload in ``status:``: the original's params string, then ``|``
    and each extension that is not at its default (so adding one keeps finished work)."""
    parts = [" ".join(f"{flag} {value}" for flag, value in params)]
    if "collocation" in study.extended and configuration.label != Mode.NONE:
        parts.append(configuration.label)
    if power_limit_w is not None:
        parts.append(_cap_text(power_limit_w))
    if gpu_clock_mhz is not None:
        parts.append(f"{gpu_clock_mhz} MHz")
    if loader != "own":
        parts.append(f"{loader} loader")
    if study.nodes > 1:
        parts.append(f"{study.nodes} nodes")
    if repeat > 1:
        parts.append(f"repeat {repeat}")
    text = " | ".join(part for part in parts if part)
    return " ".join(text.split())


def expand(study: Study) -> list[StudyWorkload]:
    """Every workload of the study, in run order.

    Grid order: repeat, then parameters, then power limit, then GPU clock, then configuration,
    then loader (so an interrupted study has whole repeats, and own and shared loaders run one
    after the other). ``method: random`` shuffles the same list with ``seed`` (default 0): the
    same file gives the same order on every run.
    """
    combos = list(product(*[[(flag, v) for v in values] for flag, values in study.parameters]))
    items = [
        (list(combo), configuration, cap, clock, repeat, loader)
        for repeat in range(1, study.repeats + 1)
        for combo in combos
        for cap in study.power_limits_w
        for clock in study.gpu_clocks_mhz
        for configuration in study.configurations
        for loader in study.loaders
    ]
    if study.method == "random":
        random.Random(study.seed).shuffle(items)
    workloads = []
    for index, (params, configuration, cap, clock, repeat, loader) in enumerate(items, start=1):
        segments = [f"{index:03}"]
        if "collocation" in study.extended:
            segments.append(configuration.slug)
        if "power_limit" in study.extended:
            segments.append("default" if cap is None else f"{cap:g}w")
        if "gpu_clock" in study.extended:
            segments.append("default" if clock is None else f"{clock}mhz")
        if "loader" in study.extended:
            segments.append(loader)
        if study.repeats > 1:
            segments.append(f"r{repeat}")
        workloads.append(
            StudyWorkload(
                index=index,
                params=params,
                configuration=configuration,
                power_limit_w=cap,
                repeat=repeat,
                job=default_job(study, params),
                descriptor=descriptor(study, params, configuration, cap, repeat, loader, clock),
                name="-".join(segments),
                loader=loader,
                gpu_clock_mhz=clock,
            )
        )
    return workloads

"""A study's progress in words: each workload's status from the study's ``status:`` and the
dry run's table (counts, configurations, power limits, repeats, then one line per workload with
its status).
"""

from __future__ import annotations

from pathlib import Path

from radt.plans import batch
from radt.plans.model import FINISHED
from radt.plans.study import Progress, Study, StudyWorkload
from radt.plans.studycheck import Checked
from radt.tags import Mode


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
    done = sum(1 for w in workloads if status_of(w, progress) == FINISHED)
    out.append(f"progress: {done} of {len(workloads)} finished; plan: {plan_path}")
    header = ("#", "workload", "configuration", "runs", "power", "repeat", "params", "status")
    if loaders:
        header = (*header[:4], "loader", *header[4:])
    table = [header]
    for w in workloads:
        status = status_of(w, progress) or (
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


def status_of(workload: StudyWorkload, progress: dict[str, Progress]) -> str:
    """The workload's status in the study's progress (``""`` when it has none)."""
    entry = progress.get(workload.descriptor)
    return entry.status if entry is not None else ""

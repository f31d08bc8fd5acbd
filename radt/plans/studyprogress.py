"""A study's progress: the entries of the study file's ``status:`` (the last one of each
workload), each workload's status from them, and the dry run's table (counts, configurations,
power limits, repeats, then one line per workload with its status). Writing them back into the
file is :mod:`radt.plans.studyfile`'s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from radt.plans import batch
from radt.plans.model import FINISHED
from radt.plans.study import Study, StudyWorkload
from radt.plans.studycheck import Checked
from radt.tags import Mode

STATUS_WORD = re.compile(r"^[A-Z]+$")


@dataclass(frozen=True)
class Progress:
    """One ``status:`` entry: ``"<STATUS> <run id> (<descriptor>)"`` under its number."""

    number: int
    status: str
    run_id: str
    descriptor: str

    @property
    def text(self) -> str:
        return f"{self.status} {self.run_id} ({self.descriptor})"


def parse_progress(number: int, text: str) -> Progress | None:
    """An entry as the original reads it: the first word, the run id, then ``(...)``."""
    words = str(text).split()
    if len(words) < 2 or not STATUS_WORD.match(words[0]):
        return None
    rest = " ".join(words[2:]).strip()
    if len(words) == 2 and words[1].startswith("("):  # no run id: "FAILED (--lr 1)"
        rest, words[1] = words[1], ""
    if not (rest.startswith("(") and rest.endswith(")")):
        return None
    return Progress(number, words[0], words[1], " ".join(rest[1:-1].split()))


def progress_of(study: Study) -> dict[str, Progress]:
    """The last ``status:`` entry of each descriptor (higher numbers are later)."""
    found: dict[str, Progress] = {}
    for number in sorted(study.status):
        entry = parse_progress(number, study.status[number])
        if entry is not None:
            found[entry.descriptor] = entry
    return found


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

"""The ``slurm:`` options of a study or plan: read, overridden by ``--slurm-option``, checked."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from radt.errors import UsageError

KNOWN = (
    "partition",
    "account",
    "time",
    "max_parallel",
    "cpus_per_task",
    "mem",
    "gres",
    "exclusive",
    "setup",
    "extra",
)
# Option -> the sbatch flag it becomes (the others are handled on their own).
SBATCH_FLAGS = {
    "partition": "--partition",
    "account": "--account",
    "time": "--time",
    "cpus_per_task": "--cpus-per-task",
    "mem": "--mem",
    "gres": "--gres",
}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


@dataclass
class SlurmOptions:
    """How the workloads of one study or plan are submitted."""

    partition: str | None = None
    account: str | None = None
    time: str | None = None
    """Per workload, in any form sbatch takes (``02:00:00``, ``0:00:05``, ``90``)."""
    max_parallel: int | None = None
    cpus_per_task: int | None = None
    mem: str | None = None
    gres: str | None = None
    """None: derived from each workload's devices."""
    exclusive: bool = False
    setup: list[str] = field(default_factory=list)
    """Shell lines run on the node before radT (``module load …``, ``source …/activate``)."""
    extra: list[str] = field(default_factory=list)
    """Further sbatch arguments, passed as given."""


def _unknown(key: str, where: str) -> UsageError:
    return UsageError(f"{where}: unknown Slurm option {key!r}; known: {', '.join(KNOWN)}")


def _as_list(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return [str(value)]


def _positive(key: str, value, where: str) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if number <= 0:
        raise UsageError(
            f"{where}: Slurm option {key} must be a positive whole number, not {value!r}"
        )
    return number


def _flag(key: str, value, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise UsageError(f"{where}: Slurm option {key} is true or false, not {value!r}")


def slurm_options(
    block: dict | None, overrides: dict[str, str], block_where: str = "slurm:"
) -> SlurmOptions:
    """The options of the file's ``slurm:`` block, each ``--slurm-option`` overriding it.

    Raises UsageError (one line) for an unknown key or a value of the wrong kind.
    """
    merged: dict[str, tuple[object, str]] = {}
    for key, value in (block or {}).items():
        merged[str(key)] = (value, block_where)
    for key, value in overrides.items():
        if key in ("setup", "extra"):
            value = [part for part in re.split(r"\s*;\s*", value) if part]
        merged[key] = (value, "--slurm-option")
    options = SlurmOptions()
    for key, (value, where) in merged.items():
        if key not in KNOWN:
            raise _unknown(key, where)
        if key in ("max_parallel", "cpus_per_task"):
            setattr(options, key, _positive(key, value, where))
        elif key == "exclusive":
            options.exclusive = _flag(key, value, where)
        elif key in ("setup", "extra"):
            setattr(options, key, _as_list(value))
        elif value is not None and str(value).strip():
            setattr(options, key, str(value).strip())
    return options

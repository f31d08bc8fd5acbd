"""What a run is an instance of, and where its steady state begins: Job and warm-up inputs.

The command line (``--job``, ``--job-ignore``, ``--warmup-epochs``, ``--warmup-s``, ``--manual``)
and the plan columns (``Job``, ``WarmupEpochs``, ``WarmupS``) are checked here and become the run's
tags ``radt.job``, ``radt.job_ignore``, ``radt.warmup_epochs``, ``radt.warmup_s`` and
``radt.manual``, which the analysis reads (docs/analysis: client window, Job, baselines).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from radt.tags import RADT_JOB, RADT_JOB_IGNORE, RADT_MANUAL, RADT_WARMUP_EPOCHS, RADT_WARMUP_S

MAX_JOB_CHARS = 250
_FLAG = re.compile(r"^--?[A-Za-z0-9][\w.-]*$")


def parse_warmup_epochs(text: str) -> int:
    """A warm-up in epochs: a whole number, at least 1; ValueError says what to give."""
    value = text.strip()
    if not re.fullmatch(r"[0-9]+", value) or int(value) < 1:
        raise ValueError(f"{value!r} is not a whole number of epochs, at least 1 (e.g. 1)")
    return int(value)


def parse_warmup_s(text: str) -> float:
    """A warm-up in seconds from the command's start: a number ≥ 0; ValueError otherwise."""
    value = text.strip()
    try:
        seconds = float(value.removesuffix("s").strip())
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{value!r} is not a number of seconds, 0 or more (e.g. 30)")
    return seconds + 0.0  # -0 is 0


def parse_job(text: str) -> str:
    """A Job name: free text, one line, at most 250 characters; ValueError otherwise."""
    value = text.strip()
    if not value:
        raise ValueError("is empty (give a name such as resnet18-cifar)")
    if len(value) > MAX_JOB_CHARS or "\n" in value or "\r" in value:
        raise ValueError(f"must be one line of at most {MAX_JOB_CHARS} characters")
    return value


def parse_job_flag(text: str) -> str:
    """A flag to leave out of the Job (``--data-seed``); ValueError otherwise."""
    value = text.strip()
    if not _FLAG.match(value):
        raise ValueError(f"{value!r} is not a flag (give it as on the command line, e.g. --seed)")
    return value


@dataclass(frozen=True)
class JobInputs:
    """A run's Job and warm-up as the user gave them (None: not given)."""

    job: str | None = None
    job_ignore: Sequence[str] = field(default_factory=tuple)
    warmup_epochs: int | None = None
    warmup_s: float | None = None
    manual: bool = False
    """``--manual``: the window starts when the script opens ``radt.run.RADTBenchmark()``."""

    def tags(self) -> dict[str, str]:
        """The run's tags for these inputs; only those given."""
        tags: dict[str, str] = {}
        if self.job:
            tags[RADT_JOB] = self.job
        if self.job_ignore:
            tags[RADT_JOB_IGNORE] = " ".join(dict.fromkeys(self.job_ignore))
        if self.warmup_epochs is not None:
            tags[RADT_WARMUP_EPOCHS] = str(self.warmup_epochs)
        if self.warmup_s is not None:
            tags[RADT_WARMUP_S] = f"{self.warmup_s:g}"
        if self.manual:
            tags[RADT_MANUAL] = "1"
        return tags

"""The largest batch size per device slot: short probe runs and a binary search, cached in MLflow.

A **slot** is where one run of a configuration trains: a MIG profile (``3g.40gb``, probed as
one slice alone), the whole GPU (``none``), or a shared GPU (``naive x3``, ``mps:50 x2``,
probed with all its runs at once, since they share its memory). For each (Job, slot) radT runs
the job at a batch size under that slot, for a few steps (``RADT_MAX_STEPS``: the run API ends
the script after that many ``radt.log_examples`` calls; ``max_time`` minutes at most), and
bisects the candidates (``min..max``, or their powers of two) for the largest that does not run
out of memory. A probe ran out of memory when one of its runs failed with one of
:data:`OOM_MARKERS` in its output; any other failure stops the search with that run's last line.
At most ``ceil(log2(candidates + 1))`` probes: 17 for 1..65536.

Every probe is a workload run tagged ``radt.probe=probe`` with its ``radt.probe.batch`` and,
once it ended, ``radt.probe.outcome`` (``fits``/``oom``); they nest under a search run
(``radt.probe=search``) that holds the answer in ``radt.probe.batch_size``. Both are the cache:
a finished search is never run again, and a search cut short reuses the outcomes it has.
"""

from __future__ import annotations

import logging
import math
import os
import shlex
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

from radt.errors import RadtError, UsageError
from radt.launch.command import resolve_argv
from radt.plans.model import Plan, Row, Workload
from radt.plans.runner import PlanOptions, WorkloadRunner
from radt.plans.study import BatchSearch, Study, StudyWorkload
from radt.plans.studyaxes import Configuration
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_LETTER,
    RADT_NOTE,
    RADT_PROBE,
    RADT_PROBE_BATCH,
    RADT_PROBE_BATCH_SIZE,
    RADT_PROBE_JOB,
    RADT_PROBE_OUTCOME,
    RADT_PROBE_PROBES,
    RADT_PROBE_SLOT,
    RADT_PROBE_SPEC,
    Mode,
    tag_filter,
)

log = logging.getLogger(__name__)

OOM_MARKERS = (
    "torch.OutOfMemoryError",
    "torch.cuda.OutOfMemoryError",
    "CUDA out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "RESOURCE_EXHAUSTED",
)
"""Output that says a run ran out of GPU memory (PyTorch, cuBLAS, TensorFlow/JAX/XLA)."""
TAIL_B = 64 * 1024
PROBE, SEARCH = "probe", "search"


def slot_key(configuration: Configuration, position: int) -> str:
    """The slot of run ``position`` of ``configuration``: its MIG profile, ``whole GPU``, or
    the sharing configuration (all its runs share one memory)."""
    if configuration.mode == Mode.MIG:
        return str(configuration.runs[position].mig_profile)
    if configuration.mode == Mode.NONE:
        return "whole GPU"
    return configuration.label


def probe_configuration(configuration: Configuration, position: int) -> Configuration:
    """What a probe of that slot runs: one MIG slice alone, else the configuration itself."""
    if configuration.mode == Mode.MIG:
        run = configuration.runs[position]
        return Configuration(run.label, (run,))
    return configuration


@dataclass(frozen=True)
class SearchSlot:
    """One (Job, slot) to search, with the command that trains the Job."""

    job: str
    key: str
    configuration: Configuration
    params: tuple[str, ...]  # the swept params as arguments, without the batch flag


def slots(workloads: list[StudyWorkload]) -> list[SearchSlot]:
    """The distinct (Job, slot) pairs of ``workloads``, in the order they are first needed."""
    found: dict[tuple[str, str], SearchSlot] = {}
    for workload in workloads:
        for position in range(len(workload.configuration.runs)):
            key = slot_key(workload.configuration, position)
            if (workload.job, key) not in found:
                found[(workload.job, key)] = SearchSlot(
                    workload.job,
                    key,
                    probe_configuration(workload.configuration, position),
                    tuple(workload.argv_params),
                )
    return list(found.values())


def candidates(spec: BatchSearch) -> list[int]:
    """The batch sizes the search may answer, ascending."""
    if not spec.power_of_two:
        return list(range(spec.min, spec.max + 1))
    return [2**k for k in range(spec.max.bit_length()) if spec.min <= 2**k <= spec.max]


def most_probes(spec: BatchSearch) -> int:
    """The most probes one search needs: ``ceil(log2(candidates + 1))``."""
    return math.ceil(math.log2(len(candidates(spec)) + 1))


def has_oom(text: str) -> bool:
    """Whether ``text`` says the run ran out of GPU memory."""
    return any(marker in text for marker in OOM_MARKERS)


def check_flag(study: Study, spec: BatchSearch) -> str | None:
    """Why the job cannot take ``spec.flag`` (its ``--help`` does not mention it), or None."""
    import re

    try:
        argv = resolve_argv(shlex.split(study.file)) + ["--help"]
    except (UsageError, ValueError):
        return None  # reported with the file
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`{shlex.join(argv)}` could not run to tell its flags: {exc}"
    if re.search(rf"(?<![\w-]){re.escape(spec.flag)}(?![\w-])", done.stdout + done.stderr):
        return None
    return (
        f"the job has no {spec.flag} flag: `{shlex.join(argv)}` does not mention it "
        f"(exit code {done.returncode}); name the flag your script takes as batch_size.flag"
    )


class _ProbePlan(Plan):
    """A plan of one probe: its results are kept, not written to a file."""

    def __init__(self, path: Path, workload: Workload) -> None:
        super().__init__(path, [workload])
        self.results: dict[int, tuple[str, str]] = {}


class _ProbeRunner(WorkloadRunner):
    """A workload runner that keeps the end of each run's output (for the OOM markers) and its
    results in its :class:`_ProbePlan` rather than in a file."""

    tails: list[str]
    plan: _ProbePlan

    def _record(self, results: dict[int, tuple[str, str]]) -> None:
        self.plan.results.update(results)

    def _close(self, codes, failure):
        self.tails = [_tail(run.output_log) for run in self.runs]
        return super()._close(codes, failure)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - TAIL_B))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


@dataclass
class Searcher:
    """Searches the slots of one study, on an open store, under the study's run."""

    study: Study
    spec: BatchSearch
    options: PlanOptions
    found: dict
    store: tuple
    experiment_id: str
    parent_run_id: str
    probes_run: int = 0

    @property
    def client(self):
        return self.store[0]

    def _search_runs(self) -> list:
        """The experiment's probe and search runs (the cache)."""
        return self.client.search_runs(
            [self.experiment_id], filter_string=tag_filter(RADT_PROBE, "", "!="), max_results=50000
        )

    def cached(self, slot: SearchSlot) -> int | None:
        """The answer of a finished search of ``slot`` with this spec, if any."""
        for run in self._search_runs():
            tags = run.data.tags
            if (
                tags.get(RADT_PROBE) == SEARCH
                and self._same(tags, slot)
                and run.info.status == "FINISHED"
                and tags.get(RADT_PROBE_BATCH_SIZE, "").isdigit()
            ):
                return int(tags[RADT_PROBE_BATCH_SIZE])
        return None

    def _same(self, tags: dict, slot: SearchSlot) -> bool:
        return (
            tags.get(RADT_PROBE_JOB) == slot.job
            and tags.get(RADT_PROBE_SLOT) == slot.key
            and tags.get(RADT_PROBE_SPEC) == self.spec.spec
        )

    def _outcomes(self, slot: SearchSlot) -> dict[int, str]:
        """Outcomes of earlier probes of ``slot`` (batch size -> fits/oom)."""
        outcomes = {}
        for run in self._search_runs():
            tags = run.data.tags
            if (
                tags.get(RADT_PROBE) == PROBE
                and RADT_LETTER not in tags
                and self._same(tags, slot)
                and tags.get(RADT_PROBE_OUTCOME) in ("fits", "oom")
                and tags.get(RADT_PROBE_BATCH, "").isdigit()
            ):
                outcomes[int(tags[RADT_PROBE_BATCH])] = tags[RADT_PROBE_OUTCOME]
        return outcomes

    def search(self, slot: SearchSlot) -> int:
        """The largest batch size that fits ``slot`` (cached, else searched now)."""
        cached = self.cached(slot)
        if cached is not None:
            return cached
        tags = self._slot_tags(slot)
        run = self.client.create_run(
            self.experiment_id,
            run_name=f"batch size: {slot.key}",
            tags={**tags, RADT_PROBE: SEARCH, MLFLOW_PARENT_RUN_ID: self.parent_run_id},
        )
        search_id = run.info.run_id
        try:
            answer, probes = self._bisect(slot, search_id)
        except BaseException as exc:
            status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
            self.client.set_tag(search_id, RADT_NOTE, str(exc)[:5000] or type(exc).__name__)
            self.client.set_terminated(search_id, status)
            raise
        self.client.set_tag(search_id, RADT_PROBE_BATCH_SIZE, str(answer))
        self.client.set_tag(search_id, RADT_PROBE_PROBES, str(probes))
        self.client.set_terminated(search_id, "FINISHED")
        log.info(
            f"batch size for {slot.job} on {slot.key}: {self.spec.flag} {answer} "
            f"({probes} new probe{'s' if probes != 1 else ''})"
        )
        return answer

    def _slot_tags(self, slot: SearchSlot) -> dict[str, str]:
        return {
            RADT_PROBE_JOB: slot.job,
            RADT_PROBE_SLOT: slot.key,
            RADT_PROBE_SPEC: self.spec.spec,
        }

    def _bisect(self, slot: SearchSlot, search_id: str) -> tuple[int, int]:
        sizes = candidates(self.spec)
        known = self._outcomes(slot)
        fits = [i for i, size in enumerate(sizes) if known.get(size) == "fits"]
        ooms = [i for i, size in enumerate(sizes) if known.get(size) == "oom"]
        low = max(fits, default=-1)  # the largest index known to fit
        high = min(ooms, default=len(sizes))  # the smallest index known to run out of memory
        probes = 0
        while high - low > 1:
            middle = (low + high) // 2
            outcome = self._probe(slot, sizes[middle], search_id)
            probes += 1
            if outcome == "fits":
                low = middle
            else:
                high = middle
        if low < 0:
            raise RadtError(
                f"{self.study.path}: batch_size: {slot.job} runs out of memory on {slot.key} "
                f"even at {self.spec.flag} {sizes[0]}; lower batch_size.min or leave this "
                "configuration out"
            )
        return sizes[low], probes

    def _probe(self, slot: SearchSlot, size: int, search_id: str) -> str:
        """Run one probe; return ``fits`` or ``oom``; raise for any other failure."""
        self.probes_run += 1
        label = f"probe {slot.key} {self.spec.flag} {size}"
        tags = {**self._slot_tags(slot), RADT_PROBE: PROBE, RADT_PROBE_BATCH: str(size)}
        options = replace(
            self.options,
            listeners="none",
            max_time_min=self.spec.max_time_min,
            max_epochs=None,
            power_limit_w=None,
            modes=None,
            rerun=True,
            tags=tags,
            parent_run_id=search_id,
        )
        workload = Workload(self.study.experiment, label, [])
        devices = [d for d in self.study.devices.split("+") if d]
        params = [*slot.params, self.spec.flag, str(size)]
        for position, collocation in enumerate(slot.configuration.runs):
            workload.rows.append(
                Row(
                    line=position + 1,
                    experiment=self.study.experiment,
                    workload=label,
                    status="",
                    run="",
                    devices=devices,
                    collocation=collocation,
                    file=self.study.file,
                    listeners="none",
                    params=params,
                    power_limit_w=None,
                    env={"RADT_MAX_STEPS": str(self.spec.steps)},
                    letter=chr(ord("A") + position),
                    values={"job": slot.job},
                )
            )
        plan = _ProbePlan(self.study.path, workload)
        client, uri, original_env = self.store
        runner = _ProbeRunner(plan, workload, options, self.found, client, uri, original_env)
        runner.run()
        if runner.interrupted:
            raise KeyboardInterrupt(f"interrupted while probing {label}")
        tails = getattr(runner, "tails", [])
        statuses = [plan.results.get(row.line, ("FAILED", ""))[0] for row in workload.rows]
        reason = runner.supervisor.reason if runner.supervisor is not None else None
        if any(has_oom(tail) for tail in tails):
            outcome = "oom"
        elif all(status == "FINISHED" for status in statuses):
            outcome = "fits"
        elif reason and reason.startswith("--max-time") and runner.supervisor.signum is None:
            log.info(
                f"{label} ran {self.spec.max_time_min:g} min without running out of memory: it "
                "fits (does the script call radt.log_examples? RADT_MAX_STEPS ends a probe "
                f"after {self.spec.steps} calls)"
            )
            outcome = "fits"
        else:
            bad = next(i for i, status in enumerate(statuses) if status != "FINISHED")
            run_id = plan.results.get(workload.rows[bad].line, ("", ""))[1]
            tail = tails[bad] if bad < len(tails) else ""
            last = next((ln for ln in reversed(tail.splitlines()) if ln.strip()), "")
            self.client.set_tag(runner.parent.run_id, RADT_PROBE_OUTCOME, "error")
            raise RadtError(
                f"{self.study.path}: batch_size: {label} failed for another reason than "
                f"memory ({statuses[bad]}{': ' + last.strip()[:300] if last else ''}); "
                f"see its output in run {run_id or runner.parent.run_id}"
            )
        self.client.set_tag(runner.parent.run_id, RADT_PROBE_OUTCOME, outcome)
        log.info(f"{label}: {'fits' if outcome == 'fits' else 'out of memory'}")
        return outcome

"""The figures of a distributed training's job run, from its node runs (docs/analysis.md,
"Distributed jobs").

- **job window**: while every node trained: from the latest start to the earliest end of the
  nodes' own (client) windows;
- **examples**: summed over every node (each node's count is already summed over its ranks);
  ``examples_total`` the nodes' final counts, ``examples`` their growth inside the job window;
- **energy**: the GPU energy of every node's GPUs inside the job window, summed; host energy
  (RAPL) the same;
- **per example** and **rate**: as a lone run's, over the job window; ``examples_per_s_per_gpu``
  the rate over every node's GPUs;
- **GPUs**: what the nodes' GPU listeners recorded, each GPU once
  (:func:`radt.quantities.gpu_devices`); a node without a GPU listener leaves the count and
  every per-GPU figure NaN, the note naming it;
- **scaling efficiency**: examples/s per GPU over that of the same Job on fewer nodes (its
  baseline: a job run, or a lone run of 1 node, :func:`per_gpu_rate`; named in
  ``radt.scaling_baseline``).

:func:`store_job_figures` computes them once, when the job run ends, and logs them on it
(``radt/<figure>`` metrics, ``examples``); :func:`job_rows` gives the summary its ``job`` and
``node`` rows.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from radt.analysis.figures import NAN
from radt.analysis.runtree import configuration_label, job_of
from radt.quantities import gpu_devices
from radt.tags import (
    JOB_ROLE,
    NODE_ROLE,
    RADT_GROUP_ROLE,
    RADT_JOB,
    RADT_NODE,
    RADT_SCALING_BASELINE,
    RADT_WINDOW_END_S,
    RADT_WINDOW_NOTE,
    RADT_WINDOW_START_S,
    RunKind,
    run_kind,
    tag_filter,
)

if TYPE_CHECKING:
    import pandas as pd

    from radt.analysis.windows import Timeline

log = logging.getLogger(__name__)

JOB_FIGURES = (
    "window_s",
    "examples",
    "examples_total",
    "examples_per_s",
    "examples_per_s_per_gpu",
    "time_per_example_ns",
    "energy_j",
    "energy_per_example_nj",
    "host_energy_j",
    "host_energy_per_example_nj",
    "nodes",
    "gpus",
    "scaling_efficiency",
)
"""What the job run holds, as metrics ``radt/<figure>`` (``examples_total`` as ``examples``)."""
JOB_COLUMNS = ("nodes", "gpus", "examples_per_s_per_gpu", "scaling_efficiency")
"""The summary's columns for job rows only (NaN on every other row)."""
WINDOW_TAGS = (RADT_WINDOW_START_S, RADT_WINDOW_END_S)
BASELINE_TAG = RADT_SCALING_BASELINE
NOTE_TAG = RADT_WINDOW_NOTE


@dataclass(frozen=True)
class NodeSamples:
    """What one node run recorded: its progress, its GPUs' series and its RAPL series."""

    name: str
    timeline: Timeline
    series: Mapping = field(default_factory=dict)
    """``(listener, gpu, quantity) → (seconds, values)``, as ``device_series`` gives them."""
    rapl: Mapping = field(default_factory=dict)
    """``rapl/<zone>/<quantity> → (seconds, values)``."""
    keys: Sequence[str] = ()
    """The node's other recorded keys (its MLflow ``system/`` metrics): its MIG devices'."""

    @property
    def gpus(self) -> list[str]:
        """The node's GPUs (:func:`radt.quantities.gpu_devices`): what its GPU listeners
        recorded, one per GPU or MIG device; empty without a GPU listener."""
        return gpu_devices([*("/".join(key) for key in self.series), *self.keys])


def recorded_keys(run) -> list[str]:
    """The sample keys an MLflow run recorded, from its ``system/<key>`` metrics."""
    from radt.record.decimate import MLFLOW_PREFIX

    return [k[len(MLFLOW_PREFIX) :] for k in run.data.metrics if k.startswith(MLFLOW_PREFIX)]


def per_gpu_rate(run) -> tuple[float, str | None]:
    """A finished run's examples/s per GPU and, when it has none, why: a job run's
    ``radt/examples_per_s_per_gpu``; a lone run's ``radt/examples_per_s`` over the GPUs its
    GPU listeners recorded (:func:`radt.quantities.gpu_devices` of its keys)."""
    metrics = run.data.metrics
    if run.data.tags.get(RADT_GROUP_ROLE) == JOB_ROLE:
        rate = metrics.get("radt/examples_per_s_per_gpu", NAN)
        return rate, None if math.isfinite(rate) else "no examples/s per GPU"
    gpus = gpu_devices(recorded_keys(run))
    rate = metrics.get("radt/examples_per_s", NAN)
    if not gpus:
        return NAN, "no GPU listener recorded"
    if not math.isfinite(rate):
        return NAN, "no examples/s"
    return rate / len(gpus), None


def job_figures(nodes: Sequence[NodeSamples]) -> tuple[dict[str, float], float, float, str | None]:
    """The job's figures from its nodes' samples: ``(figures, window start, end, note)``.

    A figure that cannot be had is NaN, and the note says why.
    """
    from radt.analysis.attribution import host_energy
    from radt.analysis.windows import client_window, counter_increase, energy_between

    figures = dict.fromkeys(JOB_FIGURES, NAN)
    figures["nodes"] = float(len(nodes))
    gpuless = sorted(n.name for n in nodes if not n.gpus)
    if nodes and not gpuless:
        figures["gpus"] = float(sum(len(n.gpus) for n in nodes))
    notes = []
    if gpuless:
        notes.append(
            f"no GPU listener recorded on node {', '.join(gpuless)}: "
            "gpus, energy_j and the per-GPU figures (examples_per_s_per_gpu, "
            "scaling_efficiency) missing"
        )
    totals = [float(n.timeline.counter.max()) if len(n.timeline.counter) else NAN for n in nodes]
    figures["examples_total"] = sum(totals) if nodes else NAN
    windows = [client_window(n.timeline) for n in nodes]
    if not nodes or not all(w.valid and w.basis == "examples" for w in windows):
        missing = [n.name for n, w in zip(nodes, windows, strict=True) if not w.valid]
        notes.insert(0, f"node {', '.join(missing) or '?'} has no window with examples")
        return figures, NAN, NAN, "; ".join(notes)
    start = max(w.start_s for w in windows)
    end = min(w.end_s for w in windows)
    if end <= start:
        notes.insert(0, "the nodes never trained at the same time: no job window")
        return figures, start, end, "; ".join(notes)
    seconds = end - start
    examples = sum(counter_increase(*n.timeline.counter_points(), start, end) for n in nodes)
    figures["window_s"] = seconds
    figures["examples"] = examples
    if examples > 0:
        figures["examples_per_s"] = examples / seconds
        figures["time_per_example_ns"] = seconds * 1e9 / examples
        if figures["gpus"] > 0:
            figures["examples_per_s_per_gpu"] = examples / seconds / figures["gpus"]
    if not gpuless:
        energies = [energy_between(n.series, start, end) for n in nodes if n.series]
        if len(energies) < len(nodes):
            notes.append("a node recorded no GPU series: GPU energy missing")
        else:
            figures["energy_j"] = sum(joules for joules, _, _ in energies)
            notes += [note for _, _, note in energies if note]
    hosts = [host_energy(n.rapl, start, end) for n in nodes]
    if all(math.isfinite(joules) for joules, _ in hosts):
        figures["host_energy_j"] = sum(joules for joules, _ in hosts)
    notes += [note for _, note in hosts if note]
    for energy, per in (
        ("energy_j", "energy_per_example_nj"),
        ("host_energy_j", "host_energy_per_example_nj"),
    ):
        if math.isfinite(figures[energy]) and examples > 0:
            figures[per] = figures[energy] * 1e9 / examples
    return figures, start, end, "; ".join(notes) or None


def scaling_efficiency(per_gpu: float, baseline_per_gpu: float) -> float:
    """Examples/s per GPU of the job over its baseline's (1.0: perfect scaling)."""
    if not (math.isfinite(per_gpu) and math.isfinite(baseline_per_gpu)) or baseline_per_gpu <= 0:
        return NAN
    return per_gpu / baseline_per_gpu


def _node_samples(client, run) -> NodeSamples:
    import pyarrow as pa

    from radt.analysis.attribution import ATTRIBUTION_KEYS, extra_series
    from radt.analysis.loadsamples import KeyFilter, prepare, run_pieces
    from radt.analysis.stored import SUMMARY_KEYS, run_series

    (plan,) = prepare(client, [run])
    pieces = list(run_pieces(client, plan, KeyFilter([*SUMMARY_KEYS, *ATTRIBUTION_KEYS])))
    series, timeline = run_series(pieces, run.data.tags)
    rapl = extra_series(pa.concat_tables(pieces) if pieces else None)
    rapl = {k: v for k, v in rapl.items() if k.startswith("rapl/")}
    name = run.data.tags.get(RADT_NODE, run.info.run_name)
    return NodeSamples(name, timeline, series, rapl, recorded_keys(run))


def _baseline(client, job, nodes: int) -> tuple[object | None, float, str | None]:
    """The latest FINISHED job run or lone run (1 node) of the same Job on fewer nodes that
    has an examples/s per GPU (:func:`per_gpu_rate`): ``(run, its rate, None)``, else
    ``(None, NaN, why)``. The Job is :func:`~radt.analysis.runtree.job_of`'s: the
    ``radt.job`` tag, else the command without its seed-only flags, as for lone runs."""
    name = job_of(job.data.tags, job.data.params)
    if not name:
        return None, NAN, "the job run has no Job (no radt.job tag, no command): no baseline"
    named = job.data.tags.get(RADT_JOB)
    finished = "attributes.status = 'FINISHED'"
    runs = client.search_runs(
        [job.info.experiment_id],
        filter_string=f"{tag_filter(RADT_JOB, named)} and {finished}" if named else finished,
        order_by=["start_time DESC"],
    )
    runs = [run for run in runs if job_of(run.data.tags, run.data.params) == name]
    for run in runs:
        tags = run.data.tags
        role = tags.get(RADT_GROUP_ROLE)
        if run.info.run_id == job.info.run_id:
            continue
        if role != JOB_ROLE and (role is not None or run_kind(tags) != RunKind.LONE):
            continue
        used = int(run.data.metrics.get("radt/nodes", 1))
        rate, _ = per_gpu_rate(run)
        if used < nodes and math.isfinite(rate):
            return run, rate, None
    return (
        None,
        NAN,
        (
            f"no FINISHED job run or lone run of Job {name!r} on fewer nodes "
            "with examples/s per GPU: no baseline"
        ),
    )


def store_job_figures(client, job_run_id: str, node_runs: Sequence) -> dict[str, float]:
    """Compute the job's figures from ``node_runs`` and log them on the job run."""
    from mlflow.entities import Metric, RunTag

    samples = [_node_samples(client, run) for run in node_runs]
    figures, start, end, note = job_figures(samples)
    job = client.get_run(job_run_id)
    tags = {}
    baseline, rate, why = _baseline(client, job, len(samples))
    if baseline is None:
        note = "; ".join(filter(None, [note, f"scaling_efficiency missing: {why}"]))
    else:
        figures["scaling_efficiency"] = scaling_efficiency(figures["examples_per_s_per_gpu"], rate)
        used = int(baseline.data.metrics.get("radt/nodes", 1))
        tags[BASELINE_TAG] = f"{baseline.info.run_id} ({used} node{'s' * (used != 1)})"
    if math.isfinite(start) and math.isfinite(end):
        tags.update({WINDOW_TAGS[0]: f"{start:.6f}", WINDOW_TAGS[1]: f"{end:.6f}"})
    if note:
        tags[NOTE_TAG] = note
    now_ms = int((end if math.isfinite(end) else 0) * 1000) or (job.info.start_time or 0)
    metrics = [
        Metric("examples" if name == "examples_total" else f"radt/{name}", value, now_ms, 0)
        for name, value in figures.items()
        if math.isfinite(value)
    ]
    client.log_batch(
        job_run_id,
        metrics=metrics,
        tags=[RunTag(k, v) for k, v in tags.items()],
        synchronous=True,
    )
    return figures


def job_rows(frame: pd.DataFrame, runs: Mapping[str, object]) -> pd.DataFrame:
    """The summary ``frame`` with ``level`` = job / node for the runs of a group, each job
    row's figures the job run's own (:func:`store_job_figures`) and each node row's
    configuration its own (``none``: its GPUs shared with no other node)."""
    import pandas as pd

    for index, run_id in frame["run_id"].items():
        run = runs.get(run_id)
        role = run.data.tags.get(RADT_GROUP_ROLE) if run is not None else None
        if role not in (JOB_ROLE, NODE_ROLE):
            continue
        frame.at[index, "level"] = role
        if role != JOB_ROLE:  # a node shares its GPUs with no other node
            frame.at[index, "configuration"] = configuration_label([run.data.tags])
            continue
        metrics = run.data.metrics
        for name in JOB_FIGURES:
            if name in frame.columns:
                key = "examples" if name == "examples_total" else f"radt/{name}"
                frame.at[index, name] = metrics.get(key, NAN)
        start, end = (run.data.tags.get(tag) for tag in WINDOW_TAGS)
        if start and end:
            frame.at[index, "window_start"] = pd.Timestamp(float(start), unit="s", tz="UTC")
            frame.at[index, "window_end"] = pd.Timestamp(float(end), unit="s", tz="UTC")
        frame.at[index, "basis"] = "examples" if "radt/examples" in metrics else "duration"
        frame.at[index, "window_note"] = run.data.tags.get(NOTE_TAG)
    return frame


def one_line_per_job(frame: pd.DataFrame) -> pd.DataFrame:
    """``radt runs``' view of ``frame``: a distributed job as its job row alone, its
    configuration its nodes and GPUs (``2 nodes, 8 GPUs``); the node rows left out."""
    from radt.words import count

    if "level" not in frame or not frame["level"].isin(["job", "node"]).any():
        return frame
    frame = frame[frame["level"] != "node"].copy()
    for index in frame.index[frame["level"] == "job"]:
        nodes, gpus = frame.at[index, "nodes"], frame.at[index, "gpus"]
        parts = [count(int(nodes), "node")] if math.isfinite(nodes) else []
        parts += [count(int(gpus), "GPU")] if math.isfinite(gpus) else []
        frame.at[index, "configuration"] = ", ".join(parts) or None
    return frame

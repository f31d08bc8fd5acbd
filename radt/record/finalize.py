"""The steps that complete a run in MLflow, shared by the launcher and ``radt sync``.

Each step is idempotent and is struck from the run's state once done, so a
run interrupted anywhere (server down, radT killed) is finished later by
running the remaining steps again.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from radt.listener import Sample
from radt.record.decimate import Decimator
from radt.record.runfolder import RunFolder, RunState, disk_full
from radt.record.spool import compact, read_spool
from radt.record.writer import MAX_BATCH, is_permanent

SAMPLES_ARTIFACT = "radt/samples.parquet"
DOING = {
    "metrics": "send the metric stream",
    "samples": "upload the samples",
    "summary": "log the summary metrics",
    "artifacts": "upload the output log and environment",
    "status": "set the final status",
}


def resend_metrics(client: MlflowClient, folder: RunFolder, state: RunState) -> int:
    """Send the whole decimated stream again from the spool; return the point count.

    Points equal those the live stream sent, which MLflow de-duplicates.
    """
    table, _ = read_spool(folder.spool)
    decimator = Decimator(state.window_s, state.started_s)
    micros = pc.cast(table.column("timestamp"), "int64").to_pylist()
    samples = (
        Sample(ts / 1e6, key, value)
        for ts, key, value in zip(
            micros,
            table.column("key").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    points = decimator.add(samples) + decimator.flush()
    _log_points(client, state.run_id, points)
    return len(points)


def summary_points(
    folder: RunFolder,
    state: RunState,
    examples: float | None = None,
    samples_path: Path | None = None,
) -> list[Metric]:
    """The run's summary metrics, for MLflow's compare view.

    ``summary/<key>/mean`` and ``/max`` of every key, and the run's figures
    (energy, power, memory and, with examples, time and energy per example)
    as ``summary/<figure>``. The samples are read from ``samples_path``
    (default: the folder's compacted ``samples.parquet``).
    """
    from radt.analysis.figures import summarize_samples

    samples = pq.read_table(
        samples_path or folder.path / "samples.parquet", columns=["timestamp", "key", "value"]
    )
    if samples.num_rows == 0:
        return []
    table = pa.table({"key": samples["key"].cast(pa.string()), "value": samples["value"]})
    grouped = table.group_by("key").aggregate([("value", "mean"), ("value", "max")])
    when = round((state.ended_s or state.started_s) * 1000)
    points = []
    for key, mean, peak in zip(
        grouped.column("key").to_pylist(),
        grouped.column("value_mean").to_pylist(),
        grouped.column("value_max").to_pylist(),
        strict=True,
    ):
        points.append(Metric(f"summary/{key}/mean", mean, when, 0))
        points.append(Metric(f"summary/{key}/max", peak, when, 0))
    duration_s = (state.ended_s or state.started_s) - state.started_s
    if state.ended_s:
        # Energy over the run's own window: not while radT stopped listeners after it.
        end = pa.scalar(round(state.ended_s * 1e6), pa.timestamp("us", tz="UTC"))
        samples = samples.filter(pc.less_equal(samples["timestamp"], end))
    figures = summarize_samples(samples.to_pandas(), examples=examples, duration_s=duration_s)
    points += [
        Metric(f"summary/{name}", value, when, 0)
        for name, value in figures.items()
        if math.isfinite(value)
    ]
    return points


def _examples(client: MlflowClient, run_id: str) -> float | None:
    """The run's last ``examples`` metric (radt.log_examples), if the script logged it."""
    return client.get_run(run_id).data.metrics.get("examples")


def _log_points(client: MlflowClient, run_id: str, points: list[Metric]) -> None:
    for first in range(0, len(points), MAX_BATCH):
        try:
            client.log_batch(run_id, metrics=points[first : first + MAX_BATCH], synchronous=True)
        except Exception as exc:
            if not is_permanent(exc):
                raise


def finish(
    client: MlflowClient,
    folder: RunFolder,
    warn: Callable[[str], None],
    state: RunState | None = None,
) -> bool:
    """Run the run's remaining steps; True when all are done and the folder removed.

    ``state`` is the run's state when the caller holds it (else read from the folder).
    A step that fails stops the sequence with one warning; the folder stays for
    ``radt sync``. A step that fails for want of local disk space is left for
    ``radt sync`` too, but the steps after it (the final status) still run.
    """
    state = folder.load() if state is None else state
    samples = _Samples(folder, warn, reuse="samples" not in state.pending)
    steps: dict[str, Callable[[], None]] = {
        "metrics": lambda: resend_metrics(client, folder, state),
        "samples": lambda: client.log_artifact(state.run_id, str(samples.path()), "radt"),
        "summary": lambda: _log_points(
            client,
            state.run_id,
            summary_points(folder, state, _examples(client, state.run_id), samples.path()),
        ),
        "artifacts": lambda: _upload_attachments(client, folder, state),
        "status": lambda: _set_status(client, state),
    }
    try:
        for step in list(state.pending):
            try:
                steps[step]()
            except Exception as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                if disk_full(exc) and step != "status":
                    warn(
                        f"could not {DOING[step]} of run {state.run_id}: no room on the local "
                        f"disk ({first[:160]}); the run is completed without it, and "
                        f"`radt sync` adds it once there is space (kept in {folder.path})"
                    )
                    continue
                warn(
                    f"could not {DOING[step]} of run {state.run_id} ({first[:160]}); "
                    f"everything is kept in {folder.path} — run `radt sync` when the tracking "
                    "server is reachable"
                )
                return False
            state.pending.remove(step)
            save_state(folder, state, warn)
    finally:
        samples.cleanup()
    if state.pending:
        return False
    folder.remove()
    return True


def save_state(folder: RunFolder, state: RunState, warn: Callable[[str], None]) -> bool:
    """Save the run's state; on a full disk say so once per folder and go on (False)."""
    try:
        folder.save(state)
    except OSError as exc:
        if not folder.unsaved:
            warn(
                f"cannot save the state of run {state.run_id} in {folder.path} "
                f"({exc.strerror or exc}); finishing it anyway"
            )
        folder.unsaved = True
        return False
    return True


class _Samples:
    """The run's compacted samples file, made once: in the run folder, or in a temporary
    folder elsewhere when the run folder's disk is full."""

    def __init__(self, folder: RunFolder, warn: Callable[[str], None], reuse: bool) -> None:
        self.folder = folder
        self.warn = warn
        self.reuse = reuse
        """Whether a file compacted before (by an earlier, interrupted finish) may serve."""
        self._path: Path | None = None
        self._scratch: tempfile.TemporaryDirectory | None = None

    def path(self) -> Path:
        """The compacted file, made on first use."""
        if self._path is not None:
            return self._path
        target = self.folder.path / "samples.parquet"
        if self.reuse and target.exists():
            self._path = target
            return target
        try:
            self._compact(target)
        except OSError as exc:
            if not disk_full(exc):
                raise
            with contextlib.suppress(OSError):
                target.unlink(missing_ok=True)
            self._scratch = tempfile.TemporaryDirectory(prefix="radt-samples-")
            target = Path(self._scratch.name) / "samples.parquet"
            self._compact(target)
        self._path = target
        return target

    def _compact(self, target: Path) -> None:
        _, problems = compact(self.folder.spool, target)
        for problem in problems:
            self.warn(f"damaged spool chunk {problem}")

    def cleanup(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()


def _upload_attachments(client: MlflowClient, folder: RunFolder, state: RunState) -> None:
    if folder.attachments.is_dir() and any(folder.attachments.rglob("*")):
        client.log_artifacts(state.run_id, str(folder.attachments))


def _set_status(client: MlflowClient, state: RunState) -> None:
    tags = dict(state.tags)
    if state.note:
        tags["radt.note"] = state.note
    for key, value in tags.items():
        client.set_tag(state.run_id, key, value)
    end_ms = round((state.ended_s or state.started_s) * 1000)
    client.set_terminated(state.run_id, state.status, end_time=end_ms)

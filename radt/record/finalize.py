"""The steps that complete a run in MLflow, shared by the launcher and ``radt sync``.

Each step is idempotent and is struck from the run's state once done, so a
run interrupted anywhere (server down, radT killed) is finished later by
running the remaining steps again. The figures of the ``summary`` step are
the analysis's: its caller hands them in (:data:`Summarize`), so recording
imports no analysis. On a store across a network (a tracking server, a database server)
the steps that do not need each other run at once (:data:`CHAINS`): each waits mostly for
the store's answers; on a file store (SQLite) they run one after the other.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import pyarrow as pa

from radt.record.compact import compact
from radt.record.decimate import Decimator
from radt.record.phases import ARTIFACT as PHASES_ARTIFACT
from radt.record.phases import compact_phases
from radt.record.runfolder import RunFolder, RunState, disk_full
from radt.record.spool import iter_spool
from radt.record.writer import MAX_BATCH, is_permanent
from radt.tags import RADT_NOTE, RADT_PHASE_ROWS

SAMPLES_ARTIFACT = "radt/samples.parquet"
DOING = {
    "metrics": "send the metric stream",
    "samples": "upload the samples",
    "summary": "log the summary figures",
    "artifacts": "upload the output log, environment and phase intervals",
    "status": "set the final status",
}
CHAINS = (("metrics",), ("samples",), ("summary", "artifacts"))
"""The steps before ``status`` as chains that may run at once, each in its order: the summary
writes ``radt/summary.csv`` among the attachments; ``status`` comes after them all."""
LOCAL_STORES = ("", "file", "sqlite")
"""Stores whose steps run one after the other: in this process, on one file."""


if TYPE_CHECKING:
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

Summarize: TypeAlias = (
    "Callable[[MlflowClient, RunFolder, RunState, Callable[[str], None], Path], list[Metric]]"
)
"""The ``summary`` step: (client, folder, state, warn, samples file) → the headline metrics
to log; it may add tags to ``state.tags`` and files to the folder's attachments
(:func:`radt.analysis.closing.summarize`)."""

RESEND_ROWS = 1_000_000
"""Spooled samples decimated at once by :func:`resend_metrics`."""


def resend_metrics(client: MlflowClient, folder: RunFolder, state: RunState) -> int:
    """Send the whole decimated stream again from the spool; return the point count.

    Points equal those the live stream sent, which MLflow de-duplicates. The
    spool is read, decimated and sent a part at a time: memory stays flat
    however long the run was.
    """
    decimator = Decimator(state.window_s, state.started_s)
    sent = 0
    held: list[pa.RecordBatch] = []
    rows = 0
    for batch in iter_spool(folder.spool, []):
        held.append(batch)
        rows += batch.num_rows
        if rows >= RESEND_ROWS:
            sent += _log_points(client, state.run_id, decimator.add(pa.Table.from_batches(held)))
            held, rows = [], 0
    if held:
        sent += _log_points(client, state.run_id, decimator.add(pa.Table.from_batches(held)))
    return sent + _log_points(client, state.run_id, decimator.flush())


def _log_points(client: MlflowClient, run_id: str, points: list[Metric]) -> int:
    for first in range(0, len(points), MAX_BATCH):
        try:
            client.log_batch(run_id, metrics=points[first : first + MAX_BATCH], synchronous=True)
        except Exception as exc:
            if not is_permanent(exc):
                raise
    return len(points)


def finish(
    client: MlflowClient,
    folder: RunFolder,
    warn: Callable[[str], None],
    state: RunState | None = None,
    *,
    summarize: Summarize,
    keep: bool = False,
) -> bool:
    """Run the run's remaining steps; True when all are done and the folder removed.

    ``state`` is the run's state when the caller holds it (else read from the folder);
    ``summarize`` computes the figures of the ``summary`` step; ``keep``: a folder whose
    steps are all done stays, for its caller to remove (a workload's run, whose samples its
    workload run reads as it closes).
    A step that fails stops its chain (:data:`CHAINS`) and the final status, with one
    warning; the folder stays for ``radt sync``. A step that fails for want of local disk
    space is left for ``radt sync`` too, but the steps after it (the final status) still run.
    """
    state = folder.load() if state is None else state
    samples = _Samples(folder, warn, reuse="samples" not in state.pending)
    steps: dict[str, Callable[[], None]] = {
        "metrics": lambda: resend_metrics(client, folder, state),
        "samples": lambda: client.log_artifact(state.run_id, str(samples.path()), "radt"),
        "summary": lambda: _log_points(
            client, state.run_id, summarize(client, folder, state, warn, samples.path())
        ),
        "artifacts": lambda: _upload_attachments(client, folder, state, warn),
        "status": lambda: _set_status(client, state),
    }
    held = threading.Lock()  # the state, its file and the warnings, between the chains
    failed: dict[str, Exception] = {}

    def run(chain: list[str]) -> bool:
        for step in chain:
            try:
                if step == "summary":  # it adds to the state's tags
                    with held:
                        steps[step]()
                else:
                    steps[step]()
            except Exception as exc:
                if disk_full(exc) and step != "status":
                    with held:
                        warn(
                            f"could not {DOING[step]} of run {state.run_id}: no room on the "
                            f"local disk ({_first_line(exc)[:160]}); the run is completed "
                            f"without it, and `radt sync` adds it once there is space (kept in "
                            f"{folder.path})"
                        )
                    continue
                with held:
                    failed[step] = exc
                return False
            with held:
                state.pending.remove(step)
                save_state(folder, state, warn)
        return True

    try:
        pending = [step for step in state.pending if step != "status"]
        chains = [[s for s in chain if s in pending] for chain in CHAINS]
        chains.append([s for s in pending if not any(s in chain for chain in CHAINS)])
        chains = [chain for chain in chains if chain]
        if _across_network(client) and len(chains) > 1:
            with ThreadPoolExecutor(len(chains), thread_name_prefix="radt-finish") as pool:
                done = all(list(pool.map(run, chains)))
        else:
            done = run(pending)
        if done and "status" in state.pending:
            run(["status"])
    finally:
        samples.cleanup()
    if failed:
        step = min(failed, key=list(DOING).index)
        warn(
            f"could not {DOING[step]} of run {state.run_id} ({_first_line(failed[step])[:160]}); "
            f"everything is kept in {folder.path} — run `radt sync` when the tracking "
            "server is reachable"
        )
        return False
    if state.pending:
        return False
    if not keep:
        folder.remove()
    return True


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _across_network(client: MlflowClient) -> bool:
    """Whether the client's store is reached over a network (its steps may run at once)."""
    from urllib.parse import urlsplit

    scheme = urlsplit(str(getattr(client, "tracking_uri", "") or "")).scheme
    return scheme.split("+")[0] not in LOCAL_STORES


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
        self._making = threading.Lock()

    def path(self) -> Path:
        """The compacted file, made on first use (by whichever step asks first)."""
        with self._making:
            return self._made()

    def _made(self) -> Path:
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


def _upload_attachments(
    client: MlflowClient, folder: RunFolder, state: RunState, warn: Callable[[str], None]
) -> None:
    failed: OSError | None = None
    rows = 0
    try:
        rows, problem = compact_phases(
            folder.path, state.run_id, folder.attachments / PHASES_ARTIFACT
        )
    except OSError as exc:  # a full disk: the rest goes now, the phases with `radt sync`
        failed, problem = exc, None
        (folder.attachments / PHASES_ARTIFACT).unlink(missing_ok=True)
    if problem:
        warn(f"damaged phase intervals of run {state.run_id}: kept the whole batches ({problem})")
    if folder.attachments.is_dir() and any(folder.attachments.rglob("*")):
        client.log_artifacts(state.run_id, str(folder.attachments))
    if failed is not None:
        raise failed
    # the analysis reads this instead of asking the store whether there is a phases artifact
    client.set_tag(state.run_id, RADT_PHASE_ROWS, str(rows))


def log_tags(client: MlflowClient, run_id: str, tags: dict[str, str]) -> None:
    """Set ``tags`` on the run in one request (MLflow splits it past 100 tags), not one a tag."""
    from mlflow.entities import RunTag

    client.log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()], synchronous=True)


def _set_status(client: MlflowClient, state: RunState) -> None:
    tags = dict(state.tags)
    if state.note:
        tags[RADT_NOTE] = state.note
    if tags:
        log_tags(client, state.run_id, tags)
    end_ms = round((state.ended_s or state.started_s) * 1000)
    client.set_terminated(state.run_id, state.status, end_time=end_ms)

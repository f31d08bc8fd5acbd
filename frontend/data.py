"""What the UI reads, through ``radt.load`` and ``radt.summary`` only, with one-line errors.

MLflow's client is used here for metadata alone (the list of experiments, and
runs with their tags and metric names, through ``radt.load``'s helpers);
samples and summaries always come from radT's analysis API. Every failure
becomes a :class:`DataError` whose message fits on one line of the page.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd

from radt.errors import RadtError
from radt.tags import (
    JOB_ROLE,
    NODE_ROLE,
    RADT_GROUP_ROLE,
    RADT_NODE,
    RADT_SCALING_BASELINE,
    parent_id,
    run_kind,
    tag_filter,
)

T = TypeVar("T")
TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
GROUP_LEVELS = (JOB_ROLE, NODE_ROLE)
"""The levels of a distributed training's runs (tag ``radt.group.role``), as in the summary."""


class DataError(Exception):
    """A failure to read the tracking store, in one line meant for the page."""


@dataclass(frozen=True)
class Experiment:
    """An experiment of the store."""

    id: str
    name: str


@dataclass(frozen=True)
class RunInfo:
    """A run's metadata: enough to label it, place it in time and list its keys."""

    run_id: str
    name: str
    status: str
    start_us: int
    level: str
    """The run's :class:`radt.tags.RunKind` value: ``provider`` (a workload), ``client`` (one
    of its runs), ``loader`` (its shared loader) or ``run`` (alone); a distributed training's
    runs: ``job`` (its job run) or ``node`` (one of its node runs), as the summary's levels."""
    parent_id: str | None
    experiment_id: str
    keys: tuple[str, ...]
    node: str | None = None
    """A node run's node (tag ``radt.node``); None for any other run."""

    @property
    def running(self) -> bool:
        return self.status not in TERMINAL


def _padded(window: tuple, relative: bool) -> dict:
    """``start``/``end`` of :func:`radt.load` for a window of the time axis, 5 % wider on
    each side: seconds since each run's start, or UTC times."""
    lo, hi = window
    if relative:
        lo, hi = float(lo), float(hi)
        pad = (hi - lo) * 0.05
        return {"start": lo - pad, "end": hi + pad}
    lo, hi = (pd.Timestamp(v) for v in (lo, hi))
    lo, hi = (t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC") for t in (lo, hi))
    pad = (hi - lo) * 0.05
    return {"start": lo - pad, "end": hi + pad}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:500]


def metric_keys(metric_names: Iterable[str]) -> tuple[str, ...]:
    """radT keys of a run's MLflow metric names, sorted (``system/`` stripped).

    ``summary/nvml/gpu0/power_w/mean`` (runs recorded before windows) names the
    key ``nvml/gpu0/power_w``; the headline figures ``radt/...`` are no series.
    """
    from radt.analysis.loadsamples import HEADLINE_PREFIX, MLFLOW_PREFIX, SUMMARY_PREFIX

    keys = set()
    for name in metric_names:
        if name.startswith(HEADLINE_PREFIX):
            continue
        if name.startswith(SUMMARY_PREFIX):
            key = name[len(SUMMARY_PREFIX) :].rsplit("/", 1)[0]
        elif name.startswith(MLFLOW_PREFIX):
            key = name[len(MLFLOW_PREFIX) :]
        else:
            key = name
        if key:
            keys.add(key)
    return tuple(sorted(keys))


def run_info(run) -> RunInfo:
    """A :class:`RunInfo` of an MLflow run."""
    tags = run.data.tags
    role = tags.get(RADT_GROUP_ROLE)
    return RunInfo(
        run_id=run.info.run_id,
        name=run.info.run_name or run.info.run_id[:8],
        status=run.info.status,
        start_us=int(run.info.start_time or 0) * 1000,
        level=role if role in GROUP_LEVELS else run_kind(tags).value,
        parent_id=parent_id(tags),
        experiment_id=run.info.experiment_id,
        keys=metric_keys(run.data.metrics),
        node=tags.get(RADT_NODE) if role == NODE_ROLE else None,
    )


class Store:
    """The tracking store the UI shows, read through radT's API.

    ``tracking_uri`` None means what radT itself would use (``MLFLOW_TRACKING_URI``,
    else ./mlflow.db of the current folder). Samples of runs that have all
    ended are kept in memory (the ``cache_size`` latest reads, at most
    ``cache_rows`` samples in all). A selection of at most ``full_rows``
    samples is read whole once, and zooming re-reads nothing; a longer one
    (a day-long run) is read whole for the first draw only, and each zoom
    reads just the visible window (with a margin) through the artifact's key
    index.
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        cache_size: int = 6,
        cache_rows: int = 8_000_000,
        full_rows: int = 2_000_000,
    ) -> None:
        from radt.tracking import redact, resolve_tracking_uri

        self.tracking_uri = tracking_uri
        self.label = redact(resolve_tracking_uri(tracking_uri)[0])
        self._cache: OrderedDict[tuple, object] = OrderedDict()
        self._cache_size = cache_size
        self._cache_rows = cache_rows
        self.full_rows = full_rows
        self._lock = threading.Lock()

    def _call(self, what: Callable[[], T]) -> T:
        try:
            return what()
        except DataError:
            raise
        except RadtError as exc:
            raise DataError(_one_line(exc)) from exc
        except Exception as exc:
            raise DataError(
                f"reading the tracking store {self.label} failed: "
                f"{type(exc).__name__}: {_one_line(exc)}"
            ) from exc

    def _client(self):
        from radt.analysis.loadruns import open_client

        return open_client(self.tracking_uri)

    def check(self) -> str | None:
        """None when the store answers, else what is wrong and what to do, in one line."""
        try:
            self._call(self._client)
        except DataError as exc:
            return str(exc)
        return None

    def experiments(self) -> list[Experiment]:
        """Active experiments, the most recently updated first."""

        def read() -> list[Experiment]:
            client = self._client()
            found, token = [], None
            while True:
                page = client.search_experiments(max_results=1000, page_token=token)
                found.extend(page)
                token = page.token
                if not token:
                    break
            found.sort(key=lambda e: -(e.last_update_time or e.creation_time or 0))
            return [Experiment(str(e.experiment_id), e.name) for e in found]

        return self._call(read)

    def latest_experiment(self, experiments: Sequence[Experiment]) -> str | None:
        """The id of the experiment with the most recently started run (None without runs)."""

        def read() -> str | None:
            ids = [e.id for e in experiments]
            if not ids:
                return None
            newest = self._client().search_runs(
                ids, max_results=1, order_by=["attributes.start_time DESC"]
            )
            return str(newest[0].info.experiment_id) if newest else None

        return self._call(read)

    def default_experiment(self, found: Sequence[Experiment] | None = None) -> str | None:
        """The experiment a page shows before one is picked: the one with the newest run,
        else the most recently updated one (of ``found``, default all); None without any."""
        found = self.experiments() if found is None else found
        if not found:
            return None
        return self.latest_experiment(found) or found[0].id

    def summary(self, experiment: str | None = None, runs: Sequence[str] | None = None):
        """``radt.summary.summary`` of an experiment (by id) or of runs."""
        from radt.analysis.summary import summary

        return self._call(
            lambda: summary(
                experiment, list(runs) if runs else None, tracking_uri=self.tracking_uri
            )
        )

    def windows(self, runs: Sequence[RunInfo]) -> dict[str, tuple[int, int, str]]:
        """Each ended run's window and basis (µs since the epoch), from ``radt.summary``.

        Runs still RUNNING have no window yet; windows of ended runs are kept in
        memory like their samples.
        """
        ended = sorted(r.run_id for r in runs if not r.running)
        if not ended:
            return {}
        token = ("windows", tuple(ended))
        with self._lock:
            if token in self._cache:
                self._cache.move_to_end(token)
                return self._cache[token]
        frame = self.summary(None, ended)
        found = {}
        for row in frame.itertuples(index=False):
            if pd.notna(row.window_start) and pd.notna(row.window_end):
                found[str(row.run_id)] = (
                    int(row.window_start.value // 1000),
                    int(row.window_end.value // 1000),
                    str(row.basis),
                )
        with self._lock:
            self._cache[token] = found
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return found

    def phase_intervals(self, runs: Sequence[RunInfo]) -> pd.DataFrame:
        """The ``radt.phase`` intervals of the ended ``runs`` (``radt.phases``' intervals).

        Runs still RUNNING have none yet (their artifact is written at the end); those of
        ended runs are kept in memory like their samples.
        """
        from radt.analysis.phases import intervals

        ended = sorted(r.run_id for r in runs if not r.running)
        if not ended:
            return pd.DataFrame(columns=["run_id", "phase", "start", "end"])
        token = ("phases", tuple(ended))
        with self._lock:
            if token in self._cache:
                self._cache.move_to_end(token)
                return self._cache[token]
        frame = self._call(lambda: intervals(runs=ended, tracking_uri=self.tracking_uri))
        for column in ("run_id", "phase"):
            frame[column] = frame[column].astype("category")
        with self._lock:
            self._cache[token] = frame
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return frame

    def runs(self, run_ids: Sequence[str]) -> dict[str, RunInfo]:
        """The runs and their workload (parent) runs, oldest first; unknown ids are an error.

        A ticked job run of a distributed training brings its node runs: they hold its series
        (``radt.analysis.loadruns.with_nodes``); a ticked node comes with its job, not with the
        other nodes.
        """
        from radt.analysis.loadruns import select_runs

        if not run_ids:
            return {}

        def read() -> list:
            return select_runs(self._client(), None, list(run_ids), True)

        return {r.info.run_id: run_info(r) for r in self._call(read)}

    def scaling_baselines(self, experiment: str) -> dict[str, str]:
        """The baseline each job run of ``experiment`` measured its scaling efficiency against
        (tag ``radt.scaling_baseline``: ``<run id> (<n> nodes)``), by job run id."""
        from radt.analysis.loadruns import search_all

        jobs = self._call(
            lambda: search_all(self._client(), [experiment], tag_filter(RADT_GROUP_ROLE, JOB_ROLE))
        )
        return {
            r.info.run_id: r.data.tags[RADT_SCALING_BASELINE]
            for r in jobs
            if r.data.tags.get(RADT_SCALING_BASELINE)
        }

    def samples(
        self,
        runs: Sequence[RunInfo],
        keys: Sequence[str],
        window: tuple | None = None,
        relative: bool = True,
    ) -> pd.DataFrame:
        """``radt.load.load`` of ``keys`` of ``runs`` (tidy), from memory when all have ended.

        ``window`` is the time axis's range as the browser sends it: seconds since
        each run's start (``relative``), else wall times (strings, UTC). When the
        whole selection is not in memory (it was longer than ``full_rows``), only
        the window is read, with 5 % of its width on each side so lines run to the
        edges. The frame's ``attrs["radt.window"]`` is True for such a partial read.
        """
        from radt.analysis.load import load

        ids = sorted(r.run_id for r in runs)
        if not ids or not keys:
            return pd.DataFrame(columns=["run_id", "key", "timestamp", "value"])
        cacheable = not any(r.running for r in runs)
        whole = (tuple(ids), tuple(sorted(keys)))
        with self._lock:
            if cacheable and whole in self._cache:
                self._cache.move_to_end(whole)
                return self._cache[whole]
        token, bounds = whole, {}
        if window is not None and cacheable:
            bounds = _padded(window, relative)
            token = (*whole, tuple(sorted(bounds.items())))
            with self._lock:
                if token in self._cache:
                    self._cache.move_to_end(token)
                    return self._cache[token]
        frame = self._call(
            lambda: load(runs=ids, keys=list(keys), tracking_uri=self.tracking_uri, **bounds)
        )
        frame.attrs["radt.window"] = bool(bounds)
        if cacheable and (bounds or len(frame) <= self.full_rows):
            self._remember(token, frame)
        return frame

    def _remember(self, token: tuple, frame: pd.DataFrame) -> None:
        with self._lock:
            self._cache[token] = frame
            while len(self._cache) > 1 and (
                len(self._cache) > self._cache_size
                or sum(len(f) for f in self._cache.values()) > self._cache_rows
            ):
                self._cache.popitem(last=False)

    def export(self, what: str, fmt: str, experiment: str | None, runs: Sequence[str]) -> bytes:
        """The table ``radt export`` writes: ``samples`` or ``summary``, as csv or parquet.

        The selected ``runs`` (with their workloads; a job run with its node runs, which hold
        its samples), else the whole ``experiment``.
        """
        from radt.analysis.load import load

        selection = {"runs": list(runs) or None, "tracking_uri": self.tracking_uri}
        selection["experiment"] = None if runs else experiment
        if what == "summary":
            frame = self.summary(selection["experiment"], selection["runs"])
        else:
            frame = self._call(lambda: load(**selection))
        buffer = io.BytesIO()
        if fmt == "parquet":
            frame.to_parquet(buffer, index=False)
        else:
            frame.to_csv(buffer, index=False)
        return buffer.getvalue()

    def report(self, experiments: Sequence[str], objective=None, ui: str | None = None):
        """``radt.report`` of experiments (by id), as :class:`radt.analysis.report.Report`;
        ``ui``: this UI's address, for the page's links to the runs."""
        from radt.analysis.report import report

        return self._call(
            lambda: report(
                list(experiments), objective=objective, tracking_uri=self.tracking_uri, ui=ui
            )
        )

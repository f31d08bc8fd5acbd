"""Finding the runs to load in the tracking store: the client, the experiment, every run of a
search (asked once inside :func:`searches_shared`), the runs an experiment or run ids select (a
job run with its node runs, a training with its workload run), which runs only group others,
and the run columns of the tidy frame.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from radt.errors import AnalysisError
from radt.tags import (
    JOB_ROLE,
    MLFLOW_PARENT_RUN_ID,
    RADT_COLLOCATION,
    RADT_GROUP_ROLE,
    RADT_LETTER,
    RADT_MIG_PROFILE,
    RADT_MPS_THREAD_PCT,
    RADT_POWER_LIMIT_W,
    RADT_PROBE,
    RADT_STUDY_FILE,
    RADT_WORKLOAD,
    child_order,
    tag_filter,
)

TAG_COLUMNS: dict[str, str | None] = {
    "run_name": None,
    "status": None,
    "parent_run_id": MLFLOW_PARENT_RUN_ID,
    "workload": RADT_WORKLOAD,
    "collocation": RADT_COLLOCATION,
    "mig_profile": RADT_MIG_PROFILE,
    "mps_thread_pct": RADT_MPS_THREAD_PCT,
    "power_limit_w": RADT_POWER_LIMIT_W,
    "letter": RADT_LETTER,
}
"""Run columns of the tidy frame and the MLflow tag each comes from (None: run info)."""


def open_client(tracking_uri: str | None = None):
    """An ``MlflowClient`` for ``tracking_uri``, else ``MLFLOW_TRACKING_URI``, else ./mlflow.db.

    Raises AnalysisError when no store is named and ./mlflow.db does not exist
    (rather than creating an empty one), TrackingUnreachable when the store
    does not answer.
    """
    from radt.tracking import DEFAULT_DB, connect, resolve_tracking_uri

    uri, embedded = resolve_tracking_uri(tracking_uri)
    if embedded and not (Path.cwd() / DEFAULT_DB).exists():
        raise AnalysisError(
            f"no tracking store: MLFLOW_TRACKING_URI is not set and there is no {DEFAULT_DB} "
            f"in {Path.cwd()}; set it, pass --tracking-uri (tracking_uri=), "
            "or work in the folder where radT ran"
        )
    return connect(uri)


def find_experiment(client, name_or_id: str):
    """The experiment named (or numbered) ``name_or_id``; AnalysisError when there is none."""
    experiment = client.get_experiment_by_name(str(name_or_id))
    if experiment is None and str(name_or_id).isdigit():
        with contextlib.suppress(Exception):
            experiment = client.get_experiment(str(name_or_id))
    if experiment is None or experiment.lifecycle_stage == "deleted":
        raise AnalysisError(
            f"no experiment named {name_or_id!r} at {_store_name(client)}; "
            "`radt runs` lists the experiments (as does `mlflow experiments search`)"
        )
    return experiment


_SHARED_SEARCHES: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "radt_shared_searches", default=None
)


@contextlib.contextmanager
def searches_shared() -> Iterator[None]:
    """Within the block, :func:`search_all` asks the store each search once: the parts of one
    answer (a report's summary, phases and study facts) read the same experiment's runs."""
    token = _SHARED_SEARCHES.set({})
    try:
        yield
    finally:
        _SHARED_SEARCHES.reset(token)


def search_all(client, experiment_ids: Sequence[str], filter_string: str = "") -> list:
    """Every active run of the experiments (all pages), oldest first (asked once per search
    inside :func:`searches_shared`)."""
    shared = _SHARED_SEARCHES.get()
    key = (getattr(client, "tracking_uri", id(client)), tuple(experiment_ids), filter_string)
    if shared is not None and key in shared:
        return list(shared[key])
    found = _search_pages(client, experiment_ids, filter_string)
    if shared is not None:
        shared[key] = found
    return list(found)


SEARCH_PAGE_RUNS = 10_000
"""Runs asked for per page of a search (MLflow's most for one page of ``search_runs``)."""
OLDEST_FIRST = ["attributes.start_time ASC"]


def _search_pages(client, experiment_ids: Sequence[str], filter_string: str) -> list:
    """Every page of the search; from an ``mlflow server`` read from its JSON
    (:mod:`radt.analysis.restsearch`: the same runs, without MLflow's protobuf round trip)."""
    from radt.analysis.restsearch import rest_store, search_page

    store = rest_store(client)
    found: list = []
    token = None
    while True:
        if store is not None:
            page, token = search_page(
                store, experiment_ids, filter_string, SEARCH_PAGE_RUNS, OLDEST_FIRST, token
            )
        else:
            page = client.search_runs(
                list(experiment_ids),
                filter_string,
                max_results=SEARCH_PAGE_RUNS,
                order_by=OLDEST_FIRST,
                page_token=token,
            )
            token = page.token
        found.extend(page)
        if not token:
            return found


def select_runs(
    client,
    experiment: str | None,
    runs: Iterable[str] | None,
    include_workload: bool = True,
) -> list:
    """The MLflow runs that ``experiment`` and ``runs`` select, oldest first.

    With both, the runs must belong to the experiment. A selected job run of a distributed
    training comes with its node runs (:func:`with_nodes`): they hold its samples. With
    ``include_workload``, the workload (parent) run of each selected run is added: the
    device-wide series (power, energy) of a workload are recorded in its parent run.
    """
    if experiment is None and runs is None:
        raise AnalysisError("name an experiment (experiment=, -e) or runs (runs=, --runs)")
    exp = find_experiment(client, experiment) if experiment is not None else None
    if runs is None:
        return search_all(client, [exp.experiment_id])
    wanted = list(dict.fromkeys(str(r) for r in ([runs] if isinstance(runs, str) else runs)))
    chosen = [_get_run(client, run_id) for run_id in wanted]
    if exp is not None:
        outside = [r.info.run_id for r in chosen if r.info.experiment_id != exp.experiment_id]
        if outside:
            raise AnalysisError(
                f"run {outside[0]} is not in experiment {exp.name!r}; "
                "leave out -e/experiment= or choose runs of that experiment"
            )
    chosen = with_nodes(client, chosen)
    if include_workload:
        have = {r.info.run_id for r in chosen}
        for run in list(chosen):
            parent = run.data.tags.get(MLFLOW_PARENT_RUN_ID)
            if parent and parent not in have and not grouping(run):
                with contextlib.suppress(AnalysisError):
                    found = _get_run(client, parent)
                    if not grouping(found):  # a study's run is not a workload
                        chosen.append(found)
                    have.add(parent)
    return sorted(chosen, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def with_nodes(client, runs: Sequence) -> list:
    """``runs`` and, after each job run of a distributed training among them, its node runs
    (the runs that name it their parent, by node rank), each once: a job run holds only its
    figures, its nodes the samples. A node run brings no other node (its job is its workload,
    added by :func:`select_runs`). The one expansion of a job that ``radt.load``, ``radt
    export`` and the UI share."""
    found = list(runs)
    have = {r.info.run_id for r in found}
    for job in [r for r in runs if r.data.tags.get(RADT_GROUP_ROLE) == JOB_ROLE]:
        nodes = search_all(
            client, [job.info.experiment_id], tag_filter(MLFLOW_PARENT_RUN_ID, job.info.run_id)
        )
        for node in sorted(nodes, key=child_order):  # by node rank
            if node.info.run_id not in have:
                found.append(node)
                have.add(node.info.run_id)
    return found


def grouping(run) -> bool:
    """Whether ``run`` only groups others: a study's run (tag ``radt.study_file``) or a
    batch-size search's (``radt.probe=search``); it has no samples or figures of its own."""
    tags = run.data.tags
    return RADT_STUDY_FILE in tags or tags.get(RADT_PROBE) == "search"


def probe(run) -> bool:
    """Whether ``run`` belongs to a batch-size search (tag ``radt.probe``): not a measurement."""
    return RADT_PROBE in run.data.tags


def _get_run(client, run_id: str):
    try:
        return client.get_run(run_id)
    except Exception as exc:
        raise AnalysisError(
            f"no run with id {run_id!r} at {_store_name(client)} ({_first_line(exc)})"
        ) from exc


def _store_name(client) -> str:
    from radt.tracking import redact

    inner = getattr(client, "_tracking_client", None)
    return redact(str(getattr(inner, "tracking_uri", None) or "the tracking store"))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:200]


def run_columns(run) -> dict[str, str | None]:
    """The run columns of the tidy frame for one MLflow run (``-`` tags become None)."""
    tags = run.data.tags
    values: dict[str, str | None] = {}
    for column, tag in TAG_COLUMNS.items():
        if column == "run_name":
            value = run.info.run_name
        elif column == "status":
            value = run.info.status
        else:
            value = tags.get(tag)
        values[column] = None if value in (None, "", "-") else str(value)
    return values

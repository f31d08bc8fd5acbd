"""An experiment's first page of runs, asked of an ``mlflow server`` while MLflow is imported.

A look in a new process (``radt.summary`` in a fresh notebook, a cold ``radt runs``) first
imports MLflow (a second of CPU), then waits for the server to answer the search of the
experiment's runs (about a second for 1,000 runs). Within :func:`first_page`, the server is
asked for that first page in a background thread before MLflow is imported, with the light
calls of :mod:`radt.restclient`; :func:`take` hands the answer to
:func:`radt.analysis.restsearch.search_page` when it asks for exactly that page, so the two
waits overlap. Anything unexpected (the light path not applying, an error answer, another
search) leaves the search to be asked as before: the answer is only ever the server's own
answer to the same request, taken moments earlier.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from radt.restclient import LightCallFailed, LightClient, applies
from radt.tracking import resolve_tracking_uri

log = logging.getLogger(__name__)


@dataclass
class Asked:
    """One search asked ahead: its thread, and once answered, its key and JSON answer."""

    thread: threading.Thread | None = None
    key: tuple | None = None
    answer: dict | None = None
    taken: bool = False


_ASKED: contextvars.ContextVar[Asked | None] = contextvars.ContextVar(
    "radt_search_asked_ahead", default=None
)


def search_key(
    uri: str,
    experiment_ids: Sequence[str],
    filter_string: str,
    max_results: int,
    order_by: Sequence[str],
) -> tuple:
    """What makes two searches the same request."""
    return (
        uri.rstrip("/"),
        tuple(str(e) for e in experiment_ids),
        filter_string,
        max_results,
        tuple(order_by),
    )


@contextlib.contextmanager
def first_page(
    tracking_uri: str | None,
    experiment: str | None,
    max_results: int,
    order_by: Sequence[str],
) -> Iterator[None]:
    """Within the block (one look), the first page of ``experiment``'s active runs is asked
    of its ``mlflow server`` in the background from the start, where the light path applies
    (an ``http`` or ``https`` server, MLflow not yet imported); an answer the look did not
    take is dropped at the end."""
    asked = None
    if experiment is not None:
        uri, _ = resolve_tracking_uri(tracking_uri)
        if applies(uri):
            asked = Asked()
            asked.thread = threading.Thread(
                target=_ask,
                args=(asked, uri, str(experiment), max_results, list(order_by)),
                name="radt-prefetch",
                daemon=True,
            )
            asked.thread.start()
    token = _ASKED.set(asked)
    try:
        yield
    finally:
        _ASKED.reset(token)


def _ask(asked: Asked, uri: str, experiment: str, max_results: int, order_by: list[str]) -> None:
    client = LightClient(uri)
    try:
        found = client.find_experiment(experiment)
        if found is None or found.lifecycle_stage != "active":
            return
        body = {
            "experiment_ids": [found.experiment_id],
            "filter": "",
            "run_view_type": "ACTIVE_ONLY",
            "max_results": max_results,
            "order_by": order_by,
        }
        answer = client.call("POST", "runs/search", body)
        asked.key = search_key(uri, [found.experiment_id], "", max_results, order_by)
        asked.answer = answer
    except (LightCallFailed, KeyError, TypeError, ValueError) as exc:
        log.debug(f"the search asked ahead failed ({exc}); it is asked again when needed")


def take(
    uri: str,
    experiment_ids: Sequence[str],
    filter_string: str,
    max_results: int,
    order_by: Sequence[str],
) -> dict | None:
    """The JSON answer of this look's search asked ahead, when it was exactly this search
    (waiting for it if it is on its way); None otherwise. Taken once."""
    asked = _ASKED.get()
    if asked is None or asked.taken:
        return None
    if asked.thread is not None:
        asked.thread.join()
    if asked.key != search_key(uri, experiment_ids, filter_string, max_results, order_by):
        return None
    asked.taken = True
    return asked.answer

"""A page of runs from an ``mlflow server`` read from its JSON answer into MLflow's entities,
without MLflow's protobuf round trip.

MLflow's REST client turns the JSON of ``runs/search`` into protobuf messages
(``google.protobuf.json_format``) and those into entities: for 1,000 runs that is 25,000
messages and most of a second of the client's CPU, on top of the server's answer. This module
sends the same request through MLflow's own HTTP helpers and builds the same ``Run`` entities
from the JSON, field by field as ``Run.from_proto`` does (absent fields take the protobuf
defaults). A run whose JSON holds anything else (dataset inputs, model outputs) goes through
MLflow's own parsing, so every run comes back as MLflow would give it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def rest_store(client) -> Any | None:
    """The ``RestStore`` behind ``client`` (an ``MlflowClient``), or None for any other store
    (a database, a file store, a subclass of MLflow's REST store)."""
    from mlflow.store.tracking.rest_store import RestStore

    from radt.tracking import client_store

    store = client_store(client)
    return store if type(store) is RestStore else None


def search_page(
    store,
    experiment_ids: Sequence[str],
    filter_string: str,
    max_results: int,
    order_by: Sequence[str],
    page_token: str | None,
) -> tuple[list, str | None]:
    """One page of ``store``'s ``search_runs`` of active runs: the runs, as MLflow's ``Run``
    entities, and the next page's token (None after the last). Errors are MLflow's own, as
    ``MlflowClient.search_runs`` raises them."""
    from mlflow.entities import ViewType
    from mlflow.protos.service_pb2 import SearchRuns
    from mlflow.utils.proto_json_utils import message_to_json
    from mlflow.utils.rest_utils import http_request, verify_rest_response

    from radt.analysis.prefetch import take

    request = SearchRuns(
        experiment_ids=[str(e) for e in experiment_ids],
        filter=filter_string,
        run_view_type=ViewType.to_proto(ViewType.ACTIVE_ONLY),
        max_results=max_results,
        order_by=list(order_by),
        page_token=page_token,
    )
    host_creds = store.get_host_creds()
    answer = None
    if page_token is None:  # this look's first page, perhaps asked ahead
        answer = take(host_creds.host, experiment_ids, filter_string, max_results, order_by)
    if answer is None:
        endpoint, method = store._METHOD_TO_INFO[SearchRuns]
        response = http_request(
            host_creds=host_creds,
            endpoint=endpoint,
            method=method,
            json=json.loads(message_to_json(request)),
        )
        response = verify_rest_response(response, endpoint)
        answer = response.json()
    runs = [run_from_json(run) for run in answer.get("runs", [])]
    return runs, answer.get("next_page_token") or None


_PLAIN_RUN = frozenset({"info", "data", "inputs", "outputs"})
"""The parts of a run in the JSON that :func:`run_from_json` reads itself."""
_PLAIN_INPUTS = ({}, None)


def run_from_json(run: dict):
    """MLflow's ``Run`` entity from one run of a ``runs/search`` JSON answer, equal to what
    ``Run.from_proto`` gives for the same answer."""
    from mlflow.entities import (
        Metric,
        Param,
        Run,
        RunData,
        RunInfo,
        RunInputs,
        RunOutputs,
        RunStatus,
        RunTag,
    )

    if set(run) - _PLAIN_RUN or any(
        run.get(part) not in _PLAIN_INPUTS for part in ("inputs", "outputs")
    ):
        return _run_through_protobuf(run)
    info = run.get("info", {})
    status = info.get("status", "RUNNING")  # the enum's first value, protobuf's default
    end_time = int(info.get("end_time", 0)) or None  # protobuf's 0: no end time
    fields = run.get("data", {})
    data = RunData()
    for metric in fields.get("metrics", ()):
        data._add_metric(
            Metric(
                metric.get("key", ""),
                float(metric.get("value", 0.0)),  # also "NaN", "Infinity", "-Infinity"
                int(metric.get("timestamp", 0)),
                int(metric.get("step", 0)),
                model_id=metric.get("model_id") or None,
                dataset_name=metric.get("dataset_name") or None,
                dataset_digest=metric.get("dataset_digest") or None,
                run_id=metric.get("run_id") or None,
            )
        )
    for param in fields.get("params", ()):
        data._add_param(Param(param.get("key", ""), param.get("value", "")))
    for tag in fields.get("tags", ()):
        data._add_tag(RunTag(tag.get("key", ""), tag.get("value", "")))
    return Run(
        RunInfo(
            run_id=info.get("run_id", ""),
            run_name=info.get("run_name", ""),
            experiment_id=info.get("experiment_id", ""),
            user_id=info.get("user_id", ""),
            status=status if isinstance(status, str) else RunStatus.to_string(int(status)),
            start_time=int(info.get("start_time", 0)),
            end_time=end_time,
            lifecycle_stage=info.get("lifecycle_stage", ""),
            artifact_uri=info.get("artifact_uri", ""),
        ),
        data,
        RunInputs(dataset_inputs=[], model_inputs=[]),  # from_proto's for an empty message
        RunOutputs(model_outputs=[]),
    )


def _run_through_protobuf(run: dict):
    """``run`` parsed as MLflow's REST client parses it (protobuf, then ``Run.from_proto``)."""
    from mlflow.entities import Run
    from mlflow.protos.service_pb2 import Run as ProtoRun
    from mlflow.utils.proto_json_utils import parse_dict

    message = ProtoRun()
    parse_dict(js_dict=run, message=message)
    return Run.from_proto(message)

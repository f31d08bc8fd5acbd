"""radt/analysis/restsearch.py against a real ``mlflow server``: the runs a look reads from the
search's JSON are the runs MLflow's own client gives, field by field, page by page."""

from __future__ import annotations

import json
import math

import pytest
from mlflow_server import MlflowServer, server_fixture

from radt.analysis import restsearch
from radt.analysis.loadruns import search_all

mlflow_server = server_fixture(scope="module")


def as_dicts(runs) -> list[str]:
    """Each run as JSON text (NaN and infinities written out), for comparing exactly."""
    return [json.dumps(run.to_dictionary(), sort_keys=True, default=str) for run in runs]


def mlflows_own(client, experiment_ids, filter_string="", max_results=10_000) -> list[list]:
    """The pages of ``MlflowClient.search_runs``, as radT asks for them."""
    pages, token = [], None
    while True:
        page = client.search_runs(
            experiment_ids,
            filter_string,
            max_results=max_results,
            order_by=["attributes.start_time ASC"],
            page_token=token,
        )
        pages.append(list(page))
        token = page.token
        if not token:
            return pages


@pytest.fixture(scope="module")
def experiment(mlflow_server: MlflowServer) -> tuple[object, str]:
    """An experiment with the runs a look meets: finished, failed, still running (no end
    time), deleted, with NaN and infinite metrics, empty params, nested, and one with a
    dataset input (which goes through MLflow's own parsing)."""
    from mlflow.entities import Dataset as DatasetEntity
    from mlflow.entities import DatasetInput, Metric, Param, RunTag

    client = mlflow_server.client()
    exp = client.create_experiment("restsearch")
    parent = client.create_run(exp, run_name="workload", tags={"radt.collocation": "naive"})
    for k, (status, metrics) in enumerate(
        [
            ("FINISHED", {"examples_per_s": 1828.25, "energy_j": math.nan}),
            ("FAILED", {"power_w": math.inf, "cold": -math.inf}),
            ("RUNNING", {"step": 0.0}),
        ]
    ):
        run = client.create_run(
            exp, run_name=f"client-{k}", tags={"mlflow.parentRunId": parent.info.run_id}
        )
        client.log_batch(
            run.info.run_id,
            metrics=[Metric(key, v, 1_700_000_000_000 + k, k) for key, v in metrics.items()],
            params=[Param("batch-size", str(32 << k)), Param("empty", "")],
            tags=[RunTag("radt.workload", "w"), RunTag("note", 'é ✓ "quoted"')],
        )
        if status != "RUNNING":
            client.set_terminated(run.info.run_id, status)
    gone = client.create_run(exp, run_name="deleted")
    client.delete_run(gone.info.run_id)
    with_data = client.create_run(exp, run_name="with-a-dataset")
    dataset = DatasetEntity(name="d", digest="abc", source_type="local", source="/data")
    client.log_inputs(with_data.info.run_id, [DatasetInput(dataset)])
    client.set_terminated(with_data.info.run_id)
    client.set_terminated(parent.info.run_id)
    return client, exp


def test_a_look_reads_the_runs_mlflow_gives(experiment, monkeypatch):
    client, exp = experiment
    assert restsearch.rest_store(client) is not None
    through_protobuf = []
    original = restsearch._run_through_protobuf
    monkeypatch.setattr(
        restsearch,
        "_run_through_protobuf",
        lambda run: through_protobuf.append(run["info"]["run_name"]) or original(run),
    )
    found = search_all(client, [exp])
    (own,) = mlflows_own(client, [exp])
    assert as_dicts(found) == as_dicts(own)
    assert [r.info.run_name for r in found] == [
        "workload",
        "client-0",
        "client-1",
        "client-2",
        "with-a-dataset",
    ]  # the deleted run is left out, as MLflow's search leaves it out
    assert through_protobuf == ["with-a-dataset"]  # only the run with more than info and data
    byname = {r.info.run_name: r for r in found}
    assert byname["client-2"].info.end_time is None and byname["client-2"].info.status == "RUNNING"
    assert math.isnan(byname["client-0"].data.metrics["energy_j"])
    assert byname["client-0"].data.params["empty"] == ""


def test_pages_and_filters_are_mlflows(experiment):
    client, exp = experiment
    store = restsearch.rest_store(client)
    wanted = "tags.`radt.workload` = 'w'"
    pages, token = [], None
    while True:
        page, token = restsearch.search_page(
            store, [exp], wanted, 2, ["attributes.start_time ASC"], token
        )
        pages.append(page)
        if token is None:
            break
    assert [as_dicts(p) for p in pages] == [
        as_dicts(p) for p in mlflows_own(client, [exp], wanted, max_results=2)
    ]
    assert [len(p) for p in pages][:2] == [2, 1]


def test_a_bad_filter_is_mlflows_error(experiment):
    from mlflow.exceptions import MlflowException

    client, exp = experiment
    store = restsearch.rest_store(client)
    with pytest.raises(MlflowException) as ours:
        restsearch.search_page(store, [exp], "tags.x ===", 10, [], None)
    with pytest.raises(MlflowException) as theirs:
        client.search_runs([exp], "tags.x ===")
    assert ours.value.error_code == theirs.value.error_code


def test_other_stores_search_through_mlflows_client(workspace):
    from mlflow.tracking import MlflowClient

    assert restsearch.rest_store(MlflowClient(tracking_uri=workspace.uri)) is None

"""The UI's Dash app over a real SQLite store, served by Flask's test client (the fast tier's
test of frontend/app.py; test_ui_browser.py drives the same pages in Chromium)."""

from __future__ import annotations

import json

from conftest import Workspace
from radt.frontend.app import create_app


def update(client, output: str, prop_id: str, value) -> dict:
    """One Dash callback request, as the page's JavaScript sends it."""
    component, prop = output.split(".")
    source, source_prop = prop_id.split(".")
    body = {
        "output": output,
        "outputs": {"id": component, "property": prop},
        "inputs": [{"id": source, "property": source_prop, "value": value}],
        "changedPropIds": [prop_id],
    }
    answer = client.post("/_dash-update-component", json=body)
    assert answer.status_code == 200, answer.data[:500]
    return json.loads(answer.data)


def test_the_shell_names_the_store_and_says_what_an_export_holds(workspace: Workspace):
    app = create_app(workspace.uri)
    client = app.server.test_client()
    index = client.get("/")
    assert index.status_code == 200 and b"<title>radT</title>" in index.data
    layout = json.dumps(json.loads(client.get("/_dash-layout").data))
    assert f"tracking store: {workspace.uri}" in layout
    said = update(client, "selection-text.children", "selection.data", None)
    assert said["response"]["selection-text"]["children"] == (
        "No runs selected: exports hold the whole experiment."
    )

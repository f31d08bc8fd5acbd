"""Where runs go: the tracking URI, the reachability check, the experiment."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from radt.errors import TrackingUnreachable, UsageError

DEFAULT_DB = "mlflow.db"
URI_PASSWORD = re.compile(r"(?<=://)([^:/@\s]+):[^@/\s]+@")


def resolve_tracking_uri(explicit: str | None = None) -> tuple[str, bool]:
    """Return the tracking URI and whether it is the embedded default.

    ``explicit`` wins, then ``MLFLOW_TRACKING_URI``; otherwise the embedded
    SQLite store ``mlflow.db`` in the current folder (MLflow's own default),
    made absolute so that the child finds it from any folder.
    """
    uri = explicit or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri, False
    return f"sqlite:///{Path.cwd() / DEFAULT_DB}", True


def redact(uri: str) -> str:
    """Hide a password in a URI (``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db``)."""
    return URI_PASSWORD.sub(r"\1:***@", uri)


def move_credentials(uri: str) -> tuple[str, dict[str, str]]:
    """Take a user's password out of ``uri`` and into the variables its client reads.

    ``http(s)://user:secret@host`` becomes ``http(s)://host`` with
    ``MLFLOW_TRACKING_USERNAME``/``MLFLOW_TRACKING_PASSWORD``;
    ``postgresql://user:secret@host/db`` keeps the user and moves the password to
    ``PGPASSWORD`` (libpq reads it). The clean URI is what radT records, prints and
    hands to the command, so a password never reaches a run. Other URIs are
    returned as they are.
    """
    parts = urlsplit(uri)
    if parts.password is None:
        return uri, {}
    host = parts.netloc.rsplit("@", 1)[1]
    user = unquote(parts.username or "")
    password = unquote(parts.password)
    if parts.scheme in ("http", "https"):
        env = {"MLFLOW_TRACKING_PASSWORD": password}
        if user:
            env["MLFLOW_TRACKING_USERNAME"] = user
        return urlunsplit(parts._replace(netloc=host)), env
    if parts.scheme.split("+")[0] in ("postgresql", "postgres"):
        netloc = f"{parts.username}@{host}" if user else host
        return urlunsplit(parts._replace(netloc=netloc)), {"PGPASSWORD": password}
    return uri, {}


def prepare_process_env() -> None:
    """Make MLflow's HTTP client fail fast in radT's own process.

    The recorder has its own retries and the spool; MLflow's default (7
    retries, backoff up to minutes) would block a request for far too long.
    User settings win. The child's environment is built separately.
    """
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")


def connect(uri: str):
    """Return an ``MlflowClient`` for ``uri`` once the store answers.

    Raises TrackingUnreachable with what to do when it does not.
    """
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    try:
        client.search_experiments(max_results=1)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrackingUnreachable(
            f"cannot reach the tracking store {redact(uri)} ({first[:200]}); start the server, "
            "fix MLFLOW_TRACKING_URI, or unset it to use the embedded store ./mlflow.db"
        ) from exc
    return client


def experiment_id(client, name_or_id: str | None) -> str:
    """Find or create the experiment named (or numbered) ``name_or_id``.

    With None: ``MLFLOW_EXPERIMENT_ID``, then ``MLFLOW_EXPERIMENT_NAME``, then
    MLflow's ``Default`` experiment.
    """
    if name_or_id is None:
        if os.environ.get("MLFLOW_EXPERIMENT_ID"):
            return os.environ["MLFLOW_EXPERIMENT_ID"]
        name_or_id = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "Default"
    experiment = client.get_experiment_by_name(name_or_id)
    if experiment is not None:
        if experiment.lifecycle_stage == "deleted":
            raise UsageError(
                f"experiment {name_or_id!r} is deleted; restore it "
                f"(`mlflow experiments restore --experiment-id {experiment.experiment_id}`) "
                "or choose another name"
            )
        return experiment.experiment_id
    if name_or_id.isdigit():
        try:
            return client.get_experiment(name_or_id).experiment_id
        except Exception:
            pass
    try:
        return client.create_experiment(name_or_id)
    except Exception:
        # Another host may have created it since we looked: use theirs.
        experiment = client.get_experiment_by_name(name_or_id)
        if experiment is None:
            raise
        return experiment.experiment_id

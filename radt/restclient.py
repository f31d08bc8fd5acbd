"""A run's first calls to an ``mlflow server``, made over its REST API before MLflow is imported.

A cold radT (a Slurm job's, or any run the warm launcher cannot serve) spends a second or more
importing MLflow before it can create the run, and the command may not start before its run
exists (``MLFLOW_RUN_ID``). Against a tracking server the few calls in front of the command
(the reachability check, the experiment, the run with its tags and params) are plain JSON
requests, so :class:`LightClient` makes them with the standard library's HTTP client and
imports MLflow in the background once the command runs (:meth:`LightClient.prepare`); every
other call goes to a real ``MlflowClient``, made on first need.

Nothing here decides an outcome on its own: a light call that fails in any way (refused,
timed out, an error answer) is made again through MLflow, so errors, retries and their
messages are MLflow's and radT's as without this module. The light path is taken only where
it sends what MLflow would: an ``http`` or ``https`` URI, MLflow not yet imported, and none of the
settings that change MLflow's requests (an auth plugin, AWS SigV4, TLS certificates, a
workspace, request-header plugins). ``RADT_LIGHT=0`` turns it off.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from radt.switches import turned_off
from radt.tags import MLFLOW_USER

log = logging.getLogger(__name__)

ENV = "RADT_LIGHT"
"""``0``: always create runs through MLflow's client (default: the light path where it applies)."""
API = "/api/2.0/mlflow"
CHANGES_REQUESTS = (
    "MLFLOW_TRACKING_AUTH",
    "MLFLOW_TRACKING_AWS_SIGV4",
    "MLFLOW_TRACKING_SERVER_CERT_PATH",
    "MLFLOW_TRACKING_CLIENT_CERT_PATH",
    "MLFLOW_WORKSPACE",
    "MLFLOW_ENABLE_DB_SDK",
)
"""Settings under which MLflow's requests differ from plain JSON with basic or token auth."""
MISSING = "RESOURCE_DOES_NOT_EXIST"
"""MLflow's error code for an experiment or run that does not exist."""
HEADER_PLUGINS = ("mlflow.request_header_provider", "mlflow.request_auth_provider")


_IMPORTING = threading.Lock()
_imported = False


def import_mlflow() -> None:
    """Import MLflow's client and entities once, in whichever thread asks first, the others
    waiting for it: MLflow's package imports itself in circles, and two threads importing it
    at once each see it half made. Every thread of a run that may be the first to need MLflow
    after the command starts calls this before its own ``from mlflow… import``."""
    global _imported
    if _imported:
        return
    with _IMPORTING:
        if not _imported:
            import mlflow.entities  # noqa: F401
            import mlflow.tracking  # noqa: F401

            _imported = True


class LightCallFailed(Exception):
    """A light call did not succeed; the caller makes it through MLflow."""


@dataclass(frozen=True)
class Experiment:
    """An experiment as the light calls return it (the fields radT reads of MLflow's)."""

    experiment_id: str
    name: str
    lifecycle_stage: str


@dataclass(frozen=True)
class RunInfo:
    """A created run's info, as MLflow's ``RunInfo`` names its fields."""

    run_id: str
    run_name: str
    experiment_id: str
    user_id: str
    status: str
    start_time: int
    artifact_uri: str
    lifecycle_stage: str
    end_time: int | None = None

    @property
    def run_uuid(self) -> str:
        """MLflow's old name of ``run_id``."""
        return self.run_id


@dataclass(frozen=True)
class RunData:
    """A created run's data, as MLflow's ``RunData`` names it: the tags it was made with."""

    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Run:
    """A created run: its info and data, as MLflow's ``Run`` holds them."""

    info: RunInfo
    data: RunData = field(default_factory=RunData)


def applies(uri: str, environ: dict[str, str] | None = None) -> bool:
    """Whether the light path may create a run in the store at ``uri``."""
    env = os.environ if environ is None else environ
    if turned_off(ENV, env):
        return False
    if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
        return False
    if "mlflow" in sys.modules:  # nothing left to save
        return False
    if any(env.get(name) for name in CHANGES_REQUESTS):
        return False
    if env.get("MLFLOW_TRACKING_INSECURE_TLS", "").strip().lower() in ("true", "1"):
        return False
    from importlib.metadata import entry_points

    return not any(entry_points(group=group) for group in HEADER_PLUGINS)


class LightClient:
    """An ``MlflowClient`` stand-in for a server store: the calls in front of a command made
    over REST, everything else by the real client (made on first need, or by :meth:`prepare`
    in the background)."""

    def __init__(self, tracking_uri: str) -> None:
        self.tracking_uri = tracking_uri
        self._base = tracking_uri.rstrip("/") + API
        self._timeout_s = float(os.environ.get("MLFLOW_HTTP_REQUEST_TIMEOUT") or 120)
        self._full: Any = None
        self._making = threading.Lock()
        self.light_calls = 0
        """How many calls the light path answered."""

    # -- the real client ------------------------------------------------------------------

    def full(self):
        """The real ``MlflowClient`` for this store, imported and made on first need."""
        with self._making:
            if self._full is None:
                started = time.perf_counter()
                import_mlflow()
                from mlflow.tracking import MlflowClient

                self._full = MlflowClient(tracking_uri=self.tracking_uri)
                log.debug(f"MLflow's client ready in {time.perf_counter() - started:.2f} s")
            return self._full

    def prepare(self) -> None:
        """Make the real client in a background thread (the command is running by now)."""
        threading.Thread(target=self._prepare, name="radt-mlflow-import", daemon=True).start()

    def _prepare(self) -> None:
        try:
            self.full()
        except Exception as exc:  # the next call through it says what went wrong
            log.debug(f"MLflow's client could not be made in the background: {exc}")

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.full(), name)

    # -- the light calls ------------------------------------------------------------------

    def call(self, method: str, endpoint: str, body: dict | None = None) -> dict:
        """One JSON request to the server's REST API (``endpoint`` under ``/api/2.0/mlflow``),
        its JSON answer; raises LightCallFailed on anything but a 200 with a JSON object."""
        url = f"{self._base}/{endpoint}"
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        for name, value in _auth_headers().items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as answer:
                answered = json.loads(answer.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                code = json.loads(exc.read() or b"{}").get("error_code")
            except (ValueError, OSError, AttributeError):
                code = None
            raise LightCallFailed(f"HTTP {exc.code} {code or ''}".strip()) from exc
        except (OSError, ValueError) as exc:
            raise LightCallFailed(str(exc)) from exc
        if not isinstance(answered, dict):
            raise LightCallFailed("the answer is not a JSON object")
        self.light_calls += 1
        return answered

    def _light(self, name: str, call, *args, **kwargs):
        """``call()``'s answer, or else MLflow's own ``name(*args, **kwargs)``."""
        try:
            return call()
        except (LightCallFailed, KeyError, TypeError, ValueError) as exc:
            log.debug(f"{name} over REST failed ({exc}); through MLflow's client")
            return getattr(self.full(), name)(*args, **kwargs)

    def _by_name(self, name: str) -> Experiment | None:
        """The experiment called ``name``, or None; LightCallFailed where the server did
        not answer."""
        try:
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
        except LightCallFailed as exc:
            if MISSING in str(exc):
                return None
            raise
        return _experiment(found["experiment"])

    def _by_id(self, experiment_id: str) -> Experiment:
        """The experiment numbered ``experiment_id``; LightCallFailed where the server did not
        answer it."""
        found = self.call("GET", "experiments/get", {"experiment_id": experiment_id})
        return _experiment(found["experiment"])

    def find_experiment(self, name_or_id: str) -> Experiment | None:
        """The experiment named ``name_or_id`` (else numbered so), or None, over REST only:
        raises LightCallFailed where the server did not answer."""
        found = self._by_name(name_or_id)
        if found is not None or not name_or_id.isdigit():
            return found
        try:
            return self._by_id(name_or_id)
        except LightCallFailed as exc:
            if MISSING in str(exc):
                return None
            raise

    def search_experiments(self, max_results: int = 1000, **kwargs):
        """The store's reachability check: one experiment over REST (its answer is not
        returned: only a call with no other argument is light)."""
        if kwargs or self._full is not None:
            return self.full().search_experiments(max_results=max_results, **kwargs)

        def call():
            self.call("POST", "experiments/search", {"max_results": max_results})
            return []

        return self._light("search_experiments", call, max_results=max_results)

    def get_experiment_by_name(self, name: str):
        """The experiment called ``name``, or None."""
        return self._light("get_experiment_by_name", lambda: self._by_name(name), name)

    def get_experiment(self, experiment_id: str):
        """The experiment numbered ``experiment_id``."""
        return self._light("get_experiment", lambda: self._by_id(experiment_id), experiment_id)

    def create_experiment(self, name: str):
        """Create the experiment ``name``; its id. (An error answer, such as another host
        having just made it, goes through MLflow, which raises it.)"""
        return self._light(
            "create_experiment",
            lambda: str(self.call("POST", "experiments/create", {"name": name})["experiment_id"]),
            name,
        )

    def create_run(self, experiment_id: str, start_time=None, tags=None, run_name=None):
        """Create a run as ``MlflowClient.create_run`` does (its user from the
        ``mlflow.user`` tag, its start now)."""
        tags = dict(tags or {})
        body = {
            "experiment_id": str(experiment_id),
            "user_id": tags.get(MLFLOW_USER, "unknown"),
            "start_time": start_time or int(time.time() * 1000),
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        if run_name:
            body["run_name"] = run_name

        def call():
            info = self.call("POST", "runs/create", body)["run"]["info"]
            return Run(
                RunInfo(
                    run_id=info["run_id"],
                    run_name=info.get("run_name", ""),
                    experiment_id=str(info["experiment_id"]),
                    user_id=info.get("user_id", ""),
                    status=info.get("status", "RUNNING"),
                    start_time=int(info["start_time"]),
                    artifact_uri=info.get("artifact_uri", ""),
                    lifecycle_stage=info.get("lifecycle_stage", "active"),
                ),
                RunData(tags=tags),
            )

        return self._light(
            "create_run",
            call,
            experiment_id,
            start_time=body["start_time"],
            tags=tags,
            run_name=run_name,
        )

    def log_params(self, run_id: str, params: dict[str, str]) -> None:
        """Log ``params`` in one batch (MLflow's ``log_batch`` of ``Param``s)."""
        body = {"run_id": run_id, "params": [{"key": k, "value": v} for k, v in params.items()]}
        try:
            self.call("POST", "runs/log-batch", body)
        except LightCallFailed as exc:
            log.debug(f"log-batch over REST failed ({exc}); through MLflow's client")
            log_params_through(self.full(), run_id, params)


def log_params_through(client, run_id: str, params: dict[str, str]) -> None:
    """Log ``params`` in one synchronous batch through an ``MlflowClient``."""
    from mlflow.entities import Param

    client.log_batch(run_id, params=[Param(k, v) for k, v in params.items()], synchronous=True)


def log_params(client, run_id: str, params: dict[str, str]) -> None:
    """Log ``params`` on ``run_id`` in one batch, through whichever client radT holds."""
    if isinstance(client, LightClient):
        client.log_params(run_id, params)
    else:
        log_params_through(client, run_id, params)


def _experiment(found: dict) -> Experiment:
    return Experiment(
        experiment_id=str(found["experiment_id"]),
        name=found["name"],
        lifecycle_stage=found.get("lifecycle_stage", "active"),
    )


def _auth_headers() -> dict[str, str]:
    """Basic or bearer auth from MLflow's variables, as MLflow's client sends it."""
    user = os.environ.get("MLFLOW_TRACKING_USERNAME")
    password = os.environ.get("MLFLOW_TRACKING_PASSWORD")
    token = os.environ.get("MLFLOW_TRACKING_TOKEN")
    if user and password:
        basic = base64.standard_b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {basic}"}
    if token:
        return {"Authorization": f"Bearer {token}"}
    return {}

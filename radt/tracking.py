"""Where runs go: the tracking URI, the reachability check, the experiment."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

from radt.errors import RadtError, TrackingUnreachable, UsageError

log = logging.getLogger(__name__)

DEFAULT_DB = "mlflow.db"
LOCK_SUFFIX = ".lock"
"""The lock file beside a SQLite store that radT makes or upgrades (``mlflow.db.lock``)."""
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


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI, else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(urlsplit(uri).path.split("?")[0][1:]) or ":memory:")


def store_label(uri: str) -> str:
    """How radT names a store to people: a SQLite store by its file, anything else by its
    URI with any password hidden (``sqlite:////data/mlflow.db`` → ``/data/mlflow.db``)."""
    path = sqlite_path(uri)
    return str(path) if path is not None else redact(uri)


def quiet_mlflow_logs() -> None:
    """Keep MLflow's own log lines out of radT's output: radT says what matters itself
    (a new store once, a store error in one line)."""
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # tqdm bars ("Downloading artifacts: 100%|...") each time radT reads a run's samples
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


ERRNO = re.compile(r"\[Errno -?\d+\] ([^'\"()\[\]]+)")
"""The operating system's words in an error's text: ``[Errno 111] Connection refused``."""
REASON_CHARS = 200


def reason(exc: BaseException) -> str:
    """The first line of what went wrong at the bottom of ``exc``'s chain, cut between words
    at about 200 characters (``attempt to write a readonly database``, not SQLAlchemy's
    wrapping; ``… failed: Connection refused``, not urllib3's)."""
    seen = {id(exc)}
    while exc.__cause__ is not None and id(exc.__cause__) not in seen:
        exc = exc.__cause__
        seen.add(id(exc))
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"^\((\w+\.)*\w+\)\s*", "", first)
    errno = ERRNO.search(text)
    if errno:  # a connection that failed: the OS's words, not urllib3's wrapping of them
        first = f"{first.split(' with exception', 1)[0]}: {errno[1].strip()}"
    if len(first) <= REASON_CHARS:
        return first
    return first[:REASON_CHARS].rsplit(" ", 1)[0].rstrip(" ,;:(") + "…"


def store_error(uri: str, exc: BaseException, doing: str) -> RadtError:
    """A one-line error for a store that answered but refused: what, where, what to do."""
    if isinstance(exc, RadtError):
        return exc
    if sqlite_path(uri) is not None:
        advice = "make the file writable, or point MLFLOW_TRACKING_URI at another store"
    else:
        advice = "check the tracking server's log, or point MLFLOW_TRACKING_URI at another store"
    return RadtError(
        f"cannot {doing} in the tracking store {store_label(uri)} ({reason(exc)}); {advice}"
    )


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


def schema_is_current(database: Path) -> bool:
    """Whether the SQLite store ``database`` has MLflow's newest schema, read without
    changing it: a store that does not exist yet, is empty, or is being made or upgraded
    by another process is not current."""
    try:
        if not database.is_file() or database.stat().st_size == 0:
            return False
        from mlflow.store.db.utils import _get_latest_schema_revision

        head = _get_latest_schema_revision()
        with contextlib.closing(
            sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=30)
        ) as db:
            versions = db.execute("SELECT version_num FROM alembic_version").fetchall()
    except Exception:  # unreadable, no such table, not a database, MLflow moved its helper
        return False
    return versions == [(head,)]


@contextlib.contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold the lock beside a SQLite store while MLflow makes or upgrades its tables.

    MLflow creates a new SQLite store's tables, and upgrades an old one's, in the first
    process that opens it; two processes doing so at once break each other (``table …
    already exists``, ``Online migration expected to match one row``). Under this lock
    (``flock`` on ``mlflow.db.lock`` beside the store) the first makes the store and the
    others wait, then open it; the lock file is removed once the store is made. A store
    already at MLflow's newest schema is opened without the lock, so runs that start
    together on it do not wait for each other; other stores, and a folder where the lock
    cannot be made, go without it.
    """
    database = sqlite_path(uri)
    if database is None or str(database) == ":memory:" or schema_is_current(database):
        yield
        return
    lock = database.with_name(database.name + LOCK_SUFFIX)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:  # MLflow's own error about the folder follows
        log.debug(f"no store lock {lock}: {exc}")
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        if schema_is_current(database):
            # Made: no one needs the lock any more (one still waiting on this file then
            # opens the store as it is; a newcomer opens it without the lock).
            with contextlib.suppress(OSError):
                lock.unlink()
        os.close(fd)  # closing releases the lock


def client_store(client):
    """The tracking store behind an ``MlflowClient`` (MLflow's private attribute, read here
    only), or None."""
    return getattr(getattr(client, "_tracking_client", None), "store", None)


def connect(uri: str, light: bool = False):
    """Return an ``MlflowClient`` for ``uri`` once the store answers.

    With ``light``, a tracking server's client is a :class:`radt.restclient.LightClient`
    where its light path applies: the calls in front of a command made before MLflow is
    imported. A SQLite store is made (or upgraded) by one process at a time
    (:func:`store_lock`). Raises TrackingUnreachable with what to do when the store does not
    answer, and a RadtError when a SQLite store cannot be made or opened.
    """
    quiet_mlflow_logs()
    if light:
        from radt import restclient

        if restclient.applies(uri):
            client = restclient.LightClient(uri)
            try:
                client.search_experiments(max_results=1)
            except Exception:
                pass  # MLflow's own client below says why, as without the light path
            else:
                return client
    from mlflow.tracking import MlflowClient

    from radt.interrupts import hold_during_transactions

    database = sqlite_path(uri)
    existed = database is not None and os.path.isfile(database)
    try:
        with store_lock(uri):
            client = MlflowClient(tracking_uri=uri)
            hold_during_transactions(client_store(client))
            client.search_experiments(max_results=1)
    except Exception as exc:
        if "nsupported URI" in str(exc) or "nsupported scheme" in str(exc):
            scheme = urlsplit(uri).scheme or uri
            raise TrackingUnreachable(
                f"MLflow has no tracking store for {redact(uri)} (scheme {scheme!r}); use "
                "http(s)://HOST:PORT, sqlite:///FILE, postgresql://… or mysql://…, "
                "or unset MLFLOW_TRACKING_URI to use the embedded store ./mlflow.db"
            ) from exc
        if database is not None:  # a file: nothing to reach, only to make or to open
            doing = "open" if existed else "make"
            raise RadtError(
                f"cannot {doing} the tracking store {store_label(uri)} ({reason(exc)}); "
                "check the file and its folder, or point MLFLOW_TRACKING_URI at another store"
            ) from exc
        advice = (
            "start the server, fix MLFLOW_TRACKING_URI, "
            "or unset it to use the embedded store ./mlflow.db"
        )
        raise TrackingUnreachable(
            f"cannot reach the tracking store {store_label(uri)} ({reason(exc)}); {advice}"
        ) from exc
    return client


def experiment_id(client, name_or_id: str | None) -> str:
    """Find or create the experiment named (or numbered) ``name_or_id``.

    With None: ``MLFLOW_EXPERIMENT_ID``, then ``MLFLOW_EXPERIMENT_NAME``, then
    MLflow's ``Default`` experiment. Raises RadtError (one line) when the store refuses.
    """
    uri = getattr(client, "tracking_uri", "") or ""
    try:
        return _experiment_id(client, name_or_id)
    except RadtError:
        raise
    except Exception as exc:
        raise store_error(uri, exc, "find or create the experiment") from exc


def experiment_label(client, exp_id: str) -> str:
    """``radt-demo (id 1)``: an experiment by name and id, as radT's lines name it."""
    try:
        name = client.get_experiment(exp_id).name
    except Exception as exc:
        raise store_error(
            getattr(client, "tracking_uri", "") or "", exc, "read the experiment"
        ) from exc
    return f"{name} (id {exp_id})"


def _experiment_id(client, name_or_id: str | None) -> str:
    if name_or_id is None:
        given = os.environ.get("MLFLOW_EXPERIMENT_ID", "").strip()
        if given:
            experiment = None
            try:
                experiment = client.get_experiment(given)
            except Exception as exc:
                if getattr(exc, "error_code", None) not in (
                    "RESOURCE_DOES_NOT_EXIST",
                    "INVALID_PARAMETER_VALUE",
                ):
                    raise
            if experiment is None or experiment.lifecycle_stage == "deleted":
                raise UsageError(
                    f"MLFLOW_EXPERIMENT_ID={given} names no experiment in the tracking store; "
                    "unset it, or choose one with -e NAME (created if missing)"
                )
            return experiment.experiment_id
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

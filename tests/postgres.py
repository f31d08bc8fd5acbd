"""A real PostgreSQL server for tests: a fresh cluster in a temp folder, on loopback only.

``initdb`` makes the cluster; the ``postgres`` server runs as a
:class:`servers.ServerProcess` (a session of its own, its log in the folder),
with its socket in the same folder and TCP on ``127.0.0.1:<free port>``, and a
database is created for the caller. It is ready when its ``postmaster.pid``
says so, as ``pg_ctl -w`` checks. PostgreSQL refuses to run as root: when the
tests run as root, the server's commands run as the ``postgres`` system user
(made by Debian's ``postgresql`` package; ``nobody`` otherwise) and the folder
is given to that user. The folder lies directly under the system temp folder,
so that user can reach it whatever the caller's own temp folders allow.

Usage::

    with PostgresServer() as pg:
        pg.uri  # postgresql+psycopg2://radt@127.0.0.1:PORT/mlflow (password: pg.password)
        pg.restart()  # a fast shutdown (SIGINT, as pg_ctl restart -m fast), then a start
        pg.kill()  # SIGKILL the server's whole group (a crash); pg.start() brings it back

The server is always stopped, and the folder removed, by ``cleanup()`` (also on
interpreter exit for a run that never reached its teardown).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from servers import ServerProcess, end_at_exit

SUPERUSER = "radt"
DATABASE = "mlflow"
# The shutdown modes of ``pg_ctl stop -m``: the signal each sends to the postmaster.
SHUTDOWN_SIGNALS = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}


def _version_key(path: str) -> tuple[int, ...]:
    match = re.search(r"/postgresql/([\d.]+)/bin$", path)
    return tuple(int(p) for p in match[1].split(".")) if match else (0,)


def find_bin_dir() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: ``$PG_BIN``, the newest
    ``/usr/lib/postgresql/*/bin`` (Debian/Ubuntu), else beside ``initdb`` on PATH."""
    candidates = []
    if os.environ.get("PG_BIN"):
        candidates.append(os.environ["PG_BIN"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for folder in candidates:
        path = Path(folder)
        if all((path / tool).is_file() for tool in ("initdb", "postgres")):
            return path
    return None


def missing_reason() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None when it can."""
    if find_bin_dir() is None:
        return (
            "PostgreSQL server binaries not found (no initdb/postgres under "
            "/usr/lib/postgresql/*/bin or on PATH; `apt-get install postgresql`)"
        )
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (`pip install psycopg2-binary`)"
    return None


def _server_account() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


class PostgresServer(ServerProcess):
    """One PostgreSQL cluster under a temp folder, serving ``127.0.0.1:port``.

    ``durable=False`` (the default for tests) turns off fsync and synchronous
    commit: a clean or fast shutdown still loses nothing, only an OS crash
    would. Benchmarks pass ``durable=True`` for a server as deployed.
    """

    name = "postgres server"

    def __init__(
        self,
        port: int | None = None,
        database: str = DATABASE,
        user: str = SUPERUSER,
        password: str | None = None,
        durable: bool = False,
        base: Path | None = None,
    ) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError(missing_reason() or "PostgreSQL not found")
        folder = Path(tempfile.mkdtemp(prefix="radt-pg-", dir=base))
        super().__init__(folder, folder / "postgres.log", port)
        self.bin = bin_dir
        self.account = _server_account()
        self.data = self.folder / "data"
        self.database = database
        self.user = user
        self.password = password or secrets.token_urlsafe(12)
        self.durable = durable
        self._initialised = False
        if self.account is not None:
            os.chown(self.folder, self.account.pw_uid, self.account.pw_gid)
        end_at_exit(self)  # the folder goes at exit even if the server never starts

    # ------------------------------------------------------------------ addresses

    @property
    def uri(self) -> str:
        """SQLAlchemy URI for MLflow, without the password (give it as PGPASSWORD)."""
        return f"postgresql+psycopg2://{self.user}@127.0.0.1:{self.port}/{self.database}"

    @property
    def uri_with_password(self) -> str:
        return (
            f"postgresql+psycopg2://{self.user}:{self.password}"
            f"@127.0.0.1:{self.port}/{self.database}"
        )

    def client_env(self) -> dict[str, str]:
        """Variables that let libpq clients (psycopg2, psql) log in: ``PGPASSWORD``."""
        return {"PGPASSWORD": self.password}

    # ------------------------------------------------------------------ the server process

    def env(self) -> dict[str, str]:
        env = {
            "PATH": f"{self.bin}{os.pathsep}/usr/bin:/bin",
            "LC_ALL": "C",
            "LANG": "C",
            "TZ": "UTC",
        }
        if self.account is not None:
            env.update(HOME=str(self.folder), USER=self.account.pw_name)
        else:
            env["HOME"] = os.environ.get("HOME", str(self.folder))
        return env

    def popen_options(self) -> dict:
        """Run as the server's account when we are root."""
        if self.account is None:
            return {}
        return {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}

    def argv(self) -> list[str]:
        argv = [
            str(self.bin / "postgres"),
            "-D",
            str(self.data),
            "-k",
            str(self.folder),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-c",
            "max_connections=100",
        ]
        if not self.durable:
            argv += ["-c", "fsync=off", "-c", "synchronous_commit=off"]
            argv += ["-c", "full_page_writes=off"]
        return argv

    def ready(self) -> bool:
        """``postmaster.pid`` names our process and says ``ready`` (what ``pg_ctl -w`` reads)."""
        try:
            lines = (self.data / "postmaster.pid").read_text().splitlines()
        except OSError:
            return False
        return (
            self.process is not None
            and len(lines) >= 8
            and lines[0].strip() == str(self.process.pid)
            and lines[7].strip() == "ready"
        )

    def _run(self, argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run a server tool (initdb) as the server's account."""
        done = subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=self.folder,
            env=self.env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            **self.popen_options(),
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}\n"
                f"{self.log_tail()}"
            )
        return done

    def _initdb(self) -> None:
        pwfile = self.folder / "pwfile"
        pwfile.write_text(self.password + "\n")
        if self.account is not None:
            os.chown(pwfile, self.account.pw_uid, self.account.pw_gid)
        pwfile.chmod(0o600)
        try:
            self._run(
                [
                    "initdb",
                    "-D",
                    str(self.data),
                    "-U",
                    self.user,
                    f"--pwfile={pwfile}",
                    "--auth-local=trust",
                    "--auth-host=scram-sha-256",
                    "--encoding=UTF8",
                    "--locale=C",
                ]
                + ([] if self.durable else ["--no-sync"]),
                timeout=180,
            )
        finally:
            pwfile.unlink(missing_ok=True)
        self._initialised = True

    # ------------------------------------------------------------------ lifecycle

    @property
    def pid(self) -> int | None:
        """The postmaster's pid (None when not running)."""
        return self.process.pid if self.running else None

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        """initdb (the first time), start the server, create the database (the first time)."""
        first = not self._initialised
        if first:
            self._initdb()
        super().start(timeout_s)
        if first:
            self.sql(f'CREATE DATABASE "{self.database}"', database="postgres")
        return self

    def stop(self, mode: str = "fast", timeout_s: float = 60.0) -> None:
        """Shut down as ``pg_ctl stop -m <mode>`` (smart, fast or immediate) does: the mode's
        signal to the postmaster; KILL after ``timeout_s``. A no-op when not running."""
        self.end(SHUTDOWN_SIGNALS[mode], timeout_s, whole_group=False)

    def restart(self, mode: str = "fast", timeout_s: float = 60.0) -> PostgresServer:
        """Stop (``mode``) and start again: same port, same data, connections dropped."""
        self.stop(mode, timeout_s)
        return self.start(timeout_s)

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the postmaster and its backends (a crash); the next start recovers."""
        super().kill(timeout_s)
        # The next postmaster must not take a lock file of the dead one for a live one's.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for stale in (f".s.PGSQL.{self.port}.lock", f".s.PGSQL.{self.port}"):
            (self.folder / stale).unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Stop the server whatever its state and remove its folder."""
        try:
            self.stop("immediate", timeout_s=30)
        finally:
            try:
                super().cleanup()
            finally:
                shutil.rmtree(self.folder, ignore_errors=True)

    # ------------------------------------------------------------------ queries

    def connect(self, database: str | None = None):
        """A psycopg2 connection over TCP with the password (autocommit)."""
        import psycopg2

        connection = psycopg2.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            dbname=database or self.database,
            connect_timeout=10,
        )
        connection.autocommit = True
        return connection

    def sql(self, statement: str, params=None, database: str | None = None) -> list[tuple]:
        """Run one statement; return its rows (empty for statements without a result)."""
        connection = self.connect(database)
        try:
            with connection.cursor() as cursor:
                cursor.execute(statement, params)
                return cursor.fetchall() if cursor.description else []
        finally:
            connection.close()

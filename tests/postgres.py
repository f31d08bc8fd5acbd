"""A real PostgreSQL server for tests: a fresh cluster in a temp folder, on loopback only.

``initdb`` makes the cluster, ``pg_ctl`` starts it with its socket in the same
folder and TCP on ``127.0.0.1:<free port>``, and a database is created for the
caller. PostgreSQL refuses to run as root: when the tests run as root, the
server's commands run as the ``postgres`` system user (made by Debian's
``postgresql`` package; ``nobody`` otherwise) and the folder is given to that
user. The folder lies directly under the system temp folder, so that user can
reach it whatever the caller's own temp folders allow.

Usage::

    with PostgresServer() as pg:
        pg.uri  # postgresql+psycopg2://radt@127.0.0.1:PORT/mlflow (password: pg.password)
        pg.restart()  # pg_ctl restart -m fast
        pg.kill()  # SIGKILL the postmaster (a crash); pg.start() brings it back

The server is always stopped, and the folder removed, by ``stop()``/``cleanup()``
(also on interpreter exit for a run that never reached its teardown).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "radt"
DATABASE = "mlflow"
_LIVE: set[PostgresServer] = set()


@atexit.register
def _stop_leftovers() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.cleanup()


def _version_key(path: str) -> tuple[int, ...]:
    match = re.search(r"/postgresql/([\d.]+)/bin$", path)
    return tuple(int(p) for p in match[1].split(".")) if match else (0,)


def find_bin_dir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: ``$PG_BIN``, the newest
    ``/usr/lib/postgresql/*/bin`` (Debian/Ubuntu), else beside ``pg_ctl`` on PATH."""
    candidates = []
    if os.environ.get("PG_BIN"):
        candidates.append(os.environ["PG_BIN"])
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for folder in candidates:
        path = Path(folder)
        if all((path / tool).is_file() for tool in ("initdb", "pg_ctl", "postgres")):
            return path
    return None


def missing_reason() -> str | None:
    """Why a PostgreSQL server cannot be started here, or None when it can."""
    if find_bin_dir() is None:
        return (
            "PostgreSQL server binaries not found (no initdb/pg_ctl under "
            "/usr/lib/postgresql/*/bin or on PATH; `apt-get install postgresql`)"
        )
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        return "psycopg2 is not installed (`pip install psycopg2-binary`)"
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_account() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server as, or None to run as ourselves."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root and neither a 'postgres' nor a 'nobody' user exists")


class PostgresServer:
    """One PostgreSQL cluster under a temp folder, serving ``127.0.0.1:port``.

    ``durable=False`` (the default for tests) turns off fsync and synchronous
    commit: a clean or fast shutdown still loses nothing, only an OS crash
    would. Benchmarks pass ``durable=True`` for a server as deployed.
    """

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
        self.bin = bin_dir
        self.account = _server_account()
        self.folder = Path(tempfile.mkdtemp(prefix="radt-pg-", dir=base))
        self.data = self.folder / "data"
        self.log_path = self.folder / "postgres.log"
        self.port = port or free_port()
        self.database = database
        self.user = user
        self.password = password or secrets.token_urlsafe(12)
        self.durable = durable
        self.starts = 0
        self._initialised = False
        if self.account is not None:
            os.chown(self.folder, self.account.pw_uid, self.account.pw_gid)
        _LIVE.add(self)

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

    # ------------------------------------------------------------------ commands

    def _env(self) -> dict[str, str]:
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

    def _run(self, argv: list[str], timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run a server command (initdb, pg_ctl) as the server's account."""
        extra = {}
        if self.account is not None:
            extra = {"user": self.account.pw_uid, "group": self.account.pw_gid, "extra_groups": []}
        done = subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]],
            cwd=self.folder,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            **extra,
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

    def _options(self) -> str:
        options = [
            f"-k {self.folder}",
            "-h 127.0.0.1",
            f"-p {self.port}",
            "-c max_connections=100",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        return " ".join(options)

    # ------------------------------------------------------------------ lifecycle

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, from ``postmaster.pid`` (None when not running)."""
        try:
            return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None

    @property
    def running(self) -> bool:
        pid = self.pid
        if pid is None:
            return False
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"  # a postmaster nobody reaped yet is gone all the same

    def start(self, timeout_s: float = 60.0) -> PostgresServer:
        """initdb (the first time), start the server, create the database (the first time)."""
        first = not self._initialised
        if first:
            self._initdb()
        self.starts += 1
        self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log_path),
                "-o",
                self._options(),
                "-w",
                "-t",
                str(int(timeout_s)),
                "start",
            ],
            timeout=timeout_s + 30,
        )
        if first:
            self.sql(f'CREATE DATABASE "{self.database}"', database="postgres")
        return self

    def stop(self, mode: str = "fast", timeout_s: float = 60.0) -> None:
        """``pg_ctl stop -m <mode>`` (smart, fast or immediate); no-op when not running."""
        if not self.running:
            return
        self._run(
            ["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", str(int(timeout_s)), "stop"],
            timeout=timeout_s + 30,
        )

    def restart(self, mode: str = "fast", timeout_s: float = 60.0) -> PostgresServer:
        """``pg_ctl restart -m <mode>``: same port, same data, connections dropped."""
        self.starts += 1
        self._run(
            [
                "pg_ctl",
                "-D",
                str(self.data),
                "-l",
                str(self.log_path),
                "-m",
                mode,
                "-o",
                self._options(),
                "-w",
                "-t",
                str(int(timeout_s)),
                "restart",
            ],
            timeout=timeout_s + 30,
        )
        return self

    def kill(self, timeout_s: float = 30.0) -> None:
        """SIGKILL the postmaster (a crash) and wait until its port is free."""
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while self.running or _port_open(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres {pid} still alive or port {self.port} still open")
            time.sleep(0.05)
        # The backends notice the dead postmaster and exit on their own; the next
        # start reuses the data folder after crash recovery.
        # A killed postmaster may linger as a zombie nobody reaps, which makes the
        # next postmaster believe its lock files are still held: remove them.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for stale in (f".s.PGSQL.{self.port}.lock", f".s.PGSQL.{self.port}"):
            (self.folder / stale).unlink(missing_ok=True)

    def cleanup(self) -> None:
        """Stop the server whatever its state and remove its folder."""
        try:
            if self.running:
                try:
                    self.stop("immediate", timeout_s=30)
                except Exception:
                    self.kill()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
            _LIVE.discard(self)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

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

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no postgres log)"


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            return False
        return True

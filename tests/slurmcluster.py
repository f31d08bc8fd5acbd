"""A real single-node Slurm for tests: munged, slurmctld and slurmd in a temp folder, on loopback.

Debian's ``munge``, ``slurmctld``, ``slurmd`` and ``slurm-client`` packages give
the programs; everything else is private to the folder: munged's key, socket,
pid, seed and log files (munged runs as the ``munge`` user), ``slurm.conf`` and
``gres.conf``, the controller's state and the node's spool, and two free ports
on 127.0.0.1. Clients find it through :meth:`SlurmCluster.client_env`
(``SLURM_CONF``). The node is this machine under ``hostname -s`` with its own
CPUs and memory (as ``slurmd -C`` reports them, ``DefMemPerCPU`` set so jobs
share it) and ``gpus`` fake GPUs of MIG type ``1g.10gb``: GRES lines on device
files that need no hardware, so Slurm gives each job its own GPU and sets
``CUDA_VISIBLE_DEVICES``. Without cgroups (``proctrack/linuxproc``,
``task/none``) and without accounting (no slurmdbd: ``sacct`` fails here, as on
clusters that keep none).

Usage::

    with SlurmCluster(gpus=4) as slurm:
        subprocess.run(["sbatch", ...], env={**os.environ, **slurm.client_env()})
        slurm.idle()  # True once no job is pending or running
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from servers import ServerProcess, end_at_exit, free_port

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scontrol", "scancel", "srun")
# Device files that exist everywhere and need no hardware: one per fake GPU.
FAKE_GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random")
PARTITION = "debug"


def _program(name: str) -> str | None:
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None
    )


def missing_reason() -> str | None:
    """Why a Slurm cluster cannot be started here, or None when it can."""
    absent = [name for name in PROGRAMS if _program(name) is None]
    if absent:
        return (
            f"Slurm/munge programs not found: {', '.join(absent)} "
            "(`apt-get install slurmctld slurmd slurm-client munge`)"
        )
    if os.geteuid() != 0:
        return "the test Slurm runs its daemons as root (SlurmUser=root); run the tests as root"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no `munge` user (installed with Debian's munge package)"
    return None


def _node_line() -> str:
    """``slurmd -C``'s NodeName line: this machine's name, CPUs and memory."""
    done = subprocess.run(
        [_program("slurmd"), "-C"], capture_output=True, text=True, check=True, timeout=60
    )
    return next(line for line in done.stdout.splitlines() if line.startswith("NodeName="))


class _Daemon(ServerProcess):
    """One daemon of the cluster, in the foreground, in the cluster's folder."""

    def __init__(self, cluster: SlurmCluster, name: str, argv: list[str], port: int) -> None:
        super().__init__(cluster.folder, cluster.folder / f"{name}.log", port)
        self.name = name
        self.cluster = cluster
        self._argv = argv

    def argv(self) -> list[str]:
        return self._argv

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.cluster.client_env()}

    def ready(self) -> bool:
        return self.cluster.ready_check(self.name)


class _Munged(_Daemon):
    """munged as the ``munge`` user; its port is unused (it serves a unix socket)."""

    def popen_options(self) -> dict:
        account = pwd.getpwnam("munge")
        return {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}


class SlurmCluster:
    """munged, slurmctld and slurmd serving one partition ``debug`` of this machine."""

    def __init__(self, gpus: int = 4, base: Path | None = None) -> None:
        reason = missing_reason()
        if reason:
            raise RuntimeError(reason)
        if gpus > len(FAKE_GPU_FILES):
            raise ValueError(f"at most {len(FAKE_GPU_FILES)} fake GPUs")
        # Directly under the system temp folder: the munge user must reach it.
        self.folder = Path(tempfile.mkdtemp(prefix="radt-slurm-", dir=base))
        self.folder.chmod(0o755)
        self.gpus = gpus
        self.node = socket.gethostname().split(".")[0]
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        self.daemons: list[_Daemon] = []
        end_at_exit(self)

    # ------------------------------------------------------------------ configuration

    @property
    def conf(self) -> Path:
        return self.folder / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.folder / "munge" / "munge.socket"

    def client_env(self) -> dict[str, str]:
        """What Slurm's commands need to find this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def _write_munge(self) -> None:
        account = pwd.getpwnam("munge")
        folder = self.folder / "munge"
        folder.mkdir(mode=0o755)
        key = folder / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o400)
        for path in (folder, key):
            os.chown(path, account.pw_uid, account.pw_gid)

    def _write_slurm(self) -> None:
        for name in ("state", "spool"):
            (self.folder / name).mkdir()
        node = _node_line()
        # Leave some memory to the machine; jobs get DefMemPerCPU each.
        fields = dict(item.split("=", 1) for item in node.split())
        memory_mb = max(1024, int(fields.get("RealMemory", "4096")) - 512)
        gres = f" Gres=gpu:1g.10gb:{self.gpus}" if self.gpus else ""
        shape = " ".join(
            f"{k}={fields[k]}"
            for k in ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
            if k in fields
        )
        f = self.folder
        self.conf.write_text(
            f"""ClusterName=radttest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={self.ctld_port}
SlurmdPort={self.slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={self.munge_socket}
StateSaveLocation={f / "state"}
SlurmdSpoolDir={f / "spool"}
SlurmctldPidFile={f / "slurmctld.pid"}
SlurmdPidFile={f / "slurmd.pid"}
SlurmctldLogFile={f / "slurmctld.daemon.log"}
SlurmdLogFile={f / "slurmd.daemon.log"}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
GresTypes=gpu
ReturnToService=2
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
MinJobAge=600
KillWait=5
OverTimeLimit=0
InactiveLimit=0
MpiDefault=none
DefMemPerCPU=512
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName={self.node} NodeAddr=127.0.0.1 {shape} RealMemory={memory_mb}{gres} State=UNKNOWN
PartitionName={PARTITION} Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
"""
        )
        (f / "gres.conf").write_text(
            "".join(
                f"NodeName={self.node} Name=gpu Type=1g.10gb File={FAKE_GPU_FILES[i]}\n"
                for i in range(self.gpus)
            )
        )
        (f / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")

    # ------------------------------------------------------------------ readiness

    def command(self, argv: list[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster (not checked)."""
        return subprocess.run(
            [_program(argv[0]) or argv[0], *argv[1:]],
            env={**os.environ, **self.client_env()},
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )

    def ready_check(self, daemon: str) -> bool:
        if daemon == "munged":
            return self.munge_socket.exists()
        if daemon == "slurmctld":
            return self.command(["scontrol", "ping"]).stdout.count("UP") > 0
        state = self.command(["sinfo", "-h", "-N", "-o", "%T"]).stdout.strip()
        return state.startswith(("idle", "mixed", "allocated"))

    def idle(self) -> bool:
        """Whether no job is pending, running or completing."""
        done = self.command(["squeue", "-h", "-o", "%i"])
        return done.returncode == 0 and not done.stdout.strip()

    def wait_idle(self, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.idle():
            if time.monotonic() > deadline:
                raise AssertionError(f"jobs still in the queue:\n{self.command(['squeue']).stdout}")
            time.sleep(0.5)

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> SlurmCluster:
        self._write_munge()
        self._write_slurm()
        f = self.folder
        munge = f / "munge"
        daemons = [
            (
                _Munged,
                "munged",
                [
                    _program("munged"),
                    "--foreground",
                    f"--socket={self.munge_socket}",
                    f"--key-file={munge / 'munge.key'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={munge / 'munged.log'}",
                    f"--seed-file={munge / 'munged.seed'}",
                ],
                free_port(),
            ),
            (
                _Daemon,
                "slurmctld",
                [_program("slurmctld"), "-D", "-i", "-f", str(self.conf)],
                self.ctld_port,
            ),
            (
                _Daemon,
                "slurmd",
                [_program("slurmd"), "-D", "-f", str(self.conf), "-N", self.node],
                self.slurmd_port,
            ),
        ]
        for kind, name, argv, port in daemons:
            daemon = kind(self, name, argv, port)
            self.daemons.append(daemon)
            daemon.start(timeout_s=90)
        return self

    def cancel_all(self) -> None:
        """Cancel every job (between tests) and wait until the queue is empty."""
        self.command(["scancel", "--full", "--partition", PARTITION])
        self.wait_idle()

    def cleanup(self) -> None:
        """Stop the daemons (node first) and remove the folder."""
        try:
            for daemon in reversed(self.daemons):
                daemon.stop(grace_s=10)
                daemon.cleanup()
        finally:
            self.daemons.clear()
            shutil.rmtree(self.folder, ignore_errors=True)

    def log_tail(self) -> str:
        return "\n".join(d.log_tail(2000) for d in self.daemons)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.cleanup()
            raise

    def __exit__(self, *exc) -> None:
        self.cleanup()

"""Slurm's own commands, run for radT: ``sbatch``, ``scontrol show job``, ``sacct``, ``scancel``.

No scheduler of radT's own: job states are what Slurm says (``scontrol`` while the
controller still holds the job, ``sacct`` after that where the cluster keeps accounting).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from dataclasses import dataclass

from radt.errors import RadtError

log = logging.getLogger(__name__)

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
"""Slurm job states in which the workload still has to end."""
ENDINGS_KILLED = ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "CANCELLED", "PREEMPTED", "DEADLINE")
"""Slurm endings that stop a workload from outside: its runs end KILLED with the state named."""
WAITING_TURN = ("", "None", "Priority", "Resources", "JobArrayTaskLimit", "Dependency", "BeginTime")
"""Reasons of a pending job that only mean it waits its turn: not worth a line."""

_FIELD = re.compile(r"(\w+)=(\S*)")
TIMEOUT_S = 60.0


@dataclass
class TaskState:
    """One array task of a job as Slurm reports it."""

    array_id: str
    task: int
    state: str
    reason: str = ""
    exit_code: str = ""

    @property
    def job_id(self) -> str:
        """``<array job id>_<task>``, as squeue and scancel write it."""
        return f"{self.array_id}_{self.task}"

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def require(name: str) -> None:
    """Raise RadtError, in one line, when Slurm's command ``name`` is not on PATH."""
    if shutil.which(name) is None:
        raise RadtError(
            f"{name} not found: --slurm needs Slurm's commands on PATH (run on a login node)"
        )


def _run(argv: list[str], timeout_s: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    require(argv[0])
    try:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise RadtError(f"{argv[0]} did not answer within {timeout_s:g} s") from None


def _first_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def sbatch(argv: list[str]) -> str:
    """Submit with ``sbatch --parsable ARGV``; return the job id, or raise RadtError with
    sbatch's own message in one line."""
    done = _run(["sbatch", "--parsable", *argv])
    if done.returncode != 0:
        message = _first_line(done.stderr or done.stdout).removeprefix("sbatch: error: ")
        raise RadtError(f"sbatch refused the job: {message}")
    return done.stdout.strip().split(";")[0]


def test_only(argv: list[str]) -> None:
    """Ask sbatch whether it would take the job (``sbatch --test-only``), submitting nothing;
    raise RadtError with sbatch's own message in one line when it would not."""
    done = _run(["sbatch", "--test-only", *argv])
    if done.returncode != 0:
        message = _first_line(done.stderr or done.stdout).removeprefix("sbatch: error: ")
        message = message.removeprefix("allocation failure: ")
        raise RadtError(f"sbatch refused the job: {message}{_hint(message)}")


def _hint(message: str) -> str:
    """What to do about sbatch's refusal, for the refusals it words alike."""
    if "node configuration is not available" in message:
        return (
            " (no node of the partition has the GPUs, memory or CPUs asked for: compare "
            "slurm:'s gres, mem and cpus_per_task with `sinfo -o '%P %D %G %m %c'`)"
        )
    if "partition" in message.lower():
        return " (`sinfo -s` lists the partitions: set slurm: partition or --slurm-option)"
    return ""


def partition(name: str | None) -> dict[str, str]:
    """``scontrol show partition -o``'s fields of partition ``name`` (the default partition
    when None); empty when Slurm does not say."""
    done = _run(["scontrol", "show", "partition", "-o", *([name] if name else [])])
    if done.returncode != 0:
        return {}
    for line in done.stdout.splitlines():
        fields = dict(_FIELD.findall(line))
        if name or fields.get("Default") == "YES":
            return fields
    return {}


def minutes(text: str) -> float | None:
    """A Slurm time (``90``, ``1:30``, ``0:00:05``, ``2-00:00:00``, ``1-12``) in minutes; None
    for UNLIMITED, INFINITE, NONE or a form Slurm does not write."""
    text = text.strip()
    if not text or text.upper() in ("UNLIMITED", "INFINITE", "NONE"):
        return None
    days, dash, rest = text.partition("-")
    if not dash:
        days, rest = "0", text
    try:
        parts = [float(p) for p in rest.split(":")]
        day = float(days)
    except ValueError:
        return None
    if dash:  # days-hours[:minutes[:seconds]]
        parts += [0.0] * (3 - len(parts))
        hours, mins, secs = parts[:3]
    elif len(parts) == 1:  # minutes
        hours, mins, secs = 0.0, parts[0], 0.0
    elif len(parts) == 2:  # minutes:seconds
        hours, mins, secs = 0.0, parts[0], parts[1]
    else:
        hours, mins, secs = parts[:3]
    return day * 1440 + hours * 60 + mins + secs / 60


def scancel(job_ids: list[str]) -> None:
    """Cancel jobs (each running step gets SIGTERM, then SIGKILL after KillWait)."""
    if job_ids:
        done = _run(["scancel", *job_ids])
        if done.returncode != 0:
            log.warning("scancel: %s", _first_line(done.stderr))


def _tasks(text: str) -> list[int]:
    """``3``, ``2-5%2``, ``1,4-6`` → the task numbers."""
    numbers: list[int] = []
    for part in text.split("%")[0].split(","):
        first, _, last = part.partition("-")
        if first.isdigit():
            numbers += range(int(first), int(last or first) + 1)
    return numbers


def parse_scontrol(text: str) -> list[TaskState]:
    """``scontrol show job -o`` lines of array jobs, pending task ranges expanded."""
    found = []
    for line in text.splitlines():
        fields = dict(_FIELD.findall(line))
        if "ArrayJobId" not in fields or "JobState" not in fields:
            continue
        for task in _tasks(fields.get("ArrayTaskId", "")):
            found.append(
                TaskState(
                    fields["ArrayJobId"],
                    task,
                    fields["JobState"],
                    fields.get("Reason", ""),
                    fields.get("ExitCode", ""),
                )
            )
    return found


def parse_sacct(text: str) -> list[TaskState]:
    """``sacct -n -P -X -o JobID,State,ExitCode`` lines of array tasks."""
    found = []
    for line in text.splitlines():
        job, _, rest = line.partition("|")
        state, _, exit_code = rest.partition("|")
        array_id, underscore, task = job.partition("_")
        if underscore and task.isdigit():
            # "CANCELLED by 0" → CANCELLED
            found.append(TaskState(array_id, int(task), state.split()[0], "", exit_code))
    return found


def states(array_ids: list[str]) -> dict[tuple[str, int], TaskState]:
    """The state of every task of these array jobs that Slurm still knows."""
    found: dict[tuple[str, int], TaskState] = {}
    missing = []
    for array_id in dict.fromkeys(array_ids):
        done = _run(["scontrol", "show", "job", "-o", array_id])
        tasks = parse_scontrol(done.stdout) if done.returncode == 0 else []
        if not tasks:
            missing.append(array_id)
        for task in tasks:
            found[(task.array_id, task.task)] = task
    if missing and shutil.which("sacct"):
        done = _run(
            ["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(missing)]
        )
        if done.returncode == 0:  # without slurmdbd sacct fails: the runs in MLflow then say
            for task in parse_sacct(done.stdout):
                found[(task.array_id, task.task)] = task
    return found

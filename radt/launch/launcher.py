"""The run launcher: one training command becomes one complete MLflow run."""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import shlex
import signal
from dataclasses import dataclass, field

from radt.errors import RadtError
from radt.launch import group
from radt.launch.child import Child
from radt.launch.command import params_from_args, resolve_argv, script_args
from radt.launch.job import JobInputs
from radt.launch.registry import check_options, select
from radt.launch.session import RecordedRun, start_run
from radt.launch.supervise import Supervisor, ended
from radt.listener import Listener
from radt.restclient import LightClient
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    MLFLOW_SOURCE_NAME,
    MLFLOW_SOURCE_TYPE,
    MLFLOW_USER,
    RADT_COLLOCATION,
    RADT_COMMAND,
    RADT_DEVICES,
    RADT_LISTENERS,
    RADT_VERSION,
    Mode,
)
from radt.tracking import (
    connect,
    experiment_id,
    experiment_label,
    move_credentials,
    prepare_process_env,
    resolve_tracking_uri,
    sqlite_path,
    store_label,
)
from radt.words import count

log = logging.getLogger(__name__)

AUTOLOG_BOOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "autologging", "boot")
"""The folder of radT's ``sitecustomize`` that starts :func:`radt.autologging.autolog`."""


@dataclass
class LaunchOptions:
    """What the command line asked for."""

    command: list[str]
    experiment: str | None = None
    run_name: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    listeners: str | None = None
    listener_options: dict[str, dict[str, str]] = field(default_factory=dict)
    interval_s: float | None = None
    devices: list[str] = field(default_factory=list)
    max_time_min: float | None = None
    max_epochs: int | None = None
    autolog: bool = False
    """``--autolog``: count examples, steps and epochs without the script's help."""
    grace_s: float = 10.0
    window_s: float = 1.0
    tracking_uri: str | None = None
    send_timeout_s: float = 30.0
    job: JobInputs = field(default_factory=JobInputs)
    """``--job``, ``--job-ignore`` and the warm-up options."""
    group: str | None = None
    """``--group``: the distributed training this command is one node of (radt.launch.group)."""


def open_store(explicit_uri: str | None, light: bool = False):
    """Resolve the tracking URI, connect, and name the store in one line; with ``light``, a
    tracking server's client may make the calls before the command without MLflow
    (:func:`radt.tracking.connect`).

    Returns ``(client, uri, environment before radT changed it)``.
    """
    uri, embedded = resolve_tracking_uri(explicit_uri)
    uri, credentials = move_credentials(uri)
    os.environ.update(credentials)
    if "MLFLOW_TRACKING_URI" in os.environ:
        os.environ["MLFLOW_TRACKING_URI"] = uri
    original_env = dict(os.environ)
    prepare_process_env()
    database = sqlite_path(uri)
    new = database is not None and not database.exists()
    client = connect(uri, light)
    store = f"{store_label(uri)}{' (new)' if new else ''}"
    if embedded:
        log.info(f"MLFLOW_TRACKING_URI is not set; using the embedded store {store}")
    else:
        log.info(f"tracking store {store}")
    return client, uri, original_env


def run_tags(command: list[str], listeners: list[Listener], devices: list[str]) -> dict[str, str]:
    """The tags radT puts on the run of ``command``."""
    from radt import __version__

    return {
        MLFLOW_SOURCE_NAME: command[0],
        MLFLOW_SOURCE_TYPE: "LOCAL",
        MLFLOW_USER: getpass.getuser(),
        RADT_VERSION: __version__,
        RADT_COMMAND: shlex.join(command),
        RADT_COLLOCATION: Mode.NONE,
        RADT_LISTENERS: "+".join(listener.name for listener in listeners) or "none",
        RADT_DEVICES: ",".join(devices) or os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
    }


def run_params(command: list[str]) -> dict[str, str]:
    """The command's flags as params, plus the whole command line."""
    params = params_from_args(script_args(command))
    params[RADT_COMMAND] = shlex.join(command)[:6000]
    return params


def child_env(
    base: dict[str, str],
    uri: str,
    run: RecordedRun,
    devices: list[str],
    max_epochs: int | None = None,
    autolog: bool = False,
) -> dict[str, str]:
    """The command's environment: the user's, plus how to join the run (and, with
    ``autolog``, radT's bootstrap first on ``PYTHONPATH``: :mod:`radt.autologging`)."""
    env = dict(base)
    env.update(
        MLFLOW_TRACKING_URI=uri,
        MLFLOW_EXPERIMENT_ID=run.state.experiment_id,
        MLFLOW_RUN_ID=run.run_id,
        RADT_RUN_ID=run.run_id,
    )
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    if max_epochs:
        env["RADT_MAX_EPOCHS"] = str(max_epochs)
    env.pop("RADT_AUTOLOG", None)
    if autolog:
        env["RADT_AUTOLOG"] = "1"
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [AUTOLOG_BOOT, env.get("PYTHONPATH")]))
    if run.events is not None:
        env["RADT_EVENTS"] = run.events.variable
    else:
        env.pop("RADT_EVENTS", None)
    return env


def launch(options: LaunchOptions) -> int:
    """Run the command as an MLflow run; return the exit code radT should exit with."""
    argv = resolve_argv(options.command)
    listeners = select(options.listeners, options=options.listener_options)
    check_options(options.listener_options, [listener.name for listener in listeners])
    client, uri, original_env = open_store(options.tracking_uri, light=True)
    exp_id = experiment_id(client, options.experiment)
    experiment = experiment_label(client, exp_id)
    tags = {
        **run_tags(options.command, listeners, options.devices),
        **options.job.tags(),
        **options.tags,
    }
    node = group.resolve(options.group, options.command)
    wait_s = group.group_wait_s() if node else 0.0
    job_run_id = None
    if node and node.node_rank == 0:
        job_run_id = group.create_job_run(
            client, uri, exp_id, node, tags, options.run_name or node.name
        )
        log.info(f"group {node.name}: node {node.node} (rank 0) created job run {job_run_id}")
    try:
        run = RecordedRun(
            start_run(
                client,
                uri,
                exp_id,
                tags={**tags, **node.tags()} if node else tags,
                params=run_params(options.command),
                run_name=node.node if node else options.run_name,
                parent_run_id=job_run_id,
                window_s=options.window_s,
            ),
            listeners,
            interval_s=options.interval_s,
            devices=options.devices,
            listener_options=options.listener_options,
        )
    except BaseException:
        if job_run_id and node and node.node_rank == 0:
            with contextlib.suppress(Exception):
                client.set_terminated(job_run_id, "FAILED")
        raise
    log.info(f"run {run.info.run_name} ({run.run_id}) in experiment {experiment}")
    joining = None
    if node and node.node_rank > 0:
        joining = _join(client, uri, exp_id, node, run, wait_s)
    try:
        return _supervise(options, argv, uri, original_env, run, joining)
    finally:
        if joining is not None:
            job_run_id = joining.job_run_id
        if job_run_id:
            expected = node.nodes if node else None
            status = group.end_job_run(client, exp_id, job_run_id, expected, wait_s)
            if status:
                log.info(f"job run {job_run_id} of group {node.name if node else ''} {status}")


def _join(
    client, uri: str, exp_id: str, node: group.Group, run: RecordedRun, wait_s: float
) -> group.Joining:
    """A node of rank > 0 looks for its job run beside its command, and makes its node run a
    child of it once found (in the store at once, and in the run folder for ``radt sync``)."""
    log.info(f"group {node.name}: node {node.node} (rank {node.node_rank}) looks for its job run")

    def link(job_run_id: str) -> None:
        run.state.tags[MLFLOW_PARENT_RUN_ID] = job_run_id
        try:
            client.set_tag(run.run_id, MLFLOW_PARENT_RUN_ID, job_run_id)
        except Exception as exc:  # the run's end writes it with its other tags
            log.debug("parent tag of run %s not set yet: %s", run.run_id, exc)
        log.info(f"group {node.name}: node {node.node} joined job run {job_run_id}")

    joining = group.Joining(client, uri, exp_id, node, wait_s)
    joining.start(link)
    return joining


def _joined(run: RecordedRun, joining: group.Joining, give_up: bool) -> None:
    """Before the node run ends: wait for the look for its job run (with ``give_up``, a node
    stopped by a signal or a failure of radT's, only for the look under way); a node that found
    none keeps its run, without a job run, the reason in its note."""
    if joining.finish(give_up=give_up) is None:
        reason = str(joining.error)
        log.warning(f"{reason}; run {run.run_id} is kept without a job run")
        run.state.note = run.state.note or reason


def _supervise(
    options: LaunchOptions,
    argv: list[str],
    uri: str,
    original_env,
    run: RecordedRun,
    joining: group.Joining | None = None,
) -> int:
    """Run the command under ``run``'s record; return radT's exit code. ``joining``: a node's
    look for its job run, waited for before the run ends."""
    env = child_env(original_env, uri, run, options.devices, options.max_epochs, options.autolog)
    child = Child(argv, env, run.output_log)
    supervisor = Supervisor(
        [child],
        log.warning,
        options.grace_s,
        options.max_time_min,
        abandon=lambda signum: _leave_to_sync(run, child, signum),
    )
    with supervisor:  # its handlers stay while the record is finished
        try:
            child.argv = run.wrap(argv)
            child.env.update(run.command_env)
            try:
                child.start()
            except OSError as exc:
                raise RadtError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
            run.start_listeners(child.pid, child.started_s)
            if isinstance(run.client, LightClient):  # MLflow imported beside the command
                run.client.prepare()
            child.before_reap = run.stop_sampling  # their last samples see the whole command
            run.capture_environment()
            (returncode,) = supervisor.wait()
            outcome = supervisor.judge(returncode)
            run.keep_outcome(outcome.status, outcome.exit_code, child.ended_s, outcome.tags)
            supervisor.record_kept()
            run.stop_sampling()
        except BaseException as exc:
            if child.process is not None and child.poll() is None:
                child.signal_group(signal.SIGKILL)
                child.process.wait()
                child.poll()  # notes when it ended
            if isinstance(exc, KeyboardInterrupt):  # a signal before radT's own handlers were set
                stopped = ended("KILLED", 130, "radT received SIGINT", signal.SIGINT)
                run.state.tags.update(stopped.tags)
                _end(run, child, stopped.status, stopped.exit_code, options, joining)
            else:
                run.state.note = "radT failed while the command ran"
                _end(run, child, "FAILED", None, options, joining, give_up=True)
            raise
        _end(run, child, outcome.status, outcome.exit_code, options, joining)
    return outcome.exit_code


def _leave_to_sync(run: RecordedRun, child: Child, signum: int) -> None:
    """A second signal while the record is finished: end radT now, with every sample it
    received kept in the run folder."""
    child.signal_group(signal.SIGKILL)  # whatever the command left running

    def end() -> None:
        state = run.state
        log.info(
            f"received {signal.Signals(signum).name} again: stopped before the record of run "
            f"{run.run_id} was finished; `radt sync` will finish it ({state.status}, exit "
            f"code {state.exit_code}, kept in {run.folder.path})"
        )
        os._exit(128 + signum)

    run.leave(end)


def _end(
    run: RecordedRun,
    child: Child,
    status: str,
    exit_code,
    options: LaunchOptions,
    joining: group.Joining | None = None,
    give_up: bool = False,
) -> None:
    if child.process is not None:
        child.reap_group(grace_s=1.0)
        child.join_output()
        child.end_line()
    if joining is not None:
        _joined(run, joining, give_up or status == "KILLED")
    if run.close(status, exit_code, options.send_timeout_s, child.ended_s):
        log.info(
            f"run {run.run_id} {status} (exit code {exit_code}); "
            f"{count(run.recorder.received, 'sample')} recorded"
        )

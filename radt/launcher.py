"""The run launcher: one training command becomes one complete MLflow run."""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from radt import environment
from radt.child import Child
from radt.command import params_from_args, resolve_argv, script_args
from radt.decimate import Decimator
from radt.errors import RadtError
from radt.finalize import finish
from radt.listener import Listener, PolledListener, RunContext
from radt.recorder import Recorder
from radt.registry import select
from radt.runfolder import RunFolder, RunState
from radt.sampler import Sampler
from radt.spool import SpoolWriter
from radt.tracking import (
    connect,
    experiment_id,
    prepare_process_env,
    redact,
    resolve_tracking_uri,
)
from radt.writer import BatchWriter

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def say(message: str) -> None:
    """Print one line from radT on stderr."""
    print(f"radt: {message}", file=sys.stderr, flush=True)


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
    grace_s: float = 10.0
    window_s: float = 1.0
    tracking_uri: str | None = None
    send_timeout_s: float = 30.0


class _Stop:
    """Why and how the command is being stopped, set from signal handlers."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.signum: int | None = None
        self.kill_at: float | None = None


def launch(options: LaunchOptions) -> int:
    """Run the command as an MLflow run; return the exit code radT should exit with."""
    argv = resolve_argv(options.command)
    listeners = select(options.listeners)
    uri, embedded = resolve_tracking_uri(options.tracking_uri)
    if embedded:
        say(f"MLFLOW_TRACKING_URI is not set; using the embedded store {uri}")
    child_env = dict(os.environ)
    prepare_process_env()
    client = connect(uri)
    exp_id = experiment_id(client, options.experiment)
    run = _create_run(client, exp_id, options, listeners)
    run_id = run.info.run_id
    started_s = run.info.start_time / 1000
    state = RunState(
        run_id=run_id,
        experiment_id=exp_id,
        tracking_uri=uri,
        pid=os.getpid(),
        started_s=started_s,
        window_s=options.window_s,
    )
    folder = RunFolder.create(state)
    say(f"run {run.info.run_name} ({run_id}) in experiment {exp_id} at {redact(uri)}")
    writer = BatchWriter(client, run_id, say)
    recorder = Recorder(
        SpoolWriter(folder.spool), writer, Decimator(options.window_s, started_s), say
    )
    recorder.start()
    context = RunContext(
        run_id=run_id,
        pid=0,
        workdir=folder.path / "listeners",
        emit=recorder.emit,
        interval_s=options.interval_s,
        devices=tuple(options.devices),
        warn=say,
        attach=lambda path, artifact_dir: _attach(folder, path, artifact_dir),
        set_tag=state.tags.__setitem__,
    )
    context.workdir.mkdir(parents=True, exist_ok=True)
    for listener in listeners:
        argv = listener.wrap(argv, _context_for(context, listener, options))

    env = _child_env(child_env, uri, exp_id, run_id, options)
    child = Child(argv, env, folder.attachments / "radt" / "output.log")
    stop = _Stop()
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    running: list[tuple[Listener, Sampler | None]] = []
    try:
        _install_handlers(stop, child, options.grace_s)
        try:
            child.start()
        except OSError as exc:
            raise RadtError(f"cannot start {argv[0]}: {exc.strerror or exc}") from exc
        context.pid = child.pid
        running = _start_listeners(listeners, context, options)
        env_thread = threading.Thread(
            target=_capture_environment, args=(client, folder, state), daemon=True
        )
        env_thread.start()
        returncode = _wait(child, stop, options)
    except BaseException:
        if child.process is not None and child.poll() is None:
            child.signal_group(signal.SIGKILL)
            child.process.wait()
        state.status, state.exit_code = "FAILED", None
        state.note = "radT failed while the command ran"
        _finish(client, folder, state, recorder, running, child, options)
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    env_thread.join(timeout=60)
    exit_code = _judge(returncode, stop, state)
    for listener in listeners:
        try:
            listener.collect(_context_for(context, listener, options))
        except Exception as exc:
            say(f"listener {listener.name} could not collect its report: {exc}")
    _finish(client, folder, state, recorder, running, child, options)
    return exit_code


def _create_run(client, exp_id: str, options: LaunchOptions, listeners: list[Listener]):
    from mlflow.entities import Param

    from radt import __version__

    command_line = shlex.join(options.command)
    tags = {
        "mlflow.source.name": options.command[0],
        "mlflow.source.type": "LOCAL",
        "mlflow.user": getpass.getuser(),
        "radt.version": __version__,
        "radt.command": command_line,
        "radt.collocation": "none",
        "radt.listeners": "+".join(listener.name for listener in listeners) or "none",
        "radt.devices": ",".join(options.devices) or os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
        **options.tags,
    }
    run = client.create_run(exp_id, tags=tags, run_name=options.run_name)
    params = params_from_args(script_args(options.command))
    params["radt.command"] = command_line[:6000]
    client.log_batch(
        run.info.run_id, params=[Param(k, v) for k, v in params.items()], synchronous=True
    )
    return run


def _context_for(context: RunContext, listener: Listener, options: LaunchOptions) -> RunContext:
    return replace(context, options=dict(options.listener_options.get(listener.name, {})))


def _attach(folder: RunFolder, path: Path, artifact_dir: str) -> None:
    target = folder.attachments / artifact_dir
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, target / Path(path).name)


def _child_env(
    base: dict[str, str], uri: str, exp_id: str, run_id: str, options: LaunchOptions
) -> dict[str, str]:
    env = dict(base)
    env.update(
        MLFLOW_TRACKING_URI=uri,
        MLFLOW_EXPERIMENT_ID=exp_id,
        MLFLOW_RUN_ID=run_id,
        RADT_RUN_ID=run_id,
    )
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if options.devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(options.devices)
    return env


def _install_handlers(stop: _Stop, child: Child, grace_s: float) -> None:
    def on_signal(signum, _frame):
        if child.process is None:
            raise KeyboardInterrupt
        if stop.signum is not None:
            say("second interrupt: killing the command now")
            child.signal_group(signal.SIGKILL)
            return
        stop.signum = signum
        stop.reason = f"radT received {signal.Signals(signum).name}"
        stop.kill_at = time.monotonic() + grace_s
        say(f"{stop.reason}; stopping the command (again to kill it at once)")
        child.signal_group(signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM)

    for signum in STOP_SIGNALS:
        signal.signal(signum, on_signal)


def _start_listeners(
    listeners: list[Listener], context: RunContext, options: LaunchOptions
) -> list[tuple[Listener, Sampler | None]]:
    running: list[tuple[Listener, Sampler | None]] = []
    for listener in listeners:
        own = _context_for(context, listener, options)
        try:
            if isinstance(listener, PolledListener):
                sampler = Sampler(listener, own)
                sampler.start()
                running.append((listener, sampler))
            else:
                listener.start(own)
                running.append((listener, None))
        except Exception as exc:
            say(f"listener {listener.name} could not start ({exc}); the run goes on without it")
    return running


def _wait(child: Child, stop: _Stop, options: LaunchOptions) -> int:
    deadline = (
        time.monotonic() + options.max_time_min * 60 if options.max_time_min is not None else None
    )
    while True:
        returncode = child.poll()
        if returncode is not None:
            return returncode
        now = time.monotonic()
        if deadline is not None and now >= deadline and stop.reason is None:
            stop.reason = f"--max-time of {options.max_time_min:g} min reached"
            stop.kill_at = now + options.grace_s
            say(f"{stop.reason}; sending SIGTERM (SIGKILL in {options.grace_s:g} s)")
            child.signal_group(signal.SIGTERM)
        if stop.kill_at is not None and now >= stop.kill_at:
            say("the command did not stop within the grace period; sending SIGKILL")
            child.signal_group(signal.SIGKILL)
            stop.kill_at = None
        time.sleep(0.05)


def _judge(returncode: int, stop: _Stop, state: RunState) -> int:
    """Set the run's final status from how the command ended; return radT's exit code."""
    if stop.reason:
        state.tags["radt.stop_reason"] = stop.reason
    if stop.signum is not None:
        state.status = "KILLED"
        exit_code = 128 + stop.signum
    elif returncode < 0:
        state.status = "KILLED"
        exit_code = 128 - returncode
        state.tags.setdefault(
            "radt.stop_reason", f"the command died of {signal.Signals(-returncode).name}"
        )
    else:
        state.status = "FINISHED" if returncode == 0 else "FAILED"
        exit_code = returncode
    state.exit_code = exit_code
    state.tags["radt.exit_code"] = str(returncode)
    return exit_code


def _capture_environment(client, folder: RunFolder, state: RunState) -> None:
    from mlflow.entities import RunTag

    try:
        tags = environment.capture(folder.attachments)
    except Exception as exc:
        say(f"could not capture the environment: {exc}")
        return
    try:
        client.log_batch(
            state.run_id, tags=[RunTag(k, v) for k, v in tags.items()], synchronous=True
        )
    except Exception:
        state.tags.update(tags)


def _finish(
    client,
    folder: RunFolder,
    state: RunState,
    recorder: Recorder,
    running: list[tuple[Listener, Sampler | None]],
    child: Child,
    options: LaunchOptions,
) -> None:
    for listener, sampler in running:
        try:
            if sampler is not None:
                sampler.stop()
            else:
                listener.stop()
        except Exception as exc:
            say(f"listener {listener.name} failed to stop cleanly: {exc}")
    if child.process is not None:
        child.reap_group(grace_s=1.0)
        child.join_output()
    state.ended_s = time.time()
    unsent = recorder.close(options.send_timeout_s)
    if unsent == 0 and "metrics" in state.pending:
        state.pending.remove("metrics")
    folder.save(state)
    if finish(client, folder, say):
        say(
            f"run {state.run_id} {state.status} (exit code {state.exit_code}); "
            f"{recorder.received} samples recorded"
        )

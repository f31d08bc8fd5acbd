"""One MLflow run being recorded: its local folder, recorder, listeners and finish."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from radt.analysis.closing import summarize
from radt.errors import RadtError
from radt.launch import environment
from radt.listener import Listener, PolledListener, RunContext, WrappingListener
from radt.record.decimate import Decimator
from radt.record.events import EventReceiver
from radt.record.finalize import finish, log_tags, save_state
from radt.record.phases import PhaseWriter
from radt.record.recorder import Recorder
from radt.record.runfolder import RunFolder, RunState, check_runs_root, runs_root
from radt.record.sampler import Sampler
from radt.record.spool import SpoolWriter
from radt.record.writer import BatchWriter
from radt.restclient import LightClient, import_mlflow, log_params
from radt.slurm.jobenv import job_tags
from radt.tags import (
    MLFLOW_PARENT_RUN_ID,
    RADT_COMMAND_END_S,
    RADT_COMMAND_START_S,
    RADT_EXAMPLES_SOURCE,
    RADT_NOTE,
)
from radt.tracking import reason, store_error

log = logging.getLogger(__name__)


def _abandon(client, run_id: str, exc: BaseException) -> None:
    """End a run that radT could not start recording as FAILED, saying why (best effort)."""
    with contextlib.suppress(Exception):
        client.set_tag(run_id, RADT_NOTE, f"radT could not start recording: {reason(exc)}")
        client.set_terminated(run_id, "FAILED")


@dataclass
class RunParts:
    """What a recorded run is made of: its MLflow run, run folder, recorder and run-API channel."""

    client: Any
    info: Any
    """The MLflow run's ``RunInfo``."""
    state: RunState
    folder: RunFolder
    recorder: Recorder
    """Started: it takes samples from now on."""
    events: EventReceiver | None
    """The run-API channel of the run's command, bound before it starts; None without one."""


def start_run(
    client,
    tracking_uri: str,
    experiment_id: str,
    *,
    tags: dict[str, str],
    params: dict[str, str],
    run_name: str | None = None,
    parent_run_id: str | None = None,
    window_s: float = 1.0,
    warn: Callable[[str], None] = log.warning,
    run_api: bool = True,
) -> RunParts:
    """Create the MLflow run (with ``tags`` and ``params``), its run folder, its recorder
    (started) and, with ``run_api``, its run-API channel; a run that cannot be set up is
    ended FAILED with the reason, and the error says what to do."""
    tags = {**job_tags(), **tags}
    if parent_run_id:
        tags = {**tags, MLFLOW_PARENT_RUN_ID: parent_run_id}
    check_runs_root()
    try:
        run = client.create_run(experiment_id, tags=tags, run_name=run_name)
    except Exception as exc:
        raise store_error(tracking_uri, exc, "create a run") from exc
    run_id = run.info.run_id
    if params:
        try:
            log_params(client, run_id, params)
        except Exception as exc:
            _abandon(client, run_id, exc)
            raise store_error(tracking_uri, exc, "log the command's params") from exc
    started_s = run.info.start_time / 1000
    state = RunState(
        run_id=run_id,
        experiment_id=experiment_id,
        tracking_uri=tracking_uri,
        pid=os.getpid(),
        started_s=started_s,
        window_s=window_s,
    )
    try:
        folder = RunFolder.create(state, lock=True)
    except OSError as exc:
        _abandon(client, run_id, exc)
        raise RadtError(
            f"cannot create the run folder under {runs_root()} ({exc.strerror or exc}); "
            "set RADT_HOME to a writable folder with free space"
        ) from exc
    recorder = Recorder(
        SpoolWriter(folder.spool),
        BatchWriter(client, run_id, warn),
        Decimator(window_s, started_s),
        warn,
    )
    recorder.start()
    events = None
    if run_api:
        try:
            events = EventReceiver(run_id, recorder.emit, warn, PhaseWriter(folder.path, warn))
        except OSError as exc:
            warn(
                f"cannot open the run-API channel ({exc.strerror or exc}); "
                "radt.log_examples/log_epoch will not be recorded for this run"
            )
    return RunParts(client, run.info, state, folder, recorder, events)


class RecordedRun:
    """An MLflow run that radT records, from the parts :func:`start_run` made, with its
    listeners; completed by :meth:`close`."""

    def __init__(
        self,
        parts: RunParts,
        listeners: Sequence[Listener] = (),
        *,
        interval_s: float | None = None,
        devices: Sequence[str] = (),
        listener_options: dict[str, dict[str, str]] | None = None,
        warn: Callable[[str], None] = log.warning,
    ) -> None:
        self.client = parts.client
        self.info = parts.info
        self.run_id = parts.info.run_id
        self.state = parts.state
        self.folder = parts.folder
        self.recorder = parts.recorder
        self.events = parts.events
        self.listeners = list(listeners)
        self.listener_options = listener_options or {}
        self.warn = warn
        self.context = RunContext(
            run_id=self.run_id,
            pid=0,
            workdir=self.folder.path / "listeners",
            emit=self.recorder.emit,
            interval_s=interval_s,
            devices=tuple(devices),
            warn=warn,
            attach=self._attach,
            set_tag=self.state.tags.__setitem__,
        )
        self.context.workdir.mkdir(parents=True, exist_ok=True)
        self._running: list[tuple[Listener, Sampler | None]] = []
        self._sampling = threading.Lock()
        self._environment: threading.Thread | None = None
        self.command_start_s: float | None = None
        self._taking_in = False
        self._leave_then: Callable[[], None] | None = None

    @property
    def output_log(self) -> Path:
        """Where the command's output is kept; uploaded as ``radt/output.log``."""
        return self.folder.attachments / "radt" / "output.log"

    def context_for(self, listener: Listener) -> RunContext:
        """The run context with ``listener``'s own options."""
        return replace(self.context, options=dict(self.listener_options.get(listener.name, {})))

    def wrap(self, argv: list[str]) -> list[str]:
        """The command as the wrapping listeners (nsys, ncu, torch) change it.

        What they ask to add to the command's environment is then in :attr:`command_env`.
        """
        for listener in self.listeners:
            context = self.context_for(listener)
            argv = listener.wrap(argv, context)
            if isinstance(listener, WrappingListener):
                listener.declare_in_process(context)
        return argv

    @property
    def command_env(self) -> dict[str, str]:
        """Variables the listeners set for the command in :meth:`wrap`."""
        return dict(self.context.env)

    def start_listeners(self, pid: int, command_start_s: float | None = None) -> None:
        """Start every listener on the process tree rooted at ``pid``.

        ``command_start_s``: when the run's own command started (tag ``radt.command_start_s``).
        """
        if command_start_s is not None:
            self.command_start_s = command_start_s
            self.state.tags[RADT_COMMAND_START_S] = f"{command_start_s:.6f}"
        self.context.pid = pid
        for listener in self.listeners:
            own = self.context_for(listener)
            try:
                if isinstance(listener, PolledListener):
                    sampler = Sampler(listener, own)
                    sampler.start()
                    self._running.append((listener, sampler))
                else:
                    listener.start(own)
                    self._running.append((listener, None))
            except Exception as exc:
                self.warn(
                    f"listener {listener.name} could not start ({exc}); the run goes on without it"
                )

    def capture_environment(self) -> None:
        """Record the environment in the background (pip freeze takes a second)."""
        self._environment = threading.Thread(target=self._capture, daemon=True)
        self._environment.start()

    def stop_sampling(self) -> None:
        """Stop every running listener (at the end of the command it observes); safe twice.

        Thread-safe: a workload stops each run's listeners when its own command ends.
        Wrapping listeners collect their reports later, in :meth:`close`.
        """
        with self._sampling:
            for listener, sampler in self._running:
                try:
                    if sampler is not None:
                        sampler.stop()
                    else:
                        listener.stop()
                except Exception as exc:
                    self.warn(f"listener {listener.name} failed to stop cleanly: {exc}")
            self._running = []

    def _collect(self) -> None:
        for listener in self.listeners:
            try:
                listener.collect(self.context_for(listener))
            except Exception as exc:
                self.warn(f"listener {listener.name} could not collect its report: {exc}")

    def keep_outcome(
        self,
        status: str,
        exit_code: int | None,
        ended_s: float | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Keep how the command ended in the run folder at once, so that ``radt sync`` knows
        its status and exit code if radT stops before the record is finished; safe twice.

        ``ended_s``: when the command ended (default: now); ``tags``: the outcome's tags.
        """
        state = self.state
        if ended_s and self.command_start_s is not None:
            state.tags[RADT_COMMAND_END_S] = f"{ended_s:.6f}"
        state.tags.update(tags or {})
        state.status, state.exit_code = status, exit_code
        state.ended_s = ended_s or state.ended_s or time.time()
        save_state(self.folder, state, self.warn)

    def close(
        self,
        status: str,
        exit_code: int | None,
        send_timeout_s: float = 30.0,
        ended_s: float | None = None,
        keep_folder: bool = False,
    ) -> bool:
        """Stop recording and complete the run in MLflow; True when nothing is left to sync.

        ``ended_s`` is when the command ended, the run's end time in MLflow (default:
        now); stopping listeners and collecting their reports comes after it. With
        ``keep_folder`` a complete run's folder stays, locked, until :meth:`remove_folder`.
        """
        self.keep_outcome(status, exit_code, ended_s)
        self.stop_sampling()
        if isinstance(self.client, LightClient):  # its MLflow import, begun beside the command,
            with contextlib.suppress(Exception):  # done before the end (its calls then say why)
                self.client.full()
        if self.events is not None:
            with self._taking_in_last():
                self.events.close()  # every record the command sent, before the recorder stops
            if self.events.source:
                self.state.tags[RADT_EXAMPLES_SOURCE] = self.events.source
        self._collect()
        if self._environment is not None:
            self._environment.join(timeout=60)
        state = self.state
        with self._taking_in_last():
            self.recorder.stop()
        unsent = self.recorder.close(send_timeout_s)
        if unsent == 0 and "metrics" in state.pending:
            state.pending.remove("metrics")
        save_state(self.folder, state, self.warn)
        complete = False
        try:
            complete = finish(
                self.client, self.folder, self.warn, state, summarize=summarize, keep=keep_folder
            )
            return complete
        finally:
            if not (complete and keep_folder):
                self.folder.unlock()  # what is left is `radt sync`'s now

    def remove_folder(self) -> None:
        """Remove the folder of a run closed with ``keep_folder`` (its record is complete)."""
        self.folder.remove()

    def leave(self, end: Callable[[], None]) -> None:
        """Keep every sample and record radT has received in the run folder, then call
        ``end``, which ends radT and leaves the record to ``radt sync``.

        For a signal handler: where it interrupted radT taking in the last records (the
        run-API channel's, the recorder's last flush), ``end`` is called as soon as that is
        done, so nothing taken in half is lost.
        """
        if self._taking_in:
            self._leave_then = end
            return
        if self.events is not None:
            self.events.keep_received()
        self.recorder.keep_received()
        end()

    @contextlib.contextmanager
    def _taking_in_last(self):
        """A block that takes in the last records, which :meth:`leave` lets end first."""
        self._taking_in = True
        try:
            yield
        finally:
            self._taking_in = False
            if self._leave_then is not None:
                self.leave(self._leave_then)

    def _attach(self, path: Path, artifact_dir: str) -> None:
        target = self.folder.attachments / artifact_dir
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target / Path(path).name)

    def _capture(self) -> None:
        import_mlflow()
        try:
            tags = environment.capture(self.folder.attachments)
        except Exception as exc:
            self.warn(f"could not capture the environment: {exc}")
            return
        try:
            log_tags(self.client, self.run_id, tags)
        except Exception:
            self.state.tags.update(tags)

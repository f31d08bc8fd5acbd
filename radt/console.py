"""radT's own stdout and stderr: made safe against a terminal or pipe that goes away, and
where the library's log records become radT's one-line messages.

A closed terminal (EIO), a reader that exits (EPIPE) or a closed stream must never stop radT
or the training it records: once a write fails, that stream's descriptor is pointed at
``/dev/null``, so every later write (radT's lines, MLflow's logging, the interpreter's own
flush at exit) succeeds silently, and the run ends as it would have with a terminal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import TextIO


class _Resilient:
    """A text stream whose write and flush never raise; other attributes pass through."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):
                self._go_quiet()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self._go_quiet()

    def _go_quiet(self) -> None:
        self.gone = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, fd)  # what is still buffered now drains into /dev/null
            finally:
                os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard_std_streams() -> None:
    """Wrap ``sys.stdout`` and ``sys.stderr`` (real file streams only) in resilient ones."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None or isinstance(stream, _Resilient):
            continue
        try:
            stream.fileno()
        except (OSError, ValueError, AttributeError):
            continue  # not a file (a test's capture): nothing can go away under it
        setattr(sys, name, _Resilient(stream))


class _Lines(logging.Handler):
    """Writes each record as one ``radt: ...`` line on the ``sys.stderr`` of the moment."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"radt: {self.format(record)}\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


_LINES = _Lines(logging.INFO)


def install_lines() -> None:
    """Print radT's log records (``radt.*`` loggers, INFO and above) as radT's lines on stderr.

    For the processes radT runs (the command line, a script under radT): the records go to
    these lines only, not also to handlers the script gives the root logger. Without this call
    (a notebook) the library prints nothing.
    """
    logger = logging.getLogger("radt")
    if _LINES not in logger.handlers:
        logger.addHandler(_LINES)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def leave(code: int) -> int:
    """End radT's own process now with ``code``, without the interpreter's teardown, when this
    process is the ``radt`` command (``radt …``, ``python -m radt …``); else return ``code``.

    Called once a run is complete (or kept for ``radt sync``): freeing the modules and objects
    of MLflow and radT took 0.3–0.8 s after the run was already recorded. What a normal exit
    does first is done here too, in its order: threading's exit hooks run (they stop pools such
    as concurrent.futures' workers) and other non-daemon threads are waited for, ``atexit``
    handlers run, logging is shut down and both streams are flushed.
    """
    import threading
    from pathlib import Path

    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    script = Path(getattr(main, "__file__", None) or "").name
    if not ((spec is not None and spec.name == "radt.__main__") or script == "radt"):
        return code  # radT called from Python (a test, a notebook): a normal return
    # As the interpreter's own exit: threading's exit hooks first (they tell pools such as
    # concurrent.futures' workers to stop), then every other non-daemon thread is waited for.
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    else:  # pragma: no cover - CPython has threading._shutdown on every supported version
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
    import atexit

    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code if isinstance(code, int) else int(code is not None))  # as sys.exit(None)

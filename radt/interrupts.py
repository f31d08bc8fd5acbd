"""Signals held while a tracking store's database transaction runs on the main thread.

Python runs a signal's handler on the main thread between two bytecodes, wherever that thread
is. A handler that raises there (Ctrl-C's ``KeyboardInterrupt``, the plan runner's interrupt on
SIGTERM and SIGHUP) can land inside MLflow's database transaction, at its commit: the SQLite
connection then keeps the store's write lock, and the process's next write waits MLflow's busy
timeout (20 s) and fails with "database is locked", so a study stopped with Ctrl-C left its runs
RUNNING and ended with a traceback. :func:`hold_during_transactions` makes every transaction of
a database-backed store hold the stop signals and hand them to their handlers when it ends.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WRAPPED = "_radt_interrupts_held"


@contextlib.contextmanager
def held() -> Iterator[None]:
    """On the main thread, the stop signals whose handler is Python code are kept while the
    block runs and handed to that handler when it ends (in the order they came); ignored and
    default dispositions stay as they are. Elsewhere (no handler runs there): nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    handlers = {}
    for signum in HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if callable(handler):
            handlers[signum] = handler
            signal.signal(signum, lambda number, _frame: came.append(number))
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        for signum in came:
            handlers[signum](signum, None)


def hold_during_transactions(store) -> None:
    """Make each database transaction of ``store`` (an ``MlflowClient``'s tracking store:
    :func:`radt.tracking.client_store`) run :func:`held`; a store without MLflow's SQLAlchemy
    sessions (a server, files) is left as it is. Safe twice: MLflow keeps one store per URI."""
    sessions = getattr(store, "ManagedSessionMaker", None)
    if sessions is None or getattr(sessions, _WRAPPED, False):
        return

    @contextlib.contextmanager
    def held_session(*args, **kwargs):
        with held(), sessions(*args, **kwargs) as session:
            yield session

    setattr(held_session, _WRAPPED, True)
    store.ManagedSessionMaker = held_session

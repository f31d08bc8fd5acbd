"""Signals held while a store's database transaction runs (radt/interrupts.py)."""

from __future__ import annotations

import os
import signal
import time

import pytest
import sqlalchemy

from radt.interrupts import held
from radt.tracking import connect


def test_ctrl_c_at_a_commit_interrupts_after_it_and_the_store_stays_writable(tmp_path):
    # A real SIGINT sent at the commit of a transaction: without the hold, Python's
    # KeyboardInterrupt leaves the SQLite connection holding the write lock and the next
    # write waits 20 s, then fails ("database is locked").
    client = connect(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run("0").info.run_id
    engine = client._tracking_client.store.engine
    armed = [True]

    def ctrl_c_at_commit(_connection) -> None:
        if armed[0]:
            armed[0] = False
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # the handler runs here, inside the transaction

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sqlalchemy.event.listen(engine, "commit", ctrl_c_at_commit)
    try:
        with pytest.raises(KeyboardInterrupt):
            client.set_tag(run_id, "first", "1")
        assert not armed[0]
        began = time.monotonic()
        client.set_tag(run_id, "second", "2")
        waited_s = time.monotonic() - began
    finally:
        sqlalchemy.event.remove(engine, "commit", ctrl_c_at_commit)
        signal.signal(signal.SIGINT, previous)
    tags = client.get_run(run_id).data.tags
    assert tags["first"] == "1" and tags["second"] == "2"  # the interrupted write committed
    assert waited_s < 15  # not MLflow's 20 s busy timeout on a lock left held


def test_held_signals_reach_their_handlers_in_order_when_the_block_ends_and_nest():
    seen: list[int] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for signum in previous:
        signal.signal(signum, lambda number, _frame: seen.append(number))
    try:
        with held():
            with held():
                os.kill(os.getpid(), signal.SIGHUP)
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)
            assert seen == []
        assert seen == [signal.SIGHUP, signal.SIGTERM]
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

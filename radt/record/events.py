"""The run-API channel in radT's process: the script's datagrams become the run's samples.

:class:`EventReceiver` binds the socket named in the command's ``RADT_EVENTS`` before the
command starts, drains it from a thread while the command runs, and once more, fully, after it
ended (see :mod:`radt.run_api` for what the script sends). Each record becomes a sample with the
script's own timestamp:

- ``script/run/examples``: the run's cumulative examples, the sum over its processes of each
  one's latest count;
- ``script/run/epoch``: the epoch just finished, once per epoch (the first process to report it);
- ``script/run/window_start``: 1 where ``radt.start_window()`` was called.

``source`` records say who counted each process's examples (the script, ``radt --autolog``
or a framework callback); :attr:`EventReceiver.source` names it for the run's
``radt.examples_source`` tag.

Phase intervals (``radt.phase``) are no samples: they go to a
:class:`radt.record.phases.PhaseWriter`, when the run has one, and end up in the artifact
``radt/phases.parquet``. A malformed record is ignored; how many there were is said once, when
the channel closes, as are phase intervals a process reported it had to drop.
"""

from __future__ import annotations

import math
import select
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from urllib.parse import unquote

from radt.listener import Emit, Sample
from radt.record.phases import PhaseWriter
from radt.run_api import SOURCES
from radt.words import count

PROTOCOL = "radt1"
EXAMPLES_KEY = "script/run/examples"
EPOCH_KEY = "script/run/epoch"
WINDOW_KEY = "script/run/window_start"
MAX_DATAGRAM_B = 65_536
PHASE_COLUMNS = ["protocol", "pid", "start", "kind", "end", "name"]
POLL_S = 0.1


class EventReceiver:
    """The receiving end of one run's run-API channel; :meth:`close` it on every path."""

    def __init__(
        self,
        run_id: str,
        emit: Emit,
        warn: Callable[[str], None],
        phases: PhaseWriter | None = None,
    ) -> None:
        self.emit = emit
        self.warn = warn
        self.phases = phases
        self.records = 0
        self.malformed = 0
        self.phases_lost: dict[int, int] = {}
        """Phase intervals each process said it dropped (radT could not take them in time)."""
        self._names: dict[str, str] = {}
        self._counts: dict[int, int] = {}
        self._epochs: set[int] = set()
        self._sources: dict[int, int] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sock, self.name = _bind(run_id)
        self._thread = threading.Thread(target=self._loop, name="radt-events", daemon=True)
        self._thread.start()

    @property
    def variable(self) -> str:
        """The value of ``RADT_EVENTS`` for the command: ``@<abstract socket name>``."""
        return "@" + self.name

    @property
    def examples(self) -> int:
        """The run's cumulative examples so far (sum over its processes)."""
        return sum(self._counts.values())

    @property
    def source(self) -> str | None:
        """Who counted the run's examples (``script``, ``callback`` or ``autolog``; the
        highest-ranked where processes differ), or None when no process said."""
        ranks = [rank for pid, rank in self._sources.items() if self._counts.get(pid)]
        ranks = ranks or list(self._sources.values())
        return SOURCES[max(ranks)] if ranks else None

    def close(self) -> None:
        """Stop the thread, take every record still queued, close the socket; safe twice."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        try:
            self.drain()
        finally:
            self.sock.close()
            if self.phases is not None:
                self.phases.close()
        lost = sum(self.phases_lost.values())
        if lost:
            self.warn(
                f"{count(lost, 'phase interval')} not recorded: the script made them faster "
                "than radT could take them"
            )
        if self.malformed:
            self.warn(
                f"ignored {count(self.malformed, 'malformed run-API record')} on {self.variable} "
                "(something other than radt.log_examples/log_epoch/start_window wrote there)"
            )

    def drain(self) -> None:
        """Turn every queued datagram into samples, without waiting."""
        with self._lock:
            self._take_queued()
            if self.phases is not None:
                self.phases.tick()

    def keep_received(self, timeout_s: float = 10.0) -> None:
        """Take every queued record and write every phase interval held in memory, now: for
        a radT about to end before its record is finished (``radt sync`` finishes it).

        Waits for a drain in progress in another thread, ``timeout_s`` at most; safe after
        :meth:`close`. Never call it from a thread that is draining.
        """
        if not self._lock.acquire(timeout=timeout_s):
            return
        try:
            self._take_queued()
            if self.phases is not None:
                self.phases.flush()
        finally:
            self._lock.release()

    def _take_queued(self) -> None:
        samples: list[Sample] = []
        while True:
            try:
                data = self.sock.recv(MAX_DATAGRAM_B)
            except OSError:  # nothing queued (BlockingIOError), or the socket is closed
                break
            self._parse(data, samples)
        if samples:
            self.emit(samples)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self.sock], [], [], POLL_S)
            except (OSError, ValueError):
                return
            if ready:
                self.drain()

    def _parse(self, data: bytes, samples: list[Sample]) -> None:
        first = data[: data.find(b"\n")].split(b" ")
        if len(first) == 6 and first[3] == b"phase" and self._phase_batch(data):
            return
        try:
            text = data.decode("ascii")
        except UnicodeDecodeError:
            self.malformed += 1
            return
        for line in text.splitlines():
            sample = self._record(line)
            if sample is None:
                self.malformed += 1
                continue
            self.records += 1
            if sample is not _SKIP:
                samples.append(sample)

    def _record(self, line: str) -> Sample | object | None:
        parts = line.split()
        if len(parts) == 6 and parts[0] == PROTOCOL and parts[3] == "phase":
            return self._phase(parts)
        if len(parts) != 5 or parts[0] != PROTOCOL:
            return None
        _, pid_text, t_text, kind, value_text = parts
        try:
            pid, t, value = int(pid_text), float(t_text), float(value_text)
        except ValueError:
            return None
        if pid <= 0 or not math.isfinite(t) or t <= 0 or not math.isfinite(value):
            return None
        if kind == "examples":
            if value < 0 or value != int(value):
                return None
            self._counts[pid] = int(value)
            return Sample(t, EXAMPLES_KEY, float(self.examples))
        if kind == "epoch":
            if value != int(value):
                return None
            if int(value) in self._epochs:
                return _SKIP
            self._epochs.add(int(value))
            return Sample(t, EPOCH_KEY, value)
        if kind == "window":
            return Sample(t, WINDOW_KEY, 1.0)
        if kind == "source":
            if value != int(value) or not 0 < value < len(SOURCES):
                return None
            self._sources[pid] = int(value)
            self._counts.pop(pid, None)  # the new source's count replaces the old one's
            return _SKIP
        if kind == "phases_lost":
            if value < 0 or value != int(value):
                return None
            self.phases_lost[pid] = int(value)
            return _SKIP
        return None

    def _phase_batch(self, data: bytes) -> bool:
        """A datagram of phase records only (the script sends them apart), read at once.

        False, having taken nothing, when it is not all well-formed phase records: then the
        records are read one by one (and the bad ones counted).
        """
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.csv as csv

        types = {"protocol": pa.string(), "pid": pa.int64(), "start": pa.float64(),
                 "kind": pa.string(), "end": pa.float64(), "name": pa.string()}  # fmt: skip
        try:
            table = csv.read_csv(
                pa.py_buffer(data),
                read_options=csv.ReadOptions(column_names=PHASE_COLUMNS, use_threads=False),
                parse_options=csv.ParseOptions(delimiter=" ", quote_char=False),
                convert_options=csv.ConvertOptions(
                    column_types=types, strings_can_be_null=False, quoted_strings_can_be_null=False
                ),
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return False
        start, end, pid = table["start"], table["end"], table["pid"]
        good = pc.all(
            pc.and_kleene(
                pc.and_kleene(
                    pc.equal(table["protocol"], PROTOCOL), pc.equal(table["kind"], "phase")
                ),
                pc.and_kleene(
                    pc.and_kleene(pc.greater(pid, 0), pc.greater(start, 0.0)),
                    pc.and_kleene(pc.is_finite(end), pc.greater_equal(end, start)),
                ),
            )
        ).as_py()
        if not good or table.num_rows == 0:
            return False
        names = pc.dictionary_encode(table["name"]).combine_chunks()
        decoded = []
        for quoted in names.dictionary.to_pylist():
            name = self._names.get(quoted) or self._unquote(quoted)
            if name is None:
                return False
            decoded.append(name)
        self.records += table.num_rows
        if self.phases is not None:
            self.phases.add_batch(
                pid.combine_chunks(),
                pc.take(pa.array(decoded, pa.string()), names.indices),
                start.combine_chunks(),
                end.combine_chunks(),
            )
        return True

    def _unquote(self, quoted: str) -> str | None:
        """A phase name as sent (percent-encoded); None when it is not one."""
        try:
            name = unquote(quoted, errors="strict")
        except UnicodeDecodeError:
            return None
        if not name or not quoted.isascii():
            return None
        if len(self._names) < 10_000:
            self._names[quoted] = name
        return name

    def _phase(self, parts: list[str]) -> object | None:
        """``radt1 <pid> <start> phase <end> <name>``: one interval to the phase writer."""
        _, pid_text, start_text, _, end_text, quoted = parts
        try:
            pid, start, end = int(pid_text), float(start_text), float(end_text)
        except ValueError:
            return None
        finite = math.isfinite(start) and math.isfinite(end)
        if pid <= 0 or not finite or start <= 0 or end < start:
            return None
        name = self._names.get(quoted) or self._unquote(quoted)
        if name is None:
            return None
        if self.phases is not None:
            self.phases.add(pid, name, start, end)
        return _SKIP


_SKIP = object()


def _bind(run_id: str) -> tuple[socket.socket, str]:
    """A datagram socket bound in the abstract namespace (``radt-<run_id>``, else a unique one)."""
    if not sys.platform.startswith("linux"):
        raise OSError(f"abstract Unix sockets need Linux, not {sys.platform}")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
    try:
        try:
            name = f"radt-{run_id}"
            sock.bind("\0" + name)
        except OSError:  # taken (a second radT on the same run id?)
            name = f"radt-{run_id}-{uuid.uuid4().hex[:8]}"
            sock.bind("\0" + name)
    except BaseException:
        sock.close()
        raise
    return sock, name

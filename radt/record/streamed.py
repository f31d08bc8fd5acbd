"""The streamed listener shape: a long-lived tool process, parsed line by line."""

from __future__ import annotations

import subprocess
import threading
from abc import abstractmethod
from collections import deque

from radt.listener import Listener, RunContext, Sample


class StreamedListener(Listener):
    """Owns one tool process (``nvidia-smi -lms``, ``dcgmi dmon``) and always reaps it.

    Subclasses give the :meth:`command` and :meth:`parse` one line of its
    output into samples. A line that cannot be parsed (``parse`` raises) is
    skipped and counted: one warning at the first, the count at the end. A
    tool that exits on its own is reported with the end of its stderr.
    """

    stop_timeout_s: float = 3.0

    def __init__(self) -> None:
        self.process: subprocess.Popen[str] | None = None
        self.run: RunContext | None = None
        self._reader: threading.Thread | None = None
        self._errors: threading.Thread | None = None
        self._stderr: deque[str] = deque(maxlen=20)
        self._stopping = threading.Event()
        self.lines = 0
        self.skipped = 0
        self._last_line = ""
        self._skips_reported = 0

    @abstractmethod
    def command(self, run: RunContext) -> list[str]:
        """The tool's argv."""

    @abstractmethod
    def parse(self, line: str) -> list[Sample]:
        """Samples in one line of the tool's output (may keep state, e.g. a header)."""

    def start(self, run: RunContext) -> None:
        self.run = run
        self._stopping.clear()
        self.process = subprocess.Popen(
            self.command(run),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, name=f"radt-{self.name}", daemon=True)
        self._reader.start()
        self._errors = threading.Thread(target=self._drain_stderr, daemon=True)
        self._errors.start()

    def stop(self) -> None:
        self._stopping.set()
        process = self.process
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(self.stop_timeout_s)
        if self.skipped > self._skips_reported and self.run is not None:
            self._skips_reported = self.skipped
            self.run.warn(
                f"listener {self.name}: skipped {self.skipped} of {self.lines} output lines"
            )

    def _read(self) -> None:
        assert self.process is not None and self.process.stdout is not None
        assert self.run is not None
        warned = False
        for line in self.process.stdout:
            self.lines += 1
            self._last_line = line.strip() or self._last_line
            try:
                samples = self.parse(line.rstrip("\n"))
            except Exception as exc:
                self.skipped += 1
                if not warned:
                    warned = True
                    self.run.warn(
                        f"listener {self.name}: skipping unreadable output {line!r} ({exc})"
                    )
                continue
            if samples:
                self.run.emit(samples)
        code = self.process.wait()
        if self._errors is not None:
            self._errors.join(1.0)
        if not self._stopping.is_set():
            # nvidia-smi and dcgmi print their errors on stdout.
            tail = " | ".join(self._stderr) or self._last_line or "no output"
            self.run.warn(f"listener {self.name}: its tool exited with code {code} ({tail})")

    def _drain_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            if line.strip():
                self._stderr.append(line.strip())

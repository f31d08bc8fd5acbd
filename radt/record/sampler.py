"""The shared driver of polled listeners: one timer thread per listener."""

from __future__ import annotations

import threading
import time

from radt.listener import PolledListener, RunContext


class Sampler:
    """Calls ``poll()`` of one listener at its interval until stopped.

    The schedule is drift-free (ticks at start + k * interval; a slow poll
    skips ticks rather than piling up). A listener that raises is stopped
    alone with one warning; the run and other listeners go on.
    """

    def __init__(self, listener: PolledListener, run: RunContext) -> None:
        self.listener = listener
        self.run = run
        self.interval_s = listener.interval(run)
        self.failed: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"radt-{listener.name}", daemon=True
        )

    def start(self) -> None:
        """Start the listener and its polling thread."""
        self.listener.start(self.run)
        self._thread.start()

    def stop(self) -> None:
        """Stop polling (one last poll when the listener asks for it) and close the listener."""
        self._stop.set()
        self._thread.join()
        if self.listener.final_poll and self.failed is None:
            try:
                samples = self.listener.poll()
            except Exception as exc:
                self.run.warn(f"listener {self.listener.name} failed its last poll: {exc}")
            else:
                if samples:
                    self.run.emit(samples)
        try:
            self.listener.stop()
        except Exception as exc:
            self.run.warn(f"listener {self.listener.name} failed to stop cleanly: {exc}")

    def _loop(self) -> None:
        began = time.monotonic()
        tick = 0
        while True:
            try:
                samples = self.listener.poll()
            except Exception as exc:
                self.failed = f"{type(exc).__name__}: {exc}"
                self.run.warn(
                    f"listener {self.listener.name} stopped: {self.failed}; "
                    "training and the other listeners go on"
                )
                return
            if samples:
                self.run.emit(samples)
            tick = max(tick + 1, int((time.monotonic() - began) / self.interval_s) + 1)
            delay = began + tick * self.interval_s - time.monotonic()
            if self._stop.wait(max(delay, 0.0)):
                return

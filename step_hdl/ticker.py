"""A status line on the terminal while a long step runs in this process or a child (a Verilator build, an
RTL run): :class:`Ticker` rewrites one stderr line every second with what ``status()`` says, and only when
stderr is a terminal (never under ``--json``, in a log or a pipe)."""

from __future__ import annotations

import sys
import threading
import time


class Ticker:
    """``with Ticker(status, label):`` shows ``label: <status()> (<elapsed> s)`` from ``delay`` seconds on.

    ``status()`` is called from a helper thread; it must be cheap and must not raise (a failure shows as
    no status). Nothing is written when ``enabled`` is false or stderr is not a terminal; the line is
    cleared when the step ends, so the step's own output follows on a clean line.
    """

    def __init__(self, status, label: str, enabled: bool = True, delay: float = 2.0, every: float = 1.0,
                 stream=None):
        self.status, self.label, self.delay, self.every = status, label, delay, every
        self.stream = stream or sys.stderr
        self.enabled = enabled and self.stream.isatty()
        self._stop = threading.Event()
        self._thread = None
        self._shown = False
        self.t0 = 0.0

    def __enter__(self):
        self.t0 = time.monotonic()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            try:
                what = self.status()
            except Exception:       # a status that cannot be read now: the elapsed time alone
                what = ""
            elapsed = time.monotonic() - self.t0
            line = f"{self.label}: {what + ' ' if what else ''}({elapsed:.0f} s)"
            self.stream.write("\r\x1b[2K" + line[:200])
            self.stream.flush()
            self._shown = True
            self._stop.wait(self.every)

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
        return False

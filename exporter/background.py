"""A daemon thread with a stop event: the shape shared by the poller and its helper threads.

Daemon, because a thread stuck inside a hung NVML call must never keep the process from exiting.
"""

from __future__ import annotations

import threading
import time


class BackgroundThread:
    thread_name = "background"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        raise NotImplementedError


class PeriodicSampler(BackgroundThread):
    """A helper thread that runs `sample_once()` every interval and reports, node_exporter-style,
    whether its last round succeeded and how long it took."""

    def __init__(self, interval_seconds: float) -> None:
        super().__init__()
        self._interval = interval_seconds
        self.last_success = True
        self.last_duration_seconds = 0.0

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.sample_once()
            self.last_duration_seconds = time.monotonic() - started
            self._stop.wait(max(0.0, self._interval - self.last_duration_seconds))

    def sample_once(self) -> None:
        raise NotImplementedError

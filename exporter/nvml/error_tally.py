"""Thread-safe count of NVML errors by function and error name, for the self-metrics."""

from __future__ import annotations

import threading
from collections import Counter


class ErrorTally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, str]] = Counter()

    def record(self, function: str, error: str) -> None:
        with self._lock:
            self._counts[(function, error)] += 1

    def snapshot(self) -> tuple[tuple[tuple[str, str], int], ...]:
        with self._lock:
            return tuple(sorted(self._counts.items()))

"""Thread-safe counts by a tuple of label values, for the self-metrics: NVML errors by function and
error name, readings left out by GPU, field and reason."""

from __future__ import annotations

import threading
from collections import Counter


class ErrorTally:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[tuple[str, ...]] = Counter()

    def record(self, *key: str) -> None:
        with self._lock:
            self._counts[key] += 1

    def snapshot(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        with self._lock:
            return tuple(sorted(self._counts.items()))

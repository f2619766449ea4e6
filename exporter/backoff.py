"""Exponential backoff with jitter, shared by everything that retries an outside dependency
(NVML init, the XID event set, the kubelet socket, the Kubernetes API).

Jitter matters at fleet scale: after a kubelet or API-server restart, thousands of exporters must
not retry in the same instant.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass
class Backoff:
    initial_seconds: float
    max_seconds: float
    jitter: float = 0.2
    failures: int = 0

    def failed(self) -> float:
        """Record a failure and return how long to wait before the next attempt."""
        self.failures += 1
        delay = min(self.max_seconds, self.initial_seconds * 2 ** (self.failures - 1))
        return delay * random.uniform(1 - self.jitter, 1 + self.jitter)

    def succeeded(self) -> None:
        self.failures = 0

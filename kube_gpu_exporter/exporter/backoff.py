"""Exponential backoff with jitter, shared by everything that retries an outside dependency
(NVML init, the XID event set, the kubelet socket, the Kubernetes API).

Jitter matters at fleet scale: after a kubelet or API-server restart, thousands of exporters must
not retry in the same instant.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_seconds: float
    max_seconds: float
    jitter: float = 0.2
    failures: int = 0
    # Where the jitter is drawn from: a seeded random.Random(...).uniform makes it repeatable.
    uniform: Callable[[float, float], float] = field(default=random.uniform, compare=False)

    def failed(self) -> float:
        """Record a failure and return how long to wait before the next attempt."""
        self.failures += 1
        delay = min(self.max_seconds, self.initial_seconds * 2 ** (self.failures - 1))
        return delay * self.uniform(1 - self.jitter, 1 + self.jitter)

    def succeeded(self) -> None:
        self.failures = 0

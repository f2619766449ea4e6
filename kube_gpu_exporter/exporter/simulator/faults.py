"""Call-level fault injection for the simulated NVML: slow calls, hanging calls, forced errors.

A rule matches an NVML function name (or "*") and optionally one GPU index. Hung calls block on
an event that `release_all()` sets, so tests and shutdown can always unstick them.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pynvml


@dataclass
class _Rule:
    function: str
    gpu: int | None
    delay_s: float = 0.0
    hang: bool = False
    error_code: int | None = None
    remaining: int | None = None  # None: forever
    released: threading.Event = field(default_factory=threading.Event)

    def matches(self, function: str, gpu: int | None) -> bool:
        return (self.function in ("*", function)) and (self.gpu is None or self.gpu == gpu)


class CallFaults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[_Rule] = []
        self.hung_calls = 0

    def slow(self, function: str, seconds: float, gpu: int | None = None) -> None:
        self._add(_Rule(function, gpu, delay_s=seconds))

    def hang(self, function: str, gpu: int | None = None) -> None:
        """Make matching calls block until release_all() (or clear()) is called."""
        self._add(_Rule(function, gpu, hang=True))

    def fail(
        self, function: str, error_code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        self._add(_Rule(function, gpu, error_code=error_code, remaining=times))

    def release_all(self) -> None:
        with self._lock:
            for rule in self._rules:
                if rule.hang:
                    rule.released.set()
            self._rules = [r for r in self._rules if not r.hang]

    def clear(self) -> None:
        self.release_all()
        with self._lock:
            self._rules.clear()

    def _add(self, rule: _Rule) -> None:
        with self._lock:
            self._rules.append(rule)

    def before_call(self, function: str, gpu: int | None) -> None:
        with self._lock:
            rules = [r for r in self._rules if r.matches(function, gpu)]
            for rule in rules:
                if rule.remaining is not None:
                    rule.remaining -= 1
            self._rules = [r for r in self._rules if r.remaining is None or r.remaining >= 0]
        for rule in rules:
            if rule.delay_s:
                time.sleep(rule.delay_s)
            if rule.hang:
                with self._lock:
                    self.hung_calls += 1
                rule.released.wait()
            if rule.error_code is not None and (rule.remaining is None or rule.remaining >= 0):
                raise pynvml.NVMLError(rule.error_code)

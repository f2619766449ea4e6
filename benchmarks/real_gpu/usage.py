"""A process's CPU (user and system apart) and memory over a window, from /proc samples
(benchmarks/processes.py, proc_sample).

User and system are told apart because on a real GPU most of an exporter's CPU can be kernel
time spent inside NVML calls (the total energy counter alone kept a CPU 4 ms in the kernel per
read on an H200), which a user-space profile never shows.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.processes import ProcSample


@dataclass(frozen=True, slots=True)
class ProcessUsage:
    user_seconds: float
    system_seconds: float
    wall_seconds: float
    rss_bytes: list[int]
    peak_rss_bytes: int

    @property
    def cpu_seconds(self) -> float:
        return self.user_seconds + self.system_seconds

    def per_hour(self, seconds: float) -> float:
        return seconds / self.wall_seconds * 3600 if self.wall_seconds > 0 else 0.0

    @property
    def cpu_seconds_per_hour(self) -> float:
        return self.per_hour(self.cpu_seconds)

    @property
    def user_seconds_per_hour(self) -> float:
        return self.per_hour(self.user_seconds)

    @property
    def system_seconds_per_hour(self) -> float:
        return self.per_hour(self.system_seconds)

    @property
    def steady_rss_mb(self) -> float:
        """Median RSS: the start-up ramp and a scrape's brief peak do not move it."""
        return statistics.median(self.rss_bytes) / 1e6 if self.rss_bytes else 0.0


def usage_between(readings: Sequence[ProcSample], wall_seconds: float) -> ProcessUsage | None:
    """CPU from the first reading to the last, RSS over all of them; None under two."""
    if len(readings) < 2:
        return None
    first, last = readings[0], readings[-1]
    return ProcessUsage(
        user_seconds=last.user_seconds - first.user_seconds,
        system_seconds=last.system_seconds - first.system_seconds,
        wall_seconds=wall_seconds,
        rss_bytes=[r.rss_bytes for r in readings],
        peak_rss_bytes=max(r.peak_rss_bytes for r in readings),
    )


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """ours / theirs, None where either is missing or theirs is not positive."""
    if ours is None or theirs is None or theirs <= 0:
        return None
    return ours / theirs

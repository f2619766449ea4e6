"""A process's CPU (user and system apart) and memory over a window, read from /proc.

User and system are told apart because on a real GPU most of an exporter's CPU can be kernel
time spent inside NVML calls (the total energy counter alone kept a CPU 4 ms in the kernel per
read on an H200), which a user-space profile never shows.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class ProcReading:
    user_seconds: float
    system_seconds: float
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the highest RSS since the process started


def _status_kib(status: str, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+)\s+kB", status, re.M)
    if match is None:
        raise ValueError(f"/proc status has no {key}")
    return int(match.group(1))


def read_proc(pid: int, proc: Path = PROC) -> ProcReading:
    """utime and stime, fields 14 and 15 of /proc/PID/stat (clock ticks, all threads), and the
    RSS. The command name (field 2) may hold spaces and parentheses: fields are counted from
    after its last ')'."""
    stat = (proc / str(pid) / "stat").read_text()
    after_name = stat.rsplit(")", 1)[1].split()
    # after_name[0] is field 3 (state), so field N is after_name[N - 3].
    utime, stime = int(after_name[14 - 3]), int(after_name[15 - 3])
    status = (proc / str(pid) / "status").read_text()
    return ProcReading(
        user_seconds=utime / CLOCK_TICKS,
        system_seconds=stime / CLOCK_TICKS,
        rss_bytes=_status_kib(status, "VmRSS") * 1024,
        peak_rss_bytes=_status_kib(status, "VmHWM") * 1024,
    )


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


def usage_between(readings: Sequence[ProcReading], wall_seconds: float) -> ProcessUsage | None:
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

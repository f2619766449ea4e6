"""The total energy counter between two NVML reads of it, carried forward by board power.

One read of NVML's total energy counter costs 4 ms of kernel CPU on an H200, more than the rest
of a sweep, while board power costs 1.6 µs and is read every sweep anyway (docs/nvml.md,
'Timing'). So the counter is read from NVML at most every `read_interval` and, in between, the
exported value moves on by board power integrated over each sweep (trapezoids; NVML's board power
is a 1 s average on Ampere and newer, so a 1 s poll covers every second). Each NVML read puts the
estimate back on the counter itself, and remembers how far the estimate had drifted.

The read interval follows that drift, per GPU. Just before a read, the estimate is off by about
the drift times what the board drew since the last read: at a drift of d and reads every t
seconds, d * t seconds of the board's own draw. The next read comes when that error would reach
ERROR_BUDGET_SECONDS (1 % of an hour's draw), no sooner than `read_interval` and no later than
LONGEST_STRETCH times it, and at most twice as late as the last, so a workload that turns bursty
is caught within the longest interval and a steady one is read rarely. A read that could not
measure the drift (the first, a wanted one) starts again from `read_interval`.

Power is integrated at most at the board's ceiling (its maximum power limit, power_bounds.py), so
the estimate never runs ahead of NVML's counter by more than the board could draw since the last
read; the reader has already left out readings the board cannot produce.

The exported counter never goes backwards while NVML's does not: Prometheus takes any decrease
for a restart and counts the whole new value as an increase. Nor does it stand still while the
GPU draws power: where the estimate ran ahead of the counter, a read keeps the exported value
where it was and carries the difference (`ahead_mj`) on top of NVML's counter from then on, so
the exported counter moves at the counter's own pace. That difference shrinks whenever a later
estimate falls short of the counter, which it absorbs before the exported value jumps. NVML's
counter falling below its previous read is a real restart (a driver reload), and the exported
counter restarts with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

# The longest stretch without a power sample that the estimate bridges with a trapezoid between
# the samples on either side; after a longer one the counter waits for NVML's next read.
MAX_GAP_SECONDS = 15.0
# The estimate's error allowed at a read, in seconds of the board's own draw: 1 % of an hour.
ERROR_BUDGET_SECONDS = 36.0
# The longest read interval, as a multiple of the shortest (--collector.field-interval
# energy-counter=, 60 s by default: 10 minutes).
LONGEST_STRETCH = 10.0


@dataclass(slots=True)
class _Track:
    # NVML's counter at its last read, and when that was.
    counter_mj: int
    read_at: float
    # Board power integrated since that read.
    since_read_mj: float = 0.0
    # The last power sample (None: the last sweep had none) and when it was taken.
    power_mw: float | None = None
    sampled_at: float = 0.0
    # What the exported counter stands above NVML's counter at its last read: estimates that
    # ran ahead and were already published, carried rather than waited out.
    ahead_mj: int = 0
    exported_mj: int = 0
    # Estimate minus counter, over the counter's increase, at the last read that could tell.
    drift: float | None = None
    # A read is wanted at the next chance (the GPU was reconfigured or came back).
    read_wanted: bool = False
    # Seconds from the last read to the next, as the drift at the reads allows.
    interval: float = 0.0


class EnergyEstimates:
    """Per GPU: the exported energy counter, and whether NVML's own is due to be read."""

    def __init__(
        self,
        read_interval_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        max_gap_seconds: float = MAX_GAP_SECONDS,
    ):
        self._interval = read_interval_seconds
        self._clock = clock
        self._max_gap = max_gap_seconds
        self._tracks: dict[str, _Track] = {}
        self._lock = threading.Lock()

    def read_due(self, uuid: str) -> bool:
        """Whether this sweep should read NVML's counter for `uuid` (if it reads slow fields)."""
        with self._lock:
            track = self._tracks.get(uuid)
        if track is None or track.read_wanted or track.power_mw is None:
            # Without a power sample to carry the counter, only a read moves it.
            return True
        now = self._clock()
        return now - track.sampled_at > self._max_gap or now - track.read_at >= track.interval

    def update(
        self,
        uuid: str,
        power_mw: float | None,
        counter_mj: int | None,
        ceiling_mw: float | None = None,
    ) -> int | None:
        """The counter to export after a sweep that sampled `power_mw` in this very sweep (None:
        it did not) and, if it read NVML's counter, got `counter_mj`; None until the counter has
        been read once. Power above `ceiling_mw`, the most the board can draw, counts as the
        ceiling."""
        now = self._clock()
        if power_mw is not None and ceiling_mw is not None:
            power_mw = min(power_mw, ceiling_mw)
        with self._lock:
            track = self._tracks.get(uuid)
            if (
                track is not None
                and track.power_mw is not None
                and power_mw is not None
                and 0 < now - track.sampled_at <= self._max_gap
            ):
                # Across a missing sample or two too: board power is a 1 s average that moves
                # smoothly, so the trapezoid over the gap is closer than leaving it out.
                average = (power_mw + track.power_mw) / 2
                track.since_read_mj += average * (now - track.sampled_at)
            if counter_mj is not None:
                # The read covers everything up to now, the integral just added included.
                track = self._read(uuid, track, counter_mj, now)
            if track is None:
                return None
            if power_mw is not None:
                track.power_mw, track.sampled_at = float(power_mw), now
            elif counter_mj is not None:
                # The read covered the time up to now; the last sample stands as the next
                # trapezoid's left edge.
                track.sampled_at = now
            elif now - track.sampled_at > self._max_gap:
                # Too long without power to bridge: only the next read moves the counter on.
                track.power_mw = None
            estimate = track.counter_mj + track.ahead_mj + int(track.since_read_mj)
            track.exported_mj = max(track.exported_mj, estimate)
            return track.exported_mj

    def _read(self, uuid: str, track: _Track | None, counter_mj: int, now: float) -> _Track:
        if track is None or counter_mj < track.counter_mj:
            # First read, or NVML's counter restarted: so does ours.
            fresh = _Track(counter_mj, now, exported_mj=counter_mj, interval=self._interval)
            self._tracks[uuid] = fresh
            return fresh
        increase = counter_mj - track.counter_mj
        if increase > 0 and track.power_mw is not None and not track.read_wanted:
            track.drift = (track.since_read_mj - increase) / increase
            track.interval = self._next_interval(track.interval, track.drift)
        else:
            track.interval = self._interval
        # The exported value stays where it is if it is ahead of the counter (never falling),
        # and moves on from there with the counter (never waiting for it to catch up).
        track.ahead_mj = max(0, track.exported_mj - counter_mj)
        track.counter_mj, track.read_at, track.since_read_mj = counter_mj, now, 0.0
        track.read_wanted = False
        return track

    def _next_interval(self, last: float, drift: float) -> float:
        fits = ERROR_BUDGET_SECONDS / max(abs(drift), 1e-9)
        return max(self._interval, min(self._interval * LONGEST_STRETCH, 2 * last, fits))

    def interval(self, uuid: str) -> float | None:
        """Seconds between the last read of `uuid`'s counter and the next (None: not read yet)."""
        with self._lock:
            track = self._tracks.get(uuid)
            return None if track is None else track.interval

    def ahead(self, uuid: str) -> int | None:
        """How far (mJ) the exported counter stood above NVML's at the last read."""
        with self._lock:
            track = self._tracks.get(uuid)
            return None if track is None else track.ahead_mj

    def drift(self, uuid: str) -> float | None:
        """How far the estimate was from NVML's counter at the last read, as a fraction of what
        the counter moved since the read before (+0.01: the estimate ran 1 % ahead)."""
        with self._lock:
            track = self._tracks.get(uuid)
            return None if track is None else track.drift

    def want_read(self, uuid: str | None) -> None:
        """Read NVML's counter at the next chance (for every GPU with None): the GPU was
        reconfigured, lost, or the driver reloaded. The exported value stays as a floor unless
        the read shows a restart."""
        with self._lock:
            tracks = self._tracks.values() if uuid is None else [self._tracks.get(uuid)]
            for track in tracks:
                if track is not None:
                    track.read_wanted = True

    def retain(self, uuids: set[str]) -> None:
        with self._lock:
            for uuid in self._tracks.keys() - uuids:
                del self._tracks[uuid]

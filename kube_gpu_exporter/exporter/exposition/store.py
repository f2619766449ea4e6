"""Holds the current exposition as ready-to-send bytes, plain and gzip-compressed.

The body is compressed once per snapshot. The per-scrape tail is appended to a copy of the
compressor's state (`zlib.compressobj().copy()`), so a gzip scrape costs a few microseconds of
compression for the tail only and still yields a single, ordinary gzip member.

A published snapshot is joined with its pods (the `attributed` callable,
kube_gpu_exporter/exporter/attribution/) and rendered on the poller thread when a scrape is due
before the next sweep (scrape_schedule.py), which is how a scrape usually finds its bytes ready; one
that nobody will read is kept unrendered, and a scrape that comes for it anyway renders it then,
once.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kube_gpu_exporter.exporter.attribution.devices import without_pods
from kube_gpu_exporter.exporter.attribution.model import AttributedNode
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.scrape_schedule import ScrapeSchedule
from kube_gpu_exporter.exporter.snapshot import ConnectionCounts, NodeSnapshot

log = logging.getLogger(__name__)
# zlib's fast levels (1-3) cost a third of level 6 on an exposition and compress it within 10 %
# (benchmarks/overhead.py measures both); 3 is the smallest of them.
GZIP_LEVEL = 3
_GZIP_WBITS = 31
# A scrape due before the next snapshot is published reads this one, so it is rendered now; the
# next snapshot comes one interval on, as sweeps start on a fixed period. The slack is for the
# jitter of that period and of Prometheus' own, which is milliseconds. A scrape predicted later
# than that is left to the next snapshot: rendering this one as well would be a render nobody
# reads (with a tenth of an interval as slack, that was one sweep in three at a 5 s poll when an
# HA pair's scrapes fell just after a sweep). Erring that way costs no CPU, only latency: a
# scrape that the slack misses renders on the spot, off the event loop.
_DUE_SLACK_SECONDS = 0.05
# The per-scrape tail reports the snapshot's age; a 100 ms resolution lets scrapes arriving
# together share one response instead of each rebuilding it.
TAIL_RESOLUTION_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class Exposition:
    snapshot: NodeSnapshot
    body: bytes
    gzip_head: bytes
    compressor: Any  # zlib compress object positioned after the body; only ever copied
    render_seconds: float
    # (gzip?) -> (time slot, response bytes); only touched from the event loop.
    _responses: dict[bool, tuple[int, bytes]] = field(default_factory=dict)
    # What the snapshot's age is read on: the clock its `monotonic_at` was stamped on.
    clock: Callable[[], float] = time.monotonic

    def response(
        self,
        gzip: bool,
        stale_after_seconds: float,
        connections: Callable[[], ConnectionCounts] | None = None,
    ) -> bytes:
        """The full response body, rebuilt at most once per TAIL_RESOLUTION_SECONDS."""
        slot = int(self.clock() / TAIL_RESOLUTION_SECONDS)
        cached = self._responses.get(gzip)
        if cached is not None and cached[0] == slot:
            return cached[1]
        tail = self.tail(stale_after_seconds, connections() if connections else None)
        body = self.gzipped(tail) if gzip else self.plain(tail)
        self._responses[gzip] = (slot, body)
        return body

    def tail(
        self, stale_after_seconds: float, connections: ConnectionCounts | None = None
    ) -> bytes:
        age = max(0.0, self.clock() - self.snapshot.monotonic_at)
        stale = age > stale_after_seconds
        return Renderer.render_tail(age, stale, self.render_seconds, connections).encode()

    def plain(self, tail: bytes) -> bytes:
        return self.body + tail

    def gzipped(self, tail: bytes) -> bytes:
        compressor = self.compressor.copy()
        return self.gzip_head + compressor.compress(tail) + compressor.flush()


# Joins a snapshot with its pods (kube_gpu_exporter.exporter.attribution.join, wired in by
# kube_gpu_exporter/exporter/app.py, which knows the sources).
Attributed = Callable[[NodeSnapshot], AttributedNode]


def build_exposition(
    snapshot: NodeSnapshot,
    renderer: Renderer,
    attributed: Attributed,
    clock: Callable[[], float] = time.monotonic,
) -> Exposition:
    """`snapshot` joined and rendered; the join is timed with the render, as the per-snapshot
    cost that the render duration reports. `clock` is what the snapshot's age is read on."""
    started = time.perf_counter()
    try:
        node = attributed(snapshot)
    except Exception as exc:
        # A join that fails gives the device series without pods (counted, never the whole body).
        node = without_pods(snapshot, renderer.labels, exc)
    # Label values are made encodable where they are escaped; "replace" is the last resort that
    # keeps one unforeseen string from failing every scrape.
    body = renderer.render_body(node).encode("utf-8", "replace")
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    head = compressor.compress(body) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return Exposition(snapshot, body, head, compressor, time.perf_counter() - started, clock=clock)


class ExpositionStore:
    """The latest snapshot and its exposition. Both are replaced by reference, so readers never
    see a half-built one.

    `clock` is what a snapshot's age (staleness, and /healthz's limit) is read on, so it must be
    the clock snapshots are stamped on: the system's, as the poller stamps them. A test that
    steps time stamps the snapshots it publishes on its own clock and hands that clock here."""

    def __init__(
        self,
        renderer: Renderer,
        attributed: Attributed,
        *,
        interval_seconds: float = 0.0,
        schedule: ScrapeSchedule | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._renderer = renderer
        self._attributed = attributed
        # How long a published snapshot stays the newest; 0 renders every snapshot.
        self._interval = interval_seconds
        self._due_horizon = interval_seconds + min(_DUE_SLACK_SECONDS, interval_seconds / 10)
        self.clock = clock
        self.schedule = schedule or ScrapeSchedule(clock)
        self._render_lock = threading.Lock()
        self.current: Exposition | None = None
        # The newest snapshot; ahead of `current` while it waits unrendered.
        self.latest: NodeSnapshot | None = None
        self._render_failing = False

    def publish(self, snapshot: NodeSnapshot) -> None:
        """Keep the newest snapshot, and render it now if a scrape is due before the next one;
        called by the poller."""
        self.latest = snapshot
        if self._interval <= 0 or self.schedule.due_within(self._due_horizon):
            try:
                self.render_latest()
            except Exception:
                # Not the poller's fault: it must go on sweeping. A scrape renders again and
                # answers the error itself. Logged once until a render succeeds again.
                if not self._render_failing:
                    log.exception("rendering the exposition failed")
                self._render_failing = True
            else:
                self._render_failing = False

    @property
    def rendered(self) -> bool:
        """Whether `current` holds the newest snapshot (a scrape can be served without
        rendering)."""
        current = self.current
        return current is not None and current.snapshot is self.latest

    def render_latest(self) -> Exposition | None:
        """`current`, brought up to the newest snapshot (joined with the sources' latest data)
        if it is not; a second caller waits for the first's render instead of repeating it."""
        with self._render_lock:
            snapshot = self.latest
            current = self.current
            if snapshot is not None and (current is None or current.snapshot is not snapshot):
                current = build_exposition(snapshot, self._renderer, self._attributed, self.clock)
                self.current = current
            return current

"""Holds the current exposition as ready-to-send bytes, plain and gzip-compressed.

The body is compressed once per snapshot. The per-scrape tail is appended to a copy of the
compressor's state (`zlib.compressobj().copy()`), so a gzip scrape costs a few microseconds of
compression for the tail only and still yields a single, ordinary gzip member.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.exposition.context import NO_CONTEXT, AttributionContext
from exporter.exposition.renderer import Renderer
from exporter.snapshot import ConnectionCounts, NodeSnapshot

GZIP_LEVEL = 6
_GZIP_WBITS = 31
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

    def response(
        self,
        gzip: bool,
        stale_after_seconds: float,
        connections: Callable[[], ConnectionCounts] | None = None,
    ) -> bytes:
        """The full response body, rebuilt at most once per TAIL_RESOLUTION_SECONDS."""
        slot = int(time.monotonic() / TAIL_RESOLUTION_SECONDS)
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
        age = max(0.0, time.monotonic() - self.snapshot.monotonic_at)
        stale = age > stale_after_seconds
        return Renderer.render_tail(age, stale, self.render_seconds, connections).encode()

    def plain(self, tail: bytes) -> bytes:
        return self.body + tail

    def gzipped(self, tail: bytes) -> bytes:
        compressor = self.compressor.copy()
        return self.gzip_head + compressor.compress(tail) + compressor.flush()


def build_exposition(
    snapshot: NodeSnapshot, renderer: Renderer, context: AttributionContext = NO_CONTEXT
) -> Exposition:
    started = time.perf_counter()
    body = renderer.render_body(snapshot, context).encode()
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
    head = compressor.compress(body) + compressor.flush(zlib.Z_SYNC_FLUSH)
    return Exposition(snapshot, body, head, compressor, time.perf_counter() - started)


class ExpositionStore:
    """The latest exposition. Replaced by reference, so readers never see a half-built one."""

    def __init__(
        self,
        renderer: Renderer,
        context_source: Callable[[], AttributionContext] = lambda: NO_CONTEXT,
    ) -> None:
        self._renderer = renderer
        self._context_source = context_source
        self.current: Exposition | None = None

    def publish(self, snapshot: NodeSnapshot) -> None:
        """Join the snapshot with the latest pod data and render it; called by the poller."""
        self.current = build_exposition(snapshot, self._renderer, self._context_source())

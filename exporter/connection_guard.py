"""Bounds what HTTP clients can hold open, so slow or idle clients cannot starve a scrape.

aiohttp arms its keep-alive timer when a connection opens, so a client that never finishes a
request (slowloris: one header byte every few seconds) is dropped after `KEEPALIVE_SECONDS`.
What nothing bounds is how many such connections are open at once: enough of them would use up
the process's file descriptors, and then accept() fails for Prometheus too. So past
`max_connections`, a new connection closes the oldest one that is not in the middle of a
request; Prometheus, which connects and asks at once, always gets in.
"""

from __future__ import annotations

import asyncio
import logging
import resource

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from exporter.snapshot import ConnectionCounts

log = logging.getLogger(__name__)

# Longer than the usual 15-30 s scrape interval, so Prometheus keeps reusing its connection.
KEEPALIVE_SECONDS = 60.0
# File descriptors kept for what is not an HTTP connection: NVML, gRPC, logs, the API client.
RESERVED_FDS = 64


def raise_open_file_limit() -> int:
    """Raises the soft RLIMIT_NOFILE to the hard limit, as Go programs do at start (a container's
    soft limit is often 1024), and returns it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


def connection_cap(wanted: int, open_file_limit: int) -> int:
    """`wanted`, lowered so the cap is always reached before the file descriptors run out."""
    usable = max(1, open_file_limit - RESERVED_FDS)
    if wanted > usable:
        log.warning(
            "--web.max-connections=%d lowered to %d: the open-file limit is %d",
            wanted,
            usable,
            open_file_limit,
        )
        return usable
    return wanted


class ConnectionGuard:
    """Counts open connections on an aiohttp server and evicts idle ones past the cap."""

    def __init__(self, max_connections: int) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        self.max_connections = max_connections
        self.evicted = 0
        # Insertion order is age order: the first idle entry is the one to evict.
        self._open: dict[RequestHandler, asyncio.Transport] = {}
        self._busy: set[RequestHandler] = set()

    def counts(self) -> ConnectionCounts:
        return ConnectionCounts(open=len(self._open), evicted=self.evicted)

    def install(self, server: web.Server) -> None:
        """Hooks into the server's own connection bookkeeping; aiohttp offers no other place that
        sees a connection before its first request."""
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: RequestHandler, transport: asyncio.Transport) -> None:
            made(handler, transport)
            self._open[handler] = transport
            if len(self._open) > self.max_connections:
                self._evict_one(spare=handler)

        def connection_lost(handler: RequestHandler, exc: BaseException | None = None) -> None:
            self._open.pop(handler, None)
            self._busy.discard(handler)
            lost(handler, exc)

        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]

    @web.middleware
    async def middleware(self, request: web.Request, handler):
        protocol = request.protocol
        self._busy.add(protocol)
        try:
            response = await handler(request)
            # Sent here, not after the middleware returns as aiohttp would, so a connection
            # counts as busy until its whole response is handed to the kernel; aiohttp's own
            # prepare() and write_eof() that follow do nothing the second time.
            try:
                await response.prepare(request)
                await response.write_eof()
            except ConnectionError:
                # The client hung up. aiohttp meets the same error when it finishes the response
                # and treats it as the normal end of a connection, not as a handler failure.
                pass
            return response
        finally:
            self._busy.discard(protocol)

    def _evict_one(self, spare: RequestHandler) -> None:
        victim = next(
            (h for h in self._open if h is not spare and h not in self._busy),
            None,
        )
        if victim is None:
            # Every other connection is mid-request; the newcomer is the one to refuse.
            victim = spare
        transport = self._open.pop(victim)
        self.evicted += 1
        if self.evicted == 1 or self.evicted % 1000 == 0:
            log.warning(
                "%d connections open, the cap (--web.max-connections); closed the oldest idle "
                "one (%d closed so far)",
                self.max_connections,
                self.evicted,
            )
        # abort(), not close(): an idle or stalled client gets no goodbye, and its descriptor
        # is free at once instead of after a TLS shutdown it may never answer.
        transport.abort()

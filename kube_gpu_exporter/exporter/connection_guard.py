"""Bounds what HTTP clients can hold open, so slow, idle or greedy clients cannot starve a scrape.

aiohttp arms its keep-alive timer when a connection opens, so a client that never finishes a
request (slowloris: one header byte every few seconds) is dropped after `KEEPALIVE_SECONDS`.
What aiohttp does not bound, this module does:

- How many connections are open at once: enough of them would use up the process's file
  descriptors, and then accept() fails for Prometheus too. Past `max_connections`, a new
  connection closes the oldest one still in its TLS handshake, else the oldest one that is not in
  the middle of a request; Prometheus, which connects and asks at once, always gets in.
- How many of them one client address holds (an IPv6 /64 is one address). Without this, one
  address opening new connections without pause pushed everyone else's idle ones out through
  the shared cap, Prometheus' kept-alive connection between two scrapes among them. Past
  `max_per_address`, a new connection closes the oldest handshaking, else idle, connection of its
  own address, never another's, so a flood churns only itself.
- How long a TLS handshake may take (`HANDSHAKE_SECONDS`). asyncio's own TLS server hands a
  connection to aiohttp only once its handshake is done, so a client that never finished one held
  a descriptor that nothing counted or timed out; here the handshake runs under the guard.
- How many bytes a client may send before it is answered (`MAX_UNANSWERED_BYTES`). aiohttp limits
  each header line and the number of headers, but 128 legal 8 KiB headers are 1 MiB per
  connection, held twice over by the parser (as bytes and as text) until the request is complete,
  before any authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import resource
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from kube_gpu_exporter.exporter.client_address import client_key
from kube_gpu_exporter.exporter.snapshot import ConnectionCounts

log = logging.getLogger(__name__)

# Longer than the usual 15-30 s scrape interval, so Prometheus keeps reusing its connection.
KEEPALIVE_SECONDS = 60.0
# A handshake takes milliseconds even across regions; a client that has not finished one in this
# time is stalled or hostile. Also bounds the wait for a client's reply to our TLS close.
HANDSHAKE_SECONDS = 5.0
# A scrape's request line and headers are a few hundred bytes, with basic auth under 1 KiB. At the
# default cap of 512 connections, this keeps what clients can make the parser hold to about 20 MB.
MAX_UNANSWERED_BYTES = 16 * 1024
# Prometheus keeps one connection per target, an HA pair two, a browser six, a proxy sidecar in
# front of the exporter (kube-rbac-proxy) a few for all its clients: 64 is many times that, and an
# eighth of the default cap, so eight addresses at least are needed to fill it. The cap is lowered
# to a quarter of a smaller `max_connections`, so one address never fills the shared one alone.
MAX_PER_ADDRESS = 64
# File descriptors kept for what is not an HTTP connection: NVML, gRPC, logs, the API client.
RESERVED_FDS = 64
# Once this many connections were open together and three quarters of them have closed, freed
# memory is handed back to the kernel a second later (when the rest of a burst has usually gone
# too): glibc keeps in its heap what the parsers and responses of a burst freed, so without it
# RSS would stay at the burst's peak.
TRIM_AFTER_CONNECTIONS = 64
TRIM_DELAY_SECONDS = 1.0

_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_TOO_LARGE_BODY = b"request line and headers are over %d bytes\n" % MAX_UNANSWERED_BYTES
_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\n"
    b"Connection: close\r\n\r\n%s" % (len(_TOO_LARGE_BODY), _TOO_LARGE_BODY)
)


def _malloc_trim() -> Callable[[], object]:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


return_freed_memory = _malloc_trim()


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


def per_address_cap(max_connections: int, wanted: int | None = None) -> int:
    """`wanted`, at most `max_connections`; by default MAX_PER_ADDRESS, at most a quarter of it."""
    if wanted is None:
        return min(MAX_PER_ADDRESS, max(1, max_connections // 4))
    return min(wanted, max_connections)


class ConnectionGuard:
    """Counts the open connections of one listener, TLS handshakes included, in all and per
    client address, and evicts past either cap; its connections come from `protocol_factory`
    (plain HTTP) or `accept_tls`."""

    def __init__(self, max_connections: int, max_per_address: int | None = None) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if max_per_address is not None and max_per_address < 1:
            raise ValueError("max_per_address must be at least 1")
        self.max_connections = max_connections
        self.max_per_address = per_address_cap(max_connections, max_per_address)
        # Both caps' evictions; each cap's own count only spaces out its log lines.
        self.evicted = 0
        self._evicted_shared = 0
        self._evicted_per_address = 0
        self._peak = 0
        self._trim: asyncio.TimerHandle | None = None
        # Insertion order is age order: the first entry that may go is the one to evict.
        self._handshaking: dict[TlsHandshake, TlsHandshake] = {}
        self._open: dict[RequestHandler, asyncio.Transport] = {}
        self._busy: set[RequestHandler] = set()
        # Each client address's connections, oldest first, and the address of each connection.
        self._clients: dict[str, dict[TlsHandshake | RequestHandler, None]] = {}
        self._client_of: dict[TlsHandshake | RequestHandler, str] = {}
        # The event loop keeps only weak references to tasks.
        self._handshake_tasks: set[asyncio.Task[None]] = set()

    def counts(self) -> ConnectionCounts:
        return ConnectionCounts(open=len(self._open) + len(self._handshaking), evicted=self.evicted)

    def protocol_factory(
        self, server: web.Server, **handler_args: Any
    ) -> Callable[[], GuardedHandler]:
        """For `loop.create_server`: aiohttp's connection handler for `server`, made with
        `handler_args` (as AppRunner passes them), reporting to this guard."""
        loop = asyncio.get_running_loop()
        return lambda: GuardedHandler(self, server, loop=loop, **handler_args)

    async def accept_tls(
        self,
        listener: socket.socket,
        server: web.Server,
        context: ssl.SSLContext,
        **handler_args: Any,
    ) -> None:
        """Accepts connections on `listener` and runs their TLS handshakes under the guard, until
        cancelled. asyncio's own TLS server hands a connection over only once its handshake is
        done, so nothing could count, evict or time out one that never finishes; and uvloop
        reads from a connection as soon as it is made, so TLS cannot be started on it later."""
        loop = asyncio.get_running_loop()

        def make_handler(handshake: TlsHandshake) -> GuardedHandler:
            return GuardedHandler(self, server, handshake=handshake, loop=loop, **handler_args)

        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    log.debug("accept() failed: %s", exc)
                    continue
                # Out of descriptors even so (the cap was lowered below the limit for this);
                # wait for some to close rather than spin.
                log.warning("accept() failed: %s; retrying in 0.1 s", exc)
                await asyncio.sleep(0.1)
                continue
            handshake = TlsHandshake(self, sock)
            self._handshaking[handshake] = handshake
            self._join(handshake, peer)
            self._check_cap(handshake)
            self._track(loop.create_task(handshake.run(make_handler, context)))

    def close_handshakes(self) -> None:
        """At shutdown: a handshake in progress would only become a connection to close."""
        for handshake in list(self._handshaking):
            handshake.abort()

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
            if isinstance(protocol, GuardedHandler):
                protocol.answered()

    def _handed_over(self, handshake: TlsHandshake) -> None:
        # Moved, not closed: the count stays the same, so nothing is evicted or trimmed for it.
        self._handshaking.pop(handshake, None)
        self._leave(handshake)

    def _handshake_ended(self, handshake: TlsHandshake) -> None:
        self._leave(handshake)
        if self._handshaking.pop(handshake, None) is not None:
            self._connection_ended()

    def _join(self, connection: TlsHandshake | RequestHandler, peer: Any) -> None:
        # The peer is (host, port) or, for IPv6, (host, port, flowinfo, scope_id).
        host = peer[0] if isinstance(peer, tuple) and peer else None
        client = client_key(host if isinstance(host, str) else None)
        self._client_of[connection] = client
        self._clients.setdefault(client, {})[connection] = None

    def _leave(self, connection: TlsHandshake | RequestHandler) -> None:
        client = self._client_of.pop(connection, None)
        if client is None:
            return
        group = self._clients[client]
        group.pop(connection, None)
        if not group:
            del self._clients[client]

    def _track(self, task: asyncio.Task[None]) -> None:
        self._handshake_tasks.add(task)
        task.add_done_callback(self._handshake_tasks.discard)

    def _opened(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        self._open[handler] = transport
        self._join(handler, transport.get_extra_info("peername"))
        self._check_cap(handler)

    def _closed(self, handler: RequestHandler) -> None:
        self._open.pop(handler, None)
        self._busy.discard(handler)
        self._leave(handler)
        self._connection_ended()

    def _connection_ended(self) -> None:
        now = len(self._open) + len(self._handshaking)
        if self._trim is None and self._peak >= TRIM_AFTER_CONNECTIONS and now <= self._peak // 4:
            self._trim = asyncio.get_running_loop().call_later(
                TRIM_DELAY_SECONDS, self._return_freed_memory
            )

    def _return_freed_memory(self) -> None:
        self._trim = None
        self._peak = len(self._open) + len(self._handshaking)
        return_freed_memory()

    def _is_busy(self, handler: RequestHandler) -> bool:
        return handler in self._busy

    def _check_cap(self, newcomer: TlsHandshake | RequestHandler) -> None:
        now = len(self._open) + len(self._handshaking)
        self._peak = max(self._peak, now)
        client = self._client_of[newcomer]
        own = self._clients[client]
        if len(own) > self.max_per_address:
            # Checked first, so an address over its share makes room among its own connections
            # before the shared cap would take someone else's.
            victim = self._victim(
                (c for c in own if isinstance(c, TlsHandshake)),
                (c for c in own if not isinstance(c, TlsHandshake)),
                newcomer,
            )
            self._evict(victim)
            self._evicted_per_address += 1
            if self._evicted_per_address == 1 or self._evicted_per_address % 1000 == 0:
                log.warning(
                    "%d connections open from %s, the most one address may hold; closed its "
                    "oldest idle or handshaking one (%d closed so far for this cap)",
                    self.max_per_address,
                    client or "an unknown address",
                    self._evicted_per_address,
                )
            if victim is newcomer:
                return
            now -= 1
        if now <= self.max_connections:
            return
        self._evict(self._victim(self._handshaking, self._open, newcomer))
        self._evicted_shared += 1
        if self._evicted_shared == 1 or self._evicted_shared % 1000 == 0:
            log.warning(
                "%d connections open, the cap (--web.max-connections); closed the oldest idle "
                "or handshaking one (%d closed so far for this cap)",
                self.max_connections,
                self._evicted_shared,
            )

    def _victim(
        self,
        handshakes: Iterable[TlsHandshake | RequestHandler],
        opened: Iterable[TlsHandshake | RequestHandler],
        newcomer: TlsHandshake | RequestHandler,
    ) -> TlsHandshake | RequestHandler:
        """Of `handshakes` and `opened` (each oldest first), the one a newcomer closes."""
        # A stalled handshake goes first: it has sent nothing a scrape could be waiting on.
        for connection in handshakes:
            if connection is not newcomer:
                return connection
        for connection in opened:
            if connection is not newcomer and connection not in self._busy:
                return connection
        # Every other connection is mid-request; the newcomer is the one to refuse.
        return newcomer

    def _evict(self, victim: TlsHandshake | RequestHandler) -> None:
        transport = (
            self._handshaking.pop(victim)
            if isinstance(victim, TlsHandshake)
            else self._open.pop(victim)
        )
        self._leave(victim)
        self.evicted += 1
        # abort(), not close(): an idle or stalled client gets no goodbye, and its descriptor
        # is free at once instead of after a TLS shutdown it may never answer.
        transport.abort()

    def _refuse(self, handler: RequestHandler, transport: asyncio.Transport) -> None:
        log.debug(
            "closed the connection from %s: over %d bytes sent without an answer",
            transport.get_extra_info("peername"),
            MAX_UNANSWERED_BYTES,
        )
        # Mid-response, a 431 would be spliced into the answer being written.
        if not self._is_busy(handler):
            transport.write(_TOO_LARGE)


class GuardedHandler(RequestHandler):
    """aiohttp's connection handler, counted by the guard, refusing clients that send more than
    `MAX_UNANSWERED_BYTES` before they are answered."""

    __slots__ = ("_guard", "_handshake", "_over", "_unanswered")

    def __init__(
        self,
        guard: ConnectionGuard,
        manager: web.Server,
        handshake: TlsHandshake | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._handshake = handshake
        self._unanswered = 0
        self._over = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self._handshake is not None:
            self._guard._handed_over(self._handshake)
            self._handshake = None
        super().connection_made(transport)
        # asyncio's protocol API says BaseTransport; a stream server's is a Transport.
        self._guard._opened(self, transport)  # type: ignore[arg-type]

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard._closed(self)
        super().connection_lost(exc)

    def answered(self) -> None:
        self._unanswered = 0

    def data_received(self, data: bytes) -> None:
        if self._over:
            return
        room = MAX_UNANSWERED_BYTES - self._unanswered
        self._unanswered += len(data)
        if len(data) <= room:
            super().data_received(data)
            return
        self._over = True
        # The parser sees what fits, so a line over its own 8 KiB limit, or too many headers,
        # still gets aiohttp's 400 (and a request that fits is answered) before the close.
        requests = self._request_count
        if room > 0:
            super().data_received(data[:room])
        if self._request_count != requests:
            self.close()
            return
        transport = self.transport
        if transport is not None:
            self._guard._refuse(self, transport)
            self.force_close()


class TlsHandshake:
    """An accepted TCP connection until its TLS handshake ends: counted and evictable by the
    guard, and given `HANDSHAKE_SECONDS`; then aiohttp's handler takes it over."""

    __slots__ = ("_aborted", "_guard", "_sock", "_started")

    def __init__(self, guard: ConnectionGuard, sock: socket.socket) -> None:
        self._guard = guard
        self._sock = sock
        self._started = False
        self._aborted = False

    def abort(self) -> None:
        if not self._started:
            self._aborted = True
            self._sock.close()
            return
        # The TLS transport owns the descriptor now and closes it itself; a shutdown ends the
        # handshake at once. Closing it here too could close a reused descriptor number.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

    async def run(self, make_handler: Callable[[TlsHandshake], GuardedHandler], context) -> None:
        if self._aborted:
            return
        self._started = True
        try:
            # The handler's connection_made, when the handshake succeeds, ends this entry.
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: make_handler(self),
                self._sock,
                ssl=context,
                ssl_handshake_timeout=HANDSHAKE_SECONDS,
                ssl_shutdown_timeout=HANDSHAKE_SECONDS,
            )
        except OSError as exc:  # refused certificates, timeouts and hang-ups alike
            log.debug("TLS handshake failed: %s", exc)
        finally:
            self._guard._handshake_ended(self)

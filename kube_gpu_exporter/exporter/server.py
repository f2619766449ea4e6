"""The HTTP side: serves the pre-rendered exposition and the health endpoints.

Nothing here touches NVML or renders the body; a scrape copies cached bytes and appends a tail
of a few lines, so concurrent scrapes cost about what one does and never wait on a sweep.
"""

from __future__ import annotations

import asyncio
import html
import logging
import os
import signal
import socket
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from kube_gpu_exporter import __version__
from kube_gpu_exporter.exporter.config import WebConfig
from kube_gpu_exporter.exporter.connection_guard import KEEPALIVE_SECONDS, ConnectionGuard
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.exposition.store import ExpositionStore
from kube_gpu_exporter.exporter.exposition.text_format import CONTENT_TYPE
from kube_gpu_exporter.exporter.readiness import Problem, ReadinessLog, node_readiness

log = logging.getLogger(__name__)

_PLAIN_HEADERS = {"Content-Type": CONTENT_TYPE, "Vary": "Accept-Encoding"}
_GZIP_HEADERS = {**_PLAIN_HEADERS, "Content-Encoding": "gzip"}
# Sent by a scraper that scrapes on a period: Prometheus (scrape/scrape.go), and the agents built
# on its scrape code or compatible with it (Grafana Alloy, the OpenTelemetry Collector's
# Prometheus receiver, vmagent). Only such requests teach the scrape schedule; a one-off request
# (curl, a browser) is served from the latest sweep without changing when costly work is done.
PERIODIC_SCRAPER_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"


def _connection_of(request: web.Request) -> str | None:
    """The client's end of the request's connection, "address port", or None (a unix socket)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]} {peer[1]}"
    return None


STORE_KEY: web.AppKey[ExpositionStore] = web.AppKey("store", ExpositionStore)
GUARD_KEY: web.AppKey[ConnectionGuard] = web.AppKey("connection_guard", ConnectionGuard)
READINESS_LOG_KEY: web.AppKey[ReadinessLog] = web.AppKey("readiness_log", ReadinessLog)
# (path, what it is) for the index page, beyond metrics and health: routes added after build_app,
# such as the simulator's control API, list themselves here.
INDEX_LINKS_KEY: web.AppKey[list[tuple[str, str]]] = web.AppKey("index_links", list)
# The metrics path, for the address serve() logs.
TELEMETRY_PATH_KEY: web.AppKey[str] = web.AppKey("telemetry_path", str)


def accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        token, _, params = part.strip().partition(";")
        if token.strip().lower() not in ("gzip", "*"):
            continue
        quality = params.strip().lower()
        if quality.startswith("q="):
            try:
                return float(quality[2:]) > 0
            except ValueError:
                return False
        return True
    return False


class Handlers:
    def __init__(
        self,
        store: ExpositionStore,
        config: WebConfig,
        thread_problem: Callable[[], str | None],
        guard: ConnectionGuard,
        readiness: Problem,
    ):
        self._store = store
        self._config = config
        # What is wrong with the background threads (one that died and could not be restarted),
        # or None when all of them run.
        self._thread_problem = thread_problem
        self._guard = guard
        # Why the node is not ready beyond being unhealthy
        # (kube_gpu_exporter/exporter/readiness.py), or None.
        self._readiness = readiness
        # Logs why not, looking by itself and at each probe's answer.
        self.readiness_log = ReadinessLog(self.readiness_problem)
        # The snapshot's age, here as in its staleness, is read on the store's clock.
        self._clock = store.clock
        self._started = self._clock()

    async def metrics(self, request: web.Request) -> web.Response:
        store = self._store
        if store.latest is None:
            # Not counted as a scrape: a client retrying this quickly has no period to learn.
            return web.Response(status=503, text="no NVML snapshot collected yet\n")
        if PERIODIC_SCRAPER_HEADER in request.headers:
            store.schedule.scraped(request.remote or "", _connection_of(request))
        exposition = store.current
        if not store.rendered:
            # A snapshot nobody was expected to read: render it off the event loop, once.
            exposition = await asyncio.get_running_loop().run_in_executor(None, store.render_latest)
        assert exposition is not None  # a published snapshot always renders
        gzip = accepts_gzip(request.headers.get("Accept-Encoding", ""))
        body = exposition.response(gzip, self._config.stale_after_seconds, self._guard.counts)
        return web.Response(body=body, headers=_GZIP_HEADERS if gzip else _PLAIN_HEADERS)

    def _health_problem(self) -> str | None:
        problem = self._thread_problem()
        if problem is not None:
            return problem
        snapshot = self._store.latest
        since = snapshot.monotonic_at if snapshot else self._started
        age = self._clock() - since
        if age > self._config.health_max_age_seconds:
            what = "last NVML sweep finished" if snapshot else "start, and no sweep has finished"
            return (
                f"{age:.0f}s since the {what}; the limit is "
                f"{self._config.health_max_age_seconds:.0f}s (is an NVML call hanging?)"
            )
        return None

    async def healthz(self, request: web.Request) -> web.Response:
        problem = self._health_problem()
        if problem:
            return web.Response(status=503, text=f"unhealthy: {problem}\n")
        return web.Response(text="ok\n")

    def readiness_problem(self) -> str | None:
        """Why /readyz answers 503: what fails /healthz, or what readiness adds to it."""
        unhealthy = self._health_problem()
        return f"unhealthy: {unhealthy}" if unhealthy else self._readiness()

    async def readyz(self, request: web.Request) -> web.Response:
        problem = self.readiness_problem()
        self.readiness_log.observe(problem)
        if problem:
            return web.Response(status=503, text=f"not ready: {problem}\n")
        return web.Response(text="ready\n")

    async def index(self, request: web.Request) -> web.Response:
        path = html.escape(self._config.telemetry_path)
        extra = "".join(
            f'<li><a href="{html.escape(href)}">{html.escape(href)}</a>: {html.escape(what)}</li>'
            for href, what in request.app[INDEX_LINKS_KEY]
        )
        body = (
            "<!DOCTYPE html><html><head><title>kube-gpu-exporter</title></head><body>"
            f"<h1>kube-gpu-exporter {html.escape(__version__)}</h1>"
            "<p>NVIDIA GPU metrics for Kubernetes, compatible with dcgm-exporter.</p><ul>"
            f'<li><a href="{path}">{path}</a>: metrics</li>'
            '<li><a href="/healthz">/healthz</a>: liveness</li>'
            '<li><a href="/readyz">/readyz</a>: readiness</li>'
            f"{extra}</ul></body></html>"
        )
        return web.Response(text=body, content_type="text/html")


def build_app(
    store: ExpositionStore,
    config: WebConfig,
    thread_problem: Callable[[], str | None],
    readiness: Problem | None = None,
) -> web.Application:
    """The exporter's web app. `readiness` says why the node is not ready (readiness.py's
    node_readiness); without it, the store's latest snapshot alone decides."""
    guard = ConnectionGuard(config.max_connections, config.max_connections_per_address)
    if readiness is None:
        readiness = node_readiness(lambda: store.latest)
    handlers = Handlers(store, config, thread_problem, guard, readiness)
    cleanups: list[Callable[[], None]] = []
    app = web.Application(middlewares=[guard.middleware, *security_middlewares(config, cleanups)])
    app[STORE_KEY] = store
    app[GUARD_KEY] = guard
    app[READINESS_LOG_KEY] = handlers.readiness_log
    app[INDEX_LINKS_KEY] = []
    app[TELEMETRY_PATH_KEY] = config.telemetry_path
    app.router.add_get(config.telemetry_path, handlers.metrics)
    app.router.add_get("/healthz", handlers.healthz)
    app.router.add_get("/health", handlers.healthz)  # dcgm-exporter's path, for drop-in probes
    app.router.add_get("/readyz", handlers.readyz)
    if config.telemetry_path != "/":
        app.router.add_get("/", handlers.index)
    app.cleanup_ctx.append(handlers.readiness_log.context())
    for cleanup in cleanups:

        async def run_cleanup(_app: web.Application, cleanup=cleanup) -> None:
            cleanup()

        app.on_cleanup.append(run_cleanup)
    return app


def security_middlewares(config: WebConfig, cleanups: list[Callable[[], None]]) -> list:
    """Client-name check, then basic auth, as --web.config.file asks; none without it. What
    must be closed with the app (basic auth's thread pool) goes into `cleanups`."""
    security = config.security
    if security is None:
        return []
    # The first is outermost: extra headers go on 401 and 403 answers too.
    middlewares = [_extra_headers(security.headers)] if security.headers else []
    if security.tls and security.tls.client_allowed_sans:
        from kube_gpu_exporter.exporter.webconfig.client_names import allowed_sans_middleware

        middlewares.append(allowed_sans_middleware(security.tls.client_allowed_sans))
    # Even without users: a reloaded web config may add some, and they apply at once.
    from kube_gpu_exporter.exporter.webconfig.basic_auth import BasicAuth

    auth = BasicAuth(security.live_users)
    cleanups.append(auth.close)
    middlewares.append(auth.middleware)
    return middlewares


def _extra_headers(headers: tuple[tuple[str, str], ...]):
    @web.middleware
    async def add(request: web.Request, handler):
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            exc.headers.update(headers)
            raise
        response.headers.update(headers)
        return response

    return add


class _MalformedRequestLog(logging.Filter):
    """aiohttp logs each malformed request (an oversized URL or header, too many headers) as an
    error with a traceback, so any client could flood the log. The client already got its 400;
    one debug line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError) and 400 <= exc.code < 500:
            peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            log.debug("refused a malformed request from %s: %s", peer, exc.message[:200])
            return False
        return True


_MALFORMED_REQUEST_LOG = _MalformedRequestLog()


def split_listen_address(address: str) -> tuple[str | None, int]:
    """':9455' -> (None, 9455), '127.0.0.1:9455', '[::1]:9455'. Raises ValueError."""
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{address!r} is not HOST:PORT with a port from 1 to 65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{address!r}: write IPv6 hosts in brackets, e.g. [::1]:9455")
    return (host or None), int(port_text)


LISTEN_BACKLOG = 1024


def bind_listeners(address: str) -> list[socket.socket]:
    """The listening sockets for --web.listen-address, made before anything else starts, so that
    a port in use or an address this host does not have is one line at start-up."""
    host, port = split_listen_address(address)
    try:
        return _listening_sockets(host, port)
    except OSError as exc:
        # socket.create_server appends the address to a bind error's strerror; it is named here.
        if exc.errno and not isinstance(exc, socket.gaierror):
            reason = os.strerror(exc.errno)
        else:
            reason = exc.strerror or str(exc)
        reason = reason.rstrip(".")
        reason = reason[:1].lower() + reason[1:]
        raise ConfigurationError(f"--web.listen-address {address}: {reason}") from None


def _listening_sockets(host: str | None, port: int) -> list[socket.socket]:
    """Bound, listening and non-blocking, as loop.create_server would make them: one for every
    address `host` names, or one for every interface (IPv4 and IPv6) for None."""
    # (family, address): an IPv6 address is a 4-tuple, whose port is replaced below.
    wanted: list[tuple[socket.AddressFamily, tuple[Any, ...]]]
    if host is None and socket.has_dualstack_ipv6():
        wanted = [(socket.AF_INET6, ("", port))]
    elif host is None:
        wanted = [(socket.AF_INET, ("", port))]
    else:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        wanted = list(dict.fromkeys((family, address) for family, _, _, _, address in found))
    sockets: list[socket.socket] = []
    try:
        for family, address in wanted:
            # A port of 0 is chosen by the first bind; the other addresses take the same one.
            if sockets:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock = socket.create_server(
                address,
                family=family,
                backlog=LISTEN_BACKLOG,
                dualstack_ipv6=family == socket.AF_INET6 and not address[0],
            )
            sock.setblocking(False)
            sockets.append(sock)
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


def local_url(host: str, port: int, tls: bool, path: str) -> str:
    """The URL a user on this machine opens for `path` on a socket bound to `host`: localhost for
    every interface, brackets around an IPv6 address."""
    if host in ("", "0.0.0.0", "::"):
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}{path}"


async def serve(
    app: web.Application,
    address: str,
    ready: Callable[[int], None] | None = None,
    shutdown_timeout: float = 2.0,
    ssl_context: ssl.SSLContext | None = None,
    listeners: list[socket.socket] | None = None,
) -> None:
    """Serve `app` (from build_app) on `listeners` (from bind_listeners; bound here when None)
    until SIGTERM or SIGINT, then finish in-flight requests and return."""
    host, port = split_listen_address(address)
    server_sockets = bind_listeners(address) if listeners is None else listeners
    handler_args: dict[str, Any] = {"access_log": None, "keepalive_timeout": KEEPALIVE_SECONDS}
    runner = web.AppRunner(
        app, handle_signals=False, shutdown_timeout=shutdown_timeout, **handler_args
    )
    server_log = logging.getLogger("aiohttp.server")
    if _MALFORMED_REQUEST_LOG not in server_log.filters:
        server_log.addFilter(_MALFORMED_REQUEST_LOG)
    await runner.setup()
    assert runner.server is not None
    guard = app[GUARD_KEY]
    loop = asyncio.get_running_loop()
    # Every connection goes through the guard from accept() on, TLS handshakes included, which
    # is why the listener is made here rather than by aiohttp's TCPSite. aiohttp's default
    # backlog of 128 would make a burst of connections wait in SYN retries before the guard ever
    # sees them; the guard, not the kernel queue, should decide.
    if ssl_context is None:
        servers = [
            await loop.create_server(
                guard.protocol_factory(runner.server, **handler_args),
                sock=sock,
                backlog=LISTEN_BACKLOG,
            )
            for sock in server_sockets
        ]

        def close_listeners() -> None:
            for server in servers:
                server.close()

    else:
        accepting = [
            loop.create_task(guard.accept_tls(s, runner.server, ssl_context, **handler_args))
            for s in server_sockets
        ]

        def close_listeners() -> None:
            for task in accepting:
                task.cancel()
            for sock in server_sockets:
                sock.close()

    bound = server_sockets[0].getsockname()[1] if server_sockets else port
    shown = address if bound == port else f"{host or ''}:{bound}"
    # A link to click, with the port really bound, followed by a space so that a terminal's link
    # detection does not take the log format's closing quote into it.
    bound_host = server_sockets[0].getsockname()[0] if server_sockets else host or ""
    url = local_url(bound_host, bound, ssl_context is not None, app.get(TELEMETRY_PATH_KEY, "/"))
    log.info("metrics at %s (listening on %s%s)", url, shown, " with TLS" if ssl_context else "")
    if ready is not None:
        ready(bound)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
        log.info("shutting down")
    finally:
        close_listeners()
        guard.close_handshakes()
        await runner.cleanup()

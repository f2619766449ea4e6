"""The fake Kubernetes API lives in the package, where `--simulate --kubernetes` serves from it;
the tests import it from here, extended with what only tests need: field selectors read the way
the API server reads them, the time of every request, a hostile server's answers (an event
line that never ends, 410 Gone to every watch, LIST and watch bodies given byte for byte, error
answers with huge or trickled bodies, headers trickled a byte at a time)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs, urlparse

from kube_gpu_exporter.exporter.simulator.fake_kube_api import (
    SLICE_VERSIONS,
    SLICES,
    as_v1beta1,
    field_requirements,
    slice_device,
    write_kubeconfig,
)
from kube_gpu_exporter.exporter.simulator.fake_kube_api import FakeKubeApi as _SimulatedApi

__all__ = [
    "SLICES",
    "SLICE_VERSIONS",
    "FakeKubeApi",
    "as_v1beta1",
    "slice_device",
    "write_kubeconfig",
]

_RESOURCES = {"/api/v1/pods": "pods", "/api/v1/nodes": "nodes"}
# The field labels the API server accepts, by resource: any other is 400 Bad Request.
_FIELDS = {
    "pods": {"metadata.name", "metadata.namespace", "spec.nodeName"},
    "nodes": {"metadata.name"},
    SLICES: {"metadata.name", "spec.nodeName", "spec.driver"},
}
# The endless line is sent in pieces this size, up to this many bytes, so that the fake itself
# stops even against a client that reads forever.
_ENDLESS_PIECE = 64 * 1024
_ENDLESS_LIMIT = 2 << 30


@dataclass(frozen=True)
class ErrorAnswer:
    """An HTTP error whose body declares `declared` bytes and sends `sent` of them (as fast as
    the client reads, or one byte every `trickle_seconds`)."""

    status: int = 500
    declared: int = 1 << 30
    sent: int = 1 << 30
    trickle_seconds: float = 0.0


def _resource(path: str) -> str:
    if path.startswith("/apis/resource.k8s.io/") and path.endswith("/resourceslices"):
        return SLICES
    return _RESOURCES.get(path, "")


class FakeKubeApi(_SimulatedApi):
    def __init__(self, node: str) -> None:
        super().__init__(node)
        # (time.monotonic(), path, is a watch) of every request.
        self.request_times: list[tuple[float, str, bool]] = []
        # Resources whose every watch is answered 410 Gone, however new its version.
        self.gone_always: set[str] = set()
        # Resources whose watches send one event line that never ends: as fast as the client
        # reads it, or, with endless_trickle, one byte every 0.1 s, which no read timeout catches.
        self.endless_watches: set[str] = set()
        self.endless_trickle = False
        # Bytes of endless line sent on each such watch so far, by resource, oldest watch first:
        # what the client took before it hung up.
        self.endless_sent: dict[str, list[int]] = {}
        # Resources whose LIST is answered with these bytes, and whose watches with these lines.
        self.list_bodies: dict[str, bytes] = {}
        # Those LIST bodies go chunked, with no Content-Length to refuse them by, unless False;
        # with list_trickle_seconds, one byte per chunk, each that long after the last.
        self.list_chunked = True
        self.list_trickle_seconds = 0.0
        self.watch_lines: dict[str, list[bytes]] = {}
        self._sent_lock = threading.Lock()
        # (resource, is a watch) -> the error every such request is answered with.
        self.error_answers: dict[tuple[str, bool], ErrorAnswer] = {}
        # Bytes of error body sent on each such request so far, by resource, oldest first.
        self.error_sent: dict[str, list[int]] = {}
        # Resources whose every request gets a status line, then headers a byte every
        # `header_trickle_seconds` without end.
        self.header_trickle: set[str] = set()
        self.header_trickle_seconds = 0.2
        # Requests answered so far but not finished (a trickle in progress), by resource.
        self.in_progress: dict[str, int] = {}

    def requests_of(self, resource: str, *, watch: bool) -> list[float]:
        """When each LIST (or watch) of `resource` arrived."""
        return [
            t for t, p, w in list(self.request_times) if _resource(p) == resource and w is watch
        ]

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlparse(handler.path)
        query = parse_qs(url.query)
        resource = _resource(url.path)
        watch = query.get("watch", ["false"])[0].lower() == "true"
        self.request_times.append((time.monotonic(), url.path, watch))
        selector = query.get("fieldSelector", [""])[0]
        known = _FIELDS.get(resource)
        fields = [f for f, _ in field_requirements(selector)]
        unknown = [f for f in fields if known is not None and f not in known]
        if resource in self.header_trickle:
            self.requests.append((url.path, query))
            self._trickle_headers(handler, resource)
        elif (resource, watch) in self.error_answers:
            self.requests.append((url.path, query))
            self._send_error(handler, resource, self.error_answers[(resource, watch)])
        elif unknown:
            self.requests.append((url.path, query))
            message = f"field label not supported: {unknown[0]}"
            status = {"kind": "Status", "code": 400, "reason": "BadRequest", "message": message}
            self._json(handler, 400, status)
        elif watch and resource in self.gone_always:
            self.requests.append((url.path, query))
            line = (
                b'{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure",'
                b'"code":410,"reason":"Expired","message":"too old resource version"}}\n'
            )
            self._send_stream(handler, [line])
        elif watch and resource in self.endless_watches:
            self.requests.append((url.path, query))
            self._send_endless(handler, resource)
        elif watch and resource in self.watch_lines:
            self.requests.append((url.path, query))
            self._send_stream(handler, self.watch_lines[resource])
        elif not watch and resource in self.list_bodies:
            self.requests.append((url.path, query))
            self._send_body(handler, self.list_bodies[resource])
        else:
            super().handle(handler)

    @contextlib.contextmanager
    def _answering(self, resource: str) -> Iterator[None]:
        with self._sent_lock:
            self.in_progress[resource] = self.in_progress.get(resource, 0) + 1
        try:
            yield
        finally:
            with self._sent_lock:
                self.in_progress[resource] -= 1

    def _send_error(
        self, handler: BaseHTTPRequestHandler, resource: str, error: ErrorAnswer
    ) -> None:
        status = (
            b'{"kind":"Status","apiVersion":"v1","status":"Failure","code":%d,'
            b'"reason":"InternalError","message":"etcd is on fire"}' % error.status
        )
        with self._answering(resource), contextlib.suppress(OSError):
            handler.send_response(error.status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(error.declared))
            handler.end_headers()
            with self._sent_lock:
                counts = self.error_sent.setdefault(resource, [])
                counts.append(0)
                mine = len(counts) - 1
            handler.wfile.write(status)
            piece = b" " * (1 if error.trickle_seconds else _ENDLESS_PIECE)
            while counts[mine] < error.sent and self._server is not None:
                handler.wfile.write(piece)
                handler.wfile.flush()
                with self._sent_lock:
                    counts[mine] += len(piece)
                if error.trickle_seconds:
                    time.sleep(error.trickle_seconds)

    def _trickle_headers(self, handler: BaseHTTPRequestHandler, resource: str) -> None:
        with self._answering(resource), contextlib.suppress(OSError):
            handler.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            handler.wfile.flush()
            for _ in range(60_000):  # a header line of http.client's 64 KiB at most
                if self._server is None:
                    return
                handler.wfile.write(b"x")
                handler.wfile.flush()
                time.sleep(self.header_trickle_seconds)

    def _send_body(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        if self.list_trickle_seconds:
            self._start_stream(handler)
            with self._answering("list"), contextlib.suppress(OSError):
                for byte in body:
                    if self._server is None:
                        return
                    self._chunk(handler, bytes([byte]))
                    time.sleep(self.list_trickle_seconds)
                self._chunk(handler, b"")
            return
        if self.list_chunked:
            pieces = [body[i : i + _ENDLESS_PIECE] for i in range(0, len(body), _ENDLESS_PIECE)]
            self._send_stream(handler, pieces)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler.wfile.write(body)

    @staticmethod
    def _start_stream(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

    @staticmethod
    def _chunk(handler: BaseHTTPRequestHandler, payload: bytes) -> None:
        handler.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
        handler.wfile.flush()

    def _send_stream(self, handler: BaseHTTPRequestHandler, lines: list[bytes]) -> None:
        self._start_stream(handler)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for line in lines:
                self._chunk(handler, line)
            self._chunk(handler, b"")

    def _send_endless(self, handler: BaseHTTPRequestHandler, resource: str) -> None:
        self._start_stream(handler)
        piece = b"x" * (1 if self.endless_trickle else _ENDLESS_PIECE)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, OSError):
            with self._sent_lock:
                counts = self.endless_sent.setdefault(resource, [])
                counts.append(0)
                mine = len(counts) - 1
            self._chunk(handler, b'{"type":"ADDED","object":{"metadata":{"name":"')
            while counts[mine] < _ENDLESS_LIMIT and self._server is not None:
                self._chunk(handler, piece)
                with self._sent_lock:
                    counts[mine] += len(piece)
                if self.endless_trickle:
                    time.sleep(0.1)

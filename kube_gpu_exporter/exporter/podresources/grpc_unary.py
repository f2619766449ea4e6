"""Blocking gRPC unary calls over a unix socket: HTTP/2 (through h2) plus gRPC's message framing.

The kubelet's pod-resources API needs nothing more than unary calls on a local socket, and grpcio's
C core costs a DaemonSet about 12 MB of resident memory and six threads on every GPU node for them.
This client speaks the same wire protocol on one connection, used by one thread at a time, with no
threads of its own. It does what the exporter relied on grpcio for: a deadline per call (sent to
the server as `grpc-timeout` too), a receive-size limit that refuses an oversized answer from its
5-byte length prefix before reading it, status codes and messages from the trailers, and
reconnection after the kubelet restarts.

Everything the server sends is untrusted: an answer whose status, HTTP status or headers cannot be
read (a non-numeric or overlong `grpc-status`, a `:status` that is not three digits, a header that
is not UTF-8) is the call's error with code MALFORMED, never an exception of another kind.
"""

from __future__ import annotations

import re
import socket
import struct
import time
import urllib.parse
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from kube_gpu_exporter import __version__

# gRPC status codes by number (grpc/doc/statuscodes.md).
STATUS_NAMES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
)
# HTTP statuses of an answer that never reached a gRPC handler
# (grpc/doc/http-grpc-status-mapping.md).
_HTTP_TO_STATUS = {
    400: "INTERNAL",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "UNIMPLEMENTED",
    429: "UNAVAILABLE",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "UNAVAILABLE",
}
# Not a gRPC status: ours, for an answer that could not be read at all.
MALFORMED = "MALFORMED"
# gRPC statuses are small numbers; ten digits hold any 32-bit value, and a longer one is garbage
# (it would also cost int() quadratic time, and Python refuses past 4,300 digits).
_GRPC_STATUS = re.compile(r"[0-9]{1,10}")
_HTTP_STATUS = re.compile(r"[0-9]{3}")
# How much of a server's grpc-message an error (and so a log line) repeats.
_MAX_DETAILS = 300
_PREFIX = struct.Struct(">BI")  # compressed flag, message length
# A large window lets a multi-megabyte answer stream without a round trip per 64 KiB.
_WINDOW = 16 * 1024 * 1024
_MAX_FRAME = 1024 * 1024
_RECV_CHUNK = 256 * 1024


class RpcError(Exception):
    """A failed call: `code` is the gRPC status name, `details` a one-line explanation."""

    def __init__(self, code: str, details: str) -> None:
        super().__init__(f"{code}: {details}")
        self.code = code
        self.details = details


class _ConnectionLost(Exception):
    """The connection closed before this stream's answer began; a fresh one may succeed."""


@dataclass
class _Stream:
    headers: dict[str, str] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    expected: int | None = None  # message length, once the prefix has arrived
    ended: bool = False
    reset_code: int | None = None


class UnaryChannel:
    """One HTTP/2 connection to `socket_path`, opened on first use and after any failure."""

    def __init__(self, socket_path: str, max_receive_bytes: int) -> None:
        self._path = socket_path
        self._max_receive = max_receive_bytes
        self._sock: socket.socket | None = None
        self._conn: h2.connection.H2Connection | None = None

    def close(self) -> None:
        if self._sock is not None:
            try:
                if self._conn is not None:
                    self._conn.close_connection()
                    self._sock.sendall(self._conn.data_to_send())
            except (OSError, h2.exceptions.ProtocolError):
                pass
            self._sock.close()
        self._sock = None
        self._conn = None

    def call(self, method: str, request: bytes, timeout_seconds: float) -> bytearray:
        """Send `request` to `/package.Service/Method` and return the response message's bytes."""
        deadline = time.monotonic() + timeout_seconds
        reused = self._sock is not None
        try:
            return self._call(method, request, deadline)
        except _ConnectionLost as exc:
            self.close()
            if not reused:
                raise RpcError("UNAVAILABLE", str(exc)) from None
        # The kept connection had died quietly (a kubelet restart): one retry on a fresh one.
        try:
            return self._call(method, request, deadline)
        except _ConnectionLost as exc:
            self.close()
            raise RpcError("UNAVAILABLE", str(exc)) from None

    def _call(self, method: str, request: bytes, deadline: float) -> bytearray:
        conn, sock = self._connect(deadline)
        try:
            stream_id = conn.get_next_available_stream_id()
            conn.send_headers(stream_id, self._request_headers(method, deadline))
            conn.send_data(stream_id, _PREFIX.pack(0, len(request)) + request, end_stream=True)
            self._send(deadline)
            stream = _Stream()
            while not stream.ended:
                data = self._receive(sock, deadline)
                if not data:
                    raise self._lost(stream, "the server closed the connection")
                for event in conn.receive_data(data):
                    self._handle(event, stream_id, stream)
                self._send(deadline)
        except RpcError as exc:
            if exc.code in ("DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "INTERNAL", MALFORMED):
                # The stream is abandoned mid-answer; its connection is not worth untangling.
                self.close()
            raise
        except h2.exceptions.ProtocolError as exc:
            self.close()
            raise RpcError("INTERNAL", f"HTTP/2 protocol error: {exc}") from None
        try:
            return self._result(stream)
        except RpcError as exc:
            if exc.code == MALFORMED:
                self.close()  # a server that sends garbage gets a fresh connection next time
            raise

    def _connect(self, deadline: float) -> tuple[h2.connection.H2Connection, socket.socket]:
        if self._conn is not None and self._sock is not None:
            return self._conn, self._sock
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            sock.connect(self._path)
        except TimeoutError:
            sock.close()
            raise RpcError("DEADLINE_EXCEEDED", f"connecting to {self._path} timed out") from None
        except OSError as exc:
            sock.close()
            reason = exc.strerror or type(exc).__name__
            raise RpcError("UNAVAILABLE", f"cannot connect to {self._path}: {reason}") from None
        conn = h2.connection.H2Connection(
            # Headers stay bytes; _decode_headers reads them, so a server's bad bytes become
            # our MALFORMED error instead of an exception from inside h2.
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        conn.initiate_connection()
        conn.update_settings(
            {
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: _WINDOW,
                h2.settings.SettingCodes.MAX_FRAME_SIZE: _MAX_FRAME,
            }
        )
        # h2 applies our larger frame size only once the server acknowledges it, and then only
        # from the next read: an ACK and a large DATA frame arriving in one read failed as an
        # "overlong frame". Accepting what we have already advertised is safe.
        conn.max_inbound_frame_size = _MAX_FRAME
        conn.increment_flow_control_window(_WINDOW - 65535)
        self._sock, self._conn = sock, conn
        return conn, sock

    def _request_headers(self, method: str, deadline: float) -> list[tuple[str, str]]:
        millis = max(1, int((deadline - time.monotonic()) * 1000))
        return [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{min(millis, 99_999_999)}m"),
            ("user-agent", f"kube-gpu-exporter/{__version__}"),
        ]

    def _send(self, deadline: float) -> None:
        assert self._sock is not None and self._conn is not None
        data = self._conn.data_to_send()
        if not data:
            return
        try:
            self._sock.settimeout(max(0.001, deadline - time.monotonic()))
            self._sock.sendall(data)
        except TimeoutError:
            raise RpcError("DEADLINE_EXCEEDED", "Deadline Exceeded") from None
        except OSError as exc:
            raise _ConnectionLost(f"sending to {self._path}: {exc.strerror or exc}") from None

    @staticmethod
    def _receive(sock: socket.socket, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RpcError("DEADLINE_EXCEEDED", "Deadline Exceeded")
        try:
            sock.settimeout(remaining)
            return sock.recv(_RECV_CHUNK)
        except TimeoutError:
            raise RpcError("DEADLINE_EXCEEDED", "Deadline Exceeded") from None
        except OSError:
            return b""

    def _lost(self, stream: _Stream, why: str) -> Exception:
        if stream.headers or stream.body:
            return RpcError("UNAVAILABLE", f"{why} in the middle of the answer")
        return _ConnectionLost(why)

    def _handle(self, event: h2.events.Event, stream_id: int, stream: _Stream) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            # GOAWAY: streams above last_stream_id were never processed and may be retried.
            last = event.last_stream_id
            if last is None or last < stream_id:
                raise self._lost(stream, "the server is going away")
            return
        if getattr(event, "stream_id", stream_id) != stream_id:
            return
        if isinstance(event, h2.events.ResponseReceived):
            stream.headers = _decode_headers(event.headers, "header")
        elif isinstance(event, h2.events.TrailersReceived):
            stream.trailers = _decode_headers(event.headers, "trailer")
        elif isinstance(event, h2.events.DataReceived):
            assert self._conn is not None
            self._conn.acknowledge_received_data(event.flow_controlled_length, stream_id)
            self._accept(stream, event.data)
        elif isinstance(event, h2.events.StreamEnded):
            stream.ended = True
        elif isinstance(event, h2.events.StreamReset):
            stream.reset_code = int(event.error_code or 0)
            stream.ended = True

    def _accept(self, stream: _Stream, data: bytes) -> None:
        stream.body += data
        if stream.expected is None and len(stream.body) >= _PREFIX.size:
            compressed, length = _PREFIX.unpack_from(stream.body)
            if compressed:
                raise RpcError("INTERNAL", "compressed response, but no compression was offered")
            if length > self._max_receive:
                raise RpcError(
                    "RESOURCE_EXHAUSTED",
                    f"Received message larger than max ({length} vs. {self._max_receive})",
                )
            stream.expected = length
        if stream.expected is not None and len(stream.body) > _PREFIX.size + stream.expected:
            raise RpcError("INTERNAL", "more than one message in a unary response")

    @staticmethod
    def _result(stream: _Stream) -> bytearray:
        if stream.reset_code is not None:
            code = "CANCELLED" if stream.reset_code == 8 else "INTERNAL"
            if stream.reset_code == 7:  # REFUSED_STREAM: never processed
                code = "UNAVAILABLE"
            raise RpcError(code, f"stream reset by the server (HTTP/2 error {stream.reset_code})")
        status = stream.trailers.get("grpc-status", stream.headers.get("grpc-status"))
        if status is None:
            raw_http = stream.headers.get(":status", "0")
            if raw_http != "0" and not _HTTP_STATUS.fullmatch(raw_http):
                raise RpcError(MALFORMED, f"HTTP status {_cut(raw_http)!r} is not a number")
            http = int(raw_http)
            code = _HTTP_TO_STATUS.get(http, "UNKNOWN")
            raise RpcError(code, f"HTTP status {http} without a gRPC status")
        if not _GRPC_STATUS.fullmatch(status):
            raise RpcError(
                MALFORMED,
                f"grpc-status {_cut(status)!r} ({len(status)} characters) is not a status number",
            )
        message = stream.trailers.get("grpc-message", stream.headers.get("grpc-message", ""))
        number = int(status)
        name = STATUS_NAMES[number] if number < len(STATUS_NAMES) else "UNKNOWN"
        if name != "OK":
            details = urllib.parse.unquote(message, errors="replace").replace("\n", " ")
            raise RpcError(name, _cut(details))
        if stream.expected is None or len(stream.body) != _PREFIX.size + stream.expected:
            raise RpcError("INTERNAL", "the response message is incomplete")
        # In place: a 16 MiB answer is not copied again before it is parsed.
        del stream.body[: _PREFIX.size]
        return stream.body


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_DETAILS else text[:_MAX_DETAILS] + "..."


def _decode_headers(headers: list[tuple[bytes, bytes]], what: str) -> dict[str, str]:
    decoded: dict[str, str] = {}
    for name, value in headers:
        try:
            decoded[name.decode("ascii")] = value.decode("utf-8")
        except UnicodeDecodeError:
            shown = name.decode("ascii", errors="replace")[:_MAX_DETAILS]
            raise RpcError(MALFORMED, f"response {what} {shown!r} is not UTF-8") from None
    return decoded

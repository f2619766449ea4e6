"""Deadlines that a slow or trickling API server cannot stretch.

A socket's read timeout bounds each read, not the whole answer: a server that sends a byte every
couple of seconds keeps every read within it for as long as it likes, in the headers as in the
body. So each phase of an answer has a deadline of its own, enforced by a timer that shuts the
socket down when it passes; the read blocked on it then returns or fails at once, and the caller
reports the answer as abandoned.

- The headers (connecting and sending included): `HEADERS_SECONDS` from the request, by the
  connection class installed on the client's pool manager (`bound_answers`). The API server
  answers a LIST from its watch cache, and starts a watch's stream, in well under a second.
- The body: a deadline per answer (`Deadline`), set by whoever reads it: a LIST's own timeout,
  a watch's timeout plus its grace, a few seconds for an error's body.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

HEADERS_SECONDS = 30.0


class Deadline:
    """`seconds` from entering the block; past it, `abandon()` is called once, from a timer
    thread, to wake whatever read is blocked. `expired` says whether that happened."""

    def __init__(self, seconds: float, abandon: Callable[[], None]) -> None:
        self.seconds = seconds
        self._abandon = abandon
        self._expired = threading.Event()
        self._timer: threading.Timer | None = None
        self.ends_at = time.monotonic() + seconds

    def _fire(self) -> None:
        self._expired.set()
        with contextlib.suppress(Exception):
            self._abandon()

    @property
    def expired(self) -> bool:
        return self._expired.is_set() or time.monotonic() > self.ends_at

    def __enter__(self) -> Deadline:
        self.ends_at = time.monotonic() + self.seconds
        self._timer = threading.Timer(self.seconds, self._fire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()


def shut_down(response: Any) -> Callable[[], None]:
    """What abandons a urllib3 response's body: its socket shut for reading, so that a blocked
    read returns at once."""

    def abandon() -> None:
        with contextlib.suppress(Exception):
            response.shutdown()

    return abandon


class _HeadersWithin:
    """Mixed into the client's connection classes: from the request until its headers are in,
    HEADERS_SECONDS at most, or the socket is shut down under the read."""

    _headers_deadline: Deadline | None = None
    headers_seconds: float = HEADERS_SECONDS

    def _abandon_headers(self) -> None:
        sock = getattr(self, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def request(self, *args: Any, **kwargs: Any) -> Any:
        self._headers_deadline = Deadline(self.headers_seconds, self._abandon_headers).__enter__()
        try:
            return super().request(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            self._end_headers_deadline()
            raise

    def getresponse(self) -> Any:
        try:
            return super().getresponse()  # type: ignore[misc]
        finally:
            self._end_headers_deadline()

    def _end_headers_deadline(self) -> None:
        deadline, self._headers_deadline = self._headers_deadline, None
        if deadline is not None:
            deadline.__exit__(None, None, None)


def _bounded(pool_class: Any, headers_seconds: float) -> type:
    connection = pool_class.ConnectionCls
    bounded_connection = type(
        f"HeadersWithin{connection.__name__}",
        (_HeadersWithin, connection),
        {"headers_seconds": headers_seconds},
    )
    return type(
        f"HeadersWithin{pool_class.__name__}", (pool_class,), {"ConnectionCls": bounded_connection}
    )


def bound_answers(pool_manager: Any, headers_seconds: float = HEADERS_SECONDS) -> None:
    """Make every connection the client's pool manager opens from now on keep the headers
    deadline, and make no request again on its own. The pool classes (plain, TLS, or a proxy's)
    are subclassed with a connection class that enforces the deadline: urllib3 documents
    `pool_classes_by_scheme` as the place to choose them. urllib3 would otherwise retry a
    failed read at once, three times: a server that trickles headers would hold each attempt
    for the whole deadline, and the watches retry with backoff anyway."""
    classes = pool_manager.pool_classes_by_scheme
    if all(issubclass(cls.ConnectionCls, _HeadersWithin) for cls in classes.values()):
        return
    pool_manager.pool_classes_by_scheme = {
        scheme: _bounded(cls, headers_seconds) for scheme, cls in classes.items()
    }
    pool_manager.connection_pool_kw["retries"] = False
    # Pools made before now keep their plain connections: start over with the new classes.
    pool_manager.clear()

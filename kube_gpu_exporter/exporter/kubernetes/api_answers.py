"""Reading the API server's answers within bounds.

The `kubernetes` client reads a LIST whole and buffers a watch until a newline, however long; a
broken or hostile API server (or anything between it and us) could fill the exporter's memory
limit that way, or send JSON nested past Python's recursion limit, whose RecursionError is no
error the watch loop expects. Here every answer is read in pieces against a byte limit and a
deadline (answer_deadlines.py), and parsed with those failures turned into BadAnswer or
TimeoutError, one line saying what was wrong.

Parsing costs memory too: a LIST of real pods takes about 6.4 times its size as Python objects,
and JSON made of empty arrays about 25 times. So a LIST is parsed one item at a time
(`list_answer`), each item handed to a converter that keeps only what the exporter uses before
the next is parsed: what a LIST costs at its peak is its bytes, their text, and one item, not
every item at once. The limits below are set from the largest answers a legitimate cluster gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

import urllib3.exceptions

from kube_gpu_exporter.exporter.kubernetes.answer_deadlines import Deadline

MIB = 1 << 20
# One event carries one object. The API server takes request bodies up to 3 MiB and etcd stores
# objects up to 1.5 MiB (both defaults), so no object a client wrote comes near this.
MAX_EVENT_BYTES = 4 * MIB
# This node's pods: 16 MiB is 3,700 pods of a typical 4.5 KB, or 250 of 64 KB; the kubelet runs
# 110 by default. Parsed one pod at a time, a LIST that size costs its 16 MiB of bytes and as
# much again as text at its peak (docs/faults.md, 'API server').
MAX_POD_LIST_BYTES = 16 * MIB
# This node object alone.
MAX_NODE_LIST_BYTES = 4 * MIB
# This node's slices of NVIDIA's GPU driver: 8 GPUs announcing every MIG placement come to about
# 170 devices of 1 KB, some 170 KB; this is over 20 times that.
MAX_SLICE_LIST_BYTES = 4 * MIB
# Reads are this size at most, so one read never holds more than this past a limit.
READ_BYTES = 64 * 1024


class BadAnswer(ValueError):
    """An answer the exporter will not read: over its byte limit, not JSON, nested past Python's
    recursion limit, or not shaped as the API shapes it. A ValueError, like any body that does
    not decode, so the watch loop counts it, marks the view unsynced and backs off."""


class Readable(Protocol):
    """What is read of a urllib3 HTTPResponse."""

    @property
    def headers(self) -> Any: ...

    def read1(self, amt: int | None = None) -> bytes: ...


T = TypeVar("T")
# What a socket shut down under a read (a deadline passing) raises, if it does not just end.
_BROKEN = (OSError, urllib3.exceptions.HTTPError)


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"


def _abandoned(what: str, deadline: Deadline) -> TimeoutError:
    return TimeoutError(f"{what} did not arrive within {deadline.seconds:g}s; abandoned")


def _chunks(response: Readable, deadline: Deadline, what: str, size: int = 0) -> Iterator[bytes]:
    """The body's pieces as they arrive, until it ends; TimeoutError once `deadline` passes,
    whether between pieces (a trickle) or by waking a read blocked on silence."""
    while True:
        try:
            chunk = response.read1(size or READ_BYTES)
        except _BROKEN:
            if deadline.expired:
                raise _abandoned(what, deadline) from None
            raise
        if deadline.expired:
            raise _abandoned(what, deadline)
        if not chunk:
            return
        yield chunk


def read_prefix(response: Readable, limit: int, deadline: Deadline) -> bytearray:
    """At most `limit` bytes of the body, as many as arrive before `deadline`: an error's
    body, whose first bytes say all there is to say, and whose rest is never read."""
    body = bytearray()
    try:
        for chunk in _chunks(response, deadline, "an error body", min(READ_BYTES, limit)):
            body += chunk[: limit - len(body)]
            if len(body) >= limit:
                break
    except (TimeoutError, *_BROKEN):
        pass
    return body


def read_body(response: Readable, limit: int, what: str, deadline: Deadline) -> bytearray:
    """The whole body of `response`, refused with BadAnswer past `limit` bytes (at once when
    Content-Length says so, else as soon as that many arrived), and abandoned with TimeoutError
    past `deadline`."""
    declared = str(response.headers.get("content-length") or "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BadAnswer(f"{what} is {int(declared)} bytes, over its {_size(limit)} limit")
    body = bytearray()
    for chunk in _chunks(response, deadline, what):
        body += chunk
        if len(body) > limit:
            raise BadAnswer(f"{what} is over its {_size(limit)} limit")
    return body


def answer_lines(
    response: Readable, limit: int, deadline: Deadline, what: str
) -> Iterator[bytearray]:
    """The newline-ended lines of a streamed body (a watch), without their newline. A line
    longer than `limit` is BadAnswer; a stream still going at `deadline` is a TimeoutError,
    since a server trickling bytes defeats the socket's read timeout. Bytes after the last
    newline when the stream ends are a cut-off line, and dropped."""
    pending = bytearray()
    for chunk in _chunks(response, deadline, what):
        start = 0
        # Only the new bytes are searched: searching the whole pending line for each chunk
        # would cost time quadratic in its length.
        while (end := chunk.find(b"\n", start)) != -1:
            if len(pending) + end - start > limit:
                raise BadAnswer(f"{what} has a line over its {_size(limit)} limit")
            pending += chunk[start:end]
            yield pending
            pending = bytearray()
            start = end + 1
        pending += chunk[start:]
        if len(pending) > limit:
            raise BadAnswer(f"{what} has a line over its {_size(limit)} limit")


def parse_json(data: bytes | bytearray, what: str) -> Any:
    """`data` as JSON; BadAnswer when it is not JSON or is nested past the recursion limit."""
    try:
        return json.loads(data)
    except RecursionError:
        raise BadAnswer(f"{what} is JSON nested deeper than Python parses") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes
        raise BadAnswer(f"{what} is not JSON ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


_DECODER = json.JSONDecoder()
_WHITESPACE = re.compile(r"[ \t\n\r]*")


class _Cursor:
    """A position in a JSON text, stepped over one value at a time with the C decoder."""

    def __init__(self, text: str, what: str) -> None:
        self.text, self.pos, self.what = text, 0, what

    def skip(self) -> str:
        """The next character that is not whitespace ("" at the end), without moving past it."""
        text = self.text
        pos = self.pos = _WHITESPACE.match(text, self.pos).end()  # type: ignore[union-attr]
        return text[pos] if pos < len(text) else ""

    def expect(self, allowed: str) -> str:
        found = self.skip()
        if not found or found not in allowed:
            raise BadAnswer(f"{self.what} is not JSON (expected {allowed!r} at {self.pos})")
        self.pos += 1
        return found

    def value(self) -> Any:
        self.skip()
        try:
            found, self.pos = _DECODER.raw_decode(self.text, self.pos)
        except RecursionError:
            raise BadAnswer(f"{self.what} is JSON nested deeper than Python parses") from None
        except ValueError as exc:
            raise BadAnswer(f"{self.what} is not JSON ({_reason(exc)})") from None
        return found


def list_answer(
    body: bytes | bytearray, what: str, convert: Callable[[Any], T]
) -> tuple[list[T], str]:
    """The items of a LIST answer, each passed through `convert` as soon as it is parsed, and
    the list's resourceVersion. Only the top-level object is walked here; its values, an item
    included, are parsed whole by json's C decoder."""
    try:
        text = bytes(body).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadAnswer(f"{what} is not JSON ({_reason(exc)})") from None
    cursor = _Cursor(text, what)
    if cursor.skip() != "{":
        raise BadAnswer(f"{what} is not a JSON object")
    cursor.pos += 1
    items: list[T] = []
    version = ""
    if cursor.skip() == "}":
        cursor.pos += 1
    else:
        while True:
            key = cursor.value()
            if not isinstance(key, str):
                raise BadAnswer(f"{what} is not JSON (a key that is no string)")
            cursor.expect(":")
            if key == "items" and cursor.skip() == "[":
                # A repeated key: the last one counts, as for json.loads.
                items = _items(cursor, convert)
            else:
                found = cursor.value()
                if key == "items" and found is not None:
                    raise BadAnswer(f"{what} has items that are not a list")
                if key == "items":
                    items = []
                if key == "metadata":
                    given = found.get("resourceVersion") if isinstance(found, dict) else None
                    version = given if isinstance(given, str) else ""
            if cursor.expect(",}") == "}":
                break
    if cursor.skip():
        raise BadAnswer(f"{what} is not JSON (extra data at {cursor.pos})")
    return items, version


def _items(cursor: _Cursor, convert: Callable[[Any], T]) -> list[T]:
    cursor.expect("[")
    items: list[T] = []
    if cursor.skip() == "]":
        cursor.pos += 1
        return items
    while True:
        items.append(convert(cursor.value()))
        if cursor.expect(",]") == "]":
            return items

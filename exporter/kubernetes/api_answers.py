"""Reading the API server's answers within bounds.

The `kubernetes` client reads a LIST whole and buffers a watch until a newline, however long; a
broken or hostile API server (or anything between it and us) could fill the exporter's memory
limit that way, or send JSON nested past Python's recursion limit, whose RecursionError is no
error the watch loop expects. Here every answer is read in pieces against a byte limit and
parsed with those failures turned into BadAnswer, one line saying what was wrong.

Parsing costs memory too: a LIST of real pods takes about 6.4 times its size as Python objects,
and JSON made of empty arrays about 25 times. The limits below are set from the largest answers
a legitimate cluster gives, and that factor is what they cost at most.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

MIB = 1 << 20
# One event carries one object. The API server takes request bodies up to 3 MiB and etcd stores
# objects up to 1.5 MiB (both defaults), so no object a client wrote comes near this.
MAX_EVENT_BYTES = 4 * MIB
# This node's pods: 16 MiB is 3,700 pods of a typical 4.5 KB, or 250 of 64 KB; the kubelet runs
# 110 by default. Parsed, a LIST that size of real pods takes about 100 MB.
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


def _size(limit: int) -> str:
    return f"{limit // MIB} MiB" if limit % MIB == 0 else f"{limit} bytes"


def read_body(response: Readable, limit: int, what: str) -> bytearray:
    """The whole body of `response`, refused with BadAnswer past `limit` bytes: at once when
    Content-Length says so, else as soon as that many arrived."""
    declared = str(response.headers.get("content-length") or "")
    if declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BadAnswer(f"{what} is {int(declared)} bytes, over its {_size(limit)} limit")
    body = bytearray()
    while chunk := response.read1(READ_BYTES):
        body += chunk
        if len(body) > limit:
            raise BadAnswer(f"{what} is over its {_size(limit)} limit")
    return body


def answer_lines(response: Readable, limit: int, deadline: float, what: str) -> Iterator[bytearray]:
    """The newline-ended lines of a streamed body (a watch), without their newline. A line
    longer than `limit` is BadAnswer; a stream still going at `deadline` (time.monotonic()) is a
    TimeoutError, since a server trickling bytes defeats the socket's read timeout. Bytes after
    the last newline when the stream ends are a cut-off line, and dropped."""
    pending = bytearray()
    while chunk := response.read1(READ_BYTES):
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
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not end in time; abandoned")


def parse_json(data: bytes | bytearray, what: str) -> Any:
    """`data` as JSON; BadAnswer when it is not JSON or is nested past the recursion limit."""
    try:
        return json.loads(data)
    except RecursionError:
        raise BadAnswer(f"{what} is JSON nested deeper than Python parses") from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes
        reason = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        raise BadAnswer(f"{what} is not JSON ({reason})") from None


def list_items(body: Any, what: str) -> tuple[list[Any], str]:
    """The items and resourceVersion of a parsed LIST answer."""
    if not isinstance(body, dict):
        raise BadAnswer(f"{what} is not a JSON object")
    items = body.get("items") or []
    if not isinstance(items, list):
        raise BadAnswer(f"{what} has items that are not a list")
    metadata = body.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return items, version if isinstance(version, str) else ""

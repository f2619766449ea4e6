"""One WATCH request's events, read within bounds (api_answers.py) instead of through the
`kubernetes` client's Watch, which buffers an event line however long it grows and builds a
typed model of every object the exporter then ignores. The request goes through api_requests.py,
so that an error answer is read within bounds too.

The stream yields (type, object) for each event and remembers the newest resourceVersion seen,
bookmarks included, to resume from. An ERROR event ends it: 410 Gone as WatchExpired (list
again), any other status as the client's ApiException.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kube_gpu_exporter.exporter.kubernetes.answer_deadlines import Deadline, shut_down
from kube_gpu_exporter.exporter.kubernetes.api_answers import (
    MAX_EVENT_BYTES,
    BadAnswer,
    answer_lines,
    parse_json,
)
from kube_gpu_exporter.exporter.kubernetes.api_requests import ApiGetter, close

GONE = 410


class WatchExpired(Exception):
    """The watch's resourceVersion fell out of the server's history: list again."""


def _status_error(status: Any) -> Exception:
    """What an ERROR event's Status object means."""
    import kubernetes

    if not isinstance(status, dict):
        return BadAnswer("a watch ERROR event carries no Status object")
    code = status.get("code")
    if code == GONE:
        return WatchExpired()
    reason = " ".join(str(status.get(k, "")) for k in ("reason", "message")).strip()
    return kubernetes.client.ApiException(
        status=code if isinstance(code, int) else 0, reason=reason.splitlines()[0][:300]
    )


class WatchStream:
    """One watch request's answer, read within `deadline` (the server's own timeout plus a
    grace), from its open until close()."""

    def __init__(
        self,
        response: Any,
        what: str,
        deadline_seconds: float,
        max_event_bytes: int = MAX_EVENT_BYTES,
    ) -> None:
        self._response = response
        self._what = what
        self._deadline = Deadline(deadline_seconds, shut_down(response)).__enter__()
        self._max_event_bytes = max_event_bytes
        # The newest resourceVersion an event carried; empty until one did.
        self.resource_version = ""

    @classmethod
    def open(
        cls,
        getter: ApiGetter,
        path: str,
        what: str,
        selector: str,
        version: str,
        timeout_seconds: int,
        stall_grace_seconds: float,
    ) -> WatchStream:
        """Start a watch of the collection at `path`. The server ends it after
        `timeout_seconds`; silence or a trickle for `stall_grace_seconds` past that abandons it."""
        import kubernetes

        query = [
            ("fieldSelector", selector),
            ("resourceVersion", version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
            ("watch", "true"),
        ]
        try:
            response = getter.open(path, query, timeout_seconds + stall_grace_seconds, what)
        except kubernetes.client.ApiException as exc:
            if exc.status == GONE:
                raise WatchExpired() from None
            raise
        return cls(response, what, timeout_seconds + stall_grace_seconds)

    @property
    def response(self) -> Any:
        return self._response

    def events(self) -> Iterator[tuple[str, dict]]:
        lines = answer_lines(self._response, self._max_event_bytes, self._deadline, self._what)
        for line in lines:
            if not line.strip():
                continue
            event = parse_json(line, f"an event of {self._what}")
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise BadAnswer(f"an event of {self._what} has no type")
            kind, obj = event["type"], event.get("object")
            if kind == "ERROR":
                raise _status_error(obj)
            if not isinstance(obj, dict):
                raise BadAnswer(f"a {kind[:20]} event of {self._what} carries no object")
            metadata = obj.get("metadata")
            version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
            if isinstance(version, str) and version:
                self.resource_version = version
            yield kind, obj

    def close(self) -> None:
        """Drop the connection (an unfinished stream cannot go back to the pool) and the
        deadline's timer."""
        self._deadline.__exit__(None, None, None)
        close(self._response)

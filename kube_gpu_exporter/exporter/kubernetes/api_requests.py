"""GET requests to the API server through the `kubernetes` client's configuration, with every
answer checked before its body is read.

The generated API calls read an error answer's body whole before raising ApiException, even with
`_preload_content=False`: a pods LIST answered 500 with a 1 GiB body took the exporter to 4.18 GB,
where 60 MiB is enough for an OOM kill at the chart's 256 MiB limit, and a body trickled a byte
at a time froze the watch behind it for good. So the watches make their requests here: the
client still builds each one (the kubeconfig's server, its TLS settings and proxy, the bearer
token and its refresh hook), and its REST layer sends it, but the status is looked at first. An
error's body is read within `MAX_ERROR_BYTES` and `ERROR_BODY_SECONDS` for the Status message it
carries, and the connection is dropped with whatever it has left unread.

Every answer open here is registered until it is closed, so that stop() can shut them all down
at once instead of waiting for a read to time out.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from kube_gpu_exporter.exporter.kubernetes.answer_deadlines import (
    HEADERS_SECONDS,
    Deadline,
    bound_answers,
    shut_down,
)
from kube_gpu_exporter.exporter.kubernetes.api_answers import read_prefix

# The Status object the API server sends with an error is a few hundred bytes.
MAX_ERROR_BYTES = 64 * 1024
ERROR_BODY_SECONDS = 5.0
CONNECT_SECONDS = 5.0
_AUTH_SETTINGS = ["BearerToken"]


def _status_reason(reason: str, body: bytes) -> str:
    """The HTTP reason, with the Status message when the body has one, on one short line."""
    message = ""
    with contextlib.suppress(ValueError, RecursionError):
        status = json.loads(body)
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            message = status["message"]
    text = f"{reason}: {message}" if message else reason
    return " ".join(text.split())[:300]


class OpenAnswers:
    """The answers being read now, across the watch threads, for stop() to shut down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._shut = False

    @contextlib.contextmanager
    def holding(self, response: Any) -> Iterator[Any]:
        with self._lock:
            self._open.add(response)
            shut = self._shut
        if shut:
            # An answer whose request was under way when everything was shut down: a read
            # of it would otherwise wait for the server, up to a watch's whole timeout.
            shut_down(response)()
        try:
            yield response
        finally:
            with self._lock:
                self._open.discard(response)

    def shut_down_all(self) -> None:
        """Shut down every answer being read, and, from now on, every answer as it is held."""
        with self._lock:
            self._shut = True
            answers = list(self._open)
        for response in answers:
            shut_down(response)()


def close(response: Any) -> None:
    """Drop the connection: an unfinished answer cannot go back to the pool."""
    with contextlib.suppress(Exception):
        response.close()
    with contextlib.suppress(Exception):
        response.release_conn()


class ApiGetter:
    def __init__(
        self,
        api_client: Any,
        answers: OpenAnswers,
        headers_seconds: float = HEADERS_SECONDS,
        error_body_seconds: float = ERROR_BODY_SECONDS,
    ) -> None:
        self._client = api_client
        self._answers = answers
        self._error_body_seconds = error_body_seconds
        bound_answers(api_client.rest_client.pool_manager, headers_seconds)

    def open(
        self, path: str, query: Sequence[tuple[str, str]], read_timeout: float, what: str
    ) -> Any:
        """GET `path` and return its urllib3 response, its body unread, once the status says
        success; any other status is an ApiException, its body read within bounds."""
        import kubernetes

        method, url, headers, _body, _post = self._client.param_serialize(
            "GET",
            path,
            query_params=list(query),
            header_params={"Accept": "application/json"},
            auth_settings=_AUTH_SETTINGS,
        )
        answer = self._client.rest_client.request(
            method, url, headers=headers, _request_timeout=(CONNECT_SECONDS, read_timeout)
        )
        response = answer.response
        if 200 <= response.status <= 299:
            return response
        body = bytearray()
        try:
            with (
                self._answers.holding(response),
                Deadline(self._error_body_seconds, shut_down(response)) as deadline,
            ):
                body = read_prefix(response, MAX_ERROR_BYTES, deadline)
        except Exception:  # a broken error body is still the error it was
            pass
        finally:
            close(response)
        reason = _status_reason(str(response.reason or ""), bytes(body))
        raise kubernetes.client.ApiException(status=response.status, reason=f"{reason} ({what})")

    def holding(self, response: Any) -> contextlib.AbstractContextManager[Any]:
        """Register `response` for stop() while a block reads it."""
        return self._answers.holding(response)

"""Polls the kubelet's pod-resources socket in its own thread, gently.

The kubelet rate-limits this API to 100 QPS with a burst of 10 for every client on the node, so we
refresh at most once per interval, keep one call in flight, and back off on RESOURCE_EXHAUSTED
and UNAVAILABLE. A kubelet restart recreates the socket: on UNAVAILABLE the connection is dropped,
so the next attempt connects to the new socket without restarting the exporter. The calls go
through `grpc_unary`, our own small gRPC client, rather than grpcio (its docstring says why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass, replace
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from exporter.background import BackgroundThread
from exporter.backoff import Backoff
from exporter.podresources.allocations import PodResourcesSnapshot, from_responses
from exporter.podresources.answer_bounds import (
    TOO_LARGE,
    AnswerMalformed,
    AnswerTooLarge,
    check_answer,
)
from exporter.podresources.grpc_unary import RpcError, UnaryChannel
from exporter.podresources.v1 import api_pb2

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Busy nodes exceed gRPC's 4 MiB default (#509) and the kubelet's own client stops at 16 MiB.
# Twice that lets a 16 MiB List through with room, while bounding what one answer can cost us:
# the received bytes plus the parsed message, about three times the size, until the sweep ends.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_BACK_OFF = ("RESOURCE_EXHAUSTED", "UNAVAILABLE")
_Response = TypeVar("_Response", bound=Message)
# The service's full name: package `v1`, as the kubelet registers it.
_SERVICE = "/v1.PodResourcesLister/"


@dataclass(frozen=True, slots=True)
class PodResourcesStatus:
    up: bool
    last_success_at: float | None
    last_duration_seconds: float
    errors: tuple[tuple[str, int], ...]  # (gRPC status code name, count)
    last_error: str | None


class PodResourcesClient:
    """Blocking calls over the unix socket; one connection, reopened after the kubelet restarts."""

    def __init__(
        self,
        socket_path: str,
        timeout_seconds: float = 10.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._timeout = timeout_seconds
        self._channel = UnaryChannel(socket_path, max_message_bytes)

    def reset(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Message, response_type: type[_Response]) -> _Response:
        payload = self._channel.call(_SERVICE + method, request.SerializeToString(), self._timeout)
        try:
            # Before parsing: 32 MiB of tiny fields would decode to gigabytes (answer_bounds).
            check_answer(method, payload)
            return response_type.FromString(payload)
        except AnswerTooLarge as exc:
            raise RpcError(TOO_LARGE, str(exc)) from None
        except (DecodeError, AnswerMalformed) as exc:
            raise RpcError("INTERNAL", f"undecodable {method} response: {exc}") from None

    def list(self) -> api_pb2.ListPodResourcesResponse:
        return self._call(
            "List", api_pb2.ListPodResourcesRequest(), api_pb2.ListPodResourcesResponse
        )

    def allocatable(self) -> api_pb2.AllocatableResourcesResponse:
        return self._call(
            "GetAllocatableResources",
            api_pb2.AllocatableResourcesRequest(),
            api_pb2.AllocatableResourcesResponse,
        )

    def get(self, namespace: str, pod: str) -> api_pb2.GetPodResourcesResponse:
        request = api_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
        return self._call("Get", request, api_pb2.GetPodResourcesResponse)


class PodResourcesWatcher(BackgroundThread):
    thread_name = "podresources"

    def __init__(
        self,
        client: PodResourcesClient,
        interval_seconds: float,
        extra_resources: frozenset[str] = frozenset(),
        max_backoff_seconds: float = 60.0,
    ) -> None:
        super().__init__()
        self._client = client
        self._interval = interval_seconds
        self._extra = extra_resources
        self._max_backoff = max_backoff_seconds
        self._allocatable_unimplemented = False
        self._errors: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.latest: PodResourcesSnapshot | None = None
        self._status = PodResourcesStatus(False, None, 0.0, (), None)

    @property
    def status(self) -> PodResourcesStatus:
        """The last round's outcome; never up while the thread is crashed or has given up, as
        `latest` is then no longer refreshed."""
        status = self._status
        if status.up and not self.thread_healthy:
            return replace(status, up=False, last_error=f"thread crashed: {self.last_crash}")
        return status

    def _run(self) -> None:
        backoff = Backoff(self._interval, self._max_backoff)
        while not self._stop.is_set():
            started = time.monotonic()
            if self.refresh():
                backoff.succeeded()
                delay = self._interval
            else:
                delay = backoff.failed()
            # A failed call is an outcome the loop handles; only an exception ends a round.
            self._progressed()
            self._stop.wait(max(0.0, delay - (time.monotonic() - started)))
        self._client.reset()

    def _on_crash(self) -> None:
        # Whatever the connection was in the middle of is not worth untangling.
        self._client.reset()

    def refresh(self) -> bool:
        """One List (and GetAllocatableResources) round; returns whether it succeeded."""
        started = time.monotonic()
        try:
            listing = self._client.list()
            allocatable = None
            if not self._allocatable_unimplemented:
                try:
                    allocatable = self._client.allocatable()
                except RpcError as exc:
                    if exc.code != "UNIMPLEMENTED":
                        raise
                    log.info("kubelet has no GetAllocatableResources (before 1.21); skipping it")
                    self._allocatable_unimplemented = True
        except RpcError as exc:
            with self._lock:
                self._errors[exc.code] += 1
            if exc.code in _BACK_OFF:
                self._client.reset()
            message = str(exc)
            if message != self._status.last_error:
                log.warning("pod-resources call failed: %s", message)
            self._set_status(False, time.monotonic() - started, message)
            return False
        self.latest = from_responses(listing, allocatable, self._extra, time.time())
        if self._status.last_error:
            log.info("pod-resources API answering again")
        self._set_status(True, time.monotonic() - started, None)
        return True

    def _set_status(self, up: bool, duration: float, error: str | None) -> None:
        with self._lock:
            errors = tuple(sorted(self._errors.items()))
        self._status = PodResourcesStatus(
            up=up,
            last_success_at=time.time() if up else self._status.last_success_at,
            last_duration_seconds=duration,
            errors=errors,
            last_error=error,
        )

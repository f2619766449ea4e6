"""Polls the kubelet's pod-resources socket in its own thread, gently.

The kubelet rate-limits this API to 100 QPS with a burst of 10 for every client on the node, so we
refresh at most once per interval, keep one call in flight, and back off on RESOURCE_EXHAUSTED
and UNAVAILABLE. A kubelet restart recreates the socket: on UNAVAILABLE the channel is rebuilt, so
the next attempt connects to the new socket without restarting the exporter.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass

import grpc

from exporter.background import BackgroundThread
from exporter.backoff import Backoff
from exporter.podresources.allocations import PodResourcesSnapshot, from_responses
from exporter.podresources.v1 import api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Busy nodes exceed gRPC's 4 MiB default (#509) and the kubelet's own client stops at 16 MiB.
# Twice that lets a 16 MiB List through with room, while bounding what one answer can cost us:
# the received bytes plus the parsed message, about three times the size, until the sweep ends.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_BACK_OFF = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)


@dataclass(frozen=True, slots=True)
class PodResourcesStatus:
    up: bool
    last_success_at: float | None
    last_duration_seconds: float
    errors: tuple[tuple[str, int], ...]  # (gRPC status code name, count)
    last_error: str | None


class PodResourcesClient:
    """Blocking calls over the unix socket; one channel, rebuilt after the kubelet restarts."""

    def __init__(
        self,
        socket_path: str,
        timeout_seconds: float = 10.0,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._target = f"unix://{socket_path}"
        self._timeout = timeout_seconds
        self._max_message_bytes = max_message_bytes
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def _lister(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._stub is None:
            self._channel = grpc.insecure_channel(
                self._target,
                options=[
                    ("grpc.max_receive_message_length", self._max_message_bytes),
                    ("grpc.initial_reconnect_backoff_ms", 200),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                ],
            )
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def reset(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._stub = None

    def list(self) -> api_pb2.ListPodResourcesResponse:
        return self._lister().List(api_pb2.ListPodResourcesRequest(), timeout=self._timeout)

    def allocatable(self) -> api_pb2.AllocatableResourcesResponse:
        return self._lister().GetAllocatableResources(
            api_pb2.AllocatableResourcesRequest(), timeout=self._timeout
        )

    def get(self, namespace: str, pod: str) -> api_pb2.GetPodResourcesResponse:
        request = api_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
        return self._lister().Get(request, timeout=self._timeout)


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
        self.status = PodResourcesStatus(False, None, 0.0, (), None)

    def _run(self) -> None:
        backoff = Backoff(self._interval, self._max_backoff)
        while not self._stop.is_set():
            started = time.monotonic()
            if self.refresh():
                backoff.succeeded()
                delay = self._interval
            else:
                delay = backoff.failed()
            self._stop.wait(max(0.0, delay - (time.monotonic() - started)))
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
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                        raise
                    log.info("kubelet has no GetAllocatableResources (before 1.21); skipping it")
                    self._allocatable_unimplemented = True
        except grpc.RpcError as exc:
            code = exc.code()
            with self._lock:
                self._errors[code.name] += 1
            if code in _BACK_OFF:
                self._client.reset()
            message = f"{code.name}: {exc.details()}"
            if message != self.status.last_error:
                log.warning("pod-resources call failed: %s", message)
            self._set_status(False, time.monotonic() - started, message)
            return False
        self.latest = from_responses(listing, allocatable, self._extra, time.time())
        if self.status.last_error:
            log.info("pod-resources API answering again")
        self._set_status(True, time.monotonic() - started, None)
        return True

    def _set_status(self, up: bool, duration: float, error: str | None) -> None:
        with self._lock:
            errors = tuple(sorted(self._errors.items()))
        self.status = PodResourcesStatus(
            up=up,
            last_success_at=time.time() if up else self.status.last_success_at,
            last_duration_seconds=duration,
            errors=errors,
            last_error=error,
        )

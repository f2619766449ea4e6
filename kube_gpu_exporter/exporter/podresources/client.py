"""Polls the kubelet's pod-resources socket in its own thread, gently.

The kubelet rate-limits this API to 100 QPS with a burst of 10 for every client on the node, so we
refresh at most once per interval, keep one call in flight, and back off on RESOURCE_EXHAUSTED
and UNAVAILABLE. A kubelet restart recreates the socket: on UNAVAILABLE the connection is dropped,
so the next attempt connects to the new socket without restarting the exporter. The calls go
through `grpc_unary`, our own small gRPC client, rather than grpcio (its docstring says why).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import Counter
from dataclasses import dataclass, replace
from typing import TypeVar

from google.protobuf.message import DecodeError, Message

from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot, from_responses
from kube_gpu_exporter.exporter.podresources.answer_bounds import (
    TOO_LARGE,
    AnswerMalformed,
    AnswerTooLarge,
    check_answer,
)
from kube_gpu_exporter.exporter.podresources.grpc_unary import RpcError, UnaryChannel
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2
from kube_gpu_exporter.exporter.scrape_cadence import ScrapeCadence

log = logging.getLogger(__name__)

# Busy nodes exceed gRPC's 4 MiB default (#509) and the kubelet's own client stops at 16 MiB.
# Twice that lets a 16 MiB List through with room, while bounding what one answer can cost us:
# the received bytes plus the parsed message, about three times the size, until the sweep ends.
MAX_MESSAGE_BYTES = 32 * 1024 * 1024
_BACK_OFF = ("RESOURCE_EXHAUSTED", "UNAVAILABLE")
# Answers up to this size are kept to be recognised next round (a busy node's List is tens of
# KiB); a larger one is parsed every time rather than held twice.
_REMEMBERED_ANSWER_BYTES = 1024 * 1024
_Response = TypeVar("_Response", bound=Message)
# The service's full name: package `v1`, as the kubelet registers it.
_SERVICE = "/v1.PodResourcesLister/"
# What the node offers changes when a device plugin or DRA driver re-registers (which also
# restarts or evicts the pods on it, changing the List answer) or when a device turns unhealthy
# (which changes only this answer). So GetAllocatableResources is asked again whenever the List
# answer changes, and otherwise at most every 10 s: an unhealthy GPU still leaves the allocatable
# count within seconds, and a 1 s poll no longer doubles every round's cost.
ALLOCATABLE_REFRESH_SECONDS = 10.0


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
        # Per method, the last answer's bytes and what they parsed to: the kubelet's answer is
        # the same bytes round after round until a pod changes, and comparing bytes costs far
        # less than checking and parsing them again.
        self._last: dict[str, tuple[bytearray, Message]] = {}

    def reset(self) -> None:
        self._channel.close()

    def _call(self, method: str, request: Message, response_type: type[_Response]) -> _Response:
        payload = self._channel.call(_SERVICE + method, request.SerializeToString(), self._timeout)
        last = self._last.get(method)
        if last is not None and last[0] == payload and isinstance(last[1], response_type):
            return last[1]
        message = self._parse(method, payload, response_type)
        if len(payload) <= _REMEMBERED_ANSWER_BYTES:
            self._last[method] = (payload, message)
        else:
            self._last.pop(method, None)
        return message

    @staticmethod
    def _parse(method: str, payload: bytearray, response_type: type[_Response]) -> _Response:
        try:
            # Before parsing: 32 MiB of tiny fields would decode to gigabytes (answer_bounds).
            check_answer(method, payload)
            # upb parses any buffer; the stubs say bytes, and a copy of up to 32 MiB would cost.
            return response_type.FromString(payload)  # type: ignore[arg-type]
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
        cadence: ScrapeCadence | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(clock)
        self._client = client
        self._interval = interval_seconds
        # None: list every interval; else only when it says (just before a scrape).
        self._cadence = cadence
        self._extra = extra_resources
        self._max_backoff = max_backoff_seconds
        self._allocatable_unimplemented = False
        # The last answers and when the allocatable one was read; reused while they hold.
        self._listing: api_pb2.ListPodResourcesResponse | None = None
        self._allocatable: api_pb2.AllocatableResourcesResponse | None = None
        self._allocatable_at = -math.inf
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
        clock = self._clock
        while not self._stop.is_set():
            started = clock.monotonic()
            if self._cadence is not None and not self._cadence.due():
                delay = self._idle_delay()
            elif self.refresh():
                backoff.succeeded()
                if self._cadence is not None:
                    self._cadence.done()
                delay = self._idle_delay()
            else:
                delay = backoff.failed()
            # A failed call is an outcome the loop handles; only an exception ends a round.
            self._progressed()
            clock.wait(self._stop, delay - (clock.monotonic() - started))
        self._client.reset()

    def _idle_delay(self) -> float:
        # Timed to scrapes, the next List waits for the next one due; else every interval.
        if self._cadence is None:
            return self._interval
        return self._cadence.sleep_seconds(self._interval)

    def _on_crash(self) -> None:
        # Whatever the connection was in the middle of is not worth untangling.
        self._client.reset()

    def refresh(self) -> bool:
        """One List (and GetAllocatableResources) round; returns whether it succeeded."""
        clock = self._clock
        started = clock.monotonic()
        try:
            listing = self._client.list()
            allocatable = self._allocatable
            if not self._allocatable_unimplemented and (
                listing != self._listing
                or started - self._allocatable_at >= ALLOCATABLE_REFRESH_SECONDS
            ):
                try:
                    allocatable = self._client.allocatable()
                    self._allocatable_at = started
                except RpcError as exc:
                    if exc.code != "UNIMPLEMENTED":
                        raise
                    log.info("kubelet has no GetAllocatableResources (before 1.21); skipping it")
                    self._allocatable_unimplemented = True
        except RpcError as exc:
            # A kubelet that failed may have restarted with other devices: ask again next time.
            self._allocatable_at = -math.inf
            with self._lock:
                self._errors[exc.code] += 1
            if exc.code in _BACK_OFF:
                self._client.reset()
            message = str(exc)
            if message != self._status.last_error:
                log.warning("pod-resources call failed: %s", message)
            self._set_status(False, clock.monotonic() - started, message)
            return False
        latest = self.latest
        if (
            latest is not None
            and listing == self._listing
            and allocatable is self._allocatable
            and not self._status.last_error
        ):
            # Nothing changed: the parsed allocations still hold, only their time moves.
            self.latest = replace(latest, taken_at=clock.time())
        else:
            self.latest = from_responses(listing, allocatable, self._extra, clock.time())
        self._listing, self._allocatable = listing, allocatable
        if self._status.last_error:
            log.info("pod-resources API answering again")
        self._set_status(True, clock.monotonic() - started, None)
        return True

    def _set_status(self, up: bool, duration: float, error: str | None) -> None:
        with self._lock:
            errors = tuple(sorted(self._errors.items()))
        self._status = PodResourcesStatus(
            up=up,
            last_success_at=self._clock.time() if up else self._status.last_success_at,
            last_duration_seconds=duration,
            errors=errors,
            last_error=error,
        )

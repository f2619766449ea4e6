"""A kubelet that answers pod-resources calls with malformed HTTP/2 responses, over a real unix
socket: every such answer is one MALFORMED error with the usual backoff, never an exception that
ends the `podresources` thread, and good answers afterwards bring attribution back."""

from __future__ import annotations

import os
import re
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.podresources.grpc_unary import MALFORMED, RpcError, UnaryChannel
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import render
from tests.support.clock_steps import parked, step_until

Headers = list[tuple[bytes, bytes]]
OK_HEADERS: Headers = [(b":status", b"200"), (b"content-type", b"application/grpc")]
GOOD_LIST = api_pb2.ListPodResourcesResponse(
    pod_resources=[
        api_pb2.PodResources(
            name="trainer-0",
            namespace="ml",
            containers=[
                api_pb2.ContainerResources(
                    name="main",
                    devices=[
                        api_pb2.ContainerDevices(
                            resource_name="nvidia.com/gpu",
                            device_ids=["GPU-0f1e2d3c-0000-4000-8000-000000000001"],
                        )
                    ],
                )
            ],
        )
    ]
)

# (what is wrong, response headers, trailers or None for a trailers-only answer)
MALFORMED_ANSWERS: dict[str, tuple[Headers, Headers | None]] = {
    "non-numeric grpc-status": (OK_HEADERS, [(b"grpc-status", b"abc")]),
    "5,000-digit grpc-status": (OK_HEADERS, [(b"grpc-status", b"1" * 5000)]),
    # str.isdigit() is true for a superscript two, int() refuses it.
    "superscript grpc-status": (OK_HEADERS, [(b"grpc-status", "²".encode())]),
    "non-numeric :status": ([(b":status", b"abc"), (b"content-type", b"text/plain")], None),
    "non-UTF-8 grpc-message": (
        OK_HEADERS,
        [(b"grpc-status", b"13"), (b"grpc-message", b"bad \xff\xfe bytes")],
    ),
}


class HostileKubelet:
    """An HTTP/2 server on a unix socket that answers every call with `answer` (headers,
    trailers); None answers with a valid List or GetAllocatableResources response."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.answer: tuple[Headers, Headers | None] | None = None
        self.calls = 0
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._listener.bind(str(path))
        self._listener.listen(8)
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def close(self) -> None:
        self._closed = True
        self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._accepting.join(5)
        for thread in self._threads:
            thread.join(5)
        if self.path.exists():
            os.unlink(self.path)

    def _accept(self) -> None:
        while not self._closed:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        conn = h2.connection.H2Connection(
            h2.config.H2Configuration(
                client_side=False, header_encoding=None, validate_outbound_headers=False
            )
        )
        conn.initiate_connection()
        sock.settimeout(0.2)
        paths: dict[int, bytes] = {}
        with sock:
            try:
                sock.sendall(conn.data_to_send())
                while not self._closed:
                    try:
                        data = sock.recv(65536)
                    except TimeoutError:
                        continue
                    if not data:
                        return
                    for event in conn.receive_data(data):
                        if isinstance(event, h2.events.RequestReceived):
                            paths[event.stream_id] = dict(event.headers)[b":path"]
                        elif isinstance(event, h2.events.StreamEnded):
                            self._respond(conn, event.stream_id, paths.pop(event.stream_id))
                    sock.sendall(conn.data_to_send())
            except OSError:
                return

    def _respond(self, conn: h2.connection.H2Connection, stream_id: int, path: bytes) -> None:
        self.calls += 1
        if self.answer is None:
            message = (
                GOOD_LIST if path.endswith(b"/List") else api_pb2.AllocatableResourcesResponse()
            ).SerializeToString()
            conn.send_headers(stream_id, OK_HEADERS)
            conn.send_data(stream_id, struct.pack(">BI", 0, len(message)) + message)
            conn.send_headers(stream_id, [(b"grpc-status", b"0")], end_stream=True)
            return
        headers, trailers = self.answer
        conn.send_headers(stream_id, headers, end_stream=trailers is None)
        if trailers is not None:
            conn.send_headers(stream_id, trailers, end_stream=True)


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[HostileKubelet]:
    server = HostileKubelet(tmp_path / "pod-resources" / "kubelet.sock")
    yield server
    server.close()


@pytest.mark.parametrize("case", sorted(MALFORMED_ANSWERS))
def test_a_malformed_answer_is_one_malformed_error(hostile: HostileKubelet, case: str):
    hostile.answer = MALFORMED_ANSWERS[case]
    channel = UnaryChannel(str(hostile.path), 1024 * 1024)
    try:
        with pytest.raises(RpcError) as caught:
            channel.call("/v1.PodResourcesLister/List", b"", 5.0)
        assert caught.value.code == MALFORMED
        # One short line: a 5,000-digit status is not echoed whole into the log.
        assert "\n" not in caught.value.details and len(caught.value.details) < 400
        # The connection was dropped; the same channel works once the server answers properly.
        hostile.answer = None
        assert channel.call("/v1.PodResourcesLister/List", b"", 5.0) == (
            GOOD_LIST.SerializeToString()
        )
    finally:
        channel.close()


@pytest.mark.parametrize("case", sorted(MALFORMED_ANSWERS))
def test_the_watcher_counts_malformed_answers_and_recovers(hostile: HostileKubelet, case: str):
    hostile.answer = MALFORMED_ANSWERS[case]
    watcher = PodResourcesWatcher(PodResourcesClient(str(hostile.path), 5.0), 0.05)
    assert watcher.refresh() is False
    assert watcher.refresh() is False
    status = watcher.status
    assert not status.up and dict(status.errors) == {MALFORMED: 2}, status
    text = render(
        NodeSnapshot(time.time(), time.monotonic(), 0.0, True, "550.54.15", ()),
        context=AttributionContext(pods=watcher.latest, pods_status=status),
    )
    assert "kube_gpu_exporter_podresources_up 0" in text
    assert 'kube_gpu_exporter_podresources_errors_total{code="MALFORMED"} 2' in text
    assert 'kube_gpu_exporter_collector_success{collector="podresources"} 0' in text
    hostile.answer = None
    assert watcher.refresh() is True
    assert watcher.status.up and watcher.latest is not None
    assert [a.pod for a in watcher.latest.allocations] == ["trainer-0"]


def test_the_watcher_thread_backs_off_on_malformed_answers_and_lives_on(
    hostile: HostileKubelet, caplog: pytest.LogCaptureFixture
):
    hostile.answer = MALFORMED_ANSWERS["5,000-digit grpc-status"]
    clock = ManualClock()
    watcher = PodResourcesWatcher(
        PodResourcesClient(str(hostile.path), 5.0), 0.05, max_backoff_seconds=0.4, clock=clock
    )
    watcher.start()
    try:
        waits = step_until(clock, 1, lambda: dict(watcher.status.errors).get(MALFORMED, 0) >= 4)
        assert watcher.alive and not watcher.status.up
        assert hostile.calls == 4  # one call a round, none between
        # Backoff, not a retry every 50 ms: the failures wait 50, 100, 200 and then 400 ms,
        # each give or take its 20 % jitter.
        waits += parked(clock, 1)
        wanted = [0.05, 0.1, 0.2, 0.4]
        assert all(0.8 * w <= got <= 1.2 * w for got, w in zip(waits, wanted, strict=True)), waits
        hostile.answer = None
        step_until(clock, 1, lambda: watcher.status.up)
        assert watcher.alive and watcher.thread_healthy
    finally:
        watcher.stop()
    assert not [r for r in caplog.records if r.exc_info], "a malformed answer is no crash"


# ---- the real exporter: its pod-resources socket taken over by a malformed kubelet ----


def _socket_path(proc: subprocess.Popen, timeout: float = 20.0) -> Path:
    """The fake kubelet's socket, from the exporter's startup log; stderr keeps being drained."""
    found: list[str] = []
    seen = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if not seen.is_set() and (match := re.search(r"socket at (\S+kubelet\.sock)", line)):
                found.append(match.group(1))
                seen.set()

    threading.Thread(target=drain, daemon=True).start()
    if not seen.wait(timeout):
        raise AssertionError(f"no pod-resources socket path logged within {timeout}s")
    return Path(found[0])


def podresources_state(text: str) -> tuple[float, float, float]:
    def value(pattern: str) -> float:
        match = re.search(rf"^{pattern} (\S+)$", text, re.M)
        return float(match.group(1)) if match else -1.0

    return (
        value("kube_gpu_exporter_podresources_up"),
        value(r'kube_gpu_exporter_collector_success\{collector="podresources"\}'),
        value(r'kube_gpu_exporter_podresources_errors_total\{code="MALFORMED"\}'),
    )

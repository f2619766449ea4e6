"""Pod-resources answers that fit the 32 MiB receive limit but would decode to gigabytes.

A real gRPC server on a unix socket sends the hostile answers as raw bytes, so a test can build
millions of fields in milliseconds; the good answers are the simulated node's fake kubelet's.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

# Private to protobuf, so types-protobuf leaves it out.
from google.protobuf.internal.encoder import _VarintBytes  # type: ignore[attr-defined]

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.podresources import answer_bounds
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.answer_bounds import (
    MAX_CONTAINERS_PER_POD,
    MAX_DEVICE_ID_BYTES,
    MAX_FIELDS,
    MAX_PACKED_NUMBERS,
    MAX_POD_NAME_BYTES,
    MAX_PODS,
    TOO_LARGE,
    AnswerMalformed,
    AnswerTooLarge,
    check_answer,
)
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from tests.support.clock_steps import parked, step_until

T = TypeVar("T")
GOOD_ALLOCATIONS = 12  # the simulated node's fake kubelet hands out 12 devices
# What one hostile answer may add to this process's peak RSS: the answer's own bytes held by the
# server and the client (a few MB here), and the decoded part of it up to the first bound. Before
# the bounds, the answers below took 150 MB to over 1 GB.
PEAK_GROWTH_MB = 40


def field(number: int, body: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return bytes([number << 3 | 2]) + _VarintBytes(len(body)) + body


def one_pod(containers: bytes, name: bytes = b"p", namespace: bytes = b"n") -> bytes:
    return field(1, field(1, name) + field(2, namespace) + containers)


def gpu_ids(count: int) -> bytes:
    """One pod whose one container holds `count` one-character nvidia.com/gpu device IDs."""
    devices = field(1, b"nvidia.com/gpu") + field(2, b"x") * count
    return one_pod(field(3, field(1, b"c") + field(2, devices)))


def empty_pods(count: int) -> bytes:
    return field(1, b"") * count


class RawKubelet:
    """Serves `list_answer`'s bytes to List when set, and otherwise the fake kubelet's answers."""

    def __init__(self, model: FakeKubelet) -> None:
        self.model = model
        self.list_answer: bytes | None = None
        self._server: grpc.Server | None = None

    def _list(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        if self.list_answer is not None:
            return self.list_answer
        return self.model.list_response().SerializeToString()

    def _allocatable(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        return self.model.allocatable_response().SerializeToString()

    def start(self) -> RawKubelet:
        path = self.model.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="raw-kubelet"),
            options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
        )
        handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
            "List": grpc.unary_unary_rpc_method_handler(self._list),
            "GetAllocatableResources": grpc.unary_unary_rpc_method_handler(self._allocatable),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),)
        )
        server.add_insecure_port(f"unix://{path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait()


@pytest.fixture
def raw_kubelet(sim, tmp_path: Path) -> Iterator[RawKubelet]:
    kubelet = RawKubelet(FakeKubelet(sim, tmp_path / "pod-resources" / "kubelet.sock")).start()
    yield kubelet
    kubelet.stop()


def watcher_for(kubelet: RawKubelet, clock: Clock = SYSTEM_CLOCK) -> PodResourcesWatcher:
    client = PodResourcesClient(str(kubelet.model.socket_path), timeout_seconds=10)
    return PodResourcesWatcher(client, 0.05, max_backoff_seconds=0.2, clock=clock)


def _status_kib(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/self/status")


def peak_growth_mb(action: Callable[[], T]) -> tuple[T, float]:
    """`action()`'s result and how far this process's resident memory peaked above its start."""
    # Writing 5 resets VmHWM, the peak, to the current RSS (proc(5), /proc/pid/clear_refs).
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    result = action()
    return result, (_status_kib("VmHWM") - before) / 1024


def errors(watcher: PodResourcesWatcher) -> dict[str, int]:
    return dict(watcher.status.errors)


def latest(watcher: PodResourcesWatcher) -> PodResourcesSnapshot:
    snapshot = watcher.latest
    assert snapshot is not None, watcher.status.last_error
    return snapshot


# ---- hostile answers over a real socket ----


@pytest.mark.parametrize(
    ("answer", "bound"),
    [
        # 1.5 M empty PodResources entries: 3 MB on the wire.
        pytest.param(lambda: empty_pods(1_500_000), f"at most {MAX_PODS:,}", id="empty-pods"),
        # 1 M one-character device IDs: 3 MB on the wire.
        pytest.param(lambda: gpu_ids(1_000_000), "device IDs", id="one-char-ids"),
        pytest.param(
            lambda: one_pod(b"", name=b"p" * 100_000), "a pod name of 100,000 bytes", id="long-name"
        ),
    ],
)
def test_answer_past_a_bound_is_one_error_and_a_good_answer_is_taken_after(
    raw_kubelet: RawKubelet, answer: Callable[[], bytes], bound: str
) -> None:
    watcher = watcher_for(raw_kubelet)
    assert watcher.refresh(), watcher.status.last_error
    assert len(latest(watcher).allocations) == GOOD_ALLOCATIONS
    raw_kubelet.list_answer = answer()
    ok, growth = peak_growth_mb(watcher.refresh)
    assert not ok
    error = watcher.status.last_error
    assert error is not None
    assert error.startswith(f"{TOO_LARGE}: List answer over a bound: ") and bound in error, error
    assert "\n" not in error
    assert errors(watcher) == {TOO_LARGE: 1}
    assert growth < PEAK_GROWTH_MB, f"peak RSS grew by {growth:.0f} MB"
    assert watcher.status.last_duration_seconds < 1.5, watcher.status
    # The last good attribution stays until the kubelet answers sensibly again.
    assert not watcher.status.up and len(latest(watcher).allocations) == GOOD_ALLOCATIONS
    raw_kubelet.list_answer = None
    assert watcher.refresh(), watcher.status.last_error
    assert watcher.status.up and len(latest(watcher).allocations) == GOOD_ALLOCATIONS


def test_running_watcher_backs_off_and_stops_promptly_on_a_hostile_answer(
    raw_kubelet: RawKubelet,
) -> None:
    raw_kubelet.list_answer = gpu_ids(1_000_000)
    clock = ManualClock()
    watcher = watcher_for(raw_kubelet, clock)
    watcher.start()
    try:
        waits = step_until(clock, 1, lambda: errors(watcher).get(TOO_LARGE, 0) >= 3)
        # 50 and 100 ms after the first two failures (20 % jitter), and 200 ms, the cap, now.
        waits += parked(clock, 1)
        wanted = [0.05, 0.1, 0.2]
        assert all(0.8 * w <= got <= 1.2 * w for got, w in zip(waits, wanted, strict=True)), waits
        assert not watcher.status.up and watcher.latest is None
        raw_kubelet.list_answer = None
        step_until(clock, 1, lambda: watcher.status.up)
        raw_kubelet.list_answer = gpu_ids(1_000_000)
        step_until(clock, 1, lambda: not watcher.status.up)
        # The next round starts, and is asked to stop while it reads the hostile answer.
        parked(clock, 1)
        clock.advance_to_next_wake()
    finally:
        started = time.monotonic()
        watcher.stop()
        stopped_in = time.monotonic() - started
    # Shutdown (SIGTERM) stops this thread: it must not be stuck decoding millions of IDs.
    assert stopped_in < 2, stopped_in
    assert len(latest(watcher).allocations) == GOOD_ALLOCATIONS


def realistic_node(sim, kubelet: FakeKubelet, pods: int = 500) -> api_pb2.ListPodResourcesResponse:
    """The fake kubelet's GPU and MIG pods, then device-less pods up to `pods`, each with three
    containers carrying CPU manager and memory manager data, as on a busy static-policy node."""
    listing = kubelet.list_response()
    topology = api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=1)])
    for index in range(pods - len(listing.pod_resources)):
        containers = [
            api_pb2.ContainerResources(
                name=f"container-{c}",
                cpu_ids=list(range(16 * c, 16 * c + 8)),
                memory=[
                    api_pb2.ContainerMemory(memory_type="memory", size=2**34, topology=topology),
                    api_pb2.ContainerMemory(
                        memory_type="hugepages-1Gi", size=2**30, topology=topology
                    ),
                ],
            )
            for c in range(3)
        ]
        listing.pod_resources.append(
            api_pb2.PodResources(
                name=f"web-{index:04d}-7d9f8c6b5-x2x9z",
                namespace=f"team-{index % 40}",
                containers=containers,
            )
        )
    return listing


def test_realistic_large_node_parses_quickly(sim, raw_kubelet: RawKubelet) -> None:
    listing = realistic_node(sim, raw_kubelet.model)
    raw_kubelet.list_answer = listing.SerializeToString()
    watcher = watcher_for(raw_kubelet)
    ok, growth = peak_growth_mb(watcher.refresh)
    assert ok, watcher.status.last_error
    assert len(latest(watcher).allocations) == GOOD_ALLOCATIONS
    assert growth < PEAK_GROWTH_MB, growth
    assert watcher.status.last_duration_seconds < 1.5, watcher.status


# ---- the bounds themselves, on bytes ----


def too_large(payload: bytes, method: str = "List") -> str:
    with pytest.raises(AnswerTooLarge) as info:
        check_answer(method, payload)
    return str(info.value)


def test_pods_up_to_the_bound_pass() -> None:
    check_answer("List", empty_pods(MAX_PODS))
    assert "5,001 pods" in too_large(empty_pods(MAX_PODS + 1))


def test_containers_per_pod() -> None:
    container = field(3, field(1, b"c"))
    check_answer("List", one_pod(container * MAX_CONTAINERS_PER_POD))
    message = too_large(one_pod(container * (MAX_CONTAINERS_PER_POD + 1)))
    assert f"{MAX_CONTAINERS_PER_POD + 1} containers in one pod" in message


def test_string_lengths() -> None:
    check_answer("List", one_pod(b"", name=b"p" * MAX_POD_NAME_BYTES))
    assert "a pod name of 254 bytes" in too_large(one_pod(b"", name=b"p" * 254))
    devices = field(1, field(1, b"r") + field(2, b"d" * (MAX_DEVICE_ID_BYTES + 1)))
    assert "a device ID of 257 bytes" in too_large(devices, "GetAllocatableResources")
    assert "a namespace of 64 bytes" in too_large(
        field(1, field(2, b"n" * 64)),
        "Get",  # GetPodResourcesResponse.pod_resources
    )


def _dra_answer(claim: str = "c", device: str = "gpu-0", devices: int = 1) -> bytes:
    return api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name="p",
                namespace="n",
                containers=[
                    api_pb2.ContainerResources(
                        name="main",
                        dynamic_resources=[
                            api_pb2.DynamicResource(
                                claim_name=claim,
                                claim_namespace="n",
                                claim_resources=[
                                    api_pb2.ClaimResource(
                                        driver_name="gpu.nvidia.com",
                                        pool_name="node",
                                        device_name=device,
                                    )
                                ]
                                * devices,
                            )
                        ],
                    )
                ],
            )
        ]
    ).SerializeToString()


def test_dra_claims_are_bounded_too() -> None:
    check_answer("List", _dra_answer(claim="c" * 253, device="d" * 63))
    assert "a DRA claim name of 254 bytes" in too_large(_dra_answer(claim="c" * 254))
    assert "a DRA device name of 64 bytes" in too_large(_dra_answer(device="d" * 64))
    assert "DRA devices" in too_large(_dra_answer(devices=answer_bounds.MAX_DRA_DEVICES + 1))


def test_packed_numbers_and_unknown_fields_are_counted() -> None:
    # CPU IDs in one packed field, one byte each, that would decode to 8 bytes each.
    def cpu_ids(count: int) -> bytes:
        return field(1, bytes([4 << 3 | 2]) + _VarintBytes(count) + b"\x01" * count)

    check_answer("List", cpu_ids(MAX_PACKED_NUMBERS))
    message = too_large(cpu_ids(MAX_PACKED_NUMBERS + 1))
    assert f"{MAX_PACKED_NUMBERS + 1:,} numbers in packed fields" in message
    # Unknown field 15, a varint, repeated: every one is a step of the walk.
    assert f"{MAX_FIELDS + 1:,} fields" in too_large(b"\x78\x00" * (MAX_FIELDS + 10))


def test_fields_nested_where_nothing_is_read_are_counted() -> None:
    numa_nodes = field(1, b"") * (MAX_FIELDS // 2)
    memory = field(5, field(3, numa_nodes))  # PodResources.memory[].topology.nodes[]
    too_large(one_pod(memory * 3))


def test_malformed_bytes() -> None:
    for payload in (b"\x0a\x05ab", b"\x0a\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x0b"):
        with pytest.raises(AnswerMalformed):
            check_answer("List", payload)


def test_every_answer_has_a_layout() -> None:
    # A method added to the service without a layout here would go unchecked.
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert {m.name for m in service.methods} == set(answer_bounds._ANSWERS)

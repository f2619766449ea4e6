"""Pod attribution from the kubelet pod-resources API, over real gRPC on a unix socket. A running
watcher waits between rounds on a ManualClock: its backoffs pass when the test moves the clock."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from itertools import pairwise

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.podresources import generate_stubs
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.attribution import attribute, resolve
from kube_gpu_exporter.exporter.podresources.client import (
    MAX_MESSAGE_BYTES,
    PodResourcesClient,
    PodResourcesWatcher,
)
from kube_gpu_exporter.exporter.podresources.device_ids import (
    DeviceKind,
    is_gpu_resource,
    parse_device_id,
)
from kube_gpu_exporter.exporter.podresources.grpc_unary import RpcError
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from tests.conftest import (
    LABELS,
    fleet_from_yaml,
    open_fds,
    render,
    threads,
    wait_for,
)
from tests.support.clock_steps import step_until

GPU = "GPU-8eaa0d1c-2a6d-4c1f-9e43-3c7a1b2f0d11"
MIG = "MIG-c6d4b1a2-9f0e-5d3c-8b7a-6e5f4d3c2b1a"


# ---- stubs ----


def test_generated_stubs_match_the_proto():
    assert generate_stubs.drifted() == []


def test_wire_paths_keep_package_v1():
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert sorted(m.name for m in service.methods) == ["Get", "GetAllocatableResources", "List"]
    fields = api_pb2.ContainerDevices.DESCRIPTOR.fields_by_name
    assert (fields["resource_name"].number, fields["device_ids"].number) == (1, 2)
    claim = api_pb2.ClaimResource.DESCRIPTOR.fields_by_name["share_id"]
    assert claim.number == 5 and claim.has_presence
    from google.protobuf import descriptor_pb2

    proto = descriptor_pb2.FileDescriptorProto.FromString(api_pb2.DESCRIPTOR.serialized_pb)
    assert proto.package == "v1"
    dynamic = next(m for m in proto.message_type if m.name == "DynamicResource")
    assert [(r.start, r.end) for r in dynamic.reserved_range] == [(1, 2)]  # class_name retired


# ---- device IDs and resource names ----


@pytest.mark.parametrize(
    ("raw", "kind", "uuid", "gi", "replica", "key", "share"),
    [
        (GPU, DeviceKind.GPU, GPU, None, None, GPU, None),
        (f"{GPU}::3", DeviceKind.GPU, GPU, None, 3, GPU, "3"),
        (MIG, DeviceKind.MIG, MIG, None, None, MIG, None),
        (f"{MIG}::0", DeviceKind.MIG, MIG, None, 0, MIG, "0"),
        (f"MIG-{GPU}/7/0", DeviceKind.MIG_LEGACY, GPU, 7, None, f"MIG-{GPU}/7/0", None),
        (f"MIG-{GPU}/13/0::2", DeviceKind.MIG_LEGACY, GPU, 13, 2, f"MIG-{GPU}/13/0", "2"),
        ("nvidia3", DeviceKind.GKE_GPU, "", None, None, "nvidia3", None),
        ("nvidia3/gi9", DeviceKind.GKE_MIG, "", 9, None, "nvidia3/gi9", None),
        # GKE's shares fold into their device like "::" replicas do.
        ("nvidia3/vgpu4", DeviceKind.GKE_GPU, "", None, 4, "nvidia3", "4"),
        ("nvidia3/gi9/vgpu12", DeviceKind.GKE_MIG, "", 9, 12, "nvidia3/gi9", "12"),
        ("something-else", DeviceKind.UNKNOWN, "", None, None, "something-else", None),
    ],
)
def test_device_id_forms(raw, kind, uuid, gi, replica, key, share):
    ref = parse_device_id(raw)
    assert (ref.kind, ref.uuid, ref.gpu_instance_id, ref.replica) == (kind, uuid, gi, replica)
    assert ref.device_key == key
    assert ref.shared_id == share


@pytest.mark.parametrize(
    ("resource", "counted"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpu.shared", True),
        ("nvidia.com/mig-1g.10gb", True),
        ("nvidia.com/mig-1g.10gb.me", True),
        ("nvidia.com/mig-3g.40gb", True),
        ("aliyun.com/gpu-mem", False),
        ("cpu", False),
        ("example.com/foo", False),
    ],
)
def test_resource_names(resource, counted):
    assert is_gpu_resource(resource) is counted
    assert is_gpu_resource(resource, frozenset({"aliyun.com/gpu-mem"})) is (
        counted or resource == "aliyun.com/gpu-mem"
    )


# ---- fixtures: a simulated node with its fake kubelet ----


@pytest.fixture
def kubelet(sim, tmp_path):
    fake = FakeKubelet(sim, tmp_path / "pod-resources" / "kubelet.sock").start()
    yield fake
    fake.stop()


def watcher_for(kubelet: FakeKubelet, **kwargs) -> PodResourcesWatcher:
    return PodResourcesWatcher(
        PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5), 0.05, **kwargs
    )


def latest(watcher: PodResourcesWatcher) -> PodResourcesSnapshot:
    snapshot = watcher.latest
    assert snapshot is not None, watcher.status.last_error
    return snapshot


def observe(poller, watcher: PodResourcesWatcher, labels: LabelConfig = LABELS) -> dict:
    assert watcher.refresh()
    snapshot = poller.sweep()
    context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)
    text = render(snapshot, labels, context)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    return {"text": text, "families": families, "snapshot": snapshot}


def series(families: dict, name: str) -> list:
    return families[name].samples


def test_time_sliced_gpu_lists_all_three_pods(sim, kubelet, make_poller):
    seen = observe(make_poller(sim), watcher_for(kubelet))
    allocations = series(seen["families"], "kube_gpu_exporter_pod_device_allocation")
    shared = [s for s in allocations if s.labels["gpu"] == "3"]
    assert len(shared) == 3
    assert {s.labels["resource"] for s in shared} == {"nvidia.com/gpu.shared"}
    assert len({s.labels["pod"] for s in shared}) == 3
    assert all(s.labels["UUID"] == sim.gpus[3].uuid and s.value == 1 for s in shared)
    # Every held device appears: 3 whole GPUs + 3 replicas + 1 inference GPU + 5 MIG instances.
    assert len(allocations) == 12


def test_shared_device_series_copied_per_pod_when_asked(sim, kubelet, make_poller):
    labels = replace(LABELS, shared_device_series="per-pod")
    seen = observe(make_poller(sim), watcher_for(kubelet), labels)
    temps = [s for s in series(seen["families"], "DCGM_FI_DEV_GPU_TEMP") if s.labels["gpu"] == "3"]
    assert len(temps) == 3 and len({s.labels["pod"] for s in temps}) == 3
    assert len({s.value for s in temps}) == 1  # the same board value, once per pod


def test_capacity_metrics(sim, kubelet, make_poller):
    seen = observe(make_poller(sim), watcher_for(kubelet))
    fam = seen["families"]

    def by_resource(name: str) -> dict[str, float]:
        return {s.labels["resource"]: s.value for s in series(fam, name)}

    allocatable = by_resource("kube_gpu_exporter_node_allocatable_devices")
    allocated = by_resource("kube_gpu_exporter_node_allocated_devices")
    assert allocatable == {
        "nvidia.com/gpu": 5,
        "nvidia.com/gpu.shared": 4,
        "nvidia.com/mig-1g.10gb": 2,
        "nvidia.com/mig-2g.20gb": 1,
        "nvidia.com/mig-3g.40gb": 2,
        "nvidia.com/mig-1g.20gb": 2,
    }
    assert allocated["nvidia.com/gpu"] == 4 and allocated["nvidia.com/gpu.shared"] == 3
    assert series(fam, "kube_gpu_exporter_node_physical_gpus")[0].value == 8
    mig = {
        s.labels["profile"]: s.value for s in series(fam, "kube_gpu_exporter_node_mig_instances")
    }
    assert mig == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 2, "1g.20gb": 2}
    # A lost GPU leaves allocatable (healthy devices only) but stays physical.
    sim.lose_gpu(5)
    seen = observe(make_poller(sim), watcher_for(kubelet))
    allocatable = {
        s.labels["resource"]: s.value
        for s in series(seen["families"], "kube_gpu_exporter_node_allocatable_devices")
    }
    assert allocatable["nvidia.com/gpu"] == 4
    assert series(seen["families"], "kube_gpu_exporter_node_physical_gpus")[0].value == 8


def test_allocatable_units_trace_each_offered_id_to_its_gpu(sim, kubelet, make_poller):
    def units() -> dict[str, float]:
        seen = observe(make_poller(sim), watcher_for(kubelet))
        family = seen["families"].get("kube_gpu_exporter_device_allocatable_units")
        return {s.labels["gpu"]: s.value for s in family.samples} if family else {}

    # Whole GPUs back one ID, the time-sliced GPU 3 one per replica, MIG GPUs one per instance.
    assert units() == {"0": 1, "1": 1, "2": 1, "3": 4, "4": 1, "5": 1, "6": 4, "7": 3}
    # The device plugin marks GPU 5 unhealthy: NVML still sees it, the kubelet offers nothing.
    kubelet.faults.unhealthy_gpus.add(sim.gpus[5].uuid)
    assert units()["5"] == 0
    kubelet.faults.allocatable_implemented = False
    assert units() == {}


@pytest.mark.parametrize(("strategy", "id_format"), [("single", "uuid"), ("mixed", "legacy")])
def test_mig_strategies_and_legacy_ids(make_sim, tmp_path, make_poller, strategy, id_format):
    sim = make_sim(
        fleet_from_yaml("""
        gpus:
          - {model: A100-SXM4-40GB, mig: [1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb]}
    """)
    )
    kubelet = FakeKubelet(sim, tmp_path / "k.sock", mig_strategy=strategy, mig_id_format=id_format)
    kubelet.start()
    try:
        seen = observe(make_poller(sim), watcher_for(kubelet))
    finally:
        kubelet.stop()
    resources = {
        s.labels["resource"]
        for s in series(seen["families"], "kube_gpu_exporter_pod_device_allocation")
    }
    assert resources == ({"nvidia.com/gpu"} if strategy == "single" else {"nvidia.com/mig-1g.5gb"})
    temps = series(seen["families"], "DCGM_FI_DEV_GPU_TEMP")
    held = {s.labels["GPU_I_ID"] for s in temps if "pod" in s.labels}
    assert held == {"7", "9", "10", "11", "12", "13"}  # GI 8 (the second instance) is free


def test_mig_strategy_none_labels_every_instance_of_the_whole_gpu(sim, tmp_path, make_poller):
    # With strategy none the plugin hands out whole GPUs even when MIG is on.
    kubelet = FakeKubelet(sim, tmp_path / "k.sock", mig_strategy="none")
    holder = next(
        p
        for p in kubelet.pods
        if any(sim.gpus[6].uuid in ids for c in p.containers.values() for _, ids in c)
    )
    kubelet.start()
    try:
        seen = observe(make_poller(sim), watcher_for(kubelet))
    finally:
        kubelet.stop()
    gpu6 = [s for s in series(seen["families"], "DCGM_FI_DEV_FB_USED") if s.labels["gpu"] == "6"]
    assert len(gpu6) == 4 and all(s.labels.get("pod") == holder.name for s in gpu6)


def test_extra_resource_names_are_counted(sim, kubelet, make_poller):
    kubelet.pods[-1].containers["exporter"] = [("example.com/vgpu", ["v-0", "v-1"])]
    seen = observe(
        make_poller(sim), watcher_for(kubelet, extra_resources=frozenset({"example.com/vgpu"}))
    )
    allocated = {
        s.labels["resource"]: s.value
        for s in series(seen["families"], "kube_gpu_exporter_node_allocated_devices")
    }
    assert allocated["example.com/vgpu"] == 2
    unresolved = [
        s
        for s in series(seen["families"], "kube_gpu_exporter_pod_device_allocation")
        if s.labels["resource"] == "example.com/vgpu"
    ]
    assert {s.labels["device_id"] for s in unresolved} == {"v-0", "v-1"}


def test_gke_ids_resolve_by_index(sim, make_poller):
    snapshot = make_poller(sim).sweep()
    from kube_gpu_exporter.exporter.podresources.allocations import Allocation

    ref = Allocation("ns", "p", "c", "nvidia.com/gpu", parse_device_id("nvidia6/gi4"))
    assert resolve(ref, snapshot) == (sim.gpus[6].uuid, 4)


# ---- the kubelet misbehaving ----


def test_kubelet_restart_mid_run(sim, kubelet, make_poller):
    client = PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5)
    watcher = PodResourcesWatcher(client, 0.05)
    assert watcher.refresh()
    # The socket disappears under the idle connection. The fake kubelet's graceful stop waits
    # its grace period (0.5 s) for that connection: the one real wait left here, as this is the
    # case of a connection the server closed while the client was not looking.
    kubelet.stop()
    assert not watcher.refresh()
    assert watcher.status.up is False and watcher.latest is not None  # last data kept
    kubelet.start()  # a new socket at the same path
    assert watcher.refresh()
    assert watcher.status.up
    assert dict(watcher.status.errors)["UNAVAILABLE"] >= 1
    client.reset()  # closed here, the connection does not hold up the kubelet's stop at teardown


def test_socket_missing_at_start_then_appears(sim, tmp_path, make_poller):
    path = tmp_path / "late" / "kubelet.sock"
    client = PodResourcesClient(str(path), timeout_seconds=1)
    watcher = PodResourcesWatcher(client, 0.05)
    assert not watcher.refresh()
    # Device metrics keep flowing without pod-resources.
    snapshot = make_poller(sim).sweep()
    text = render(snapshot, LABELS, AttributionContext(pods=None, pods_status=watcher.status))
    assert "DCGM_FI_DEV_GPU_TEMP{" in text and "kube_gpu_exporter_podresources_up 0" in text
    kubelet = FakeKubelet(sim, path).start()
    try:
        assert watcher.refresh()
    finally:
        client.reset()  # an idle connection would hold the kubelet's graceful stop
        kubelet.stop()


def within_jitter(waits: list[float], wanted: list[float]) -> bool:
    """Whether each wait is its wanted backoff, give or take the 20 % jitter."""
    assert len(waits) == len(wanted), (waits, wanted)
    return all(0.8 * want <= wait <= 1.2 * want for wait, want in zip(waits, wanted, strict=True))


def stop_while_called(
    kubelet: FakeKubelet, clock: ManualClock, watcher: PodResourcesWatcher
) -> None:
    """Stop the kubelet while the running watcher (on `clock`) goes on calling it, as in a real
    restart, until a round finds it gone. A watcher waiting on a clock nobody moves would leave
    its connection idle, and an idle connection holds the fake kubelet's graceful stop for its
    whole grace period."""
    stopping = threading.Thread(target=kubelet.stop, name="kubelet-stop")
    stopping.start()
    step_until(clock, 1, lambda: not watcher.status.up)
    stopping.join(5.0)
    assert not stopping.is_alive(), "the kubelet never stopped"


def test_socket_deleted_under_a_running_watcher_then_recreated(sim, tmp_path):
    path = tmp_path / "pod-resources" / "kubelet.sock"
    client = PodResourcesClient(str(path), timeout_seconds=1)
    clock = ManualClock()
    watcher = PodResourcesWatcher(client, 0.05, max_backoff_seconds=0.2, clock=clock)
    watcher.start()
    try:
        # No socket yet: calls are made, and fail.
        step_until(clock, 1, lambda: sum(n for _, n in watcher.status.errors) >= 2)
        assert not watcher.status.up and watcher.status.last_error
        kubelet = FakeKubelet(sim, path).start()
        step_until(clock, 1, lambda: watcher.status.up)
        stop_while_called(kubelet, clock, watcher)  # removes the socket, as a restart does
        assert not path.exists()
        assert watcher.latest is not None and len(watcher.latest.allocations) == 12  # kept
        kubelet = FakeKubelet(sim, path).start()  # a new socket, a new inode
        try:
            step_until(clock, 1, lambda: watcher.status.up)
        finally:
            watcher.stop()  # first: its connection closes, so the kubelet stops at once
            kubelet.stop()
    finally:
        watcher.stop()
    assert dict(watcher.status.errors)["UNAVAILABLE"] >= 2


def test_thirty_kubelet_restarts_leak_no_threads_or_fds(sim, kubelet):
    clock = ManualClock()
    watcher = watcher_for(kubelet, max_backoff_seconds=0.1, clock=clock)
    watcher.start()
    try:
        step_until(clock, 1, lambda: watcher.status.up)
        before = (threads(), open_fds())
        for _ in range(30):
            stop_while_called(kubelet, clock, watcher)
            kubelet.start()
            step_until(clock, 1, lambda: watcher.status.up)
        # gRPC's pollers and the kubelet's own pool come and go; a leak per restart would be 30+.
        assert wait_for(lambda: threads() <= before[0] + 2 and open_fds() <= before[1] + 2), (
            before,
            threads(),
            open_fds(),
        )
    finally:
        watcher.stop()


def test_rate_limit_backs_off_with_one_call_in_flight(sim, kubelet):
    kubelet.faults.rate_limited_calls = 3
    kubelet.faults.delay_seconds = 0.01
    clock = ManualClock()
    watcher = watcher_for(kubelet, max_backoff_seconds=0.4, clock=clock)
    watcher.start()
    try:
        waits = step_until(clock, 1, lambda: watcher.status.up)
    finally:
        watcher.stop()
    assert dict(watcher.status.errors)["RESOURCE_EXHAUSTED"] == 3
    assert kubelet.max_in_flight == 1
    # Backoff: 3 failures at a 50 ms interval wait 50, 100 and 200 ms before the call that
    # succeeds, and nothing is called in between.
    assert within_jitter(waits, [0.05, 0.1, 0.2]), waits
    assert kubelet.calls["List"] == 4


def test_backoff_spacing_after_rate_limit(sim, kubelet):
    clock = ManualClock()
    times: list[float] = []

    class TimedClient(PodResourcesClient):
        def list(self) -> api_pb2.ListPodResourcesResponse:
            times.append(clock.monotonic())
            return super().list()

    kubelet.faults.rate_limited_calls = 1000
    watcher = PodResourcesWatcher(
        TimedClient(str(kubelet.socket_path), timeout_seconds=5),
        0.05,
        max_backoff_seconds=0.4,
        clock=clock,
    )
    watcher.start()
    try:
        step_until(clock, 1, lambda: len(times) >= 7)
    finally:
        watcher.stop()
    gaps = [later - earlier for earlier, later in pairwise(times[:7])]
    # Failures wait 50, 100 and 200 ms, then the 400 ms cap, each with 20 % jitter; without
    # backoff every gap would be the 50 ms interval, and without the cap the default 60 s.
    backoff = [min(0.4, 0.05 * 2**failures) for failures in range(len(gaps))]
    assert within_jitter(gaps, backoff), gaps


def test_large_list_response(sim, kubelet):
    kubelet.faults.padding_pods = 1_300
    size = kubelet.list_response().ByteSize()
    assert size > 5_000_000  # over gRPC's 4 MiB default
    client = PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5)
    watcher = PodResourcesWatcher(client, 0.05)
    assert watcher.refresh(), watcher.status.last_error
    assert len(latest(watcher).allocations) == 12
    client.reset()  # an idle connection would hold the kubelet's graceful stop at teardown
    # The same call with gRPC's default 4 MiB receive limit fails, as on busy nodes (#509).
    with grpc.insecure_channel(f"unix://{kubelet.socket_path}") as channel:
        from kube_gpu_exporter.exporter.podresources.v1 import api_pb2_grpc

        with pytest.raises(grpc.RpcError) as info:
            api_pb2_grpc.PodResourcesListerStub(channel).List(api_pb2.ListPodResourcesRequest())
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_sixteen_mib_list_response(sim, kubelet):
    kubelet.faults.padding_pods = 4_150
    size = kubelet.list_response().ByteSize()
    assert 16 * 2**20 < size < MAX_MESSAGE_BYTES
    watcher = watcher_for(kubelet)
    assert watcher.refresh(), watcher.status.last_error
    assert len(latest(watcher).allocations) == 12
    assert watcher.status.last_duration_seconds < 5


def test_list_response_over_the_limit_is_one_clear_error(sim, kubelet, make_poller):
    watcher = PodResourcesWatcher(
        PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5, max_message_bytes=2**20),
        0.05,
    )
    assert watcher.refresh()
    kubelet.faults.padding_pods = 600  # about 2.5 MB
    assert not watcher.refresh()
    error = watcher.status.last_error
    assert error is not None
    assert error.startswith("RESOURCE_EXHAUSTED") and "larger than max" in error, error
    assert "\n" not in error
    # The last good attribution stays, and device metrics are still served with podresources_up 0.
    assert len(latest(watcher).allocations) == 12
    context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)
    text = render(make_poller(sim).sweep(), LABELS, context)
    assert "kube_gpu_exporter_podresources_up 0" in text and 'pod="' in text
    kubelet.faults.padding_pods = 0
    assert watcher.refresh()


def test_old_kubelet_without_allocatable(sim, kubelet, make_poller):
    kubelet.faults.allocatable_implemented = False
    watcher = watcher_for(kubelet)
    assert watcher.refresh() and watcher.refresh()
    assert latest(watcher).allocatable is None
    assert kubelet.calls["GetAllocatableResources"] == 1  # UNIMPLEMENTED is remembered
    text = render(
        make_poller(sim).sweep(), LABELS, AttributionContext(watcher.latest, watcher.status)
    )
    assert "kube_gpu_exporter_node_allocated_devices{" in text
    assert "kube_gpu_exporter_node_allocatable_devices" not in text


def test_get_where_offered(sim, kubelet):
    client = PodResourcesClient(str(kubelet.socket_path))
    with pytest.raises(RpcError) as info:
        client.get("ml-training", "llm-pretrain-worker-0")
    assert info.value.code == "UNKNOWN"  # gate KubeletPodResourcesGet off
    assert info.value.details == "PodResources API Get method disabled"
    kubelet.faults.get_enabled = True
    pod = client.get("ml-training", "llm-pretrain-worker-0").pod_resources
    assert pod.containers[0].devices[0].device_ids == [sim.gpus[0].uuid, sim.gpus[1].uuid]
    client.reset()


def test_attribution_survives_unknown_devices(sim, make_poller):
    from kube_gpu_exporter.exporter.podresources.allocations import Allocation, PodResourcesSnapshot

    snapshot = make_poller(sim).sweep()
    pods = PodResourcesSnapshot(
        allocations=(Allocation("ns", "gone", "c", "nvidia.com/gpu", parse_device_id(GPU)),),
        allocatable=None,
        allocated=(("nvidia.com/gpu", 1),),
        taken_at=time.time(),
    )
    result = attribute(snapshot, pods)
    assert result.holders == {} and result.unresolved[0].pod == "gone"


def test_allocatable_is_asked_again_only_when_it_may_have_changed(sim, kubelet, monkeypatch):
    import kube_gpu_exporter.exporter.podresources.client as client_module

    watcher = watcher_for(kubelet)
    for _ in range(3):
        assert watcher.refresh(), watcher.status.last_error
    assert kubelet.calls == {"List": 3, "GetAllocatableResources": 1, "Get": 0}
    first = latest(watcher)
    assert first.allocatable is not None
    offered = dict(first.allocatable)["nvidia.com/gpu"]

    # An unchanged answer keeps its parsed allocations; only their time moves.
    assert watcher.refresh()
    assert latest(watcher).allocations is first.allocations
    assert latest(watcher).taken_at > first.taken_at

    # A changed List answer: pods came or went, so the devices may have too.
    kubelet.faults.padding_pods = 1
    assert watcher.refresh()
    assert kubelet.calls["GetAllocatableResources"] == 2
    assert latest(watcher).allocations is not first.allocations  # parsed again

    # A device turning unhealthy changes only the allocatable answer: seen once the window ends.
    kubelet.faults.unhealthy_gpus = {sim.gpus[4].uuid}
    assert watcher.refresh()
    assert dict(latest(watcher).allocatable or ())["nvidia.com/gpu"] == offered
    monkeypatch.setattr(client_module, "ALLOCATABLE_REFRESH_SECONDS", 0.0)
    assert watcher.refresh()
    assert kubelet.calls["GetAllocatableResources"] == 3
    assert dict(latest(watcher).allocatable or ())["nvidia.com/gpu"] == offered - 1


def test_allocatable_is_asked_again_after_a_failed_round(sim, kubelet):
    watcher = watcher_for(kubelet)
    assert watcher.refresh() and watcher.refresh()
    assert kubelet.calls["GetAllocatableResources"] == 1
    kubelet.faults.rate_limited_calls = 1
    assert not watcher.refresh()
    assert watcher.refresh(), watcher.status.last_error
    assert kubelet.calls["GetAllocatableResources"] == 2


def test_an_unchanged_answer_is_not_checked_or_parsed_again(sim, kubelet, monkeypatch):
    import kube_gpu_exporter.exporter.podresources.client as client_module

    checked: list[str] = []
    real_check = client_module.check_answer

    def counting_check(method: str, payload: bytes | bytearray) -> None:
        checked.append(method)
        real_check(method, payload)

    monkeypatch.setattr(client_module, "check_answer", counting_check)
    client = PodResourcesClient(str(kubelet.socket_path))
    first = client.list()
    assert client.list() is first and checked == ["List"]
    kubelet.faults.padding_pods = 1
    changed = client.list()
    assert changed is not first and checked == ["List", "List"]
    assert len(changed.pod_resources) == len(first.pod_resources) + 1

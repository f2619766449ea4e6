"""The attribution join on its own: device plugin, DRA, time-slicing and process accounting meet
in one AttributedNode, and a part that fails costs only itself. Snapshots are built by hand, so
each test names exactly what the kubelet, the API and NVML said."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from kube_gpu_exporter.exporter.attribution.context import NO_CONTEXT, AttributionContext
from kube_gpu_exporter.exporter.attribution.devices import POD_JOIN, device_entities, without_pods
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.attribution.model import AttributedNode, Entity
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import build_exposition
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW, PodMetadata
from kube_gpu_exporter.exporter.podresources.allocations import (
    Allocation,
    DraAllocation,
    PodResourcesSnapshot,
)
from kube_gpu_exporter.exporter.podresources.client import PodResourcesStatus
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.processes.owner import HOST
from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuIdentity,
    GpuProcess,
    GpuReadings,
    GpuSnapshot,
    NodeSnapshot,
    ProcessOwner,
)

GIB = 1 << 30
LABELS = LabelConfig(node_name="node-a")
PER_POD = replace(LABELS, shared_device_series="per-pod")
SHARED = "GPU-shared"
WHOLE = "GPU-whole"
STATUS = PodResourcesStatus(True, 1.7e9, 0.01, (("UNAVAILABLE", 2),), None)


def _gpu(index: int, uuid: str, processes: tuple[GpuProcess, ...] | None = None) -> GpuSnapshot:
    return GpuSnapshot(
        GpuIdentity(
            index,
            uuid,
            "NVIDIA H100 80GB HBM3",
            f"00000000:{index + 0x18:02X}:00.0",
            mig_enabled=False,
            minor_number=index,
        ),
        up=True,
        readings=GpuReadings.of(
            DCGM_FI_DEV_GPU_TEMP=40, DCGM_FI_DEV_GPU_UTIL=60, DCGM_FI_DEV_FB_USED=12 * GIB
        ),
        processes=processes,
    )


def _owner(pod: str) -> ProcessOwner:
    return ProcessOwner(f"uid-{pod}", f"{pod:0<64}"[:64], "team", pod, "main")


SNAPSHOT = NodeSnapshot(
    1.7e9,
    1.0,
    0.01,
    True,
    "580.65.06",
    (
        _gpu(
            0,
            SHARED,
            (
                GpuProcess(11, None, 4 * GIB, 30, _owner("chat-0")),
                GpuProcess(12, None, 2 * GIB, 10, _owner("chat-2")),
                GpuProcess(13, None, 1 * GIB, 5, None, HOST),
            ),
        ),
        _gpu(1, WHOLE),
    ),
)


def _time_slice(pod: str, replica: int) -> Allocation:
    device = parse_device_id(f"{SHARED}::{replica}")
    return Allocation("team", pod, "main", "nvidia.com/gpu.shared", device)


# Three pods share GPU 0 by time-slicing, one replica each.
TIME_SLICED = PodResourcesSnapshot(
    allocations=tuple(_time_slice(f"chat-{i}", i) for i in range(3)),
    allocatable=(("nvidia.com/gpu.shared", 4),),
    allocated=(("nvidia.com/gpu.shared", 3),),
    taken_at=1.7e9,
    allocatable_devices=tuple(parse_device_id(f"{SHARED}::{i}") for i in range(4)),
)


def _pod_labels(entity: Entity) -> tuple[str, ...]:
    return tuple(v for k, v in entity.labels if k == "pod")


def test_a_time_sliced_gpu_held_by_three_pods_gives_three_per_pod_entities() -> None:
    node = join(SNAPSHOT, AttributionContext(TIME_SLICED, STATUS), PER_POD)
    shared = [e for e in node.entities if e.gpu.identity.uuid == SHARED]
    assert [_pod_labels(e) for e in shared] == [("chat-0",), ("chat-1",), ("chat-2",)]
    assert [dict(e.labels)["vgpu"] for e in shared] == ["0", "1", "2"]
    assert node.failures == ()
    assert node.allocations is not None
    assert [(dict(labels)["pod"], n) for labels, n in node.allocations] == [
        ("chat-0", 1),
        ("chat-1", 1),
        ("chat-2", 1),
    ]
    assert node.capacity is not None
    assert node.capacity.units_by_gpu == {SHARED: 4, WHOLE: 0}
    assert node.capacity.allocated == (("nvidia.com/gpu.shared", 3),)


def test_by_default_a_shared_gpu_keeps_one_entity_without_pod_labels() -> None:
    node = join(SNAPSHOT, AttributionContext(TIME_SLICED, STATUS), LABELS)
    assert [_pod_labels(e) for e in node.entities] == [(), ()]
    assert node.entities == tuple(device_entities(SNAPSHOT, LABELS))


def test_a_dra_claim_gives_its_gpu_pod_and_dra_labels_and_counts_what_names_nothing() -> None:
    def claimed(device: str) -> DraAllocation:
        return DraAllocation(
            "ml", "trainer", "main", "claim-0", "ml", "gpu.nvidia.com", "pool", device
        )

    pods = PodResourcesSnapshot(
        (), None, (), 1.7e9, dra_allocations=(claimed("gpu-1"), claimed("gpu-7"))
    )
    node = join(SNAPSHOT, AttributionContext(pods, STATUS), LABELS)
    whole = next(e for e in node.entities if e.gpu.identity.uuid == WHOLE)
    labels = dict(whole.labels)
    assert (labels["pod"], labels["dra_claim_name"], labels["dra_device_name"]) == (
        "trainer",
        "claim-0",
        "gpu-1",
    )
    assert node.dra_unresolved == (
        ((("hostname", "node-a"), ("driver", "gpu.nvidia.com"), ("reason", "no_such_gpu")), 1),
    )
    assert node.capacity is not None and ("gpu.nvidia.com", 2) in node.capacity.allocated


def test_process_accounting_gives_each_holding_pod_its_own_use() -> None:
    node = join(SNAPSHOT, AttributionContext(TIME_SLICED, STATUS), LABELS)
    assert node.pod_usage is not None
    used = {
        dict(labels)["pod"]: (n, memory, sm) for labels, n, memory, sm in node.pod_usage.containers
    }
    assert used == {
        "chat-0": (1, 4 * GIB, 0.3),
        "chat-2": (1, 2 * GIB, 0.1),
        "": (1, 1 * GIB, 0.05),
    }
    assert [(dict(labels)["reason"], n) for labels, n in node.pod_usage.unattributed] == [(HOST, 1)]


def test_without_pod_resources_only_the_processes_and_no_holders_are_joined() -> None:
    node = join(SNAPSHOT, NO_CONTEXT, LABELS)
    assert (node.allocations, node.dra_unresolved, node.capacity) == (None, None, None)
    assert node.collectors == () and node.sources.podresources is None
    assert node.pod_usage is not None
    assert {dict(use[0])["pod"] for use in node.pod_usage.containers} == {""}


def test_the_sources_health_comes_joined() -> None:
    view = replace(
        EMPTY_VIEW,
        pods=MappingProxyType(
            {("team", "chat-0"): PodMetadata("team", "chat-0", "uid-chat-0", "Job", "j", ())}
        ),
        node_labels=(("nvidia.com/gpu.count", "2"),),
        pods_synced=True,
        node_synced=True,
        pods_updated_at=1.7e9,
    )
    node = join(SNAPSHOT, AttributionContext(TIME_SLICED, STATUS, view), LABELS)
    assert node.collectors == (
        CollectorStatus("podresources", True, 0.01),
        CollectorStatus("kubernetes", True, 0.0),
    )
    assert node.sources.podresources is not None
    assert node.sources.podresources.errors == (("UNAVAILABLE", 2),)
    kube = node.sources.kubernetes
    assert kube is not None and kube.updated_at == (("pods", 1.7e9),)
    assert kube.node_info == (("hostname", "node-a"), ("label_nvidia_com_gpu_count", "2"))
    assert node.allocations is not None
    assert ("owner_kind", "Job") in node.allocations[0][0]


def test_a_pod_join_that_fails_leaves_the_devices_and_the_other_parts() -> None:
    broken = PodResourcesSnapshot(None, (("nvidia.com/gpu", 2),), (), 1.7e9)  # type: ignore[arg-type]
    node = join(SNAPSHOT, AttributionContext(broken, STATUS), LABELS)
    assert [(part, type(error)) for part, error in node.failures] == [(POD_JOIN, TypeError)]
    assert node.entities == tuple(device_entities(SNAPSHOT, LABELS))
    assert node.allocations == () and node.pod_usage is None
    assert node.capacity is not None and node.capacity.allocatable == (("nvidia.com/gpu", 2),)
    assert node.sources.podresources is not None


def test_a_part_that_fails_costs_only_itself() -> None:
    broken = replace(TIME_SLICED, allocatable=5)  # type: ignore[arg-type]
    node = join(SNAPSHOT, AttributionContext(broken, STATUS), PER_POD)
    assert [part for part, _ in node.failures] == ["capacity"]
    assert node.capacity is None
    assert len(node.entities) == 4 and node.allocations and node.pod_usage is not None
    body = Renderer(PER_POD).render_body(node)
    assert 'kube_gpu_exporter_render_errors_total{part="capacity"} 1' in body
    assert "kube_gpu_exporter_node_physical_gpus{" in body
    assert "kube_gpu_exporter_node_allocated_devices" not in body
    assert 'kube_gpu_exporter_pod_device_allocation{gpu="0"' in body


def test_a_join_that_raises_is_served_as_the_devices_without_pods() -> None:
    def failing(snapshot: NodeSnapshot) -> AttributedNode:
        raise RuntimeError("join bug")

    renderer = Renderer(LABELS)
    exposition = build_exposition(SNAPSHOT, renderer, failing)
    body = exposition.body.decode()
    assert body.count("DCGM_FI_DEV_GPU_TEMP{") == 2 and 'pod="' not in body
    assert 'kube_gpu_exporter_render_errors_total{part="pod join"} 1' in body
    assert exposition.snapshot is SNAPSHOT
    fallback = without_pods(SNAPSHOT, LABELS, RuntimeError("join bug"))
    assert Renderer(LABELS).render_body(fallback) == body

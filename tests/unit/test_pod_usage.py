"""Per-container GPU use from process accounting: the cross-check against the pods that hold a
device, the unattributed row and its reasons, MIG (memory only), the Kubernetes view naming a pod
by UID, and dcgm-exporter's per-pod GPU_UTIL / FB_USED copies."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW, PodMetadata
from kube_gpu_exporter.exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.attribution import attribute
from kube_gpu_exporter.exporter.podresources.client import PodResourcesStatus
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.processes.host_pids import HostPidOwners
from kube_gpu_exporter.exporter.processes.owner import EXITED, HOST
from kube_gpu_exporter.exporter.processes.pod_usage import (
    HOLDER_UNKNOWN,
    NOT_HOLDER,
    UNATTRIBUTED,
    Usage,
    pod_usage,
)
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fleet import CGROUP_LAYOUTS, default_fleet
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
    ProcessOwner,
)
from tests.conftest import render_body

GIB = 1 << 30
SHARED = "GPU-shared"
MIGGPU = "GPU-mig"


def _owner(pod: str, container: str = "main", named: bool = True) -> ProcessOwner:
    return ProcessOwner(
        f"uid-{pod}",
        f"{pod:0<64}"[:64],
        "team" if named else "",
        pod if named else "",
        container if named else "",
    )


SHARED_GPU = GpuSnapshot(
    GpuIdentity(0, SHARED, "NVIDIA H100 80GB HBM3", "00000000:18:00.0", mig_enabled=False),
    up=True,
    readings=GpuReadings.of(
        DCGM_FI_DEV_GPU_UTIL=70, DCGM_FI_DEV_FB_USED=30 * GIB, DCGM_FI_DEV_GPU_TEMP=50
    ),
    processes=(
        GpuProcess(101, None, 8 * GIB, 30, _owner("chat-a")),
        GpuProcess(102, None, 2 * GIB, 10, _owner("chat-a", "sidecar")),
        GpuProcess(201, None, 6 * GIB, 20, _owner("chat-b")),
        GpuProcess(301, None, 4 * GIB, None, _owner("chat-c", named=False)),  # named by UID
        GpuProcess(401, None, 1 * GIB, 5, _owner("intruder")),  # its pod holds no share
        GpuProcess(501, None, 1 * GIB, 5, None, HOST),
        GpuProcess(502, None, None, None, None, EXITED),
    ),
)
MIG_GPU = GpuSnapshot(
    GpuIdentity(1, MIGGPU, "NVIDIA H100 80GB HBM3", "00000000:2A:00.0", mig_enabled=True),
    up=True,
    readings=GpuReadings.of(DCGM_FI_DEV_GPU_TEMP=40),
    mig_instances=(
        MigInstance("MIG-1", 9, 0, "1g.10gb", fb_used_bytes=5 * GIB),
        MigInstance("MIG-2", 10, 0, "1g.10gb", fb_used_bytes=0),
    ),
    processes=(GpuProcess(601, 9, 3 * GIB, None, _owner("mig-user")),),
)
SNAPSHOT = NodeSnapshot(1.7e9, 1.0, 0.01, True, "580.65.06", (SHARED_GPU, MIG_GPU))


def _alloc(pod: str, device: str, container: str = "main") -> Allocation:
    resource = "nvidia.com/gpu.shared" if "::" in device else "nvidia.com/mig-1g.10gb"
    return Allocation("team", pod, container, resource, parse_device_id(device))


PODS = PodResourcesSnapshot(
    allocations=(
        _alloc("chat-a", f"{SHARED}::0"),
        _alloc("chat-b", f"{SHARED}::1"),
        _alloc("chat-c", f"{SHARED}::2"),
        _alloc("mig-user", "MIG-1"),
    ),
    allocatable=None,
    allocated=(),
    taken_at=1.7e9,
)
KUBE = replace(
    EMPTY_VIEW,
    pods=MappingProxyType(
        {("team", "chat-c"): PodMetadata("team", "chat-c", "uid-chat-c", "", "", ())}
    ),
    pods_synced=True,
)


def test_processes_count_only_for_pods_that_hold_the_device() -> None:
    usage = pod_usage(SNAPSHOT, attribute(SNAPSHOT, PODS), KUBE)
    shared = usage[(SHARED, None)]
    assert dict(shared.by_container) == {
        ("team", "chat-a", "main"): Usage(1, 8 * GIB, 30),
        ("team", "chat-a", "sidecar"): Usage(1, 2 * GIB, 10),
        ("team", "chat-b", "main"): Usage(1, 6 * GIB, 20),
        ("team", "chat-c", ""): Usage(1, 4 * GIB, None),
        UNATTRIBUTED: Usage(3, 2 * GIB, 10),
    }
    assert dict(shared.unattributed) == {NOT_HOLDER: 1, HOST: 1, EXITED: 1}
    # Rows add up to what NVML listed, and stay within the device's used memory.
    total = sum(u.memory_bytes or 0 for u in shared.by_container.values())
    readings = SHARED_GPU.readings
    assert readings is not None and readings.fb_used_bytes is not None
    assert total == 22 * GIB <= readings.fb_used_bytes


def test_without_the_kubernetes_view_a_pod_known_only_by_uid_is_unattributed() -> None:
    usage = pod_usage(SNAPSHOT, attribute(SNAPSHOT, PODS), None)
    assert ("team", "chat-c", "") not in usage[(SHARED, None)].by_container
    assert usage[(SHARED, None)].unattributed["unknown_container"] == 1


def test_mig_instances_have_memory_and_no_sm_share() -> None:
    usage = pod_usage(SNAPSHOT, attribute(SNAPSHOT, PODS), KUBE)
    assert dict(usage[(MIGGPU, 9)].by_container) == {
        ("team", "mig-user", "main"): Usage(1, 3 * GIB, None),
        UNATTRIBUTED: Usage(0, 0, None),
    }
    assert dict(usage[(MIGGPU, 10)].by_container) == {UNATTRIBUTED: Usage(0, 0, None)}


def _scrape(labels: LabelConfig) -> dict[str, list]:
    context = AttributionContext(PODS, PodResourcesStatus(True, 1.7e9, 0.01, (), None), KUBE)
    text = render_body(SNAPSHOT, labels, context)
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_the_families_have_one_row_per_container_and_one_unattributed_per_device() -> None:
    families = _scrape(LabelConfig(node_name="n"))
    memory = {
        (
            s.labels["UUID"],
            s.labels.get("GPU_I_ID", ""),
            s.labels["pod"],
            s.labels["container"],
        ): s.value
        for s in families["kube_gpu_exporter_pod_gpu_memory_used_bytes"]
    }
    assert memory[(SHARED, "", "chat-a", "sidecar")] == 2 * GIB
    assert memory[(SHARED, "", "", "")] == 2 * GIB
    assert memory[(MIGGPU, "10", "", "")] == 0
    sm = {
        (s.labels["UUID"], s.labels["pod"], s.labels["container"]): s.value
        for s in families["kube_gpu_exporter_pod_gpu_sm_utilization_ratio"]
    }
    assert sm[(SHARED, "chat-a", "main")] == 0.3
    assert sm[(SHARED, "chat-c", "")] == 0  # no sample in the window: not busy
    assert all(uuid == SHARED for uuid, _, _ in sm)  # none on MIG
    reasons = {
        s.labels["reason"]: s.value
        for s in families["kube_gpu_exporter_gpu_processes_unattributed"]
    }
    assert reasons == {"exited": 1, "host": 1, "not_holder": 1}
    # The device series are untouched: still the device's own figures, with no pod labels.
    [temp] = [s for s in families["DCGM_FI_DEV_FB_USED"] if s.labels["UUID"] == SHARED]
    assert temp.value == 30 * 1024 and "pod" not in temp.labels


def test_without_pod_resources_every_process_is_on_its_devices_unattributed_row() -> None:
    """--no-podresources --collector.processes: no holders are known, so no process counts for a
    pod, and none is lost: a pod's process says holder_unknown, the rest their own reason."""
    text = render_body(SNAPSHOT, LabelConfig(node_name="n"))  # no attribution context
    families = {f.name: f.samples for f in text_string_to_metric_families(text)}
    rows = {
        (s.labels["UUID"], s.labels.get("GPU_I_ID", ""), s.labels["pod"]): s.value
        for s in families["kube_gpu_exporter_pod_gpu_memory_used_bytes"]
    }
    assert rows == {(SHARED, "", ""): 22 * GIB, (MIGGPU, "9", ""): 3 * GIB, (MIGGPU, "10", ""): 0}
    reasons = {
        (s.labels["UUID"], s.labels["reason"]): s.value
        for s in families["kube_gpu_exporter_gpu_processes_unattributed"]
    }
    assert reasons == {
        (SHARED, HOLDER_UNKNOWN): 5,
        (SHARED, "host"): 1,
        (SHARED, "exited"): 1,
        (MIGGPU, HOLDER_UNKNOWN): 1,
    }
    # Pod-resources' own families stay away: it is off, not failing.
    assert "kube_gpu_exporter_pod_device_allocation" not in families
    assert 'collector="podresources"' not in text


def test_per_pod_copies_carry_each_pods_own_use_when_asked() -> None:
    families = _scrape(
        LabelConfig(node_name="n", shared_device_series="per-pod", per_pod_usage=True)
    )
    util = {
        s.labels["pod"]: s.value
        for s in families["DCGM_FI_DEV_GPU_UTIL"]
        if s.labels["UUID"] == SHARED
    }
    assert util == {"chat-a": 30, "chat-b": 20, "chat-c": 0}
    fb = {
        s.labels["pod"]: s.value
        for s in families["DCGM_FI_DEV_FB_USED"]
        if s.labels["UUID"] == SHARED
    }
    assert fb == {"chat-a": 8 * 1024, "chat-b": 6 * 1024, "chat-c": 0}  # MiB
    # Without the option, the copies repeat the device's figures, as before.
    families = _scrape(LabelConfig(node_name="n", shared_device_series="per-pod"))
    assert {s.value for s in families["DCGM_FI_DEV_GPU_UTIL"] if s.labels["UUID"] == SHARED} == {70}


@pytest.mark.parametrize("layout", CGROUP_LAYOUTS)
def test_every_simulated_process_resolves_to_its_container_in_every_cgroup_layout(
    make_sim, tmp_path, layout
) -> None:
    """The simulator's host tree, read by the production resolver: every pod process is named,
    the host process is a host process, whatever the cgroup driver, runtime and version."""
    sim = make_sim(replace(default_fleet(), cgroup_layout=layout))
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
    table = ProcessTable(sim, kubelet)
    tree = HostTree(table, tmp_path / "host").refresh()
    owners = HostPidOwners(tree.proc_root, tree.log_root)
    assert owners.problem() is None
    processes = table.processes()
    assert any(p.on_host for p in processes) and any(not p.on_host for p in processes)
    for process in processes:
        found = owners.owner(process.pid)
        if process.container is None:
            assert found == HOST, process
            continue
        c = process.container
        assert found == ProcessOwner(c.pod_uid, c.container_id, c.namespace, c.pod, c.name)

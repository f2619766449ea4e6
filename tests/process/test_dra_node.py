"""The simulated DRA node end to end: the exporter's pod-resources client over real gRPC against
the fake kubelet, through attribution to the exposition; a kubelet restart mid-run; a node mixing
the device plugin and DRA; privileged and unprivileged NVML; and the real process under
`--simulate dra`."""

from __future__ import annotations

import re
from dataclasses import replace
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER
from kube_gpu_exporter.exporter.dra.slices import offered_devices, parse_resource_slice
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import builtin_fleet
from kube_gpu_exporter.exporter.simulator.resource_slices import resource_slices
from tests.conftest import render, unexpected_lint_findings
from tests.support.exporter_process import scrape_until, start_exporter

NODE_LABELS = ("pod", "namespace", "container")


@pytest.fixture
def served(make_sim, make_poller, tmp_path):
    """Start the fake kubelet for a fleet; returns (sim, kubelet, watcher, poller)."""
    kubelets: list[FakeKubelet] = []

    def start(fleet_name: str, **fleet_changes):
        sim = make_sim(replace(builtin_fleet(fleet_name), **fleet_changes))
        kubelet = FakeKubelet(sim, tmp_path / f"{len(kubelets)}" / "kubelet.sock").start()
        kubelets.append(kubelet)
        watcher = PodResourcesWatcher(
            PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5), 0.05
        )
        return sim, kubelet, watcher, make_poller(sim)

    yield start
    for kubelet in kubelets:
        kubelet.stop()


def scrape(poller, watcher, kube=None, refresh: bool = True) -> dict[str, list]:
    if refresh:
        assert watcher.refresh()
    context = AttributionContext(pods=watcher.latest, pods_status=watcher.status, kube=kube)
    text = render(poller.sweep(), LabelConfig(node_name="n"), context)
    assert unexpected_lint_findings(text) == []
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def temperature_labels(families: dict[str, list]) -> dict[tuple[str, str], dict[str, str]]:
    return {
        (s.labels["gpu"], s.labels.get("GPU_I_ID", "")): s.labels
        for s in families["DCGM_FI_DEV_GPU_TEMP"]
    }


def allocation_rows(families: dict[str, list]) -> set[tuple[str, ...]]:
    return {
        (
            s.labels["namespace"],
            s.labels["pod"],
            s.labels["container"],
            s.labels["dra_claim_name"],
            s.labels["dra_device_name"],
        )
        for s in families["kube_gpu_exporter_pod_device_allocation"]
        if "dra_claim_name" in s.labels
    }


def expected_rows(kubelet: FakeKubelet) -> set[tuple[str, ...]]:
    return {
        (a.namespace, a.pod, a.container, a.claim_name, a.device)
        for a in kubelet.dra_holders()
        if a.driver == NVIDIA_GPU_DRIVER
    }


def test_the_dra_node_labels_claimed_devices_and_lists_every_claim(served):
    sim, kubelet, watcher, poller = served("dra")
    families = scrape(poller, watcher)
    series = temperature_labels(families)
    # Exclusive whole GPUs (0, 1 in one claim; 4) and both claimed MIG instances carry a pod.
    owned = {key for key, labels in series.items() if "pod" in labels}
    mig = {inst.gpu_instance_id: inst for inst in sim.gpus[7].live_instances()}
    claimed_mig = {("7", str(gi)) for gi, inst in mig.items() if inst is not list(mig.values())[1]}
    assert owned == {("0", ""), ("1", ""), ("4", "")} | claimed_mig
    for key in owned:
        assert {"dra_claim_name", "dra_device_name", "dra_pool_name"} <= set(series[key])
        assert series[key]["dra_driver_name"] == NVIDIA_GPU_DRIVER
    for key in claimed_mig:
        labels = series[key]
        assert labels["dra_mig_profile"] == labels["GPU_I_PROFILE"]
        assert labels["dra_mig_device_uuid"] == mig[int(key[1])].uuid
    # GPU 2 (two claims with share IDs) and GPU 3 (two containers of one claim): nobody's.
    for key in (("2", ""), ("3", "")):
        assert not set(NODE_LABELS) & set(series[key]), series[key]
    assert allocation_rows(families) == expected_rows(kubelet)
    shared = [
        s.labels
        for s in families["kube_gpu_exporter_pod_device_allocation"]
        if s.labels["gpu"] == "2"
    ]
    assert len({s["pod"] for s in shared}) == 2 and all("dra_share_id" in s for s in shared)
    unresolved = {
        (s.labels["driver"], s.labels["reason"]): s.value
        for s in families["kube_gpu_exporter_dra_devices_unresolved"]
    }
    assert unresolved == {("compute-domain.nvidia.com", "foreign_driver"): 1}
    allocated = {
        s.labels["resource"]: s.value for s in families["kube_gpu_exporter_node_allocated_devices"]
    }
    assert allocated == {
        NVIDIA_GPU_DRIVER: 5,
        f"{NVIDIA_GPU_DRIVER}/mig-1g.10gb": 1,
        f"{NVIDIA_GPU_DRIVER}/mig-3g.40gb": 1,
    }


def test_labels_survive_a_kubelet_restart_and_follow_it_back(served):
    _sim, kubelet, watcher, poller = served("dra")
    before = allocation_rows(scrape(poller, watcher))
    kubelet.stop()  # the socket goes away, as when the kubelet restarts
    assert not watcher.refresh()
    families = scrape(poller, watcher, refresh=False)
    up = families["kube_gpu_exporter_podresources_up"][0].value
    assert up == 0 and allocation_rows(families) == before  # the last answer is kept
    kubelet.start()
    assert allocation_rows(scrape(poller, watcher)) == before == expected_rows(kubelet)


def test_a_mixed_node_attributes_and_counts_both_paths(served):
    _sim, kubelet, watcher, poller = served("mixed")
    families = scrape(poller, watcher)
    rows = families["kube_gpu_exporter_pod_device_allocation"]
    resources = {s.labels["resource"] for s in rows}
    assert NVIDIA_GPU_DRIVER in resources and "nvidia.com/gpu" in resources
    assert allocation_rows(families) == expected_rows(kubelet)
    allocated = {
        s.labels["resource"]: s.value for s in families["kube_gpu_exporter_node_allocated_devices"]
    }
    plugin = sum(n for r, n in allocated.items() if r.startswith("nvidia.com/"))
    dra = sum(n for r, n in allocated.items() if r.startswith(NVIDIA_GPU_DRIVER))
    assert plugin > 0 and dra > 0
    # The kubelet's allocatable list has the device plugin's devices only.
    allocatable = {
        s.labels["resource"] for s in families["kube_gpu_exporter_node_allocatable_devices"]
    }
    assert allocatable and not any(r.startswith(NVIDIA_GPU_DRIVER) for r in allocatable)
    units = {
        s.labels["gpu"]: s.value for s in families["kube_gpu_exporter_device_allocatable_units"]
    }
    held_by_dra = {s.labels["gpu"] for s in rows if s.labels["resource"] == NVIDIA_GPU_DRIVER}
    assert all(units[gpu] > 0 for gpu in held_by_dra)


def _slice_view(sim: FakeNvml):
    parsed = [parse_resource_slice(obj) for obj in resource_slices(sim)]
    return replace(
        EMPTY_VIEW,
        resource_slices=MappingProxyType(offered_devices([p for p in parsed if p is not None])),
        slices_synced=True,
    )


def test_unprivileged_nvml_leaves_twin_mig_instances_ambiguous_until_slices_tell(served):
    sim, _kubelet, watcher, poller = served("dra", nvml_privileged=False)
    families = scrape(poller, watcher)
    unresolved = {
        s.labels["reason"]: s.value for s in families["kube_gpu_exporter_dra_devices_unresolved"]
    }
    # GPU 7 has two 1g.10gb instances; without placements the claimed one is not guessed.
    assert unresolved.get("ambiguous_mig_instance") == 1
    series = temperature_labels(families)
    mig_owned = {k for k, labels in series.items() if k[0] == "7" and "pod" in labels}
    assert len(mig_owned) == 1  # the 3g.40gb, unique on its GPU
    # The ResourceSlices' uuid attribute resolves it, and makes free devices allocatable.
    families = scrape(poller, watcher, kube=_slice_view(sim))
    assert "kube_gpu_exporter_dra_devices_unresolved" not in families or not [
        s
        for s in families["kube_gpu_exporter_dra_devices_unresolved"]
        if s.labels["reason"] != "foreign_driver"
    ]
    series = temperature_labels(families)
    assert len({k for k, labels in series.items() if k[0] == "7" and "pod" in labels}) == 2
    allocatable = {
        s.labels["resource"]: s.value
        for s in families["kube_gpu_exporter_node_allocatable_devices"]
    }
    assert allocatable[NVIDIA_GPU_DRIVER] == 7  # GPUs 0-6; GPU 7 is offered as MIG devices
    units = {
        s.labels["gpu"]: s.value for s in families["kube_gpu_exporter_device_allocatable_units"]
    }
    assert all(n > 0 for n in units.values()), units  # free GPUs 5 and 6 too


def test_the_process_under_simulate_dra():
    proc, base = start_exporter("--simulate", "dra")
    try:
        text = scrape_until(
            base, lambda t: "dra_claim_name=" in t, what="DRA claim labels", proc=proc
        )
        assert 'hostname="sim-dra-node-0"' in text
        assert re.search(r'DCGM_FI_DEV_GPU_TEMP\{gpu="0"[^}]*dra_device_name="gpu-0"', text)
        assert re.search(r'DCGM_FI_DEV_GPU_TEMP\{gpu="7"[^}]*dra_mig_profile="3g.40gb"', text)
        assert not re.search(r'DCGM_FI_DEV_GPU_TEMP\{gpu="2"[^}]*pod=', text)
        assert re.search(
            r'kube_gpu_exporter_dra_devices_unresolved\{[^}]*reason="foreign_driver"\} 1', text
        )
        assert unexpected_lint_findings(text) == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)

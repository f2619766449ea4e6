"""The capacity dashboard, recording rules and alerts on a DRA node and on a cluster mixing a DRA
node with a device-plugin node, in a real Prometheus: every capacity panel has data, whole GPUs
of both paths add up, and GPUUnallocatable stays quiet for GPUs the DRA driver offers.

The DRA node is `--simulate dra` with `--kubernetes` against a fake API server in this process,
which serves the node's pods and the ResourceSlices NVIDIA's DRA driver would publish; the
device-plugin node is the default simulated node, scraped as one more target of the bundle's job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.localstack.stack import CompanionExporter, LocalStack
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import builtin_fleet, default_fleet
from kube_gpu_exporter.exporter.simulator.resource_slices import resource_slices
from tests.e2e.conftest import started_stack
from tests.e2e.ksm_fake import FakeKubeStateMetrics
from tests.e2e.panels import (
    dashboards_of,
    needs_fabric_node,
    needs_faulty_node,
    needs_kube_state_metrics,
    run_panels,
)
from tests.e2e.test_panels import warm_up
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig

DRA_NODE = builtin_fleet("dra").node_name
PLUGIN_NODE = default_fleet().node_name
JOB = DEFAULT.scrape.job_name
CAPACITY = [p for p in dashboards_of(DEFAULT.dcgm_version) if p.stem == "gpu-cluster-capacity"]


def _offered_whole_gpus(nvml: FakeNvml) -> int:
    return sum(
        1
        for obj in resource_slices(nvml)
        for device in obj["spec"]["devices"]
        if device["attributes"]["type"]["string"] == "gpu"
    )


@dataclass(frozen=True)
class Cluster:
    stack: LocalStack
    # Whole GPUs each node offers: the DRA node through its ResourceSlices, the other through
    # the device plugin's nvidia.com/gpu.
    offered: dict[str, int]


def _fake_api(directory: Path) -> tuple[FakeKubeApi, Path, int]:
    """An API server for the DRA node: its pods, its GPU labels and its ResourceSlices."""
    nvml = FakeNvml(builtin_fleet("dra"))
    api = FakeKubeApi(DRA_NODE)
    for pod in FakeKubelet(nvml, directory / "unused.sock").pods:
        api.put_pod(api.pod(pod.namespace, pod.name))
    api.set_node_labels({"nvidia.com/gpu.present": "true"})
    for obj in resource_slices(nvml):
        api.put_slice(obj)
    api.start()
    return api, write_kubeconfig(directory / "kubeconfig", api.host), _offered_whole_gpus(nvml)


@pytest.fixture(scope="module", params=["dra-node", "mixed-cluster"])
def cluster(request, tmp_path_factory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp(request.param)
    api, kubeconfig, dra_offered = _fake_api(workdir)
    ksm = FakeKubeStateMetrics("127.0.0.1")
    offered = {DRA_NODE: dra_offered}
    companions = []
    if request.param == "mixed-cluster":
        companions.append(CompanionExporter("plugin-node", as_job=JOB))
        plugin = FakeKubelet(FakeNvml(default_fleet()), workdir / "unused.sock")
        offered[PLUGIN_NODE] = len(plugin.allocatable_devices()["nvidia.com/gpu"])
    try:
        with started_stack(
            workdir,
            DEFAULT,
            ksm,
            companions,
            exporter_args=(
                "--simulate",
                "dra",
                "--kubernetes",
                f"--kubernetes.kubeconfig={kubeconfig}",
            ),
        ) as stack:
            warm_up(stack)
            yield Cluster(stack, offered)
    finally:
        ksm.stop()
        api.stop()


def test_every_capacity_panel_has_data(cluster):
    results = run_panels(cluster.stack.api, dashboards=CAPACITY)
    assert len(results) > 10
    empty = {key for key, per_query in results.items() if not all(per_query)}
    # No GPU of these nodes is faulty, so the panels of GPUs needing a repair stay empty too.
    assert empty == (
        needs_kube_state_metrics(CAPACITY)
        | needs_fabric_node(CAPACITY)
        | needs_faulty_node(CAPACITY)
    )


def _by_node(api, expr: str) -> dict[str, float]:
    return {s["metric"]["node"]: float(s["value"][1]) for s in api.query(expr)}


def test_whole_gpus_of_both_paths_add_up(cluster):
    api = cluster.stack.api
    whole = DEFAULT.resources.whole_gpu_regex
    allocatable = _by_node(api, f'sum by (node) ({r.ALLOCATABLE}{{resource=~"{whole}"}})')
    assert allocatable == cluster.offered
    [total] = api.query(
        f'sum(cluster_resource:kube_gpu_exporter_node_allocatable_devices:sum{{resource=~"{whole}"}})'
    )
    assert float(total["value"][1]) == sum(cluster.offered.values())
    free = _by_node(api, f'sum by (node) ({r.FREE}{{resource=~"{whole}"}})')
    [pods] = api.query(f'{r.SCHEDULABLE_PODS}{{gpus_per_pod="1"}}')
    assert float(pods["value"][1]) == sum(free.values()) > 0
    # The DRA node: 7 whole GPUs offered, 5 in use (GPUs 0-4), so 2 free.
    assert free[DRA_NODE] == 2


def test_gpu_unallocatable_stays_quiet_for_gpus_the_dra_driver_offers(cluster):
    api = cluster.stack.api
    units = api.query(f'kube_gpu_exporter_device_allocatable_units{{hostname="{DRA_NODE}"}} == 0')
    assert units == []
    alerts = api.query('ALERTS{alertname=~"GPUUnallocatable|GPUClusterNodeUnallocatable"}')
    assert [a["metric"] for a in alerts] == []
    watch = api.query('kube_gpu_exporter_kubernetes_watch_up{resource="resourceslices"}')
    assert [float(w["value"][1]) for w in watch] == [1.0]

"""The ResourceSlice watch against the simulated DRA node: a forged ResourceSlice. The fake API
serves the driver's real slice and, in the same pool at a newer generation, one mapping `gpu-0`
to GPU 5's UUID. The kubelet speaks real gRPC and the slices come over real HTTP through the
`kubernetes` client; the pod holding GPU 0 must keep its labels there, and the disagreement must
be counted.

Here, not with the others in tests/unit/test_resource_slice_watch.py, because the DRA node's
fixture and scrape are tests/process/test_dra_node.py's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher
from tests.conftest import wait_for
from tests.process.test_dra_node import scrape, served, temperature_labels
from tests.support.fake_kube_api import FakeKubeApi, slice_device
from tests.support.kubernetes import client_for

__all__ = ["served"]  # the fixture, imported for pytest

NODE_LABELS = {"pod", "namespace", "container"}


@pytest.fixture
def forged(served) -> Iterator[tuple[object, object, KubernetesWatcher]]:
    """The DRA node, its pod-resources watcher and poller, and a ResourceSlice watch whose API
    serves a forged slice moving `gpu-0` to GPU 5; yields (watcher, poller, slice watcher)."""
    from kube_gpu_exporter.exporter.simulator.resource_slices import resource_slices

    sim, _kubelet, pods, poller = served("dra")
    node = sim.fleet.node_name
    api = FakeKubeApi(node)
    [genuine] = resource_slices(sim)
    api.put_slice(genuine)
    pool = genuine["spec"]["pool"]
    gpu5 = next(d for d in genuine["spec"]["devices"] if d["name"] == "gpu-5")
    stolen = gpu5["attributes"]["uuid"]["string"]
    api.put_slice(
        api.resource_slice(
            "forged",
            [slice_device("gpu-0", type="gpu", uuid=stolen)],
            pool=pool["name"],
            generation=pool["generation"] + 1,
        )
    )
    api.start()
    watcher = KubernetesWatcher(
        client_for(api.host),
        node,
        watch_resource_slices=True,
        watch_timeout_seconds=1,
        max_backoff_seconds=0.2,
    )
    watcher.start()
    try:
        # The forged generation is the newest: it is all the pool offers now.
        assert wait_for(
            lambda: (
                watcher.view().slices_synced is True
                and [d.uuid for d in watcher.view().resource_slices.values()] == [stolen]
            )
        )
        yield pods, poller, watcher
    finally:
        watcher.stop(timeout=3)
        api.stop()


def test_a_forged_slice_does_not_move_a_pods_labels_to_another_gpu(forged):
    pods, poller, watcher = forged
    families = scrape(poller, pods, kube=watcher.view())
    series = temperature_labels(families)
    # GPU 0 is the one NVML gives minor 0, and a pod holds it; GPU 5 is idle.
    assert set(series[("0", "")]) >= NODE_LABELS, series[("0", "")]
    assert series[("0", "")]["dra_device_name"] == "gpu-0"
    assert not NODE_LABELS & set(series[("5", "")]), series[("5", "")]
    rows = {
        s.labels["gpu"]
        for s in families["kube_gpu_exporter_pod_device_allocation"]
        if s.labels.get("dra_device_name") == "gpu-0"
    }
    assert rows == {"0"}
    # The offer is counted on the GPU the name's minor number is, too.
    units = {
        s.labels["gpu"]: s.value for s in families["kube_gpu_exporter_device_allocatable_units"]
    }
    assert (units["0"], units["5"]) == (1, 0), units


def test_a_forged_slice_is_counted_as_a_conflict(forged):
    pods, poller, watcher = forged
    families = scrape(poller, pods, kube=watcher.view())
    unresolved = {
        (s.labels["driver"], s.labels["reason"]): s.value
        for s in families["kube_gpu_exporter_dra_devices_unresolved"]
    }
    assert unresolved.get(("gpu.nvidia.com", "slice_conflict")) == 1, unresolved

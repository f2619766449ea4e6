"""Kubernetes enrichment as it reaches the exposition: hostile pod-label values stay intact."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW, PodMetadata
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from tests.conftest import LABELS, render, unexpected_lint_findings

HOSTILE = [
    'say "hi"',
    "back\\slash",
    "two\nlines",
    "ünïcødé ✓ 日本語",
    'all: "\\\n',
    "",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_pod_label_values_are_escaped(sim, tmp_path, make_poller, value):
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock").start()
    try:
        watcher = PodResourcesWatcher(PodResourcesClient(str(kubelet.socket_path)), 1.0)
        assert watcher.refresh()
    finally:
        kubelet.stop()
    pod = "llm-pretrain-worker-0"
    meta = PodMetadata(
        namespace="ml-training",
        name=pod,
        uid="0b7c3a9e-1111-4d2e-9c1a-5f6e7d8c9b0a",
        owner_kind="Job",
        owner_name="llm-pretrain",
        labels=(("label_team", value),),
    )
    view = EMPTY_VIEW.__class__(
        **{
            **{f: getattr(EMPTY_VIEW, f) for f in EMPTY_VIEW.__slots__},
            "pods": {("ml-training", pod): meta},
            "pods_synced": True,
        }
    )
    context = AttributionContext(pods=watcher.latest, pods_status=watcher.status, kube=view)
    text = render(make_poller(sim).sweep(), LABELS, context)
    families = {f.name: f for f in text_string_to_metric_families(text)}
    held = [
        s
        for s in families["kube_gpu_exporter_pod_device_allocation"].samples
        if s.labels["pod"] == pod
    ]
    assert len(held) == 2
    for sample in held:
        assert sample.labels["label_team"] == value
        assert sample.labels["pod_uid"] == meta.uid
        assert (sample.labels["owner_kind"], sample.labels["owner_name"]) == ("Job", "llm-pretrain")
    assert unexpected_lint_findings(text) == []


def test_node_info_from_gpu_feature_discovery_labels(sim, make_poller):
    view = EMPTY_VIEW.__class__(
        **{
            **{f: getattr(EMPTY_VIEW, f) for f in EMPTY_VIEW.__slots__},
            "node_labels": (
                ("nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"),
                ("nvidia.com/mig.config", "all-balanced"),
            ),
            "node_synced": True,
            "pods_synced": True,
            "watch_errors": 2,
            "relists": 1,
            "labels_dropped": 4,  # the per-pod label cap triggered
        }
    )
    text = render(make_poller(sim).sweep(), LABELS, AttributionContext(kube=view))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    info = families["kube_gpu_exporter_node_info"].samples[0].labels
    assert info["label_nvidia_com_gpu_product"] == "NVIDIA-H100-80GB-HBM3"
    assert info["label_nvidia_com_mig_config"] == "all-balanced"
    up = {
        s.labels["resource"]: s.value
        for s in families["kube_gpu_exporter_kubernetes_watch_up"].samples
    }
    assert up == {"pods": 1, "node": 1}
    assert "kube_gpu_exporter_kubernetes_relists_total 1" in text
    assert "kube_gpu_exporter_pod_labels_dropped_total 4" in text
    assert unexpected_lint_findings(text) == []


@pytest.mark.parametrize("value", HOSTILE[:-1])
def test_pod_container_and_namespace_names_from_the_kubelet_are_escaped(sim, make_poller, value):
    """The kubelet is trusted to send valid Kubernetes names, but a wrong one must not corrupt
    the exposition: it is escaped like any label value and parsed back exactly."""
    from kube_gpu_exporter.exporter.podresources.allocations import from_responses
    from kube_gpu_exporter.exporter.podresources.v1 import api_pb2

    listing = api_pb2.ListPodResourcesResponse(
        pod_resources=[
            api_pb2.PodResources(
                name=f"pod {value}",
                namespace=f"ns {value}",
                containers=[
                    api_pb2.ContainerResources(
                        name=f"ctr {value}",
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name="nvidia.com/gpu",
                                device_ids=[sim.gpus[0].uuid, f"GPU-{value}"],
                            )
                        ],
                    )
                ],
            )
        ]
    )
    pods = from_responses(listing, None, frozenset(), 0.0)
    text = render(make_poller(sim).sweep(), LABELS, AttributionContext(pods=pods))
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [temp] = [s for s in families["DCGM_FI_DEV_GPU_TEMP"].samples if s.labels["gpu"] == "0"]
    assert temp.labels["pod"] == f"pod {value}"
    assert temp.labels["namespace"] == f"ns {value}"
    assert temp.labels["container"] == f"ctr {value}"
    assert unexpected_lint_findings(text) == []

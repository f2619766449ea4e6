"""`--simulate --kubernetes` without a kubeconfig: the simulated node's pods, node object and
ResourceSlices come from an in-process fake API, and the exporter's Kubernetes watcher reads
them as it would a cluster's."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.app import attribution_sources, with_node_name
from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
from kube_gpu_exporter.exporter.simulator.cluster_state import TEAM_LABEL, node_labels
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.node import simulated_node
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable, pod_uid
from tests.conftest import wait_for

SYNC_DEADLINE_SECONDS = 10.0


@pytest.fixture(autouse=True)
def _fresh_kubernetes_default() -> Iterator[None]:
    import kubernetes

    yield
    # load_kube_config() sets the client's process-wide default; later tests must not inherit it.
    kubernetes.client.Configuration.set_default(None)


@contextlib.contextmanager
def _synced_view(*flags: str) -> Iterator[tuple[FakeNvml, FakeKubelet, Config, KubernetesView]]:
    """The simulated node wired as `kube-gpu-exporter --simulate FLAGS` wires it, and its
    Kubernetes watcher's view once every watch has synced."""
    config = parse_config(["--simulate", *flags], environ={})
    with simulated_node(config) as node:
        nvml, kubelet, config = node.nvml, node.kubelet, node.config
        config = with_node_name(config, nvml.fleet.node_name)
        _, kube = attribution_sources(config)
        assert kube is not None
        kube.start()
        try:
            assert wait_for(
                lambda: (
                    kube.view().pods_synced
                    and kube.view().node_synced
                    and kube.view().slices_synced is not False
                ),
                SYNC_DEADLINE_SECONDS,
                step=0.005,
            ), "the watches of the simulated API synced"
            yield nvml, kubelet, config, kube.view()
        finally:
            kube.stop(timeout=3.0)


def test_the_watcher_reads_the_simulated_nodes_pods_with_the_process_tables_uids():
    with _synced_view("--kubernetes") as (nvml, kubelet, config, view):
        kubeconfig = Path(config.attribution.kubeconfig or "")
        assert kubeconfig.name == "kubeconfig" and kubeconfig.is_file()
        seed = nvml.fleet.seed
        assert set(view.pods) == {(p.namespace, p.name) for p in kubelet.pods}
        for (namespace, name), meta in view.pods.items():
            assert meta.uid == pod_uid(seed, namespace, name)
        # Process accounting names its pods by the same UIDs.
        assert isinstance(nvml.processes, ProcessTable)
        table_uids = {c.pod_uid for c in nvml.processes.containers}
        assert table_uids and table_uids <= {m.uid for m in view.pods.values()}
        training = view.pods[("ml-training", "llm-pretrain-worker-0")]
        assert (training.owner_kind, training.owner_name) == ("Job", "llm-pretrain")
        chat = next(m for (_, n), m in view.pods.items() if n.startswith("chat-api-"))
        assert (chat.owner_kind, chat.owner_name) == ("Deployment", "chat-api")
        # The team label is allow-listed when the user names no allow-list.
        assert config.attribution.pod_label_allowlist == TEAM_LABEL
        assert dict(training.labels) == {"label_team": "research"}
        labels = dict(view.node_labels)
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
        assert labels["nvidia.com/gpu.count"] == str(len(nvml.gpus))
        assert "nvidia.com/gfd.timestamp" not in labels


def test_a_users_allowlist_is_kept():
    with _synced_view("--kubernetes", "--kubernetes.pod-label-allowlist=pod-template-hash") as (
        _,
        _,
        config,
        view,
    ):
        assert config.attribution.pod_label_allowlist == "pod-template-hash"
        chat = next(m for (_, n), m in view.pods.items() if n.startswith("chat-api-"))
        assert [name for name, _ in chat.labels] == ["label_pod_template_hash"]


def test_the_dra_fleet_serves_its_resource_slices():
    with _synced_view("dra", "--kubernetes") as (_, kubelet, _, view):
        assert view.slices_synced is True
        offered = {name for _, name in view.resource_slices}
        assert offered and offered == set(kubelet.dra_devices())


def test_no_simulated_api_without_kubernetes_or_with_a_kubeconfig(tmp_path):
    config = parse_config(["--simulate"], environ={})
    with simulated_node(config) as node:
        config = node.config
        assert config.attribution.kubeconfig is None
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    config = parse_config(
        ["--simulate", "--kubernetes", f"--kubernetes.kubeconfig={kubeconfig}"], environ={}
    )
    with simulated_node(config) as node:
        config = node.config
        assert config.attribution.kubeconfig == str(kubeconfig)
        assert config.attribution.pod_label_allowlist is None


def test_node_labels_follow_the_fleet():
    config = parse_config(["--simulate", "mixed"], environ={})
    with simulated_node(config) as node:
        nvml, kubelet = node.nvml, node.kubelet
        labels = node_labels(nvml, kubelet.mig_strategy)
        first = nvml.gpus[0].model
        assert labels["nvidia.com/gpu.product"] == first.name.replace(" ", "-")
        assert labels["nvidia.com/mig.capable"] == str(first.mig_capable).lower()
        assert labels["nvidia.com/cuda.driver.major"] == nvml.fleet.driver_version.split(".")[0]
        assert labels["nvidia.com/gpu.count"] == str(len(nvml.gpus))

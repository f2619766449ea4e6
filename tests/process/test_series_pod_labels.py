"""dcgm-exporter's Kubernetes opt-ins on the DCGM series: `pod_uid` (--kubernetes.enable-pod-uid),:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_series_pod_labels.py."""

from __future__ import annotations

from tests.conftest import unexpected_lint_findings
from tests.support.exporter_process import scrape_until, start_exporter
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig
from tests.unit.test_series_pod_labels import dcgm_series


def test_exporter_process_with_both_options_and_per_pod_copies(tmp_path):
    node = "sim-gpu-node-0"
    api = FakeKubeApi(node)
    api.put_pod(
        api.pod(
            "ml-training",
            "llm-pretrain-worker-0",
            uid="0b7c3a9e-1111-4d2e-9c1a-5f6e7d8c9b0a",
            labels={"team": "vision", "app.kubernetes.io/name": "llm", "pod": "clash"},
        )
    )
    api.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.host)
    proc, base = start_exporter(
        "--kubernetes",
        f"--kubernetes.kubeconfig={kubeconfig}",
        "--kubernetes.enable-pod-uid",
        "--kubernetes.enable-pod-labels",
        "--attribution.shared-devices=per-pod",
    )
    try:
        text = scrape_until(
            base,
            lambda t: 'pod_uid="0b7c3a9e' in t and 'vgpu="' in t,
            what="pod_uid and vgpu on DCGM series",
            proc=proc,
        )
        series = dcgm_series(text)
        for name, pairs in series:
            names = [n for n, _ in pairs]
            assert len(names) == len(set(names)), f"{name} repeats a label: {names}"
        trainer = [dict(p) for _, p in series if ("pod", "llm-pretrain-worker-0") in p]
        assert trainer
        for labels in trainer:
            assert labels["pod_uid"] == "0b7c3a9e-1111-4d2e-9c1a-5f6e7d8c9b0a"
            assert (labels["team"], labels["app_kubernetes_io_name"]) == ("vision", "llm")
        # The simulated node time-slices one GPU among three pods the API does not know.
        shares = {
            dict(p)["vgpu"]
            for name, p in series
            if name == "DCGM_FI_DEV_GPU_TEMP" and "vgpu" in dict(p)
        }
        assert len(shares) == 3
        assert not any("pod_uid" in dict(p) for _, p in series if "vgpu" in dict(p))
        assert unexpected_lint_findings(text) == []
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        api.stop()

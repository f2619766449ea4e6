"""The installed command, run as users run it: real process, real HTTP, real signals."""

from __future__ import annotations

import re
import signal
import time

from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import unexpected_lint_findings
from tests.support.exporter_process import get, scrape_until, start_exporter
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig


def test_simulated_node_end_to_end():
    proc, base = start_exporter("--log.format=json")
    try:
        text = scrape_until(
            base, lambda t: 'pod="llm-pretrain-worker-0"' in t, what="a pod label", proc=proc
        )
        assert 'modelName="NVIDIA H100 80GB HBM3"' in text
        assert 'GPU_I_PROFILE="3g.40gb"' in text
        assert 'hostname="sim-gpu-node-0"' in text  # the default profile, 4.8.3
        # Pod attribution from the fake kubelet, on exclusive GPUs and MIG instances.
        assert 'container="trainer",namespace="ml-training",pod="llm-pretrain-worker-0"' in text
        assert re.search(r'DCGM_FI_DEV_FB_USED\{[^}]*GPU_I_ID="7"[^}]*pod="inference-1g', text)
        shared = re.findall(
            r'kube_gpu_exporter_pod_device_allocation\{gpu="3"[^}]*pod="(chat[^"]*)"', text
        )
        assert len(set(shared)) == 3
        assert "kube_gpu_exporter_node_allocatable_devices{" in text
        # Per-pod use of the time-sliced GPU: its three pods, within the device's figures.
        text = scrape_until(
            base,
            lambda t: 'pod_gpu_sm_utilization_ratio{gpu="3"' in t,
            what="per-pod use of GPU 3",
            proc=proc,
        )
        families = {f.name: f for f in text_string_to_metric_families(text)}

        def on_gpu3(name: str) -> dict[str, float]:
            return {
                s.labels.get("pod", ""): s.value
                for s in families[name].samples
                if s.labels["gpu"] == "3"
            }

        memory = on_gpu3("kube_gpu_exporter_pod_gpu_memory_used_bytes")
        sm = on_gpu3("kube_gpu_exporter_pod_gpu_sm_utilization_ratio")
        chat = {pod for pod in memory if pod.startswith("chat-api-")}
        assert len(chat) == 3 and all(memory[p] > 0 for p in chat), memory
        assert len({sm[p] for p in chat}) == 3, sm  # real, distinct shares
        # The device series and the process round are read moments apart, as on a real node;
        # both move with the workload, hence the margins.
        [fb_used] = on_gpu3("DCGM_FI_DEV_FB_USED").values()
        assert sum(memory.values()) <= fb_used * 2**20 * 1.02
        [util] = on_gpu3("DCGM_FI_DEV_GPU_UTIL").values()
        assert 0 < sum(sm.values()) <= min(1.0, util / 100 + 0.1)
        assert unexpected_lint_findings(text) == []
        assert get(f"{base}/healthz")[0] == 200
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - started < 5
        _, stderr = proc.communicate(timeout=5)
        assert '"msg": "shutting down"' in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_simulated_node_with_kubernetes_enrichment(tmp_path):
    api = FakeKubeApi("sim-gpu-node-0")
    api.put_pod(
        api.pod(
            "ml-training",
            "llm-pretrain-worker-0",
            labels={"team": 'vision "A"'},
            owner=("Job", "llm-pretrain"),
        )
    )
    api.set_node_labels({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    api.start()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", api.host)
    proc, base = start_exporter(
        "--kubernetes",
        f"--kubernetes.kubeconfig={kubeconfig}",
        "--kubernetes.pod-label-allowlist=team",
    )
    try:
        text = scrape_until(
            base,
            lambda t: "label_team=" in t and "kube_gpu_exporter_node_info{" in t,
            what="pod and node labels from the API server",
            proc=proc,
        )
        assert 'label_team="vision \\"A\\""' in text
        assert 'owner_kind="Job",owner_name="llm-pretrain"' in text
        assert 'label_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3"' in text
        assert unexpected_lint_findings(text) == []
        assert all(
            q.get("fieldSelector", [""])[0] == "spec.nodeName=sim-gpu-node-0"
            for p, q in api.requests
            if p == "/api/v1/pods"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        api.stop()

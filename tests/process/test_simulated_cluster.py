"""`--simulate --kubernetes` without a kubeconfig, as a process: the simulated node's pods, node
object and ResourceSlices on the exporter's series. The in-process cases are in
tests/unit/test_simulated_cluster.py."""

from __future__ import annotations

from tests.support.exporter_process import scrape_until, start_exporter


def test_simulate_kubernetes_shows_owners_pod_uids_and_node_info():
    proc, base = start_exporter("--kubernetes")
    try:
        text = scrape_until(
            base,
            lambda t: 'owner_kind="Job"' in t and "kube_gpu_exporter_node_info{" in t,
            what="owners and node labels from the simulated API",
            proc=proc,
        )
        allocations = [
            line for line in text.splitlines() if line.startswith("kube_gpu_exporter_pod_device_")
        ]
        assert allocations and all('pod_uid="' in line for line in allocations)
        assert any('owner_kind="Deployment",owner_name="chat-api"' in line for line in allocations)
        assert 'label_team="research"' in text
        assert 'label_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3"' in text
    finally:
        proc.terminate()
        proc.wait(timeout=10)

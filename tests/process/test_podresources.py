"""Pod attribution from the kubelet pod-resources API, over real gRPC on a unix socket: the cases
that start a process or need a system package's binary (promtool); the others are in
tests/unit/test_podresources.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import unexpected_lint_findings
from tests.unit.test_podresources import observe, series, watcher_for


@pytest.fixture
def kubelet(sim: FakeNvml, tmp_path: Path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(sim, tmp_path / "pod-resources" / "kubelet.sock").start()
    yield fake
    fake.stop()


def test_exclusive_gpus_and_mig_instances_get_pod_labels(sim, kubelet, make_poller):
    seen = observe(make_poller(sim), watcher_for(kubelet))
    temps = series(seen["families"], "DCGM_FI_DEV_GPU_TEMP")
    by_device = {(s.labels["gpu"], s.labels.get("GPU_I_ID")): s.labels for s in temps}
    # GPUs 0 and 1: one two-GPU training pod.
    for gpu in ("0", "1"):
        labels = by_device[(gpu, None)]
        assert (labels["namespace"], labels["pod"], labels["container"]) == (
            "ml-training",
            "llm-pretrain-worker-0",
            "trainer",
        )
        assert list(labels)[-3:] == ["container", "namespace", "pod"]
    # GPU 5 is idle and free; GPU 3 is time-sliced among three pods: neither has pod labels.
    assert "pod" not in by_device[("5", None)]
    assert "pod" not in by_device[("3", None)]
    # MIG: every instance but the second one on each GPU is held by a pod.
    assert by_device[("6", "7")]["pod"].startswith("inference-1g-10gb-")
    assert "pod" not in by_device[("6", "8")]
    assert by_device[("6", "2")]["pod"].startswith("inference-3g-40gb-")
    assert by_device[("7", "2")]["namespace"] == "batch"
    assert unexpected_lint_findings(seen["text"]) == []
    collectors = {
        s.labels["collector"]: s.value
        for s in series(seen["families"], "kube_gpu_exporter_collector_success")
    }
    assert collectors["nvml"] == 1 and collectors["podresources"] == 1

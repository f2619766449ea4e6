"""The real exporter process through repeated kubelet restarts and driver reloads, driven by the
simulator's control API: metrics keep flowing in every phase, each source's up metric says what
is down, and the process ends with the threads and file descriptors it started with."""

from __future__ import annotations

import re
import urllib.request

from tests.conftest import open_fds, threads, wait_for
from tests.process.test_hostile_clients import metric
from tests.support.exporter_process import get, scrape_until, start_exporter


def post(base: str, path: str) -> None:
    request = urllib.request.Request(f"{base}/-/simulator/{path}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def scrape_shows(base: str, name: str, value: float, timeout: float = 15.0) -> str:
    text = scrape_until(
        base, lambda t: f"\n{name} {value:g}\n" in t, timeout, what=f"{name} {value:g}"
    )
    assert metric(text, name) == value, name
    return text


def gpus_reporting(text: str) -> int:
    return len(set(re.findall(r'^DCGM_FI_DEV_GPU_TEMP\{gpu="(\d+)"', text, re.M)))


def test_kubelet_restarts_and_driver_reloads_leave_nothing_behind():
    proc, base = start_exporter("--collector.interval=0.2s")
    try:
        scrape_shows(base, "kube_gpu_exporter_podresources_up", 1)
        # One of each cycle first, so lazily started helpers (gRPC's pollers, NVML's event
        # thread) are part of the baseline.
        for source, down, up in (
            ("podresources", "kubelet/stop", "kubelet/start"),
            ("nvml", "driver/unload", "driver/load"),
        ):
            post(base, down)
            scrape_shows(base, f"kube_gpu_exporter_{source}_up", 0)
            post(base, up)
            scrape_shows(base, f"kube_gpu_exporter_{source}_up", 1)
        fds, thread_count = open_fds(proc.pid), threads(proc.pid)

        for _ in range(8):
            post(base, "kubelet/stop")
            text = scrape_shows(base, "kube_gpu_exporter_podresources_up", 0)
            assert gpus_reporting(text) == 8  # devices without pods
            post(base, "kubelet/start")
            text = scrape_shows(base, "kube_gpu_exporter_podresources_up", 1)
            assert 'pod="llm-pretrain-worker-0"' in text
        for _ in range(4):
            post(base, "driver/unload")
            text = scrape_shows(base, "kube_gpu_exporter_nvml_up", 0)
            assert "DCGM_FI_DEV_GPU_TEMP{" not in text
            assert "kube_gpu_exporter_podresources_up 1" in text  # the other source is fine
            post(base, "driver/load")
            text = scrape_shows(base, "kube_gpu_exporter_nvml_up", 1)
            assert gpus_reporting(text) == 8

        assert wait_for(lambda: open_fds(proc.pid) <= fds), (fds, open_fds(proc.pid))
        # Pools grow on demand (asyncio.to_thread, the fake kubelet's gRPC workers): allow two;
        # a leak per cycle would show as eight or more.
        assert wait_for(lambda: threads(proc.pid) <= thread_count + 2), (
            thread_count,
            threads(proc.pid),
        )
        assert get(f"{base}/healthz")[0] == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)

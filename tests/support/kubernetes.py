"""What the Kubernetes watch tests share: a watcher against the fake API server
(tests/support/fake_kube_api.py), what the exporter says about its view, the fake cluster an
exporter process enriches from, and the stepping of a ManualClock that the watches and other
supervised threads park in.

A watcher on a ManualClock waits for nothing on the wall clock: a backoff, a restart delay or
the no-DRA recheck lasts until the test moves the clock past it. `parked()` says what each
parked thread still has to wait (the backoff it chose), and `run_until()` moves time on as fast
as the threads allow where only the outcome matters."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig

NODE = "gpu-node-7"
MIB = 1 << 20
GIB = 1 << 30
# An event line's limit, as docs/faults.md ('API server') states it: api_answers.py's.
EVENT_LIMIT = 4 * MIB
# What loopback sockets may hold beyond what the client read: both kernel buffers, at most.
SOCKET_BUFFERS = 12 * MIB
SIM_NODE = "sim-gpu-node-0"  # the default simulated node's name
# The simulated exporter with the kubernetes client loaded holds about 125 MB; before the answer
# bounds, an endless event line took it to 414 MB (after 40 s) and a 40 MB ResourceSlice LIST to
# 396 MB. An event line's 4 MiB and the pieces read around it fit in the margin.
RSS_BOUND_MB = 160
# How long a step of the threads' own work may take in real time before a test gives up on it.
REAL_SECONDS = 10.0


def client_for(host: str) -> Callable[[], kubernetes.client.ApiClient]:
    """A factory of API clients for the server at `host`, as KubernetesWatcher takes one."""

    def factory() -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        config.host = host
        return kubernetes.client.ApiClient(config)

    return factory


def make_watcher(host: str, *, clock: Clock = SYSTEM_CLOCK, **kwargs: Any) -> KubernetesWatcher:
    """A watcher of NODE against the API at `host`. Unless told otherwise, the server ends each
    watch after a second and a failed round waits 0.2 s at most, so that a test on the system's
    clock sees rounds come and go quickly; a test on a ManualClock mostly wants watches held
    open as in production (`watch_timeout_seconds=300`)."""
    kwargs.setdefault("watch_timeout_seconds", 1)
    kwargs.setdefault("max_backoff_seconds", 0.2)
    return KubernetesWatcher(client_for(host), NODE, clock=clock, **kwargs)


def kube_success(text: str) -> float | None:
    """collector_success{collector="kubernetes"} in an exposition; None when it is missing."""
    match = re.search(r'collector_success\{[^}]*collector="kubernetes"[^}]*\} (\S+)', text)
    return None if match is None else float(match.group(1))


def kube_status(watcher: KubernetesWatcher) -> bool:
    """collector_success{collector="kubernetes"} as the renderer reads it."""
    [status] = [
        s
        for s in AttributionContext(kube=watcher.view()).collector_statuses()
        if s.name == "kubernetes"
    ]
    return bool(status.success)


def peak_rss_mb(pid: int) -> float:
    """The process's high-water resident memory (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1000
    raise AssertionError("no VmHWM")


def cluster() -> FakeKubeApi:
    """A fake API with one of the simulated kubelet's pods, labelled."""
    api = FakeKubeApi(SIM_NODE)
    api.put_pod(api.pod("ml-training", "llm-pretrain-worker-0", labels={"team": "vision"}))
    return api


def exporter_flags(api: FakeKubeApi, tmp_path: Path) -> list[str]:
    """The flags of an exporter enriching from the started `api`."""
    return [
        "--kubernetes",
        f"--kubernetes.kubeconfig={write_kubeconfig(tmp_path / 'kubeconfig', api.host)}",
        "--kubernetes.pod-label-allowlist=team",
    ]

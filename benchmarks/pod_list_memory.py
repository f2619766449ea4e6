"""What a large pods LIST costs the exporter in memory: its high-water RSS (VmHWM) once it has
listed this node's pods, with a LIST of a handful of pods and with one just under the 16 MiB
limit (kube_gpu_exporter/exporter/kubernetes/api_answers.py), each from the simulator's fake API
server over real HTTP through the real `kubernetes` client.

    python -m benchmarks.pod_list_memory [--mib 15.5]

The pods are shaped like real ones of about 4.5 KB: labels, annotations, owner references, two
containers with environment variables and resources, and a status. The chart's memory limit is
256 MiB (deploy/): the peak must stay well under it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.processes import REPO, free_port, proc_sample, stop, wait_ready
from kube_gpu_exporter.exporter.simulator.fake_kube_api import FakeKubeApi, write_kubeconfig

NODE = "sim-gpu-node-0"  # the default simulated node
MIB = 1 << 20


def _pod(api: FakeKubeApi, index: int) -> dict[str, Any]:
    obj = api.pod(
        f"team-{index % 40}",
        f"worker-{index:05d}-{'x' * 12}",
        labels={
            "app.kubernetes.io/name": f"service-{index % 97}",
            "app.kubernetes.io/instance": f"release-{index % 13}",
            "pod-template-hash": f"{index * 7919 % 10**10:010d}",
            "team": f"team-{index % 40}",
        },
        owner=("ReplicaSet", f"service-{index % 97}-{index * 7919 % 10**10:010d}"),
    )
    env = [{"name": f"SETTING_{k}", "value": f"value-{index}-{k}" * 3} for k in range(12)]
    container = {
        "name": "main",
        "image": f"registry.example/team/service-{index % 97}:1.{index % 50}.0",
        "env": env,
        "resources": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi", "cpu": "4"}},
        "volumeMounts": [{"name": f"data-{k}", "mountPath": f"/data/{k}"} for k in range(6)],
    }
    obj["metadata"]["annotations"] = {
        f"example.com/annotation-{k}": f"{'a' * 80}-{index}" for k in range(6)
    }
    obj["spec"]["containers"] = [container, {**container, "name": "sidecar", "env": env[:4]}]
    obj["status"] = {
        "phase": "Running",
        "podIP": f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}",
        "conditions": [
            {"type": kind, "status": "True", "lastTransitionTime": "2026-11-28T10:00:00Z"}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
    }
    return obj


def _pods_listed(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return False
    return 'kubernetes_watch_up{resource="pods"} 1' in text


def measure(list_bytes: int) -> tuple[int, int, float]:
    """(pods, bytes of the LIST, the exporter's peak RSS in MB once it listed them)."""
    api = FakeKubeApi(NODE)
    pods = 0
    size = 2  # the list's brackets
    while True:
        pod = _pod(api, pods)
        encoded = len(json.dumps(pod)) + 1
        if size + encoded > list_bytes:
            break
        api.put_pod(pod)
        pods, size = pods + 1, size + encoded
    api.start()
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = write_kubeconfig(Path(tmp) / "kubeconfig", api.host)
        argv = [
            sys.executable,
            "-m",
            "kube_gpu_exporter",
            "--simulate",
            f"--web.listen-address=:{port}",
        ]
        proc = subprocess.Popen(
            [*argv, "--kubernetes", f"--kubernetes.kubeconfig={kubeconfig}"],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_ready(port, timeout=120)
            deadline = time.monotonic() + 60
            while not _pods_listed(port):
                if time.monotonic() > deadline:
                    raise RuntimeError("the exporter never listed the pods")
                time.sleep(0.5)
            time.sleep(2.0)  # a sweep and a render with every pod in the view
            peak = proc_sample(proc.pid).peak_rss_bytes / 1e6
        finally:
            stop(proc)
            api.stop()
    return pods, size, peak


def summary(list_mib: float = 15.5) -> str:
    small_pods, small_bytes, small_peak = measure(64 * 1024)
    pods, size, peak = measure(int(list_mib * MIB))
    return (
        f"peak RSS {peak:.0f} MB after a pods LIST of {size / MIB:.1f} MiB ({pods:,} pods of "
        f"{size / pods / 1000:.1f} KB), against {small_peak:.0f} MB after one of "
        f"{small_bytes / 1024:.0f} KiB ({small_pods} pods); the chart's limit is 256 MiB"
    )


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pod_list_memory")
    parser.add_argument("--mib", type=float, default=15.5, help="the large LIST's size")
    args = parser.parse_args()
    print(summary(args.mib))
    return 0


if __name__ == "__main__":
    sys.exit(main())

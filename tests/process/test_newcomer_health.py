"""Health that tells the truth (docs/health.md): a real exporter process without NVML, with the
simulated driver unloaded and loaded again, and with a Kubernetes API that is not there yet, is
live but not ready, says why on /readyz and in its log, and turns ready when the cause goes."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, wait_for
from tests.support.exporter_process import free_port, get
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig

START_TIMEOUT = 30.0


def _nvml_loadable() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class Exporter:
    """`python -m kube_gpu_exporter FLAGS` on a free loopback port, its log (JSON lines) in a
    file."""

    def __init__(self, log_path: Path, *flags: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self._log_path = log_path
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kube_gpu_exporter",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--collector.interval=1s",
                "--log.format=json",
                *flags,
            ],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )

    def lines(self) -> list[dict]:
        text = self._log_path.read_text()
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def logged(self, logger: str, contains: str = "") -> list[str]:
        return [e["msg"] for e in self.lines() if e["logger"] == logger and contains in e["msg"]]

    def answer(self, path: str) -> tuple[int, str]:
        try:
            return get(self.base + path, 2)
        except OSError as exc:  # not listening yet
            return 0, str(exc)

    def until(self, what: str, path: str, ok: Callable[[int, str], bool], timeout: float) -> str:
        """Ask `path` until `ok(status, body)`; the body then, else a failure naming the last."""
        last = (0, "")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"exited {self.proc.returncode}: {self.lines()[-3:]}"
            last = self.answer(path)
            if ok(*last):
                return last[1]
            time.sleep(0.1)
        raise AssertionError(f"{what}: {path} still answers {last} after {timeout}s")

    def post(self, path: str) -> None:
        request = urllib.request.Request(self.base + path, method="POST", data=b"")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[Callable[..., Exporter]]:
    started: list[Exporter] = []

    def start(*flags: str) -> Exporter:
        started.append(Exporter(tmp_path / f"exporter-{len(started)}.log", *flags))
        return started[-1]

    yield start
    for one in started:
        one.stop()


@pytest.mark.skipif(_nvml_loadable(), reason="this machine has NVML: the test needs it missing")
def test_without_nvml_the_exporter_is_live_but_not_ready_and_says_what_to_do(exporter):
    node = exporter()
    body = node.until("NVML missing", "/readyz", lambda s, b: "LIBRARY_NOT_FOUND" in b, 20)
    assert body.startswith("not ready: NVML does not answer (nvml_up 0)"), body
    for advice in ("install the NVIDIA driver", "run on a GPU node", "--simulate"):
        assert advice in body, body
    assert node.answer("/readyz")[0] == 503
    # Liveness must not restart-loop a pod for a driver a restart cannot install.
    assert node.answer("/healthz") == (200, "ok\n")
    assert node.answer("/health") == (200, "ok\n")
    status, metrics = node.answer("/metrics")
    assert status == 200 and "kube_gpu_exporter_nvml_up 0" in metrics
    # The init failure once, with the advice; then the readiness line, after its grace.
    [failure] = node.logged("kube_gpu_exporter.exporter.poller", "NVML initialisation failed")
    assert "install the NVIDIA driver" in failure and "--simulate" in failure, failure
    assert wait_for(
        lambda: node.logged("kube_gpu_exporter.exporter.readiness", "not ready"), timeout=15
    )
    [line] = node.logged("kube_gpu_exporter.exporter.readiness")
    assert "LIBRARY_NOT_FOUND" in line and "every 60s" in line, line
    assert node.answer("/healthz")[0] == 200


def test_an_unloaded_driver_makes_the_simulated_node_not_ready_until_it_loads(exporter):
    node = exporter("--simulate")
    node.until("first sweep", "/readyz", lambda s, b: s == 200, START_TIMEOUT)
    node.post("/-/simulator/driver/unload")
    # The sweep that finds NVML gone says so; the next one's nvmlInit says why.
    body = node.until("driver gone", "/readyz", lambda s, b: "DRIVER_NOT_LOADED" in b, 20)
    assert "kernel driver is not loaded" in body and node.answer("/readyz")[0] == 503, body
    assert node.answer("/healthz")[0] == 200
    assert wait_for(
        lambda: node.logged("kube_gpu_exporter.exporter.readiness", "not ready"), timeout=15
    )
    node.post("/-/simulator/driver/load")
    # nvmlInit is retried with backoff (1, 2, 4 s ...): ready again within a few of them.
    assert node.until("driver back", "/readyz", lambda s, b: s == 200, 30) == "ready\n"
    # The readiness log looks every 5 s (readiness.py).
    assert wait_for(
        lambda: node.logged("kube_gpu_exporter.exporter.readiness", "ready after"), timeout=12
    )


def test_with_kubernetes_not_ready_until_the_first_list_then_an_api_outage_is_no_matter(
    exporter, tmp_path
):
    api_port = free_port()
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{api_port}")
    node = exporter("--simulate", "--kubernetes", f"--kubernetes.kubeconfig={kubeconfig}")
    # Once the first sweep is in, the simulated NVML answers: only the API stands in the way.
    body = node.until(
        "API absent", "/readyz", lambda s, b: "Kubernetes" in b and "NVML" not in b, START_TIMEOUT
    )
    assert body.startswith("not ready: the Kubernetes API has not answered this node's pod LIST")
    assert node.answer("/readyz")[0] == 503
    assert node.answer("/healthz")[0] == 200
    api = FakeKubeApi("sim-gpu-node-0").start(api_port)
    try:
        # The watch retries with backoff (0.5 s doubling, jittered).
        node.until("API answered", "/readyz", lambda s, b: s == 200, 40)
    finally:
        api.stop()
    # The API goes away again: the enrichment reads unsynced, readiness stays.
    node.until(
        "API gone",
        "/metrics",
        lambda s, b: 'kube_gpu_exporter_collector_success{collector="kubernetes"} 0' in b,
        30,
    )
    assert node.answer("/readyz") == (200, "ready\n")
    # One line per failed watch from the watcher, not urllib3's three retries of each.
    assert node.logged("urllib3.connectionpool") == []
    assert node.logged(
        "kube_gpu_exporter.exporter.kubernetes.watcher", "Kubernetes API watch failed"
    )


def test_the_simulated_node_says_it_is_unprivileged_on_purpose(exporter):
    node = exporter("--simulate", "--log.level=debug")
    node.until("first sweep", "/readyz", lambda s, b: s == 200, START_TIMEOUT)
    assert wait_for(
        lambda: node.logged("kube_gpu_exporter.exporter.nvml.mig_reader", "refused"), timeout=10
    )
    refusals = [e for e in node.lines() if "refused the GPU-instance" in e["msg"]]
    assert refusals and all(e["level"] == "debug" for e in refusals), refusals
    assert all("unprivileged on purpose" in e["msg"] for e in refusals), refusals
    assert not any("run privileged" in e["msg"] for e in refusals)
    [start] = node.logged("kube_gpu_exporter.exporter.simulator.node", "simulating node")
    assert "NVML unprivileged, as the DaemonSet runs" in start, start


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

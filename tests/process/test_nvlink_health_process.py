"""`kube-gpu-exporter --simulate gb200`, the console script as users run it: the GB200 tray's
own collectors file turns on the NVLink error, fabric and C2C families, the NVLink domain info is
served, and the control API's nvlink-errors, fabric and recovery-action switches move their
series over real HTTP. The in-process cases are in tests/unit/test_nvlink_health.py."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.exporter_process import free_port, scrape_until, stop_exporter

CLUSTER = "5f0c2a8e-7d3b-4e61-9a4c-2b8d6e1f0a37"


@pytest.fixture(scope="module")
def tray() -> Iterator[str]:
    """One simulated GB200 tray for the module; each test moves a GPU of its own."""
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("kube-gpu-exporter")),
            "--simulate",
            "gb200",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.interval=1s",
            # The Blackwell counters, the fabric and the recovery action are slow fields: read
            # every sweep here, as when the exporter reads them is test_scrape_cadence.py's.
            "--collector.field-interval=slow-fields=0s",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        scrape_until(
            base,
            lambda t: "kube_gpu_exporter_nvlink_domain_info{" in t,
            what="the NVLink domain info",
            proc=proc,
        )
        yield base
    finally:
        stop_exporter(proc)


def post(base: str, path: str, body: object) -> tuple[int, object]:
    request = urllib.request.Request(
        f"{base}/-/simulator/gpus/{path}", data=json.dumps(body).encode(), method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def value(text: str, family: str, gpu: int) -> float | None:
    for line in text.splitlines():
        if line.startswith(f'{family}{{gpu="{gpu}",'):
            return float(line.rpartition(" ")[2])
    return None


def becomes(base: str, family: str, gpu: int, expected: float) -> str:
    return scrape_until(
        base,
        lambda t: value(t, family, gpu) == expected,
        what=f"{family} of GPU {gpu} at {expected}",
    )


def test_the_tray_serves_the_fabric_error_and_c2c_families(tray: str) -> None:
    text = scrape_until(tray, lambda t: "DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES{" in t)
    for gpu in range(4):
        assert value(text, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", gpu) == 3
        assert value(text, "DCGM_FI_DEV_FABRIC_CLIQUE_ID", gpu) == 32766
        assert value(text, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", gpu) == 1
        assert (value(text, "DCGM_FI_DEV_C2C_LINK_COUNT", gpu) or 0) > 0
        assert value(text, "DCGM_FI_DEV_C2C_LINK_STATUS", gpu) == 1
        assert value(text, "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu) == 0
        assert value(text, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", gpu) == 0
    # The cluster UUID is a label on the GPU's DCGM series, and the domain groups all four.
    assert f'DCGM_FI_DEV_FABRIC_CLUSTER_UUID="{CLUSTER}"' in text
    domains = [
        line
        for line in text.splitlines()
        if line.startswith("kube_gpu_exporter_nvlink_domain_info{")
    ]
    assert len(domains) == 4
    assert all(f'cluster_uuid="{CLUSTER}",clique_id="32766"}} 1' in line for line in domains)


def test_an_nvlink_error_burst_moves_the_link_and_the_totals(tray: str) -> None:
    status, state = post(tray, "1/nvlink-errors", {"kind": "replay", "link": 3, "count": 7})
    assert status == 200 and isinstance(state, dict) and state["nvlink_errors"]["replay"] == 7
    status, _ = post(tray, "1/nvlink-errors", {"kind": "tx_discards", "link": 17, "count": 5})
    assert status == 200
    becomes(tray, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L3", 1, 7)
    becomes(tray, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 1, 7)
    text = becomes(tray, "DCGM_FI_DEV_NVLINK_COUNT_TX_DISCARDS", 1, 5)
    assert value(text, "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", 0) == 0
    status, message = post(tray, "1/nvlink-errors", {"kind": "replay", "link": 18})
    assert status == 400 and "link" in str(message)


def test_a_degraded_fabric_shows_and_a_registration_in_progress_leaves_its_domain(
    tray: str,
) -> None:
    status, _ = post(tray, "2/fabric", {"state": "completed", "degraded_bandwidth": True})
    assert status == 200
    text = becomes(tray, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", 2, 3)  # limited capacity
    assert value(text, "DCGM_FI_DEV_FABRIC_HEALTH_MASK", 2) != value(
        text, "DCGM_FI_DEV_FABRIC_HEALTH_MASK", 0
    )
    status, _ = post(tray, "2/fabric", {"state": "in_progress"})
    assert status == 200
    text = becomes(tray, "DCGM_FI_DEV_FABRIC_MANAGER_STATUS", 2, 2)
    assert 'kube_gpu_exporter_nvlink_domain_info{gpu="2",' not in text
    post(tray, "2/fabric", {"state": "completed"})
    text = becomes(tray, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY", 2, 1)
    scrape_until(tray, lambda t: 'kube_gpu_exporter_nvlink_domain_info{gpu="2",' in t)


def test_a_requested_recovery_action_shows(tray: str) -> None:
    status, state = post(tray, "3/recovery-action", {"action": "reboot"})
    assert status == 200 and isinstance(state, dict) and state["recovery_action"] == 2
    becomes(tray, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", 3, 2)
    post(tray, "3/recovery-action", {"action": "none"})
    becomes(tray, "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION", 3, 0)

"""The simulator's fault-injection API against a running `python -m kube_gpu_exporter --simulate`:
each action shows up in /metrics as the families dashboards and alerts read, and a bad request gets
a one-line error naming what is wrong. The cases that run in process are in
tests/unit/test_simulator_control.py."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

from tests.conftest import REPO
from tests.support.exporter_process import get, scrape_until, start_exporter, stop_exporter


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    """One simulated exporter for the module; each test breaks a GPU of its own."""
    # ECC counts are slow fields, read every 10 s by default: every sweep here, since when the
    # exporter reads them is tests/unit/test_scrape_cadence.py's subject, not this module's.
    proc, base = start_exporter("--collector.field-interval=slow-fields=0s")
    try:
        # XIDs are events: one sent before the watcher has registered is lost, as with NVML.
        ready = ('kube_gpu_exporter_collector_success{collector="xid"} 1', "allocatable_units{")
        scrape_until(
            base, lambda t: all(r in t for r in ready), what=" and ".join(ready), proc=proc
        )
        yield base
    finally:
        stop_exporter(proc)


def call(base: str, path: str, body: object | None = None, data: bytes | None = None):
    """POST to the control API; returns (status, parsed JSON on 200 or the text otherwise)."""
    if data is None and body is not None:
        data = json.dumps(body).encode()
    request = urllib.request.Request(
        f"{base}/-/simulator/gpus/{path}", data=data or b"", method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def value(text: str, family: str, gpu: int, *labels: str) -> float | None:
    """The sample of `family` for whole GPU `gpu` (with every one of `labels`), or None."""
    for line in text.splitlines():
        if line.startswith(f'{family}{{gpu="{gpu}",') and all(f in line for f in labels):
            return float(line.rpartition(" ")[2])
    return None


def metric_becomes(base: str, family: str, gpu: int, check, *labels: str) -> str:
    return scrape_until(
        base,
        lambda t: (v := value(t, family, gpu, *labels)) is not None and check(v),
        what=f"the expected {family} of GPU {gpu} {labels}",
    )


def test_process_lists_every_gpu_with_the_pods_holding_it(exporter):
    status, text = get(f"{exporter}/-/simulator/gpus")
    gpus = json.loads(text)
    assert status == 200 and [g["index"] for g in gpus] == list(range(8))
    assert set(gpus[0]) == {
        "index",
        "uuid",
        "pci_bus_id",
        "model",
        "workload",
        "lost",
        "mig_enabled",
        "mig_instances",
        "temperature_offset_celsius",
        "unhealthy",
        "nvlink_errors",
        "fabric",
        "recovery_action",
        "pods",
    }
    # The default node's H100s: NVLink counters, but no fabric and no recovery asked for.
    assert gpus[0]["nvlink_errors"]["replay"] == 0
    assert gpus[0]["fabric"] is None and gpus[0]["recovery_action"] == 0
    assert gpus[0]["pods"] == ["ml-training/llm-pretrain-worker-0"]
    assert len(gpus[3]["pods"]) == 3  # time-sliced replicas
    assert len(gpus[6]["pods"]) == 3 and gpus[6]["mig_enabled"]  # MIG instances
    assert gpus[5]["pods"] == []


def test_process_xid_reaches_both_xid_families(exporter):
    status, state = call(exporter, "2/xid", {"xid": 79, "gpu_instance_id": None})
    assert status == 200 and state["index"] == 2
    text = metric_becomes(exporter, "DCGM_EXP_XID_ERRORS_TOTAL", 2, lambda v: v == 1, 'xid="79"')
    assert value(text, "DCGM_FI_DEV_XID_ERRORS", 2, 'err_code="79"') == 79


def test_process_ecc_error_until_gpu_reset(exporter):
    assert call(exporter, "1/ecc", {"double_bit": True, "count": 3})[0] == 200
    metric_becomes(exporter, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1, lambda v: v == 3)
    status, state = call(exporter, "1/reset")
    assert status == 200 and not state["lost"]
    metric_becomes(exporter, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", 1, lambda v: v == 0)


def test_process_temperature_offset_and_clearing(exporter):
    status, state = call(exporter, "3/temperature", {"offset_celsius": 60})
    assert status == 200 and state["temperature_offset_celsius"] == 60
    # Without an offset the model stays below 34 + 48 C; with it, never below 28 + 6 + 60.
    metric_becomes(exporter, "DCGM_FI_DEV_GPU_TEMP", 3, lambda v: v >= 94)
    assert call(exporter, "3/temperature", {"offset_celsius": 0})[0] == 200
    metric_becomes(exporter, "DCGM_FI_DEV_GPU_TEMP", 3, lambda v: v < 90)


def test_process_idle_workload_stops_utilization_and_keeps_the_pod(exporter):
    status, state = call(exporter, "0/workload", {"workload": "idle"})
    assert status == 200 and state["workload"] == "idle"
    assert state["pods"] == ["ml-training/llm-pretrain-worker-0"]
    text = metric_becomes(exporter, "DCGM_FI_DEV_GPU_UTIL", 0, lambda v: v == 0)
    assert value(text, "DCGM_FI_DEV_GPU_UTIL", 0, 'pod="llm-pretrain-worker-0"') == 0
    assert call(exporter, "0/workload", {"workload": "training"})[0] == 200
    metric_becomes(exporter, "DCGM_FI_DEV_GPU_UTIL", 0, lambda v: v > 0)


def test_process_lose_and_restore_flip_device_up(exporter):
    status, state = call(exporter, "5/lose")
    assert status == 200 and state["lost"]
    metric_becomes(exporter, "kube_gpu_exporter_device_up", 5, lambda v: v == 0)
    status, state = call(exporter, "5/restore")
    assert status == 200 and not state["lost"]
    metric_becomes(exporter, "kube_gpu_exporter_device_up", 5, lambda v: v == 1)


def test_process_unhealthy_gpu_is_not_allocatable(exporter):
    status, state = call(exporter, "4/unhealthy", {"unhealthy": True})
    assert status == 200 and state["unhealthy"]
    metric_becomes(exporter, "kube_gpu_exporter_device_allocatable_units", 4, lambda v: v == 0)
    assert call(exporter, "4/unhealthy", {"unhealthy": False})[0] == 200
    metric_becomes(exporter, "kube_gpu_exporter_device_allocatable_units", 4, lambda v: v == 1)


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("9/lose", None, 404, "no simulated GPU '9' (the node has GPUs 0-7)"),
        ("x/lose", None, 404, "no simulated GPU 'x' (the node has GPUs 0-7)"),
        (urllib.parse.quote("\u00b2/xid"), {"xid": 79}, 404, "no simulated GPU '\u00b2'"),
        (urllib.parse.quote("\u0663/xid"), {"xid": 79}, 404, "no simulated GPU '\u0663'"),
        ("0/melt", None, 404, "unknown action 'melt'"),
        ("0/xid", {}, 400, "xid is required"),
        ("0/xid", {"xid": 0}, 400, "xid: 0 is out of range [1, 999]"),
        ("0/xid", {"xid": 1000}, 400, "xid: 1000 is out of range [1, 999]"),
        ("0/xid", {"xid": True}, 400, "xid: expected an integer, got true"),
        ("0/xid", {"xid": 79, "gpu_instance_id": 3}, 400, "GPU 0 has no MIG instance 3"),
        ("0/ecc", {"count": "2"}, 400, 'count: expected an integer, got "2"'),
        ("0/ecc", {"count": 0}, 400, "count: 0 is out of range [1, 1e+06]"),
        ("0/ecc", {"double": True}, 400, "unknown field 'double' (allowed: double_bit, count)"),
        ("0/ecc", [1], 400, "body must be a JSON object"),
        ("0/temperature", {}, 400, "offset_celsius is required"),
        ("0/temperature", {"offset_celsius": 900}, 400, "out of range [-50, 150]"),
        ("0/workload", {"workload": "mining"}, 400, "'mining' is not one of training"),
        ("0/unhealthy", {"unhealthy": 1}, 400, "expected true or false, got 1"),
        ("0/lose", {"now": True}, 400, "unknown field 'now' (this action takes no fields)"),
    ],
)
def test_process_bad_requests_get_one_line_naming_the_problem(
    exporter, path, body, status, message
):
    got_status, text = call(exporter, path, body)
    assert got_status == status
    assert message in text and text.count("\n") == 1


def test_process_invalid_json_and_wrong_method(exporter):
    status, text = call(exporter, "0/xid", data=b"{xid: 79")
    assert status == 400 and text.startswith("body is not valid JSON")
    assert text.count("\n") == 1
    # 3,000 levels are past Python's recursion limit and inside the bytes a client may send
    # before it is answered.
    status, text = call(exporter, "0/xid", data=b"[" * 3000 + b"]" * 3000)
    assert (status, text) == (400, "body is not valid JSON: nested too deeply\n")
    assert get(f"{exporter}/-/simulator/gpus/0/xid")[0] == 405
    status, _ = call(exporter, "0/xid", data=b"")
    assert status == 400  # xid is required; an empty body is an empty object


def test_production_modules_do_not_import_the_simulator():
    code = (
        "import sys, kube_gpu_exporter.exporter.cli, kube_gpu_exporter.exporter.app,"
        " kube_gpu_exporter.exporter.server, kube_gpu_exporter.exporter.poller;"
        "print(sorted(m for m in sys.modules"
        " if m.startswith('kube_gpu_exporter.exporter.simulator')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

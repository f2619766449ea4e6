"""The simulator's fault-injection API over real HTTP.

In process, each action changes what NVML and the kubelet report. Against a running
`python -m exporter --simulate`, each action shows up in /metrics as the families dashboards and
alerts read, and a bad request gets a one-line error naming what is wrong."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pynvml
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.config import WebConfig
from exporter.podresources.client import PodResourcesClient
from exporter.server import build_app
from exporter.simulator.control import add_control_routes
from exporter.simulator.fake_kubelet import FakeKubelet
from exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import REPO, store_for, wait_for
from tests.test_process import get, scrape_until, start_exporter


@pytest.fixture
async def control(sim, tmp_path):
    sim.api.nvmlInit()
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
    app = web.Application()
    add_control_routes(app, sim, kubelet)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client, kubelet
    await client.close()
    sim.api.nvmlShutdown()


async def post(client: TestClient, path: str, body: object | None = None):
    response = await client.post(f"/-/simulator/gpus/{path}", json=body)
    return response.status, (
        await response.json() if response.status == 200 else await response.text()
    )


def handle(sim: FakeNvml, index: int):
    return sim.api.nvmlDeviceGetHandleByIndex(index)


async def test_gpus_lists_state_and_the_pods_holding_each(control):
    client, _ = control
    response = await client.get("/-/simulator/gpus")
    gpus = await response.json()
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[0]["pods"] == ["ml-training/llm-pretrain-worker-0"]
    assert gpus[3]["pods"] and all(p.startswith("inference/chat-api-") for p in gpus[3]["pods"])
    assert len(gpus[3]["pods"]) == 3  # time-sliced replicas
    assert gpus[5]["pods"] == [] and gpus[5]["workload"] == "idle"
    assert gpus[6]["mig_enabled"] and len(gpus[6]["pods"]) == 3  # one instance left free
    assert gpus[0]["uuid"].startswith("GPU-") and gpus[0]["model"] == "NVIDIA H100 80GB HBM3"


async def test_gpus_lists_the_mig_instances_an_xid_can_name(control, sim: FakeNvml):
    client, _ = control
    gpus = await (await client.get("/-/simulator/gpus")).json()
    assert gpus[0]["mig_instances"] == []
    instances = gpus[6]["mig_instances"]
    live = sim.gpus[6].live_instances()
    assert [i["gpu_instance_id"] for i in instances] == [m.gpu_instance_id for m in live]
    assert [i["uuid"] for i in instances] == [m.uuid for m in live]
    assert all(i["uuid"].startswith("MIG-") and i["profile"] for i in instances)
    named = instances[-1]["gpu_instance_id"]
    assert (await post(client, "6/xid", {"xid": 94, "gpu_instance_id": named}))[0] == 200


async def test_the_index_page_links_the_control_api(sim, tmp_path):
    app = build_app(store_for(), WebConfig(), lambda: None)
    add_control_routes(app, sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        page = await (await client.get("/")).text()
        assert '<a href="/-/simulator/gpus">' in page
        assert '<a href="/metrics">' in page
    finally:
        await client.close()


async def test_xid_is_delivered_as_an_nvml_event(control, sim):
    client, _ = control
    events = sim.api.nvmlEventSetCreate()
    sim.api.nvmlDeviceRegisterEvents(handle(sim, 2), pynvml.nvmlEventTypeXidCriticalError, events)
    try:
        assert (await post(client, "2/xid", {"xid": 79}))[0] == 200
        event = sim.api.nvmlEventSetWait_v2(events, 1000)
        assert (event.eventType, event.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    finally:
        sim.api.nvmlEventSetFree(events)


async def test_uncorrectable_ecc_error_until_reset(control, sim):
    client, _ = control
    dbe, volatile, aggregate = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0, 1
    before = sim.api.nvmlDeviceGetTotalEccErrors(handle(sim, 1), dbe, aggregate)
    assert (await post(client, "1/ecc", {"count": 2}))[0] == 200
    assert sim.api.nvmlDeviceGetTotalEccErrors(handle(sim, 1), dbe, volatile) == 2
    assert sim.api.nvmlDeviceGetRemappedRows(handle(sim, 1))[3] == 0  # failure
    assert sim.api.nvmlDeviceGetRemappedRows(handle(sim, 1))[2] == 1  # pending
    assert (await post(client, "1/reset"))[0] == 200
    assert sim.api.nvmlDeviceGetTotalEccErrors(handle(sim, 1), dbe, volatile) == 0
    assert sim.api.nvmlDeviceGetTotalEccErrors(handle(sim, 1), dbe, aggregate) == before + 2
    assert sim.api.nvmlDeviceGetRemappedRows(handle(sim, 1))[2] == 0


async def test_temperature_offset_and_its_clearing(control, sim):
    client, _ = control
    sensor = pynvml.NVML_TEMPERATURE_GPU
    status, state = await post(client, "4/temperature", {"offset_celsius": 40})
    assert status == 200 and state["temperature_offset_celsius"] == 40
    assert sim.api.nvmlDeviceGetTemperature(handle(sim, 4), sensor) >= 40 + 30
    await post(client, "4/temperature", {"offset_celsius": 0})
    assert sim.api.nvmlDeviceGetTemperature(handle(sim, 4), sensor) < 70


async def test_idle_workload_stops_utilization_but_keeps_the_pod(control, sim):
    client, kubelet = control
    pods = [p.name for p in kubelet.pods]
    status, state = await post(client, "0/workload", {"workload": "idle"})
    assert status == 200 and state["workload"] == "idle"
    assert sim.api.nvmlDeviceGetUtilizationRates(handle(sim, 0)).gpu == 0
    assert [p.name for p in kubelet.pods] == pods
    await post(client, "0/workload", {"workload": "training"})
    assert sim.api.nvmlDeviceGetUtilizationRates(handle(sim, 0)).gpu > 50


async def test_lose_and_restore(control, sim):
    client, kubelet = control
    status, state = await post(client, "2/lose")
    assert status == 200 and state["lost"]
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sim.api.nvmlDeviceGetTemperature(handle(sim, 2), pynvml.NVML_TEMPERATURE_GPU)
    assert state["uuid"] not in kubelet.allocatable_devices().get("nvidia.com/gpu", [])
    await post(client, "2/restore")
    assert sim.api.nvmlDeviceGetTemperature(handle(sim, 2), pynvml.NVML_TEMPERATURE_GPU) > 0


async def test_driver_and_kubelet_go_away_and_come_back(control, sim):
    client, kubelet = control
    kubelet.start()
    try:
        response = await client.post("/-/simulator/driver/unload")
        assert await response.json() == {"driver_loaded": False, "kubelet_running": True}
        with pytest.raises(pynvml.NVMLError_Uninitialized):
            sim.api.nvmlDeviceGetCount()
        await client.post("/-/simulator/driver/load")
        sim.api.nvmlInit()
        assert sim.api.nvmlDeviceGetCount() == 8
        response = await client.post("/-/simulator/kubelet/stop")
        assert (await response.json())["kubelet_running"] is False
        assert not kubelet.socket_path.exists()
        response = await client.post("/-/simulator/kubelet/start")
        assert await response.json() == {"driver_loaded": True, "kubelet_running": True}
        response = await client.post("/-/simulator/kubelet/reboot")
        assert response.status == 404 and "kubelet/stop" in await response.text()
    finally:
        kubelet.stop()


def grpc_servers() -> int:
    # gRPC runs one `_serve` thread per server; that of a dropped server ends once gRPC reaps it.
    return sum(t.name.endswith("(_serve)") for t in threading.enumerate())


async def test_kubelet_start_while_running_keeps_the_socket(control):
    """A second start used to unlink the live socket and bind another server; gRPC reaped the
    dropped first server about a second later, deleting the socket path with it."""
    client, kubelet = control
    kubelet.start()
    try:
        servers = grpc_servers()
        inode = kubelet.socket_path.stat().st_ino
        response = await client.post("/-/simulator/kubelet/start")
        assert await response.json() == {"driver_loaded": True, "kubelet_running": True}
        assert kubelet.socket_path.stat().st_ino == inode  # not unlinked and bound again
        assert await asyncio.to_thread(wait_for, lambda: grpc_servers() <= servers, 10)
        assert kubelet.socket_path.exists()
        answer = await asyncio.to_thread(PodResourcesClient(str(kubelet.socket_path), 5).list)
        assert len(answer.pod_resources) == len(kubelet.pods)
    finally:
        kubelet.stop()


HOSTILE_REQUESTS = [
    # str.isdigit() takes both; int() fails on the first (a 500) and reads the second as 3.
    ("gpus/\u00b2/xid", b'{"xid": 79}', 404, "no simulated GPU '\u00b2' (the node has GPUs 0-7)"),
    ("gpus/\u0663/xid", b'{"xid": 79}', 404, "no simulated GPU '\u0663' (the node has GPUs 0-7)"),
    ("gpus/" + "0" * 5000 + "/lose", b"", 404, "no simulated GPU '00000000"),  # int() refuses
    ("gpus/0/xid", b"[" * 100_000 + b"]" * 100_000, 400, "body is not valid JSON: nested"),
    ("gpus/0/" + "m" * 5000, b"", 404, "unknown action 'mmmmmmmm"),
    ("kubelet/" + "s" * 5000, b"", 404, "unknown action 'kubelet/sssssss"),
    ("gpus/0/workload", b'{"workload": "' + b"w" * 100_000 + b'"}', 400, "workload: 'wwwww"),
    ("gpus/0/xid", b'{"' + b"k" * 100_000 + b'": 1}', 400, "unknown field 'kkkkk"),
    ("gpus/0/xid", b'{"xid": "' + b"x" * 100_000 + b'"}', 400, 'expected an integer, got "xxx'),
    ("gpus/0/xid", b'{"xid": ' + b"9" * 4000 + b"}", 400, "xid: 99999"),
]


@pytest.mark.parametrize(("path", "body", "status", "message"), HOSTILE_REQUESTS)
async def test_hostile_requests_get_one_short_line_and_log_no_traceback(
    control, caplog, path, body, status, message
):
    client, _ = control
    with caplog.at_level(logging.DEBUG):
        response = await client.post(f"/-/simulator/{path}", data=body)
        text = await response.text()
    assert (response.status, text.count("\n")) == (status, 1), text[:300]
    assert message in text and len(text) < 250, text[:300]
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_unhealthy_device_is_no_longer_allocatable(control):
    client, kubelet = control
    status, state = await post(client, "4/unhealthy", {"unhealthy": True})
    assert status == 200 and state["unhealthy"]
    assert state["uuid"] not in kubelet.allocatable_devices()["nvidia.com/gpu"]
    await post(client, "4/unhealthy", {"unhealthy": False})
    assert state["uuid"] in kubelet.allocatable_devices()["nvidia.com/gpu"]


# ---- The simulator calls behind the API ----


def test_set_workload_rejects_unknown_shapes_and_keeps_the_pods(sim: FakeNvml, tmp_path):
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
    before = kubelet.pods_using(sim.gpus[0])
    with pytest.raises(ValueError, match=r"unknown workload 'mining' \(known: training, "):
        sim.set_workload(0, "mining")
    sim.set_workload(0, "idle")
    assert sim.gpus[0].workload == "idle" and kubelet.pods_using(sim.gpus[0]) == before


def test_reset_clears_volatile_counts_applies_the_remap_and_keeps_history(sim: FakeNvml):
    gpu = sim.gpus[1]
    gpu.remapped_failure = 1
    sim.inject_ecc_error(1, double_bit=False, count=5)
    sim.inject_ecc_error(1, double_bit=True, count=2)
    sim.lose_gpu(1)
    totals = gpu.ecc_totals()
    sim.reset_gpu(1)
    after = gpu.ecc_totals()
    assert (after["sbe_volatile"], after["dbe_volatile"]) == (0, 0)
    assert (after["sbe_aggregate"], after["dbe_aggregate"]) == (
        totals["sbe_aggregate"],
        totals["dbe_aggregate"],
    )
    assert (gpu.remapped_uncorrectable, gpu.remapped_pending, gpu.remapped_failure) == (2, 0, 1)
    assert not gpu.lost


# ---- Against a running `python -m exporter --simulate`, read back through /metrics ----


@pytest.fixture(scope="module")
def exporter() -> Iterator[str]:
    """One simulated exporter for the module; each test breaks a GPU of its own."""
    proc, base = start_exporter()
    try:
        # XIDs are events: one sent before the watcher has registered is lost, as with NVML.
        ready = ('kube_gpu_exporter_collector_success{collector="xid"} 1', "allocatable_units{")
        scrape_until(
            base, lambda t: all(r in t for r in ready), what=" and ".join(ready), proc=proc
        )
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.communicate()


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
        "pods",
    }
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


# ---- Production never has it ----


async def test_production_app_has_no_control_routes():
    client = TestClient(TestServer(build_app(store_for(), WebConfig(), lambda: None)))
    await client.start_server()
    try:
        assert "/-/simulator" not in await (await client.get("/")).text()
        assert (await client.get("/-/simulator/gpus")).status == 404
        assert (await client.post("/-/simulator/gpus/0/lose")).status == 404
    finally:
        await client.close()


def test_production_modules_do_not_import_the_simulator():
    code = (
        "import sys, exporter.cli, exporter.app, exporter.server, exporter.poller;"
        "print(sorted(m for m in sys.modules if m.startswith('exporter.simulator')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"

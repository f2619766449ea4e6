"""The simulator's fault-injection API over real HTTP, in process: each action changes what NVML
and the kubelet report. Against a running `python -m kube_gpu_exporter --simulate`: see
tests/process/test_simulator_control.py."""

from __future__ import annotations

import asyncio
import logging
import threading

import pynvml
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.config import WebConfig
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient
from kube_gpu_exporter.exporter.server import build_app
from kube_gpu_exporter.exporter.simulator.control import add_control_routes
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import store_for, wait_for


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
    # The echo of what was sent is cut short; the list of known actions is what is left.
    assert message in text and len(text) < 320, text[:400]
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

"""The simulator's fault-injection API over real HTTP: each action changes what NVML and the
kubelet report, and a bad request gets a one-line error naming what is wrong."""

from __future__ import annotations

import pynvml
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter.simulator.control import add_control_routes
from exporter.simulator.fake_kubelet import FakeKubelet


@pytest.fixture
async def control(sim, tmp_path):
    pynvml.nvmlInit()
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
    app = web.Application()
    add_control_routes(app, sim, kubelet)
    client = TestClient(TestServer(app))
    await client.start_server()
    yield client, kubelet
    await client.close()
    pynvml.nvmlShutdown()


async def post(client: TestClient, path: str, body: object | None = None):
    response = await client.post(f"/-/simulator/gpus/{path}", json=body)
    return response.status, (
        await response.json() if response.status == 200 else await response.text()
    )


def handle(index: int):
    return pynvml.nvmlDeviceGetHandleByIndex(index)


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


async def test_xid_is_delivered_as_an_nvml_event(control):
    client, _ = control
    events = pynvml.nvmlEventSetCreate()
    pynvml.nvmlDeviceRegisterEvents(handle(2), pynvml.nvmlEventTypeXidCriticalError, events)
    try:
        assert (await post(client, "2/xid", {"xid": 79}))[0] == 200
        event = pynvml.nvmlEventSetWait_v2(events, 1000)
        assert (event.eventType, event.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    finally:
        pynvml.nvmlEventSetFree(events)


async def test_uncorrectable_ecc_error_until_reset(control):
    client, _ = control
    dbe, volatile, aggregate = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, 0, 1
    before = pynvml.nvmlDeviceGetTotalEccErrors(handle(1), dbe, aggregate)
    assert (await post(client, "1/ecc", {"count": 2}))[0] == 200
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(1), dbe, volatile) == 2
    assert pynvml.nvmlDeviceGetRemappedRows(handle(1))[3] == 0  # failure
    assert pynvml.nvmlDeviceGetRemappedRows(handle(1))[2] == 1  # pending
    assert (await post(client, "1/reset"))[0] == 200
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(1), dbe, volatile) == 0
    assert pynvml.nvmlDeviceGetTotalEccErrors(handle(1), dbe, aggregate) == before + 2
    assert pynvml.nvmlDeviceGetRemappedRows(handle(1))[2] == 0


async def test_temperature_offset_and_its_clearing(control):
    client, _ = control
    sensor = pynvml.NVML_TEMPERATURE_GPU
    status, state = await post(client, "4/temperature", {"offset_celsius": 40})
    assert status == 200 and state["temperature_offset_celsius"] == 40
    assert pynvml.nvmlDeviceGetTemperature(handle(4), sensor) >= 40 + 30
    await post(client, "4/temperature", {"offset_celsius": 0})
    assert pynvml.nvmlDeviceGetTemperature(handle(4), sensor) < 70


async def test_idle_workload_stops_utilization_but_keeps_the_pod(control):
    client, kubelet = control
    pods = [p.name for p in kubelet.pods]
    status, state = await post(client, "0/workload", {"workload": "idle"})
    assert status == 200 and state["workload"] == "idle"
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(0)).gpu == 0
    assert [p.name for p in kubelet.pods] == pods
    await post(client, "0/workload", {"workload": "training"})
    assert pynvml.nvmlDeviceGetUtilizationRates(handle(0)).gpu > 50


async def test_lose_and_restore(control):
    client, kubelet = control
    status, state = await post(client, "2/lose")
    assert status == 200 and state["lost"]
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetTemperature(handle(2), pynvml.NVML_TEMPERATURE_GPU)
    assert state["uuid"] not in kubelet.allocatable_devices().get("nvidia.com/gpu", [])
    await post(client, "2/restore")
    assert pynvml.nvmlDeviceGetTemperature(handle(2), pynvml.NVML_TEMPERATURE_GPU) > 0


async def test_unhealthy_device_is_no_longer_allocatable(control):
    client, kubelet = control
    status, state = await post(client, "4/unhealthy", {"unhealthy": True})
    assert status == 200 and state["unhealthy"]
    assert state["uuid"] not in kubelet.allocatable_devices()["nvidia.com/gpu"]
    await post(client, "4/unhealthy", {"unhealthy": False})
    assert state["uuid"] in kubelet.allocatable_devices()["nvidia.com/gpu"]


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("9/lose", None, 404, "no simulated GPU 9 (the node has GPUs 0-7)"),
        ("x/lose", None, 404, "no simulated GPU x"),
        ("0/melt", None, 404, "unknown action 'melt'"),
        ("0/xid", {}, 400, "xid: xid is required"),
        ("0/xid", {"xid": 0}, 400, "xid: xid: 0 is out of range [1, 999]"),
        ("0/xid", {"xid": True}, 400, "xid: xid: expected an integer, got true"),
        ("0/xid", {"xid": 79, "gpu_instance_id": 3}, 400, "GPU 0 has no MIG instance 3"),
        ("0/ecc", {"count": "2"}, 400, 'ecc: count: expected an integer, got "2"'),
        ("0/ecc", {"double": True}, 400, "ecc: unknown field 'double'"),
        ("0/ecc", [1], 400, "ecc: body must be a JSON object"),
        ("0/temperature", {"offset_celsius": 900}, 400, "out of range [-50, 150]"),
        ("0/workload", {"workload": "mining"}, 400, "'mining' is not one of training"),
        ("0/unhealthy", {"unhealthy": 1}, 400, "expected true or false, got 1"),
    ],
)
async def test_bad_requests_get_one_line_naming_the_problem(control, path, body, status, message):
    client, _ = control
    got_status, text = await post(client, path, body)
    assert got_status == status
    assert message in text and text.count("\n") == 1


async def test_invalid_json_and_wrong_method(control):
    client, _ = control
    response = await client.post("/-/simulator/gpus/0/xid", data=b"{xid: 79")
    assert response.status == 400
    assert (await response.text()).startswith("xid: body is not valid JSON")
    assert (await client.get("/-/simulator/gpus/0/xid")).status == 405

"""The health verdict, PCIe link training and P2P status as the exposition serves them, the
reasons the control API injects (real HTTP to the simulator's control routes), and /readyz under
--health.require-gpus."""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.health.verdict import verdict
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.readiness import NO_GPUS, node_readiness
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.gpu_models import T4
from kube_gpu_exporter.exporter.snapshot import GpuSnapshot, NodeSnapshot
from tests.conftest import quiet, wait_for
from tests.support.control_client import control_client
from tests.support.rendered_node import RenderedNode

REASON = "kube_gpu_exporter_gpu_health_reason"
CSV = """DCGM_FI_DEV_GPU_TEMP, gauge, Temperature.
DCGM_EXP_GPU_HEALTH_STATUS, counter, Health.
DCGM_EXP_P2P_STATUS, counter, P2P.
DCGM_FI_DEV_PCIE_LINK_WIDTH, gauge, Width.
"""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Callable[[str | None], RenderedNode]]:
    made: list[RenderedNode] = []

    def make(csv: str | None = None) -> RenderedNode:
        made.append(RenderedNode(tmp_path, csv))
        return made[-1]

    yield make
    for n in made:
        n.close()


def _series(body: str, family: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(family + "{")]


def _label(line: str, name: str) -> str:
    found = re.search(rf'[{{,]{name}="([^"]*)"', line)
    assert found, (name, line)
    return found.group(1)


def test_every_gpu_and_instance_states_healthy_explicitly(
    node: Callable[..., RenderedNode],
) -> None:
    n = node()
    body = n.body()
    reasons = _series(body, REASON)
    entities = _series(body, "DCGM_FI_DEV_GPU_TEMP")
    assert len(reasons) == len(entities) > len(n.sim.gpus)
    for line in reasons:
        assert 'reason="healthy",severity="none",action="none"} 1' in line
        assert _label(line, "UUID").startswith("GPU-") and _label(line, "hostname")
    # Off by default: no dcgm-exporter health or P2P family, no PCIe link family.
    assert "DCGM_EXP_GPU_HEALTH_STATUS" not in body and "DCGM_EXP_P2P_STATUS" not in body
    assert "DCGM_FI_DEV_PCIE_LINK" not in body


def test_mig_instances_inherit_their_board_reason(node: Callable[..., RenderedNode]) -> None:
    n = node()
    mig = next(g for g in n.sim.gpus if g.live_instances())
    # An XID raised for the board counts for each of its instances.
    n.body()  # starts the XID watcher, whose thread waits on NVML's event set
    everyone = set(range(len(n.sim.gpus)))
    assert wait_for(lambda: n.sim.registered_gpus() == everyone)
    n.sim.inject_xid(mig.index, 48, None)
    wanted = 'reason="xid_48",severity="critical",action="reset"'

    def board_lines() -> list[str]:
        lines = [line for line in _series(n.body(), REASON) if _label(line, "UUID") == mig.uuid]
        return [x for x in lines if wanted in x]

    # The event reaches the snapshot once the watcher's thread has taken it.
    assert wait_for(board_lines)
    lines = board_lines()
    # A MIG-enabled board's series are its instances', each with the board's XID.
    assert {_label(x, "GPU_I_ID") for x in lines} == {
        str(m.gpu_instance_id) for m in mig.live_instances()
    }


def test_listed_health_status_p2p_and_pcie_families(node: Callable[..., RenderedNode]) -> None:
    n = node(CSV)
    n.sim.set_pcie_downtrain(2, None, 8)
    body = n.body()
    status = [x for x in _series(body, "DCGM_EXP_GPU_HEALTH_STATUS") if 'gpu="2"' in x]
    pcie = [x for x in status if 'health_watch="PCIE"' in x]
    assert pcie and all('health_error_code="DCGM_FR_PCIE_GENERATION"' in x for x in pcie)
    assert all(x.endswith(" 10") for x in pcie)
    assert any(x.endswith(" 0") and "DCGM_FR_OK" in x for x in status)
    widths = [x for x in _series(body, "DCGM_FI_DEV_PCIE_LINK_WIDTH") if 'gpu="2"' in x]
    assert widths and all(x.endswith(" 8") for x in widths)
    p2p = _series(body, "DCGM_EXP_P2P_STATUS")
    # Every ordered pair of the 8 NVLink boards, OK (0), once per whole GPU.
    whole = [x for x in p2p if "GPU_I_ID" not in x]
    assert whole == p2p
    # MIG-enabled boards have no whole-GPU series to carry theirs (a known gap).
    whole_gpus = [g.index for g in n.sim.gpus if not g.live_instances()]
    assert {(_label(x, "gpu"), _label(x, "peer_gpu")) for x in p2p} == {
        (str(a), str(b)) for a in whole_gpus for b in range(8) if a != b
    }
    assert all('link_status="OK"' in x and x.endswith(" 0") for x in p2p)


def test_p2p_on_pcie_boards_and_lost_gpus(node: Callable[..., RenderedNode]) -> None:
    n = node(CSV)
    n.sim.gpus[1].model = T4  # a PCIe-only board: no NVLink
    n.sim.lose_gpu(3)
    body = n.body()
    p2p = _series(body, "DCGM_EXP_P2P_STATUS")
    pairs = {(_label(x, "gpu"), _label(x, "peer_gpu")): x for x in p2p}
    assert 'link_status="NotSupported"' in pairs[("0", "1")] and pairs[("0", "1")].endswith(" 5")
    assert 'link_status="NotSupported"' in pairs[("1", "0")]
    assert not any("3" in pair for pair in pairs)


@pytest.fixture
async def control() -> AsyncIterator[tuple[FakeNvml, TestClient]]:
    sim = FakeNvml(quiet(default_fleet()))
    sim.api.nvmlInit()
    async with control_client(sim, Path("/nonexistent/kubelet.sock")) as client:
        yield sim, client
    sim.close()


def _verdict_of(sim: FakeNvml, index: int, clock_events: bool = False) -> list[tuple[str, ...]]:
    """The GPU's reasons as the device reader and the verdict find them; the simulated workload
    may brake clocks on its own, so clock-event reasons are left out unless asked for."""
    reader = DeviceReader(GuardedNvml(ErrorTally(), sim.api), threading.Lock())
    handle = sim.api.nvmlDeviceGetHandleByIndex(index)
    identity = reader.read_identity(index, handle)
    gpu = GpuSnapshot(identity, up=True, readings=reader.read_board(identity, handle))
    braking = ("thermal_brake", "hw_slowdown", "power_brake")
    return [
        (r.name, r.severity.value, r.action.value)
        for r in verdict(gpu, 0.0).reasons
        if clock_events or r.name not in braking
    ]


async def _post(client: TestClient, path: str, body: dict[str, object]) -> None:
    response = await client.post(f"/-/simulator/gpus/{path}", json=body)
    assert response.status == 200, await response.text()


async def test_pcie_downtrain_warns_and_clears_at_once(
    control: tuple[FakeNvml, TestClient],
) -> None:
    sim, client = control
    await _post(client, "0/pcie-downtrain", {"width": 8})
    assert _verdict_of(sim, 0) == [("pcie_downtrained", "warning", "watch")]
    await _post(client, "0/pcie-downtrain", {"width": None})
    assert _verdict_of(sim, 0) == [("healthy", "none", "none")]
    response = await client.post("/-/simulator/gpus/0/pcie-downtrain", json={"generation": 6})
    assert response.status == 400


async def test_retired_page_holds_until_reset(control: tuple[FakeNvml, TestClient]) -> None:
    sim, client = control
    sim.gpus[1].model = T4  # page retirement is pre-Ampere
    await _post(client, "1/retired-page", {})
    assert _verdict_of(sim, 1) == [("retired_pages_pending", "critical", "reset")]
    await _post(client, "1/reset", {})
    assert _verdict_of(sim, 1) == [("healthy", "none", "none")]
    # A board that remaps rows retires no pages.
    assert (await client.post("/-/simulator/gpus/0/retired-page", json={})).status == 400


async def test_thermal_brake_warns_while_on(control: tuple[FakeNvml, TestClient]) -> None:
    sim, client = control
    await _post(client, "0/thermal-brake", {"active": True})
    assert ("thermal_brake", "warning", "watch") in _verdict_of(sim, 0, clock_events=True)
    await _post(client, "0/thermal-brake", {"active": False})
    # Cleared at once; the idle board brakes nothing on its own.
    sim.set_workload(0, "idle")
    assert _verdict_of(sim, 0, clock_events=True) == [("healthy", "none", "none")]


def test_readyz_requires_gpus_only_when_asked(node: Callable[..., RenderedNode]) -> None:
    n = node()
    with_gpus = n.poller.sweep()
    without: NodeSnapshot = replace(with_gpus, gpus=())
    assert node_readiness(lambda: without)() is None
    assert node_readiness(lambda: without, require_gpus=True)() == NO_GPUS
    assert node_readiness(lambda: with_gpus, require_gpus=True)() is None


async def test_readyz_answers_503_without_gpus_when_required() -> None:
    config = parse_config(["--health.require-gpus"], {})
    assert config.web.health_require_gpus
    app = web.Application()

    async def readyz(_request: web.Request) -> web.Response:
        # As server.py's handler: 503 with the reason, else 200.
        why = node_readiness(lambda: None, require_gpus=True)()
        return web.Response(status=503 if why else 200, text=why or "ready")

    app.router.add_get("/readyz", readyz)
    async with TestClient(TestServer(app)) as client:
        assert (await client.get("/readyz")).status == 503

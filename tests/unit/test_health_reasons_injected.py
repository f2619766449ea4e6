"""Each reason of the health table, injected through the simulator's control API over real HTTP,
turns its GPU's verdict to the severity and action the table documents (docs/health.md, 'The
reason table'), and then clears, or stays, as the table says it does."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.health.reasons import BY_NAME, Clears, xid_reason
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, builtin_fleet, parse_fleet
from tests.conftest import wait_for
from tests.support.control_client import control_client
from tests.support.rendered_node import RenderedNode
from tests.unit.test_health_exposition import REASON, _label, _series

T4_FLEET = 'driver_version: "570.133.20"\ngpus:\n  - {model: T4, count: 2}\n'


@dataclass(frozen=True)
class Case:
    name: str
    fleet: str  # "default", "gb200" or "t4"
    action: str
    body: dict[str, object]
    reason: str
    # What undoes it, and whether the reason is then gone (False: it stays, as documented).
    undo: str
    undo_body: dict[str, object]
    cleared: bool


CASES = (
    Case("ecc", "default", "ecc", {"double_bit": True}, "ecc_dbe_volatile", "reset", {}, True),
    Case(
        "remap", "default", "row-remap", {"pending": True}, "row_remap_pending", "reset", {}, True
    ),
    Case(
        "remap failure",
        "default",
        "row-remap",
        {"pending": False, "failure": True},
        "row_remap_failure",
        "reset",
        {},
        False,
    ),
    Case(
        "thermal",
        "default",
        "thermal-brake",
        {"active": True},
        "thermal_brake",
        "thermal-brake",
        {"active": False},
        True,
    ),
    Case(
        "pcie",
        "default",
        "pcie-downtrain",
        {"width": 8},
        "pcie_downtrained",
        "pcie-downtrain",
        {"width": None},
        True,
    ),
    Case("lost", "default", "lose", {}, "gpu_lost", "restore", {}, True),
    Case("xid", "default", "xid", {"xid": 48}, "xid_48", "reset", {}, False),
    Case(
        "fabric degraded",
        "gb200",
        "fabric",
        {"degraded_bandwidth": True},
        "fabric_degraded",
        "fabric",
        {},
        True,
    ),
    Case(
        "fabric unhealthy",
        "gb200",
        "fabric",
        {"route_unhealthy": True},
        "fabric_unhealthy",
        "fabric",
        {},
        True,
    ),
    Case(
        "recovery",
        "gb200",
        "recovery-action",
        {"action": "reboot"},
        "recovery_action_reboot",
        "reset",
        {},
        True,
    ),
    Case(
        "retired",
        "t4",
        "retired-page",
        {"cause": "sbe"},
        "retired_pages_pending",
        "reset",
        {},
        True,
    ),
)


def _fleet(name: str) -> FleetSpec | None:
    if name == "gb200":
        return builtin_fleet("gb200")
    if name == "t4":
        return parse_fleet(T4_FLEET, "test fleet")
    return None


@pytest.fixture
def made(tmp_path: Path) -> Iterator[list[RenderedNode]]:
    nodes: list[RenderedNode] = []
    yield nodes
    for node in nodes:
        node.close()


def _reasons(node: RenderedNode, uuid: str) -> dict[str, tuple[str, str]]:
    """reason -> (severity, action) on the GPU's series."""
    return {
        _label(line, "reason"): (_label(line, "severity"), _label(line, "action"))
        for line in _series(node.body(), REASON)
        if _label(line, "UUID") == uuid
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_an_injected_reason_sets_the_documented_verdict_and_clears_as_documented(
    case: Case, made: list[RenderedNode], tmp_path: Path
) -> None:
    node = RenderedNode(tmp_path, None, _fleet(case.fleet))
    made.append(node)
    gpu = next(g for g in node.sim.gpus if not g.live_instances())
    node.body()  # the first sweep starts the XID watcher
    everyone = set(range(len(node.sim.gpus)))
    assert wait_for(lambda: node.sim.registered_gpus() == everyone)
    assert _reasons(node, gpu.uuid) == {"healthy": ("none", "none")}
    row = xid_reason(48) if case.reason == "xid_48" else BY_NAME[case.reason]
    documented = (row.severity.value, row.action.value)
    async with control_client(node.sim, tmp_path / "kubelet.sock") as client:
        response = await client.post(f"/-/simulator/gpus/{gpu.index}/{case.action}", json=case.body)
        assert response.status == 200, await response.text()
        # XIDs reach the snapshot once the watcher's thread has taken the event.
        assert wait_for(lambda: case.reason in _reasons(node, gpu.uuid))
        assert _reasons(node, gpu.uuid)[case.reason] == documented
        assert "healthy" not in _reasons(node, gpu.uuid)
        response = await client.post(
            f"/-/simulator/gpus/{gpu.index}/{case.undo}", json=case.undo_body
        )
        assert response.status == 200, await response.text()
    after = _reasons(node, gpu.uuid)
    if case.cleared:
        assert after == {"healthy": ("none", "none")}, after
    else:
        # Latched, or held for its window after the last event (the table's 'Clears').
        assert row.clears in (Clears.LATCHED, Clears.WINDOW)
        assert after[case.reason] == documented

"""The GPU health verdict over hand-built snapshots: every reason set and cleared, healthy
explicit, worst first, XIDs held for their window; and the control API driving the simulator's
reasons through the device reader."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from aiohttp.test_utils import TestClient

from kube_gpu_exporter.exporter import fabric_health
from kube_gpu_exporter.exporter.health.reasons import (
    BY_NAME,
    HEALTHY,
    XID_HOLD_SECONDS,
    Action,
    Severity,
)
from kube_gpu_exporter.exporter.health.verdict import verdict
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import builtin_fleet
from kube_gpu_exporter.exporter.snapshot import GpuIdentity, GpuReadings, GpuSnapshot, XidRecord
from tests.support.control_client import control_client

IDENT = GpuIdentity(0, "GPU-0", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")


def names(gpu: GpuSnapshot, now: float = 0.0) -> list[str]:
    return [r.name for r in verdict(gpu, now).reasons]


def board(**readings: int | None) -> GpuSnapshot:
    """A GPU whose readings are the given rows' values (DCGM names)."""
    return GpuSnapshot(IDENT, up=True, readings=GpuReadings.of(readings))


def test_healthy_is_explicit() -> None:
    assert verdict(board(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0), 0).reasons == (HEALTHY,)


@pytest.mark.parametrize(
    ("gpu", "reason"),
    [
        (board(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2), "ecc_dbe_volatile"),
        (board(DCGM_FI_DEV_ROW_REMAP_PENDING=1), "row_remap_pending"),
        (board(DCGM_FI_DEV_ROW_REMAP_FAILURE=1), "row_remap_failure"),
        (board(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x40), "thermal_brake"),
        (board(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x8), "hw_slowdown"),
        (board(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x80), "power_brake"),
        (board(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=1), "recovery_action_reset"),
        (board(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=2), "recovery_action_reboot"),
        (board(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=3), "recovery_action_drain_p2p"),
        (board(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=4), "recovery_action_drain_reset"),
        (board(DCGM_FI_DEV_RETIRED_PENDING=1), "retired_pages_pending"),
        (board(DCGM_FI_DEV_FABRIC_MANAGER_STATUS=4), "fabric_registration_failed"),
        (
            board(
                DCGM_FI_DEV_FABRIC_HEALTH_MASK=fabric_health.mask_with({"degraded_bandwidth": True})
            ),
            "fabric_degraded",
        ),
        (
            board(
                DCGM_FI_DEV_FABRIC_HEALTH_MASK=fabric_health.mask_with({"route_unhealthy": True})
            ),
            "fabric_unhealthy",
        ),
        (
            (board(DCGM_FI_DEV_PCIE_LINK_WIDTH=8, DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH=16)),
            "pcie_downtrained",
        ),
        (GpuSnapshot(IDENT, up=False, readings=None, error="GPU_IS_LOST"), "gpu_lost"),
    ],
)
def test_each_reason_holds_with_its_evidence(gpu: GpuSnapshot, reason: str) -> None:
    assert names(gpu) == [reason]


def pcie(gen: int, clock_events: int | None) -> GpuSnapshot:
    return board(
        DCGM_FI_DEV_PCIE_LINK_GEN=gen,
        DCGM_FI_DEV_PCIE_MAX_LINK_GEN=5,
        DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=clock_events,
    )


def test_a_low_pcie_generation_counts_only_under_load() -> None:
    # Busy (no GpuIdle bit): a Gen4 link on a Gen5 slot is downtrained.
    assert names(pcie(4, 0)) == ["pcie_downtrained"]
    # Idle, or reasons unknown: the link may have slowed down to save power.
    assert names(pcie(1, 0x1)) == ["healthy"]
    assert names(pcie(1, None)) == ["healthy"]
    # At its maximum, or unmeasured (0): nothing.
    assert names(pcie(5, 0)) == names(pcie(0, 0)) == ["healthy"]


def test_reasons_clear_with_their_evidence() -> None:
    assert names(
        board(
            DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=0,
            DCGM_FI_DEV_ROW_REMAP_PENDING=0,
            DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x1,
        )
    ) == ["healthy"]
    assert names(board(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=0)) == ["healthy"]
    assert names(board(DCGM_FI_DEV_FABRIC_HEALTH_MASK=fabric_health.mask_with({}))) == ["healthy"]
    # A timed-out read says nothing of the board.
    assert names(GpuSnapshot(IDENT, up=False, readings=None, stale=True)) == ["healthy"]


def test_worst_first() -> None:
    gpu = board(
        DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x40,
        DCGM_FI_DEV_ROW_REMAP_FAILURE=1,
        DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=1,
    )
    result = verdict(gpu, 0)
    assert [r.name for r in result.reasons] == [
        "row_remap_failure",
        "ecc_dbe_volatile",
        "thermal_brake",
    ]
    assert result.worst.action is Action.DRAIN and result.worst.severity is Severity.CRITICAL


def test_xids_hold_for_their_window_board_and_instances() -> None:
    record = XidRecord(79, 1, ((79, 1),), last_seen=((79, 100.0),))
    app = XidRecord(13, 2, ((13, 1),), last_seen=((13, 100.0),))
    gpu = replace(board(), xid=record, instance_xids=((3, app),))
    held = verdict(gpu, 100.0 + XID_HOLD_SECONDS - 1)
    assert [r.name for r in held.reasons] == ["xid_79", "xid_13"]
    assert held.worst.action is Action.DRAIN
    assert held.reasons[1].action is Action.WATCH
    assert names(gpu, 100.0 + XID_HOLD_SECONDS) == ["healthy"]


def test_the_table_names_every_reason_once() -> None:
    assert BY_NAME["healthy"] is HEALTHY
    assert len(BY_NAME) == len({r.name for r in BY_NAME.values()})


# ---- through the control API, over real HTTP, read back by the device reader ----


@pytest.fixture
def sim() -> FakeNvml:
    return FakeNvml(builtin_fleet("default"))


@pytest.fixture
async def control(sim: FakeNvml, tmp_path):
    async with control_client(sim, tmp_path / "kubelet.sock") as client:
        yield client


def read(sim: FakeNvml, index: int = 0) -> list[str]:
    sim.api.nvmlInit()
    reader = DeviceReader(GuardedNvml(ErrorTally(), sim.api), threading.Lock())
    handle = sim.api.nvmlDeviceGetHandleByIndex(index)
    identity = reader.read_identity(index, handle)
    gpu = GpuSnapshot(identity, up=True, readings=reader.read_board(identity, handle))
    # The simulated workload may brake clocks on its own; the board's faults are what is tested.
    return [n for n in names(gpu) if n not in ("thermal_brake", "hw_slowdown", "power_brake")]


async def test_control_api_drives_reasons_and_a_reset_clears_what_it_clears(
    sim: FakeNvml, control: TestClient
) -> None:
    assert read(sim) == ["healthy"]
    assert (await control.post("/-/simulator/gpus/0/ecc", json={"double_bit": True})).status == 200
    assert "ecc_dbe_volatile" in read(sim) and "row_remap_pending" in read(sim)
    response = await control.post("/-/simulator/gpus/0/row-remap", json={"failure": True})
    assert response.status == 200
    assert read(sim)[0] == "row_remap_failure"
    assert (await control.post("/-/simulator/gpus/0/reset")).status == 200
    # A reset applies the pending remap and zeroes volatile ECC; a remap failure stays.
    assert read(sim) == ["row_remap_failure"]
    response = await control.post("/-/simulator/gpus/0/row-remap", json={"pending": False})
    assert read(sim) == ["healthy"]


async def test_control_api_lost_gpu(sim: FakeNvml, control: TestClient) -> None:
    assert (await control.post("/-/simulator/gpus/1/lose")).status == 200
    assert sim.gpus[1].lost
    assert names(GpuSnapshot(IDENT, up=False, readings=None, error="GPU_IS_LOST")) == ["gpu_lost"]

"""Blackwell and Grace health families: NVLink error counters, the NVLink fabric, C2C and the
recovery action, from the simulated GB200 tray through the device reader, moved by the control
API over real HTTP; and NOT_SUPPORTED-safe on the boards that lack them."""

from __future__ import annotations

import threading

import pytest
from aiohttp.test_utils import TestClient

from kube_gpu_exporter.exporter import fabric_health
from kube_gpu_exporter.exporter.fields.collectors_file import parse_collectors, read_collectors_file
from kube_gpu_exporter.exporter.fields.nvlink_health_rows import FABRIC_FIELDS, NVLINK_HEALTH_FIELDS
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import (
    builtin_collectors,
    builtin_fleet,
    parse_fleet,
)
from kube_gpu_exporter.exporter.simulator.nvlink_health import HEALTHY_MASK
from tests.support.control_client import control_client

NAMES = [row.name for row in NVLINK_HEALTH_FIELDS]
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"


def read(sim: FakeNvml, reader: DeviceReader, index: int) -> dict[str, int | float]:
    handle = sim.api.nvmlDeviceGetHandleByIndex(index)
    return dict(reader.read_board(reader.read_identity(index, handle), handle).values)


def reader_for(sim: FakeNvml) -> DeviceReader:
    sim.api.nvmlInit()
    return DeviceReader(GuardedNvml(ErrorTally(), sim.api), threading.Lock(), extra_fields=NAMES)


@pytest.fixture
def tray() -> FakeNvml:
    return FakeNvml(builtin_fleet("gb200"))


@pytest.fixture
async def control(tray: FakeNvml, tmp_path):
    async with control_client(tray, tmp_path / "kubelet.sock") as client:
        yield client


def test_the_gb200_tray_serves_fabric_c2c_and_error_families(tray: FakeNvml) -> None:
    fleet = tray.fleet
    assert len(fleet.gpus) == 4 and "arm64" in fleet.node_name
    assert {g.fabric for g in fleet.gpus} == {fleet.gpus[0].fabric}
    values = read(tray, reader_for(tray), 0)
    assert values["DCGM_FI_DEV_FABRIC_MANAGER_STATUS"] == 3  # completed
    assert values["DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE"] == 0
    assert values["DCGM_FI_DEV_FABRIC_CLIQUE_ID"] == 32766
    assert values["DCGM_FI_DEV_FABRIC_HEALTH_MASK"] == HEALTHY_MASK
    assert values["DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"] == 1  # healthy
    assert values["DCGM_FI_DEV_C2C_LINK_COUNT"] > 0
    assert values["DCGM_FI_DEV_C2C_LINK_STATUS"] == 1
    assert values["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 0
    assert values["DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES"] > 0
    assert values["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] == 0


def test_boards_without_them_have_no_series_and_the_rest_keeps_working() -> None:
    # The default node's H100s on driver R550: NVLink but no fabric, no C2C, no Blackwell
    # counters, no recovery-action field.
    sim = FakeNvml(builtin_fleet("default"))
    values = read(sim, reader_for(sim), 0)
    assert not FABRIC_FIELDS & values.keys()
    assert not any(n.startswith(("DCGM_FI_DEV_C2C", "DCGM_FI_DEV_NVLINK_COUNT_")) for n in values)
    assert "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION" not in values
    assert values["DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_L11"] == 0
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    reader = reader_for(sim)
    readings = reader.read_board(reader.read_identity(0, handle), handle)
    assert TEMPERATURE in readings.values and readings.power_mw is not None


def test_a_pcie_board_answers_only_the_recovery_action() -> None:
    sim = FakeNvml(
        parse_fleet('driver_version: "570.133.20"\ngpus:\n  - {model: L4}\n', "test fleet")
    )
    # The reader also gives the health verdict's inputs, which every board answers.
    answered = set(read(sim, reader_for(sim), 0)) & set(NAMES)
    assert answered == {"DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"}


async def post(client: TestClient, path: str, body: object):
    response = await client.post(f"/-/simulator/gpus/{path}", json=body)
    return response.status, await response.text()


async def test_an_error_burst_moves_its_link_and_the_totals(control, tray: FakeNvml) -> None:
    reader = reader_for(tray)
    status, _ = await post(control, "1/nvlink-errors", {"kind": "replay", "link": 3, "count": 7})
    assert status == 200
    status, _ = await post(control, "1/nvlink-errors", {"kind": "rx", "link": 17, "count": 2})
    assert status == 200
    values = read(tray, reader, 1)
    assert values["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L3"] == 7
    assert values["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 7
    assert values["DCGM_FI_DEV_NVLINK_COUNT_RX_ERRORS"] == 2
    assert read(tray, reader, 0)["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 0
    status, text = await post(control, "1/nvlink-errors", {"kind": "replay", "link": 18})
    assert status == 400 and "link" in text
    status, text = await post(control, "1/nvlink-errors", {"kind": "bogus", "link": 0})
    assert status == 400 and text.startswith("kind:")


async def test_a_degraded_fabric_and_its_state(control, tray: FakeNvml) -> None:
    body = {"state": "in_progress", "degraded_bandwidth": True, "route_unhealthy": True}
    status, _ = await post(control, "2/fabric", body)
    assert status == 200
    values = read(tray, reader_for(tray), 2)
    assert values["DCGM_FI_DEV_FABRIC_MANAGER_STATUS"] == 2
    assert values["DCGM_FI_DEV_FABRIC_HEALTH_MASK"] != HEALTHY_MASK
    assert values["DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"] == 2  # unhealthy
    assert "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE" not in values  # only once completed
    status, _ = await post(control, "2/fabric", {"state": "completed", "degraded_bandwidth": True})
    values = read(tray, reader_for(tray), 2)
    assert values["DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"] == 3  # limited capacity
    status, _ = await post(control, "2/fabric", {"state": "completed"})
    assert read(tray, reader_for(tray), 2)["DCGM_FI_DEV_FABRIC_HEALTH_MASK"] == HEALTHY_MASK


async def test_a_requested_recovery_action(control, tray: FakeNvml) -> None:
    for action, number in (("reset", 1), ("reboot", 2), ("drain", 3), ("none", 0)):
        status, _ = await post(control, "3/recovery-action", {"action": action})
        assert status == 200
        assert read(tray, reader_for(tray), 3)["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] == number
    status, text = await post(control, "3/recovery-action", {"action": "explode"})
    assert status == 400 and text.startswith("action:")


def test_a_collectors_file_exports_the_new_fields_and_names_what_is_not_read() -> None:
    selection = parse_collectors(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, counter, flit CRC errors\n"
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2, counter, replays on link 2\n"
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS, gauge, fabric\n"
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L15, counter, replays on link 15\n"
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0, counter, link 0 bandwidth\n",
        "test.csv",
    )
    assert [f.row.name for f in selection.listed] == [
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L2",
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS",
    ]
    assert [u.name for u in selection.unsupported] == [
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_L15",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0",
    ]
    assert all("not read here" in u.reason for u in selection.unsupported)


def test_the_gb200_fleet_ships_the_csv_of_its_families() -> None:
    path = builtin_collectors("gb200")
    assert path is not None and builtin_collectors("default") is None
    listed = {f.row.name for f in read_collectors_file(path).listed}
    assert set(NAMES) <= listed
    assert "DCGM_FI_DEV_GPU_TEMP" in listed


@pytest.mark.parametrize("model", ["H100-80GB-HBM3", "H200-141GB-HBM3e", "L4"])
def test_a_board_outside_any_fabric_serves_no_fabric_or_c2c_series(model: str) -> None:
    """Every new family listed, on boards that have none of the fabric, C2C or Blackwell
    counters, on a driver that knows the recovery action: NVML's refusals cost nothing else,
    the fabric is asked once and its refusal is not counted as an NVML error, and no domain."""
    sim = FakeNvml(
        parse_fleet(f'driver_version: "570.133.20"\ngpus:\n  - {{model: {model}}}\n', "test")
    )
    sim.api.nvmlInit()
    tally = ErrorTally()
    reader = DeviceReader(GuardedNvml(tally, sim.api), threading.Lock(), extra_fields=NAMES)
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    identity = reader.read_identity(0, handle)
    for _ in range(2):
        readings = reader.read_board(identity, handle)
    values = dict(readings.values)
    assert readings.fabric_domain is None
    assert not FABRIC_FIELDS & values.keys()
    assert not any(n.startswith(("DCGM_FI_DEV_C2C", "DCGM_FI_DEV_NVLINK_COUNT_")) for n in values)
    assert values["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] == 0
    assert sim.calls["nvmlDeviceGetGpuFabricInfoV"] == 1
    assert not [key for key, _ in tally.snapshot() if "Fabric" in key[0]]
    # The rest is read as without the new fields.
    assert TEMPERATURE in readings.values and readings.power_mw is not None
    assert readings.fb_total_bytes is not None and "DCGM_FI_DEV_SM_CLOCK" in readings.values


def test_the_domain_follows_the_registration(tray: FakeNvml) -> None:
    """The NVLink domain (the info family, the cluster-UUID label) is the fabric manager's to
    give: there once registration completed, gone while it is back in progress."""
    reader = reader_for(tray)
    handle = tray.api.nvmlDeviceGetHandleByIndex(0)
    identity = reader.read_identity(0, handle)
    domain = reader.read_board(identity, handle).fabric_domain
    fabric = tray.fleet.gpus[0].fabric
    assert domain is not None and fabric is not None
    assert (domain.cluster_uuid, domain.clique_id) == (fabric.cluster_uuid, fabric.clique_id)
    tray.set_fabric(0, state=2)  # in progress
    assert reader_for(tray).read_board(identity, handle).fabric_domain is None


def test_the_cluster_label_is_on_only_where_a_collectors_file_lists_it(tmp_path) -> None:
    from kube_gpu_exporter.exporter.flags.settings import parse_config
    from kube_gpu_exporter.exporter.simulator.node import with_fleet_collectors

    def label(*argv: str) -> str:
        return with_fleet_collectors(
            parse_config(list(argv), environ={})
        ).labels.fabric_cluster_label

    assert label("--simulate", "gb200") == "DCGM_FI_DEV_FABRIC_CLUSTER_UUID"
    assert label("--simulate") == ""
    own = tmp_path / "own.csv"
    own.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    # An explicit --collectors wins over the fleet's file.
    assert label("--simulate", "gb200", "--collectors", str(own)) == ""
    config = with_fleet_collectors(parse_config(["--simulate", "gb200"], environ={}))
    assert "DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES" in config.collection.extra_fields
    assert config.labels.driver_version_label == "DCGM_FI_DRIVER_VERSION"


def test_the_health_mask_fields_do_not_overlap_and_each_reads_back_alone() -> None:
    covered = 0
    for field in fabric_health.FIELDS:
        bits = field.width << field.shift
        assert covered & bits == 0, field.name
        covered |= bits
        mask = fabric_health.mask_with({field.name: True})
        assert [f.name for f in fabric_health.FIELDS if f.holds(mask)] == [field.name]
    assert not any(f.holds(fabric_health.mask_with({})) for f in fabric_health.FIELDS)

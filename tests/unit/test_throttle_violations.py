"""The violation counters (DCGM_FI_DEV_*_VIOLATION, fields 240-247): rows of the field table read
from NVML's NVML_FI_DEV_PERF_POLICY_* field values, and the simulator's model of them, the time
each policy's clock-event reasons were on, in nanoseconds of simulated time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.fields.collectors_file import parse_collectors
from kube_gpu_exporter.exporter.fields.model import Cadence, FieldValue
from kube_gpu_exporter.exporter.fields.table import BY_ANY_NAME, BY_NAME
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import parse_fleet
from kube_gpu_exporter.exporter.simulator.nvml import fields as sim_fields
from kube_gpu_exporter.exporter.simulator.violations import HW_THERMAL_SLOWDOWN, SW_POWER_CAP
from tests.conftest import quiet

# DCGM name -> (DCGM id, NVML field id), written out from dcgm_fields.h and nvml.h.
VIOLATIONS = {
    "DCGM_FI_DEV_POWER_VIOLATION": (240, 74),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (241, 75),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": (242, 76),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": (243, 77),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": (244, 78),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": (245, 79),
    "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION": (246, 80),
    "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION": (247, 81),
}
POWER, THERMAL = "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_FI_DEV_THERMAL_VIOLATION"
APP, BASE = "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION", "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION"
NS = 1_000_000_000
# Inference keeps the board well below its power cap and its slowdown temperature, so nothing
# but a forced reason holds its clocks back.
FLEET = "gpus:\n  - {model: H100-80GB-HBM3, count: 2, workload: inference}\n"


def test_the_rows_are_dcgm_exporters_counters_in_nanoseconds() -> None:
    for name, (field_id, nvml_id) in VIOLATIONS.items():
        row = BY_NAME[name]
        assert (row.field_id, row.kind, row.unit, row.native_unit) == (
            field_id,
            "counter",
            "ns",
            "ns",
        )
        assert isinstance(row.source, FieldValue) and row.source.nvml_field_id == nvml_id
        # Cumulative, so read with the slow fields; on by default; no 4.9 rename.
        assert row.cadence is Cadence.SLOW and row.default and row.spelling_4_9 is None


class Node:
    """A simulated node on a clock the test moves, and one device reader over it."""

    def __init__(self, fleet: str) -> None:
        self.now = 0.0
        self.sim = FakeNvml(quiet(parse_fleet(fleet, "test")), clock=lambda: self.now)
        self.sim.api.nvmlInit()
        self.tally = ErrorTally()
        self.reader = DeviceReader(GuardedNvml(self.tally, self.sim.api), threading.Lock())

    def read(self, index: int = 0) -> dict[str, Any]:
        handle = self.sim.api.nvmlDeviceGetHandleByIndex(index)
        readings = self.reader.read_board(self.reader.read_identity(index, handle), handle)
        return dict(readings.values)

    def after(self, seconds: float, index: int = 0) -> dict[str, Any]:
        self.now += seconds
        return self.read(index)


@pytest.fixture
def node() -> Iterator[Node]:
    made = Node(FLEET)
    yield made
    made.sim.close()


def _rise(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    return {name: after[name] - before[name] for name in VIOLATIONS}


def test_a_thermal_brake_runs_the_thermal_counters_at_one_second_per_second(node: Node) -> None:
    start = node.read()
    node.sim.set_clock_event_override(0, HW_THERMAL_SLOWDOWN)
    held = node.after(300.0)
    rise = _rise(start, held)
    assert rise[THERMAL] == rise[BASE] == rise[APP] == 300 * NS
    assert rise[POWER] == 0
    # The board says why: the reason bit is set, and the SM clock is cut.
    handle = node.sim.api.nvmlDeviceGetHandleByIndex(0)
    assert node.sim.api.nvmlDeviceGetCurrentClocksEventReasons(handle) & HW_THERMAL_SLOWDOWN
    # The other GPU was never braked.
    other = node.read(1)
    assert other[THERMAL] == other[BASE] == 0


def test_a_power_cap_runs_the_power_counter_but_not_the_thermal_one(node: Node) -> None:
    start = node.read()
    node.sim.set_clock_event_override(0, SW_POWER_CAP)
    rise = _rise(start, node.after(120.0))
    assert rise[POWER] == rise[APP] == 120 * NS
    # A power cap trims clocks within the boost range: not below base.
    assert rise[THERMAL] == rise[BASE] == 0


def test_the_counters_stay_flat_once_the_override_is_cleared(node: Node) -> None:
    node.sim.set_clock_event_override(0, HW_THERMAL_SLOWDOWN | SW_POWER_CAP)
    node.now += 60.0
    node.sim.set_clock_event_override(0, None)
    cleared = node.read()
    assert cleared[THERMAL] == cleared[POWER] == 60 * NS
    later = node.after(600.0)
    assert later[THERMAL] == later[POWER] == 60 * NS


def test_time_before_an_override_counts_under_the_old_reasons(node: Node) -> None:
    """The counters integrate up to the change first: an override set after a long unread
    stretch does not claim that stretch."""
    node.read()
    node.now += 500.0
    node.sim.set_clock_event_override(0, HW_THERMAL_SLOWDOWN)
    assert node.after(10.0)[THERMAL] == 10 * NS


def test_a_hot_board_throttles_and_counts_without_an_override() -> None:
    hot = Node("gpus:\n  - {model: H100-80GB-HBM3, workload: training}\n")
    try:
        start = hot.read()
        # Far past the slowdown temperature, as a failed fan wall would leave it.
        hot.sim.set_temperature_offset(0, 60.0)
        hot.now += 1.0
        hot.read()  # the offset takes effect from here
        before = hot.read()
        rise = _rise(before, hot.after(100.0))
        assert rise[THERMAL] == 100 * NS
        assert before[THERMAL] >= start[THERMAL]
    finally:
        hot.sim.close()


def test_the_counters_are_monotonic_and_deterministic() -> None:
    def run() -> list[int]:
        made = Node("gpus:\n  - {model: H100-80GB-HBM3, workload: batch}\n")
        try:
            values = []
            for step in range(40):
                if step == 10:
                    made.sim.set_clock_event_override(0, HW_THERMAL_SLOWDOWN)
                if step == 25:
                    made.sim.set_clock_event_override(0, None)
                values.append(sum(made.after(37.0)[name] for name in VIOLATIONS))
            return values
        finally:
            made.sim.close()

    first = run()
    assert first == sorted(first)
    assert first == run()


def test_the_violation_status_call_agrees_with_the_field_values(node: Node) -> None:
    node.sim.set_clock_event_override(0, SW_POWER_CAP)
    node.now += 42.0
    handle = node.sim.api.nvmlDeviceGetHandleByIndex(0)
    status = node.sim.api.nvmlDeviceGetViolationStatus(handle, pynvml.NVML_PERF_POLICY_POWER)
    [entry] = node.sim.api.nvmlDeviceGetFieldValues(handle, [74])
    assert status.violationTime == entry.value.ullVal == 42 * NS
    # The reference time is the driver's clock in microseconds, as the field's timestamp.
    assert status.referenceTime == entry.timestamp


def test_a_board_that_refuses_them_has_no_values_and_no_errors(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NOT_SUPPORTED in the batch: the entries are dropped from the GPU's batch, nothing is
    counted as an NVML error, and the other fields are read as before."""

    def refuse(gpu: Any, t: float) -> int:
        raise pynvml.NVMLError_NotSupported()

    models = dict(sim_fields.BY_FIELD_ID)
    for _field_id, nvml_id in VIOLATIONS.values():
        models[nvml_id] = refuse
    monkeypatch.setattr(sim_fields, "BY_FIELD_ID", models)
    asked: list[list[Any]] = []
    batch = node.sim.api.nvmlDeviceGetFieldValues

    def spy(handle: Any, ids: list[Any]) -> Any:
        asked.append(list(ids))
        return batch(handle, ids)

    node.sim.api.nvmlDeviceGetFieldValues = spy
    for _ in range(2):
        values = node.after(10.0)
        assert set(values) & set(VIOLATIONS) == set()
    assert "DCGM_FI_DEV_RETIRED_SBE" not in values  # an H100 remaps rows
    assert node.tally.snapshot() == ()
    assert not {nvml_id for _f, nvml_id in VIOLATIONS.values()} & set(asked[-1])


def test_a_collectors_file_listing_them_exports_them_with_its_own_type() -> None:
    text = "".join(f"{name}, counter, Throttled time (in ns).\n" for name in VIOLATIONS)
    selection = parse_collectors(text, "violations.csv")
    assert selection.unsupported == ()
    assert [(f.row.name, f.kind) for f in selection.listed] == [
        (name, "counter") for name in VIOLATIONS
    ]
    assert all(BY_ANY_NAME[name] is BY_NAME[name] for name in VIOLATIONS)

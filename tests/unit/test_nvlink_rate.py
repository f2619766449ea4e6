"""NVLink throughput as a rate (DCGM's field 449): the difference of the summed link counters over
the time between NVML's own stamps, None where no honest figure exists, and the simulator's
counters and stamps that it is computed from."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import pynvml
import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.nvlink_rate import NvlinkRate, NvlinkSample
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet
from kube_gpu_exporter.exporter.simulator.sim_gpu import NVLINK_RX_SHARE
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import fleet_from_yaml, quiet

STEP_S = 5.0
MIXED_NODE = """
    gpus:
      - {model: H100-80GB-HBM3, workload: training}
      - {model: T4}
"""


class SteppedNode:
    """The simulator on a clock the test moves, swept by a poller without helper threads."""

    def __init__(self, fleet: FleetSpec) -> None:
        self.clock = [0.0]
        self.sim = FakeNvml(quiet(fleet), clock=lambda: self.clock[0])
        self.poller = Poller(
            # Every field every sweep: the slow fields' cadence runs on the real clock.
            CollectionConfig(
                xid_enabled=False,
                pcie_enabled=False,
                gpm_enabled=False,
                slow_fields_interval_seconds=0.0,
                energy_read_interval_seconds=0.0,
            ),
            lambda snapshot: None,
            self.sim.source(),
        )

    def sweep_at(self, t: float) -> NodeSnapshot:
        self.clock[0] = t
        return self.poller.sweep()

    def expected_kib_per_s(self, index: int, start: float, end: float) -> float:
        """The load model's tx + rx rate over [start, end], as the counters integrate it."""
        midpoint = self.sim.now() - self.clock[0] + (start + end) / 2
        return self.sim.gpus[index].nvlink_kib_per_s(midpoint, transmit=True) * (
            1 + NVLINK_RX_SHARE
        )

    def close(self) -> None:
        self.poller.stop()
        self.sim.close()


@pytest.fixture
def stepped() -> Iterator[Callable[[FleetSpec | None], SteppedNode]]:
    nodes: list[SteppedNode] = []

    def make(fleet: FleetSpec | None = None) -> SteppedNode:
        nodes.append(SteppedNode(fleet or default_fleet()))
        return nodes[-1]

    yield make
    for node in nodes:
        node.close()


def sample(total: int, seconds: float, counters: int = 36, stamped: bool = True) -> NvlinkSample:
    return NvlinkSample(
        total_kib=total,
        counters=counters,
        timestamp_us=int(seconds * 1e6) if stamped else 0,
        monotonic_s=seconds,
    )


# ---- the rate itself ----


def test_rate_is_the_counter_difference_over_the_stamps_difference():
    rate = NvlinkRate()
    assert rate.update("gpu", sample(1_000, 100.0)) is None  # nothing to compare with yet
    assert rate.update("gpu", sample(6_000, 102.0)) == pytest.approx(2_500.0)
    assert rate.update("gpu", sample(6_000, 103.0)) == 0.0  # no traffic is a rate, not a gap


def test_no_rate_when_no_time_passed_and_the_next_one_spans_both_reads():
    rate = NvlinkRate()
    rate.update("gpu", sample(1_000, 100.0))
    assert rate.update("gpu", sample(1_000, 100.0)) is None  # NVML served the cached value
    assert rate.update("gpu", sample(5_000, 104.0)) == pytest.approx(1_000.0)


@pytest.mark.parametrize(
    "second",
    [
        sample(500, 101.0),  # the counters went down: reset or wrap
        sample(9_000, 99.0),  # the clock went back (a wall-clock step)
        sample(9_000, 101.0, counters=34),  # a link dropped out of the sum
        sample(9_000, 101.0, stamped=False),  # NVML stopped stamping: two different clocks
        sample(1_000 + (1 << 50), 101.0),  # faster than any NVLink: restarted and regrew
    ],
)
def test_no_rate_across_a_discontinuity_and_the_next_read_measures_from_it(second):
    rate = NvlinkRate()
    rate.update("gpu", sample(1_000, 100.0))
    assert rate.update("gpu", second) is None
    later = replace(
        second,
        total_kib=second.total_kib + 2_000,
        timestamp_us=second.timestamp_us + 2_000_000 if second.timestamp_us else 0,
        monotonic_s=second.monotonic_s + 2.0,
    )
    assert rate.update("gpu", later) == pytest.approx(1_000.0)


def test_without_nvml_stamps_the_monotonic_clock_times_the_reads():
    rate = NvlinkRate()
    rate.update("gpu", sample(0, 50.0, stamped=False))
    assert rate.update("gpu", sample(400, 54.0, stamped=False)) == pytest.approx(100.0)


def test_forget_retain_and_clear_start_gpus_over():
    rate = NvlinkRate()
    for uuid in ("a", "b", "c"):
        rate.update(uuid, sample(0, 1.0))
    rate.forget("a")
    rate.retain(["a", "b"])  # "c" is no longer enumerated
    assert rate.update("a", sample(10, 2.0)) is None
    assert rate.update("b", sample(10, 2.0)) == pytest.approx(10.0)
    assert rate.update("c", sample(10, 2.0)) is None
    rate.clear()
    assert rate.update("b", sample(20, 3.0)) is None


# ---- the simulator's counters and stamps ----


def test_simulator_stamps_field_values_with_wall_clock_micros_that_follow_its_clock(stepped):
    node = stepped(None)
    api = node.sim.api
    api.nvmlInit()
    try:
        handle = api.nvmlDeviceGetHandleByIndex(0)
        request = [(pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link) for link in range(18)]
        first = api.nvmlDeviceGetFieldValues(handle, request)
        node.clock[0] = STEP_S
        second = api.nvmlDeviceGetFieldValues(handle, request)
    finally:
        api.nvmlShutdown()
    assert {e.timestamp for e in first} == {first[0].timestamp}  # one refresh, one stamp
    assert second[0].timestamp - first[0].timestamp == pytest.approx(STEP_S * 1e6, abs=1)
    # Plausible as microseconds since 1970: after 2020, before 2100.
    assert 1.58e15 < first[0].timestamp < 4.1e15
    moved = sum(b.value.ullVal - a.value.ullVal for a, b in zip(first, second, strict=True))
    tx_share = 1 / (1 + NVLINK_RX_SHARE)
    assert moved == pytest.approx(
        node.expected_kib_per_s(0, 0, STEP_S) * tx_share * STEP_S, rel=1e-4
    )


# ---- through the poller ----


def test_rate_matches_the_simulated_load_on_every_nvlink_gpu(stepped):
    node = stepped(None)
    first = node.sweep_at(0.0)
    assert all(g.readings.nvlink_kib_per_second is None for g in first.gpus)  # first sweep
    node.sweep_at(STEP_S)
    snap = node.sweep_at(2 * STEP_S)
    for gpu in snap.gpus:
        index = gpu.identity.index
        expected = node.expected_kib_per_s(index, STEP_S, 2 * STEP_S)
        rate = gpu.readings.nvlink_kib_per_second
        assert rate is not None, index
        if expected == 0:
            assert rate == 0.0, index  # the idle GPU, as a rate of zero
        else:
            # Counters are whole KiB per link, so a few KiB over 5 s is the only difference.
            assert rate == pytest.approx(expected, rel=1e-4), index
    # The training GPUs move hundreds of GB/s; the MIG GPUs too, counted on the board.
    assert snap.gpus[0].readings.nvlink_kib_per_second > 1e8
    assert snap.gpus[6].readings.nvlink_kib_per_second > 0


def test_no_rate_on_a_gpu_without_nvlink(stepped):
    node = stepped(fleet_from_yaml(MIXED_NODE))
    for step in range(3):
        snap = node.sweep_at(step * STEP_S)
    h100, t4 = snap.gpus
    assert h100.readings.nvlink_kib_per_second > 0
    assert t4.readings.nvlink_kib_per_second is None and t4.readings.nvlink_tx_kib is None


def test_a_counter_reset_gives_no_rate_instead_of_a_negative_one(stepped):
    node = stepped(None)
    node.sweep_at(0.0)
    before = node.sweep_at(STEP_S)
    node.sim.reset_gpu(0)
    after = node.sweep_at(2 * STEP_S)
    assert after.gpus[0].readings.nvlink_tx_kib < before.gpus[0].readings.nvlink_tx_kib
    assert after.gpus[0].readings.nvlink_kib_per_second is None
    assert after.gpus[1].readings.nvlink_kib_per_second > 0  # the others are unaffected
    resumed = node.sweep_at(3 * STEP_S)
    assert resumed.gpus[0].readings.nvlink_kib_per_second == pytest.approx(
        node.expected_kib_per_s(0, 2 * STEP_S, 3 * STEP_S), rel=1e-4
    )


def test_no_rate_when_the_clock_did_not_move_then_one_over_the_longer_interval(stepped):
    node = stepped(None)
    node.sweep_at(0.0)
    node.sweep_at(STEP_S)
    again = node.sweep_at(STEP_S)
    assert again.gpus[0].readings.nvlink_kib_per_second is None
    later = node.sweep_at(3 * STEP_S)
    rate = later.gpus[0].readings.nvlink_kib_per_second
    assert rate == pytest.approx(node.expected_kib_per_s(0, STEP_S, 3 * STEP_S), rel=1e-3)


def test_one_failed_link_entry_drops_the_sum_and_the_rate_for_that_sweep(stepped, monkeypatch):
    node = stepped(None)
    node.sweep_at(0.0)
    node.sweep_at(STEP_S)
    real = node.sim.api.nvmlDeviceGetFieldValues
    failed = []

    def one_link_times_out(handle, request):
        entries = real(handle, request)
        for entry in entries:
            if entry.fieldId == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX and entry.scopeId == 3:
                entry.nvmlReturn = pynvml.NVML_ERROR_TIMEOUT
                failed.append(entry.fieldId)
                break
        return entries

    monkeypatch.setattr(node.sim.api, "nvmlDeviceGetFieldValues", one_link_times_out)
    partial = node.sweep_at(2 * STEP_S)
    monkeypatch.setattr(node.sim.api, "nvmlDeviceGetFieldValues", real)
    assert failed
    readings = partial.gpus[0].readings
    assert readings.nvlink_rx_kib is None and readings.nvlink_tx_kib is None
    assert readings.nvlink_kib_per_second is None
    # The baseline stayed at the last complete read: the next rate spans both intervals.
    whole = node.sweep_at(3 * STEP_S)
    assert whole.gpus[0].readings.nvlink_kib_per_second == pytest.approx(
        (
            node.expected_kib_per_s(0, STEP_S, 2 * STEP_S)
            + node.expected_kib_per_s(0, 2 * STEP_S, 3 * STEP_S)
        )
        / 2,
        rel=1e-3,
    )


def test_a_lost_gpu_and_a_driver_reload_start_the_rate_over(stepped):
    node = stepped(None)
    node.sweep_at(0.0)
    node.sweep_at(STEP_S)
    node.sim.lose_gpu(2)
    lost = node.sweep_at(2 * STEP_S)
    assert not lost.gpus[2].up
    node.sim.restore_gpu(2)
    back = node.sweep_at(3 * STEP_S)
    assert back.gpus[2].readings.nvlink_kib_per_second is None
    assert back.gpus[1].readings.nvlink_kib_per_second > 0

    node.sim.unload_driver()
    assert not node.sweep_at(4 * STEP_S).nvml_up
    node.sim.load_driver()
    node.poller.retry_init_now()
    reloaded = node.sweep_at(5 * STEP_S)
    assert reloaded.nvml_up
    assert all(g.readings.nvlink_kib_per_second is None for g in reloaded.gpus)
    assert node.sweep_at(6 * STEP_S).gpus[1].readings.nvlink_kib_per_second > 0


def test_a_long_sweep_interval_still_counts_all_the_traffic(stepped):
    node = stepped(None)
    interval = 300.0  # longer than one integration piece of the simulator
    node.sweep_at(0.0)
    rate = node.sweep_at(interval).gpus[0].readings.nvlink_kib_per_second
    minutes = [node.expected_kib_per_s(0, m * 60.0, (m + 1) * 60.0) for m in range(5)]
    assert rate == pytest.approx(sum(minutes) / len(minutes), rel=1e-4)

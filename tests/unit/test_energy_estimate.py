"""The energy counter between NVML reads: carried by board power, put back on NVML's counter at
each read, never falling unless NVML's own counter restarted."""

from __future__ import annotations

import itertools

import pytest

from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.nvml.energy_estimate import EnergyEstimates

GPU = "GPU-a"


class Clock:
    def __init__(self) -> None:
        self.now = 500.0

    def __call__(self) -> float:
        return self.now


def estimates(interval: float = 60.0, max_gap: float = 180.0) -> tuple[Clock, EnergyEstimates]:
    """Bridging gaps up to 180 s, as the poller does at a 60 s poll: several tests step a whole
    read interval between two samples."""
    clock = Clock()
    return clock, EnergyEstimates(interval, clock, max_gap_seconds=max_gap)


def test_nothing_is_exported_before_the_first_read() -> None:
    _, energy = estimates()
    assert energy.read_due(GPU)
    assert energy.update(GPU, 300_000, None) is None
    assert energy.update(GPU, 300_000, 1_000_000) == 1_000_000


def test_between_reads_the_counter_moves_by_power_times_time() -> None:
    clock, energy = estimates()
    energy.update(GPU, 500_000, 7_000_000)  # 500 W
    seen: list[int] = []
    for _ in range(59):
        clock.now += 1.0
        assert not energy.read_due(GPU)
        exported = energy.update(GPU, 500_000, None)
        assert exported is not None
        seen.append(exported)
    # 500 W for 59 s is 29.5 kJ.
    assert seen[-1] == 7_000_000 + 29_500_000
    assert all(b - a == 500_000 for a, b in itertools.pairwise(seen))
    clock.now += 1.0
    assert energy.read_due(GPU)


def test_power_changing_between_sweeps_counts_as_the_average_of_the_two_samples() -> None:
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    clock.now += 5.0
    # A 5 s poll, 100 W then 300 W: the trapezoid gives 200 W over the 5 s.
    assert energy.update(GPU, 300_000, None) == 1_000_000


def test_an_estimate_behind_the_counter_jumps_to_it_and_the_drift_is_negative() -> None:
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    clock.now += 60.0
    # The board drew 110 W on average where the samples said 100 W.
    assert energy.update(GPU, 100_000, 6_600_000) == 6_600_000
    assert energy.drift(GPU) == pytest.approx((6_000_000 - 6_600_000) / 6_600_000)


def test_an_estimate_ahead_of_the_counter_neither_falls_nor_waits_for_it() -> None:
    """A counter that falls looks like a restart to Prometheus, which would then count its whole
    value as an increase; one that waits for NVML to catch up reads 0 W while the GPU draws
    power. So the export keeps its value and moves on with NVML's counter from there."""
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    for _ in range(59):
        clock.now += 1.0
        exported = energy.update(GPU, 100_000, None)
    assert exported == 5_900_000
    clock.now += 1.0
    # NVML says 5.8 MJ where the samples said 6.0: the export stays at what it last showed...
    assert energy.update(GPU, 100_000, 5_800_000) == 5_900_000
    assert energy.drift(GPU) == pytest.approx(200_000 / 5_800_000)
    assert energy.ahead(GPU) == 100_000
    # ...and moves on at once by what the board draws.
    clock.now += 0.5
    assert energy.update(GPU, 100_000, None) == 5_950_000
    clock.now += 1.0
    assert energy.update(GPU, 100_000, None) == 6_050_000


def test_an_estimate_that_falls_short_later_absorbs_what_the_export_carried_ahead() -> None:
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    clock.now += 50.0
    assert energy.update(GPU, 100_000, None) == 5_000_000
    clock.now += 10.0
    # 1 MJ published ahead of the counter: carried.
    assert energy.update(GPU, 100_000, 4_000_000) == 5_000_000
    assert energy.ahead(GPU) == 1_000_000
    clock.now += 60.0
    # The board drew 150 W where the samples said 100 W: the estimate fell 3 MJ short of the
    # counter, which first absorbs the 1 MJ carried, then shows the rest.
    assert energy.update(GPU, 100_000, 13_000_000) == 13_000_000
    assert energy.ahead(GPU) == 0


def test_a_counter_below_its_last_read_is_a_restart_and_the_export_restarts_with_it() -> None:
    clock, energy = estimates()
    energy.update(GPU, 100_000, 9_000_000)
    clock.now += 60.0
    assert energy.update(GPU, 100_000, 1_000) == 1_000
    clock.now += 1.0
    assert energy.update(GPU, 100_000, None) == 101_000


def test_without_power_every_chance_reads_the_counter() -> None:
    clock, energy = estimates()
    energy.update(GPU, None, 1_000)
    clock.now += 1.0
    assert energy.read_due(GPU), "nothing else can move it"
    assert energy.update(GPU, None, None) == 1_000
    # Power back: the integral starts from that sample, not from the last read.
    energy.update(GPU, 200_000, 2_000)
    clock.now += 1.0
    assert not energy.read_due(GPU)
    assert energy.update(GPU, 200_000, None) == 202_000


def test_a_wanted_read_keeps_the_exported_floor_and_measures_no_drift() -> None:
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    clock.now += 10.0
    assert energy.update(GPU, 100_000, None) == 1_000_000
    energy.want_read(None)
    assert energy.read_due(GPU)
    # A MIG reconfiguration in between: the counter did not restart, only fell short of the
    # estimate, so the export holds.
    assert energy.update(GPU, 100_000, 900_000) == 1_000_000
    assert energy.drift(GPU) is None
    assert not energy.read_due(GPU)


def test_each_gpu_keeps_its_own_counter_and_gone_gpus_are_dropped() -> None:
    clock, energy = estimates()
    energy.update("GPU-a", 100_000, 0)
    energy.update("GPU-b", 400_000, 50)
    clock.now += 1.0
    assert energy.update("GPU-a", 100_000, None) == 100_000
    assert energy.update("GPU-b", 400_000, None) == 400_050
    energy.retain({"GPU-b"})
    assert energy.update("GPU-a", 100_000, None) is None


def test_the_flag_defaults_to_a_minute_and_zero_turns_the_estimate_off() -> None:
    assert parse_config(["--simulate"]).collection.energy_read_interval_seconds == 60.0
    config = parse_config(["--simulate", "--collector.field-interval=energy-counter=0s"])
    assert config.collection.energy_read_interval_seconds == 0.0


def test_a_missing_sample_is_bridged_by_the_samples_either_side() -> None:
    clock, energy = estimates(max_gap=15.0)
    energy.update(GPU, 100_000, 0)
    clock.now += 1.0
    assert energy.update(GPU, None, None) == 0  # glitched or failed: no sample this sweep
    assert not energy.read_due(GPU), "a gap this short is bridged"
    clock.now += 1.0
    # 100 W then 300 W across the 2 s: 200 W for 2 s.
    assert energy.update(GPU, 300_000, None) == 400_000


def test_a_gap_too_long_to_bridge_leaves_the_counter_to_nvmls_next_read() -> None:
    clock, energy = estimates(max_gap=15.0)
    energy.update(GPU, 100_000, 0)
    for _ in range(16):
        clock.now += 1.0
        assert energy.update(GPU, None, None) == 0
    assert energy.read_due(GPU), "nothing else can move it now"
    clock.now += 1.0
    assert energy.update(GPU, 100_000, None) == 0, "no trapezoid across 17 s"
    assert energy.update(GPU, 100_000, 2_000_000) == 2_000_000


def test_power_above_the_ceiling_is_integrated_at_the_ceiling() -> None:
    clock, energy = estimates()
    energy.update(GPU, 700_000, 0, 700_000)
    clock.now += 2.0
    # A reading the reader let through as an instantaneous overshoot counts as the limit.
    assert energy.update(GPU, 800_000, None, 700_000) == 1_400_000


def _sample(clock: Clock, energy: EnergyEstimates, seconds: float, watts: float) -> int:
    """Samples of `watts` every second for `seconds`, with no read; the exported counter."""
    counter = None
    for _ in range(int(seconds)):
        clock.now += 1.0
        counter = energy.update(GPU, watts * 1000, None)
    assert counter is not None
    return counter


def _read_after(clock: Clock, energy: EnergyEstimates, seconds: float, watts: float) -> None:
    """`seconds` of samples, then NVML's counter read, as the board drew exactly that."""
    counter = _sample(clock, energy, seconds, watts)
    energy.update(GPU, watts * 1000, counter - int(energy.ahead(GPU) or 0))


def test_a_steady_board_is_read_ever_less_often_up_to_ten_times_the_interval() -> None:
    clock, energy = estimates()
    energy.update(GPU, 200_000, 0)
    assert energy.interval(GPU) == 60.0
    seen = []
    for _ in range(6):
        interval = energy.interval(GPU)
        assert interval is not None
        _read_after(clock, energy, interval, 200.0)
        seen.append(energy.interval(GPU))
    # No drift: each read doubles the interval, until ten times the shortest.
    assert seen == [120.0, 240.0, 480.0, 600.0, 600.0, 600.0]


def test_a_drifting_estimate_brings_the_next_read_closer_to_keep_the_error_budget() -> None:
    """An estimate 12 % off at a read: the next read comes when 12 % of the board's draw since
    would be 36 s of it (1 % of an hour), 300 s later; over 60 % off, the shortest interval."""
    clock, energy = estimates()
    energy.update(GPU, 100_000, 0)
    for seconds in (60, 120, 240):
        _read_after(clock, energy, seconds, 100.0)
    assert energy.interval(GPU) == 480.0
    counter = _sample(clock, energy, 480, 100.0)
    # The samples said 100 W; the board drew 100 / 1.12 W.
    energy.update(GPU, 100_000, counter - 48_000_000 + round(48_000_000 / 1.12))
    assert energy.drift(GPU) == pytest.approx(0.12, rel=1e-3)
    assert energy.interval(GPU) == pytest.approx(36.0 / 0.12, rel=1e-3)
    counter = _sample(clock, energy, 300, 100.0)
    # Now the estimate fell well over half short (30 MJ counted, the counter moved about 75).
    energy.update(GPU, 100_000, counter - 30_000_000 + 75_000_000)
    drift = energy.drift(GPU)
    assert drift is not None and drift < -0.6
    assert energy.interval(GPU) == 60.0


def test_a_wanted_read_starts_the_interval_again_from_the_shortest() -> None:
    clock, energy = estimates()
    energy.update(GPU, 200_000, 0)
    _read_after(clock, energy, 60, 200.0)
    _read_after(clock, energy, 120, 200.0)
    assert energy.interval(GPU) == 240.0
    energy.want_read(GPU)
    energy.update(GPU, 200_000, _sample(clock, energy, 1, 200.0))
    assert energy.interval(GPU) == 60.0

"""Per GPU and clock event reason, the sweeps in which that reason was active (dcgm-exporter 4.8.3's
DCGM_EXP_CLOCK_EVENTS_TOTAL): one per sweep with the bit set, every reason from the first mask read,
kept through NVML hiccups and driver reloads, dropped with a GPU that NVML no longer lists."""

from __future__ import annotations

import time
from dataclasses import replace

import pynvml

from kube_gpu_exporter.exporter.clock_events import CLOCK_EVENTS
from kube_gpu_exporter.exporter.nvml.clock_event_counts import ClockEventCounts
from kube_gpu_exporter.exporter.simulator.sim_gpu import (
    GPU_IDLE,
    HW_THERMAL_SLOWDOWN,
    SW_THERMAL_SLOWDOWN,
)
from kube_gpu_exporter.exporter.snapshot import GpuSnapshot
from tests.conftest import FAST, fleet_from_yaml

NO_HELPERS = replace(FAST, xid_enabled=False, gpm_enabled=False)
IDLE_GPU = 5  # the default node's idle GPU
NAMES = [name for _bit, name in CLOCK_EVENTS]


def counts(gpu: GpuSnapshot) -> dict[str, int]:
    return dict(gpu.clock_event_counts)


# ---- the counter ----


def test_every_reason_from_the_first_mask_zeros_included():
    counter = ClockEventCounts()
    assert counter.record("gpu", None) == ()  # no mask read yet: nothing to report
    first = counter.record("gpu", 0)
    assert [name for name, _ in first] == NAMES and all(n == 0 for _, n in first)
    counter.record("gpu", GPU_IDLE | SW_THERMAL_SLOWDOWN)
    after = dict(counter.record("gpu", SW_THERMAL_SLOWDOWN))
    assert after["gpu_idle"] == 1 and after["sw_thermal"] == 2
    assert sum(after.values()) == 3
    assert dict(counter.record("gpu", None)) == after  # a failed read adds nothing


def test_retain_drops_only_the_gpus_no_longer_listed():
    counter = ClockEventCounts()
    counter.record("a", GPU_IDLE)
    counter.record("b", GPU_IDLE)
    counter.retain(["a"])
    assert dict(counter.counts("a"))["gpu_idle"] == 1
    assert counter.counts("b") == ()


# ---- through the poller ----


def test_a_reason_active_in_every_sweep_grows_by_one_per_sweep(sim, make_poller):
    poller = make_poller(sim, NO_HELPERS)
    first = poller.sweep()
    assert all([n for n, _ in g.clock_event_counts] == NAMES for g in first.gpus)
    assert counts(first.gpus[IDLE_GPU])["gpu_idle"] == 1
    assert counts(first.gpus[0])["gpu_idle"] == 0  # training, never idle
    for sweeps in range(2, 6):
        snap = poller.sweep()
        assert counts(snap.gpus[IDLE_GPU])["gpu_idle"] == sweeps
        assert counts(snap.gpus[0]) == dict.fromkeys(NAMES, 0)


def test_a_reason_that_starts_counts_from_then_on(sim, make_poller):
    poller = make_poller(sim, NO_HELPERS)
    poller.sweep()
    sim.set_temperature_offset(1, 60.0)  # far past the slowdown and shutdown temperatures
    hot = [poller.sweep() for _ in range(3)]
    assert all(g.gpus[1].readings.clock_event_reasons & HW_THERMAL_SLOWDOWN for g in hot)
    assert [counts(s.gpus[1])["sw_thermal"] for s in hot] == [1, 2, 3]
    assert [counts(s.gpus[1])["hw_thermal"] for s in hot] == [1, 2, 3]
    assert counts(hot[-1].gpus[2])["sw_thermal"] == 0


def test_counts_survive_failed_reads_a_lost_gpu_and_a_driver_reload(sim, make_poller):
    poller = make_poller(sim, NO_HELPERS)
    for _ in range(3):
        before = poller.sweep()
    idle = counts(before.gpus[IDLE_GPU])["gpu_idle"]
    assert idle == 3

    sim.faults.fail(
        "nvmlDeviceGetCurrentClocksEventReasons", pynvml.NVML_ERROR_UNKNOWN, gpu=IDLE_GPU, times=1
    )
    hiccup = poller.sweep()
    assert hiccup.gpus[IDLE_GPU].readings.clock_event_reasons is None
    assert counts(hiccup.gpus[IDLE_GPU])["gpu_idle"] == idle  # nothing added, nothing lost

    sim.lose_gpu(IDLE_GPU)
    lost = poller.sweep()
    assert not lost.gpus[IDLE_GPU].up
    assert counts(lost.gpus[IDLE_GPU])["gpu_idle"] == idle  # still known, still reported
    sim.restore_gpu(IDLE_GPU)

    sim.unload_driver()
    assert poller.sweep().gpus == ()
    sim.load_driver()
    poller.retry_init_now()
    reloaded = poller.sweep()
    assert counts(reloaded.gpus[IDLE_GPU])["gpu_idle"] == idle + 1


def test_a_gpu_that_goes_away_loses_its_counts(make_sim, make_poller, monkeypatch):
    sim = make_sim(
        fleet_from_yaml("""
            gpus:
              - {model: H100-80GB-HBM3, workload: idle}
              - {model: H100-80GB-HBM3, workload: idle}
        """)
    )
    poller = make_poller(sim, NO_HELPERS)
    poller.sweep()
    assert counts(poller.sweep().gpus[1])["gpu_idle"] == 2
    monkeypatch.setattr(sim.api, "nvmlDeviceGetCount", lambda: 1)  # the second GPU is unplugged
    shrunk = poller.sweep()
    assert len(shrunk.gpus) == 1 and counts(shrunk.gpus[0])["gpu_idle"] == 3
    monkeypatch.setattr(sim.api, "nvmlDeviceGetCount", lambda: len(sim.gpus))
    back = poller.sweep()
    assert counts(back.gpus[1])["gpu_idle"] == 1  # a new start, as after a restart
    assert counts(back.gpus[0])["gpu_idle"] == 4


def test_a_stale_gpu_repeats_its_counts_without_adding(sim, make_poller):
    poller = make_poller(sim, replace(NO_HELPERS, device_timeout_seconds=0.2))
    poller.sweep()
    poller.sweep()
    sim.faults.hang("nvmlDeviceGetTemperature", gpu=IDLE_GPU)
    try:
        stale = poller.sweep()
        assert stale.gpus[IDLE_GPU].stale
        assert counts(stale.gpus[IDLE_GPU])["gpu_idle"] == 2
    finally:
        sim.faults.release_all()
    # The hung read finishes in the background; a later sweep reads the GPU again and counts.
    deadline = time.monotonic() + 5.0
    while (snap := poller.sweep()).gpus[IDLE_GPU].stale:
        assert time.monotonic() < deadline, "the GPU stayed stale after its call was released"
    assert counts(snap.gpus[IDLE_GPU])["gpu_idle"] == 3

"""The production collector, run unchanged against the simulated NVML. Where time has to pass
(nvmlInit's backoff, the wait between sweeps, the XID log's window, the watcher's re-register
delay), the poller runs on a ManualClock that the test moves."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from itertools import pairwise

import pynvml
import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.device_reader import POWER_AVERAGE, POWER_INSTANT
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import FAST, fleet_from_yaml, render, start_xid_watch, wait_for
from tests.support.clock_steps import parked, step_until
from tests.support.stepped_node import poller_on, start_xid_watch_on

MIB = 2**20


def test_default_node_sweep(sim, make_poller):
    snap = make_poller(sim).sweep()
    assert snap.nvml_up and snap.driver_version == "550.54.15"
    assert [g.identity.index for g in snap.gpus] == list(range(8))
    assert all(g.up and not g.stale for g in snap.gpus)
    whole = snap.gpus[0]
    assert whole.identity.name == "NVIDIA H100 80GB HBM3"
    assert whole.identity.mig_enabled is False
    r = whole.readings
    for name in (
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_FB_RESERVED",
    ):
        assert name in r.values, name
    assert r.nvlink_tx_kib is not None
    assert r.fb_total_bytes == 81559 * MIB
    assert r.fb_used_bytes + r.fb_free_bytes + r.fb_reserved_bytes == r.fb_total_bytes
    assert r.power_limit_mw == 700_000


def test_the_power_limits_are_read_with_the_slow_fields_and_kept_between(make_sim, make_poller):
    # Settings, not readings: read in the sweep before a scrape (or every slow-fields interval
    # with nobody scraping), their last value standing in between; 0s reads one every sweep.
    sweeps = 4
    for intervals, enforced_reads in (((), 1), ((("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", 0.0),), 4)):
        sim = make_sim(fleet_from_yaml("gpus: [{model: H200-141GB-HBM3e}]"))
        config = replace(FAST, slow_fields_interval_seconds=10.0, field_intervals=intervals)
        poller = make_poller(sim, config)
        snaps = [poller.sweep() for _ in range(sweeps)]
        assert sim.calls["nvmlDeviceGetEnforcedPowerLimit"] == enforced_reads, intervals
        assert sim.calls["nvmlDeviceGetPowerManagementLimit"] == 1
        for snap in snaps:
            values = snap.gpus[0].readings.values
            assert values["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"] == 700_000
            assert values["DCGM_FI_DEV_POWER_MGMT_LIMIT"] == 700_000


def test_mig_instances_are_enumerated_with_profiles_and_memory(sim, make_poller):
    snap = make_poller(sim).sweep()
    gpu6 = snap.gpus[6]
    assert gpu6.identity.mig_enabled is True
    assert [(m.profile, m.gpu_instance_id) for m in gpu6.mig_instances] == [
        ("1g.10gb", 7),
        ("1g.10gb", 8),
        ("2g.20gb", 4),
        ("3g.40gb", 2),
    ]
    for inst in gpu6.mig_instances:
        assert inst.uuid.startswith("MIG-")
        assert inst.fb_used_bytes + inst.fb_free_bytes == inst.fb_total_bytes
    # Utilization does not exist on a MIG-enabled board; board values still do.
    assert gpu6.readings.gpu_util_pct is None
    assert gpu6.readings.values.get("DCGM_FI_DEV_GPU_TEMP") is not None
    # Row remapping is NOT_SUPPORTED while instances exist.
    assert gpu6.readings.values.get("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS") is None


def test_unsupported_calls_are_remembered_not_retried(make_sim, make_poller):
    sim = make_sim(
        fleet_from_yaml("""
        gpus:
          - {model: T4, count: 2}
    """)
    )
    poller = make_poller(sim)
    poller.sweep()
    first = dict(sim.calls)
    for _ in range(3):
        poller.sweep()
    # GetMigMode is NOT_SUPPORTED on T4: asked once per GPU, then never again.
    assert sim.calls["nvmlDeviceGetMigMode"] == first["nvmlDeviceGetMigMode"] == 2
    # Temperature is supported: asked every sweep.
    assert sim.calls["nvmlDeviceGetTemperature"] == 4 * 2
    snap = poller.sweep()
    assert snap.gpus[0].identity.mig_enabled is None
    values = snap.gpus[0].readings.values
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in values  # GDDR6: no memory sensor
    assert "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" not in values  # Turing
    errors = dict(snap.nvml_errors)
    assert errors[("nvmlDeviceGetMigMode", "NOT_SUPPORTED")] == 2


def test_unsupported_batched_fields_are_dropped_from_later_batches(make_sim, make_poller):
    sim = make_sim(
        fleet_from_yaml("""
        gpus: [{model: T4}]
    """)
    )
    poller = make_poller(sim)
    poller.sweep()
    requested = _spy_field_requests(sim, poller)
    assert len(requested) == 1
    assert pynvml.NVML_FI_DEV_MEMORY_TEMP not in requested[0]
    assert pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION in requested[0]


def _spy_field_requests(sim, poller) -> list[list]:
    """The id lists of every nvmlDeviceGetFieldValues call made during one sweep."""
    requested: list[list] = []
    original = sim.api.nvmlDeviceGetFieldValues

    def spy(handle, ids):
        requested.append(list(ids))
        return original(handle, ids)

    sim.api.nvmlDeviceGetFieldValues = spy
    try:
        poller.sweep()
    finally:
        sim.api.nvmlDeviceGetFieldValues = original
    return requested


def test_board_power_comes_from_the_field_batch(sim, make_poller):
    poller = make_poller(sim)
    poller.sweep()
    requests = _spy_field_requests(sim, poller)
    assert len(requests) == 8 and all(POWER_AVERAGE in r and POWER_INSTANT in r for r in requests)
    snap = poller.sweep()
    assert sim.calls["nvmlDeviceGetPowerUsage"] == 0
    for gpu in snap.gpus:
        assert 60_000 <= gpu.readings.power_mw <= 700_000  # milliwatts, as the getter gives


def test_ga100_power_is_the_instant_field_as_its_getter_reports(make_sim, make_poller):
    sim = make_sim(fleet_from_yaml("gpus: [{model: A100-SXM4-80GB}]"))
    poller = make_poller(sim)
    poller.sweep()
    [request] = _spy_field_requests(sim, poller)
    assert POWER_INSTANT in request and POWER_AVERAGE not in request
    power = poller.sweep().gpus[0].readings.power_mw
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert abs(power - sim.api.nvmlDeviceGetPowerUsage(handle)) < 0.05 * power


def test_power_falls_back_to_the_getter_when_the_batch_fails(sim, make_poller):
    poller = make_poller(sim)
    sim.faults.fail("nvmlDeviceGetFieldValues", pynvml.NVML_ERROR_UNKNOWN)
    snap = poller.sweep()
    assert all(g.readings.power_mw > 0 for g in snap.gpus)
    assert sim.calls["nvmlDeviceGetPowerUsage"] == len(snap.gpus)


def test_function_not_found_falls_back_to_older_calls(make_sim, make_poller):
    sim = make_sim(
        fleet_from_yaml("""
        driver_version: "470.182.03"
        gpus: [{model: T4}]
    """)
    )
    poller = make_poller(sim)
    for _ in range(3):
        snap = poller.sweep()
    r = snap.gpus[0].readings
    # No nvmlMemory_v2 before R510: v1 figures, no reservation.
    assert r.fb_total_bytes == 15360 * MIB and r.fb_reserved_bytes is None
    # No ClocksEventReasons before R535: the deprecated throttle-reasons call serves.
    assert r.clock_event_reasons is not None
    assert sim.calls["nvmlDeviceGetCurrentClocksEventReasons"] == 1
    assert sim.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3
    assert (
        dict(snap.nvml_errors)[("nvmlDeviceGetCurrentClocksEventReasons", "FUNCTION_NOT_FOUND")]
        == 1
    )


def test_lost_gpu_is_marked_down_and_others_keep_exporting(sim, make_poller):
    poller = make_poller(sim)
    poller.sweep()
    sim.lose_gpu(3)
    snap = poller.sweep()
    assert not snap.gpus[3].up and snap.gpus[3].readings is None
    assert "GPU is lost" in (snap.gpus[3].error or "")
    assert snap.gpus[3].identity.uuid == sim.gpus[3].uuid  # identity kept for its labels
    assert all(g.up for i, g in enumerate(snap.gpus) if i != 3)
    assert snap.nvml_up
    sim.restore_gpu(3)
    assert poller.sweep().gpus[3].up


def test_hanging_device_call_marks_only_that_device_stale(sim, make_poller):
    poller = make_poller(sim, replace(FAST, device_timeout_seconds=0.3))
    first = poller.sweep()
    sim.faults.hang("nvmlDeviceGetTemperature", gpu=2)
    started = time.monotonic()
    snap = poller.sweep()
    assert time.monotonic() - started < 1.0
    assert snap.gpus[2].stale
    assert snap.gpus[2].readings == first.gpus[2].readings  # last good values kept
    assert all(not g.stale and g.up for i, g in enumerate(snap.gpus) if i != 2)
    # The hung device is not asked again while its call is stuck: no thread pile-up.
    calls = sim.calls["nvmlDeviceGetTemperature"]
    poller.sweep()
    assert sim.faults.hung_calls == 1
    assert sim.calls["nvmlDeviceGetTemperature"] == calls + 7
    sim.faults.release_all()
    assert wait_for(lambda: not poller.sweep().gpus[2].stale)


def test_xid_events_reach_the_snapshot(sim, make_poller):
    poller = make_poller(sim)
    start_xid_watch(sim, poller)
    sim.inject_xid(1, 79)
    sim.inject_xid(1, 48)
    sim.inject_xid(1, 79)
    sim.inject_xid(6, 31, gpu_instance_id=8)

    def seen() -> NodeSnapshot | None:
        snap = poller.sweep()
        return (
            snap
            if dict(snap.gpus[1].xid.counts).get(79) == 2 and snap.gpus[6].instance_xids
            else None
        )

    assert wait_for(lambda: seen() is not None)
    snap = seen()
    assert snap is not None
    assert snap.gpus[1].xid.last_xid == 79
    assert dict(snap.gpus[1].xid.counts) == {48: 1, 79: 2}
    assert snap.gpus[0].xid.last_xid == 0
    assert dict(snap.gpus[6].instance_xids)[8].last_xid == 31


def test_xid_storm_keeps_memory_bounded(sim):
    from kube_gpu_exporter.exporter.nvml.xid_watcher import MAX_DISTINCT_CODES, XidBook

    book = XidBook()
    for i in range(20_000):
        book.record(sim.gpus[0].uuid, None, i % 5000)
    record = book.gpu_record(sim.gpus[0].uuid)
    assert record is not None
    assert len(record.counts) == MAX_DISTINCT_CODES
    assert sum(n for _, n in record.counts) == 20_000


def test_xid_storm_through_the_event_api_is_counted_not_logged_line_by_line(sim, caplog):
    from kube_gpu_exporter.exporter.nvml.xid_log import BURST, WINDOW_SECONDS

    clock = ManualClock()
    with poller_on(clock, sim) as poller:
        start_xid_watch_on(clock, sim, poller)
        caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.nvml.xid_watcher")
        storm = 20_000
        # As fast as the simulated driver raises them, over 8 GPUs: mostly 13, 2,000 codes.
        for n in range(storm):
            sim.inject_xid(n % 8, 13 if n % 10 else 1000 + n)

        def counted() -> int:
            snap = poller.sweep()
            return sum(n for g in snap.gpus for _, n in g.xid.counts)

        def lines() -> list[logging.LogRecord]:
            return [
                r for r in caplog.records if r.name == "kube_gpu_exporter.exporter.nvml.xid_watcher"
            ]

        # Whatever the driver's queue held is counted; what overflowed it is the driver's loss.
        assert wait_for(lambda: counted() == storm - sim.events_dropped(), timeout=20), (
            counted(),
            sim.events_dropped(),
        )
        assert counted() > storm // 10
        # Codes past MAX_DISTINCT_CODES fold into 999: memory follows codes, not events.
        assert all(len(g.xid.counts) <= 257 for g in poller.sweep().gpus)
        # The first events of the window are logged one by one; the rest wait for its end.
        assert len(lines()) == BURST
        clock.advance(WINDOW_SECONDS)
        # The next sweep's drain ends the window, with one line for the rest.
        poller.sweep()
        assert len(lines()) == BURST + 1, len(lines())
        summary = lines()[-1].getMessage()
        assert summary.startswith(f"{counted() - BURST} more XID events in the last 60s"), summary


def test_xid_log_summarises_what_it_held_back(caplog):
    from kube_gpu_exporter.exporter.nvml.xid_log import XidLog

    now = [0.0]
    logger = logging.getLogger("test.xid")
    xid_log = XidLog(logger, window_seconds=60, burst=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="test.xid"):
        for _ in range(5):
            xid_log.event("GPU-a", None, 79)
        xid_log.event("GPU-b", 3, 31)
        assert [r.getMessage() for r in caplog.records] == ["XID 79 on GPU-a", "XID 79 on GPU-a"]
        now[0] = 59.0
        xid_log.flush()
        assert len(caplog.records) == 2  # the window is not over
        now[0] = 61.0
        xid_log.flush()
        summary = caplog.records[-1].getMessage()
        assert summary.startswith("4 more XID events in the last 61s")
        assert "XID 79 on GPU-a x3, XID 31 on GPU-b x1" in summary
        xid_log.event("GPU-b", 3, 31)  # a new window logs at once again
        assert caplog.records[-1].getMessage() == "XID 31 on GPU-b (GPU instance 3)"
        now[0] = 200.0
        xid_log.flush()
        assert len(caplog.records) == 4  # nothing held back, no summary


def test_pcie_throughput_is_sampled_off_the_sweep(sim):
    sim.pcie_window_s = 0.02  # the real 20 ms blocking window
    config = replace(FAST, pcie_enabled=True, pcie_interval_seconds=1.0)
    # On a clock nobody moves, the sampler's only round is the one the first sweep asks for.
    with poller_on(ManualClock(), sim, config) as poller:

        def pcie_tx(snap: NodeSnapshot, index: int) -> float | None:
            readings = snap.gpus[index].readings
            assert readings is not None
            return readings.pcie_tx_kbps

        assert wait_for(lambda: pcie_tx(poller.sweep(), 0) is not None)
        calls = sim.calls["nvmlDeviceGetPcieThroughput"]
        assert calls >= 8 * 2  # both directions of every GPU, by the sampler
        started = time.monotonic()
        snap = poller.sweep()
        # 8 GPUs x 2 directions x 20 ms would be 320 ms if the sweep made these calls itself.
        assert time.monotonic() - started < 0.15
        assert sim.calls["nvmlDeviceGetPcieThroughput"] == calls
    readings = snap.gpus[0].readings
    assert readings is not None and (readings.pcie_rx_kbps or 0) > 0
    assert pcie_tx(snap, 5) == 0  # idle GPU


def test_driver_not_loaded_at_start_then_recovers(sim, make_poller):
    sim.unload_driver()
    poller = make_poller(sim)
    snap = poller.sweep()
    assert not snap.nvml_up and snap.gpus == ()
    assert dict(snap.nvml_errors)[("nvmlInit", "DRIVER_NOT_LOADED")] == 1
    sim.load_driver()
    poller.retry_init_now()
    snap = poller.sweep()
    assert snap.nvml_up and len(snap.gpus) == 8


def test_driver_missing_at_start_is_retried_with_backoff_while_metrics_serve(sim, caplog):
    sim.unload_driver()
    clock = ManualClock()
    interval = 0.25
    # Sweeps a quarter second apart; no helper thread waits on the clock beside the poller's.
    config = replace(FAST, interval_seconds=interval, xid_enabled=False, gpm_enabled=False)
    published: list[tuple[float, NodeSnapshot]] = []
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.poller")

    def init_failures(snap: NodeSnapshot) -> int:
        return dict(snap.nvml_errors).get(("nvmlInit", "DRIVER_NOT_LOADED"), 0)

    with poller_on(clock, sim, config, lambda s: published.append((clock.monotonic(), s))) as p:
        p.start()
        step_until(clock, 1, lambda: published and init_failures(published[-1][1]) >= 2)
        sim.load_driver()  # e.g. the driver container finished installing
        step_until(clock, 1, lambda: published[-1][1].nvml_up)
    assert "NVML initialised, driver 550.54.15" in caplog.text
    instants = [at - published[0][0] for at, _ in published]
    snaps = [snap for _, snap in published]
    assert len(snaps[-1].gpus) == 8
    # Still serving: every sweep is published, one an interval, with nvml_up 0 and no device
    # series until the driver is there.
    assert [s.sequence for s in snaps] == list(range(1, len(snaps) + 1))
    assert [later - earlier for earlier, later in pairwise(instants)] == pytest.approx(
        [interval] * (len(snaps) - 1)
    )
    down = snaps[: next(i for i, s in enumerate(snaps) if s.nvml_up)]
    text = render(down[-1])
    assert "kube_gpu_exporter_nvml_up 0" in text and "DCGM_FI_DEV_GPU_TEMP" not in text
    assert init_failures(down[-1]) == sim.calls["nvmlInit"] - 1  # every try but the last failed
    # The sweeps that tried nvmlInit: the first, then after a backoff of 1 s and of 2 s, not one
    # per sweep.
    tried = [
        instants[i]
        for i, snap in enumerate(snaps)
        if snap.nvml_up or init_failures(snap) > (init_failures(snaps[i - 1]) if i else 0)
    ]
    assert tried[:3] == pytest.approx([0.0, 1.0, 3.0])
    assert sim.calls["nvmlInit"] == 3
    failures = [r for r in caplog.records if "NVML initialisation failed" in r.getMessage()]
    assert len(failures) == 1 and "DRIVER_NOT_LOADED" in failures[0].getMessage()


def test_driver_reload_reinitialises_nvml(sim, make_poller):
    poller = make_poller(sim)
    assert poller.sweep().nvml_up
    sim.unload_driver()
    assert not poller.sweep().nvml_up
    sim.load_driver()
    poller.retry_init_now()
    assert poller.sweep().nvml_up


def test_driver_reloads_leak_no_threads_or_event_sets(sim):
    clock = ManualClock()
    config = replace(FAST, pcie_enabled=True, pcie_interval_seconds=0.2)
    everything = set(range(8))
    with poller_on(clock, sim, config) as poller:
        start_xid_watch_on(clock, sim, poller)

        def reload() -> None:
            sim.unload_driver()
            assert not poller.sweep().nvml_up
            sim.load_driver()
            poller.retry_init_now()
            assert poller.sweep().nvml_up
            # The XID watcher dropped its event set with the driver and registered a fresh one
            # at the end of that sweep; the PCIe and GPM samplers wait for their next round.
            assert sim.registered_gpus() == everything
            parked(clock, 2)

        reload()  # warm: helpers that start lazily are running from here on
        threads, event_sets = threading.active_count(), sim.event_sets_open()
        assert wait_for(lambda: sim.gpm_samples_allocated > 0)
        gpm_samples = sim.gpm_samples_allocated
        for _ in range(20):
            reload()
        # Buffers and event sets go with the driver; the exporter allocates fresh ones, not more.
        assert wait_for(lambda: sim.gpm_samples_allocated <= gpm_samples)
        assert wait_for(lambda: threading.active_count() <= threads), (
            threads,
            [t.name for t in threading.enumerate()],
        )
        assert sim.event_sets_open() == event_sets == 1


def test_nvlink_counters_sum_all_links(sim, make_poller):
    poller = make_poller(sim)
    snap = poller.sweep()
    gpu = sim.gpus[0]
    assert snap.gpus[0].readings.nvlink_tx_kib > 0
    # Counters only grow.
    later = poller.sweep()
    assert later.gpus[0].readings.nvlink_tx_kib >= snap.gpus[0].readings.nvlink_tx_kib
    assert gpu.model.nvlink_links == 18


def test_profile_name_from_attributes_when_the_name_has_none():
    from kube_gpu_exporter.exporter.nvml.mig_profile import (
        profile_from_attributes,
        profile_from_name,
    )

    assert profile_from_name("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert profile_from_name("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb") == "1c.3g.40gb"
    assert profile_from_name("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert profile_from_name("NVIDIA H100 80GB HBM3") is None
    h100 = 81559 * MIB
    assert profile_from_attributes(1, 1, 9984, h100) == "1g.10gb"
    assert profile_from_attributes(1, 1, 20096, h100) == "1g.20gb"
    assert profile_from_attributes(3, 3, 40448, h100) == "3g.40gb"
    assert profile_from_attributes(7, 7, 81152, h100) == "7g.80gb"
    assert profile_from_attributes(3, 1, 40448, h100) == "1c.3g.40gb"
    assert profile_from_attributes(1, 1, 4864, 40960 * MIB) == "1g.5gb"


def test_collection_interval_is_respected(sim):
    interval = 0.25
    clock = ManualClock()
    # The poller alone waits on the clock: no helper threads.
    config = CollectionConfig(
        interval_seconds=interval, pcie_enabled=False, xid_enabled=False, gpm_enabled=False
    )
    # Simulated seconds a sweep takes (its publish, here), by sequence: one shorter than the
    # interval, one longer.
    slow = {3: 0.1, 5: 0.4}
    started: list[float] = []
    snaps: list[NodeSnapshot] = []

    def publish(snap: NodeSnapshot) -> None:
        started.append(clock.monotonic())
        snaps.append(snap)
        clock.advance(slow.get(snap.sequence, 0.0))

    with poller_on(clock, sim, config, publish) as poller:
        poller.start()
        step_until(clock, 1, lambda: len(snaps) >= 8)
    assert [s.sequence for s in snaps] == list(range(1, len(snaps) + 1))
    gaps = [later - earlier for earlier, later in pairwise(started)]
    # The wait after a sweep is what is left of the interval: the next sweep starts an interval
    # after the last began, or at once when that sweep took longer; never a sweep's length
    # apart, as a busy loop would.
    assert gaps == pytest.approx(
        [max(interval, slow.get(s.sequence, 0.0)) for s in snaps[: len(gaps)]]
    )


def test_helpers_step_with_simulated_time_instead_of_threads():
    """The cluster benchmark steps simulated time: PCIe and GPM rounds then run on the caller's
    thread, one per step, and their readings reach the next sweep."""
    import threading

    from kube_gpu_exporter.exporter.poller import Poller
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
    from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
    from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
    from tests.conftest import quiet

    clock = [0.0]
    stepped = SteppedHelpers()
    with FakeNvml(quiet(default_fleet()), clock=lambda: clock[0]) as sim:
        poller = Poller(
            CollectionConfig(xid_enabled=False), lambda s: None, sim.source(), runner=stepped
        )
        try:
            for step in range(3):
                clock[0] = step * 15.0
                snap = poller.sweep()
                if step == 0:
                    assert snap.gpus[0].profiling is None
                stepped.run_once()
            names = {t.name for t in threading.enumerate()}
            assert not names & {"gpm-sampler", "pcie-sampler"}
            whole = snap.gpus[0]
            profiling = whole.profiling
            assert profiling is not None and profiling.graphics_active is not None
            assert 0 < profiling.graphics_active <= 1
            assert whole.readings is not None and whole.readings.pcie_tx_kbps is not None
        finally:
            poller.stop()

"""NVML GPM profiling metrics: the simulator's GPM against nvidia-ml-py's structs, and the
sampler that turns two samples an interval apart into DCGM_FI_PROF_* series, per GPU and per MIG
instance, skipping GPUs without GPM, never leaking a sample buffer, and never holding up a driver
reload with a round stuck in NVML.

The sampler's tests run the simulated GPUs on a ManualClock: the time between two samples is
what the test moved it by.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pynvml
import pytest

from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.gpm_sampler import GpmSampler, GpmTarget
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet
from kube_gpu_exporter.exporter.simulator.gpm_model import PIPE_MIX
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import GpuSnapshot, NodeSnapshot
from tests.conftest import FAST, fleet_from_yaml, quiet, render, wait_for
from tests.support.clock_steps import parked, step
from tests.support.stepped_node import poller_on

PCIE_RX, NVLINK_TX = "DCGM_FI_PROF_PCIE_RX_BYTES", "DCGM_FI_PROF_NVLINK_TX_BYTES"
PCIE_TX = "DCGM_FI_PROF_PCIE_TX_BYTES"
OLD_GPUS = """
    driver_version: "550.54.15"
    gpus:
      - {model: A100-SXM4-80GB}
      - {model: T4}
      - {model: L4}
"""


def stepped_sim(clock: ManualClock, fleet: FleetSpec | None = None) -> FakeNvml:
    """A simulated node whose GPUs work on `clock`."""
    return FakeNvml(quiet(fleet or default_fleet()), clock=clock.monotonic)


@pytest.fixture
def nvml(clock: ManualClock) -> Iterator[FakeNvml]:
    with stepped_sim(clock) as sim:
        sim.api.nvmlInit()
        yield sim
        sim.api.nvmlShutdown()


def targets(sim) -> list[GpmTarget]:
    return [
        GpmTarget(
            g.index,
            g.uuid,
            tuple(m.gpu_instance_id for m in g.live_instances()) if g.mig_enabled else None,
        )
        for g in sim.gpus
        if not g.lost
    ]


def sampler_for(sim) -> GpmSampler:
    sampler = GpmSampler(GuardedNvml(ErrorTally(), sim.api), interval_seconds=0.05)
    sampler.sample(targets(sim))
    return sampler


def rounds(sampler: GpmSampler, clock: ManualClock, n: int, gap: float = 0.05) -> None:
    """`n` rounds, `gap` simulated seconds apart (NVML refuses two samples of the same instant)."""
    for _ in range(n):
        sampler.sample_once()
        clock.advance(gap)


def metrics_request(first, second, metric_ids) -> pynvml.c_nvmlGpmMetricsGet_t:
    request = pynvml.c_nvmlGpmMetricsGet_t()
    request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(metric_ids)
    request.sample1, request.sample2 = first, second
    for i, metric_id in enumerate(metric_ids):
        request.metrics[i].metricId = metric_id
    return request


# ---- the simulated NVML ----


def test_support_query_follows_the_architecture(make_sim):
    sim = make_sim(fleet_from_yaml(OLD_GPUS + "      - {model: H100-80GB-HBM3}\n"))
    sim.api.nvmlInit()
    try:
        supported = [
            sim.api.nvmlGpmQueryDeviceSupport(
                sim.api.nvmlDeviceGetHandleByIndex(i)
            ).isSupportedDevice
            for i in range(len(sim.gpus))
        ]
        assert supported == [0, 0, 0, 1]  # A100, T4, L4 say no; H100 says yes
        sample = sim.api.nvmlGpmSampleAlloc()
        with pytest.raises(pynvml.NVMLError_NotSupported):
            sim.api.nvmlGpmSampleGet(sim.api.nvmlDeviceGetHandleByIndex(0), sample)
        sim.api.nvmlGpmSampleFree(sample)
    finally:
        sim.api.nvmlShutdown()


def test_drivers_before_r520_have_no_gpm(make_sim):
    sim = make_sim(
        fleet_from_yaml('driver_version: "515.65.01"\ngpus: [{model: H100-80GB-HBM3}]\n')
    )
    sim.api.nvmlInit()
    try:
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            sim.api.nvmlGpmQueryDeviceSupport(sim.api.nvmlDeviceGetHandleByIndex(0))
    finally:
        sim.api.nvmlShutdown()


def test_metrics_between_two_samples_match_the_simulated_workload(nvml, clock):
    handle = nvml.api.nvmlDeviceGetHandleByIndex(0)  # training
    first, second = nvml.api.nvmlGpmSampleAlloc(), nvml.api.nvmlGpmSampleAlloc()
    t1 = nvml.now()
    nvml.api.nvmlGpmSampleGet(handle, first)
    clock.advance(0.3)
    nvml.api.nvmlGpmSampleGet(handle, second)
    t2 = nvml.now()
    ids = [
        pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL,
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
        pynvml.NVML_GPM_METRIC_C2C_TOTAL_TX_PER_SEC,  # H100 PCIe has no C2C link
    ]
    request = nvml.api.nvmlGpmMetricsGet(metrics_request(first, second, ids))
    graphics, tensor, pcie, c2c = (request.metrics[i] for i in range(4))
    expected = 100 * sum(nvml.gpus[0].utilization(t1 + (t2 - t1) * k / 10) for k in range(11)) / 11
    assert graphics.nvmlReturn == pynvml.NVML_SUCCESS
    assert graphics.value == pytest.approx(expected, abs=2.0)
    assert tensor.value == pytest.approx(graphics.value * PIPE_MIX["training"].tensor, rel=1e-6)
    assert graphics.metricInfo.shortName == b"graphics_util" and graphics.metricInfo.unit == b"%"
    assert pcie.nvmlReturn == pynvml.NVML_SUCCESS and pcie.value > 0
    assert c2c.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    for sample in (first, second):
        nvml.api.nvmlGpmSampleFree(sample)


def test_metrics_get_refuses_what_nvml_refuses(nvml, clock):
    a, b, c = (nvml.api.nvmlGpmSampleAlloc() for _ in range(3))
    ids = [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # samples never filled
        nvml.api.nvmlGpmMetricsGet(metrics_request(a, b, ids))
    nvml.api.nvmlGpmSampleGet(nvml.api.nvmlDeviceGetHandleByIndex(0), a)
    clock.advance(0.1)
    nvml.api.nvmlGpmSampleGet(nvml.api.nvmlDeviceGetHandleByIndex(1), b)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # two different GPUs
        nvml.api.nvmlGpmMetricsGet(metrics_request(a, b, ids))
    nvml.api.nvmlGpmSampleGet(nvml.api.nvmlDeviceGetHandleByIndex(0), c)
    stale = metrics_request(a, c, ids)
    stale.version = 2
    with pytest.raises(pynvml.NVMLError) as caught:
        nvml.api.nvmlGpmMetricsGet(stale)
    assert caught.value.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    mig_handle = nvml.api.nvmlDeviceGetMigDeviceHandleByIndex(
        nvml.api.nvmlDeviceGetHandleByIndex(6), 0
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):  # MIG goes through nvmlGpmMigSampleGet
        nvml.api.nvmlGpmSampleGet(mig_handle, a)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nvml.api.nvmlGpmMigSampleGet(nvml.api.nvmlDeviceGetHandleByIndex(6), 99, a)
    for sample in (a, b, c):
        nvml.api.nvmlGpmSampleFree(sample)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # double free
        nvml.api.nvmlGpmSampleFree(a)
    assert nvml.gpm_samples_allocated == 0


# ---- the sampler ----


def test_sampler_reports_every_gpu_and_mig_instance_after_two_samples(nvml, clock):
    sampler = sampler_for(nvml)
    sampler.sample_once()
    assert sampler.latest(nvml.gpus[0].uuid) == (None, ())  # one sample is not a measurement
    clock.advance(0.05)
    rounds(sampler, clock, 2)
    for gpu in nvml.gpus:
        board, instances = sampler.latest(gpu.uuid)
        if gpu.mig_enabled:
            assert board is None
            assert [gi for gi, _ in instances] == sorted(
                m.gpu_instance_id for m in gpu.live_instances()
            )
            for _gi, readings in instances:
                assert readings.graphics_active is not None
                assert 0 <= readings.graphics_active <= 1
                assert PCIE_TX not in readings.values and NVLINK_TX not in readings.values
        else:
            assert instances == ()
            assert board is not None
            assert board.graphics_active is not None and PCIE_RX in board.values
            assert 0 <= board.graphics_active <= 1 and board.values[PCIE_RX] >= 0
            assert NVLINK_TX in board.values
    idle = sampler.latest(nvml.gpus[5].uuid)[0]
    assert idle is not None
    assert idle.graphics_active == 0 and idle.values["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == 0
    busy = sampler.latest(nvml.gpus[0].uuid)[0]
    assert busy is not None and busy.graphics_active is not None and busy.sm_active is not None
    assert busy.graphics_active > 0.5 and busy.sm_active <= busy.graphics_active
    assert sampler.last_success
    sampler.stop()


def test_mig_instance_activity_follows_its_own_workload(nvml, clock):
    sampler = sampler_for(nvml)
    rounds(sampler, clock, 3, gap=0.2)
    gpu = nvml.gpus[6]
    # The last two samples were 0.4 s and 0.2 s ago: the readings are that window's.
    start, end = nvml.now() - 0.4, nvml.now() - 0.2
    for gi, readings in sampler.latest(gpu.uuid)[1]:
        [instance] = [m for m in gpu.live_instances() if m.gpu_instance_id == gi]
        expected = (
            sum(
                gpu.instance_utilization(instance, start + (end - start) * k / 10)
                for k in range(11)
            )
            / 11
        )
        assert readings.graphics_active == pytest.approx(expected, abs=0.02)
    sampler.stop()


def test_buffers_are_allocated_once_and_freed_on_loss_and_stop(nvml, clock):
    sampler = sampler_for(nvml)
    entities = sum(len(g.live_instances()) if g.mig_enabled else 1 for g in nvml.gpus)
    rounds(sampler, clock, 2)
    assert sampler.buffers_allocated == nvml.gpm_samples_allocated == 2 * entities
    rounds(sampler, clock, 20, gap=0.001)  # a short soak: the same buffers, refilled
    assert sampler.last_success
    assert nvml.gpm_samples_allocated == 2 * entities
    assert nvml.calls["nvmlGpmSampleAlloc"] == 2 * entities
    nvml.lose_gpu(0)
    sampler.sample_once()  # still a target this round: its sample fails with GPU_IS_LOST
    assert nvml.gpm_samples_allocated == 2 * (entities - 1)
    assert not sampler.last_success
    clock.advance(0.05)
    sampler.sample(targets(nvml))  # the poller drops lost GPUs from the targets
    sampler.sample_once()
    assert sampler.last_success and sampler.latest(nvml.gpus[0].uuid) == (None, ())
    nvml.restore_gpu(0)
    sampler.sample(targets(nvml))
    clock.advance(0.05)
    rounds(sampler, clock, 2)
    assert nvml.gpm_samples_allocated == 2 * entities
    sampler.stop()
    assert nvml.gpm_samples_allocated == 0


def test_gpus_without_gpm_are_asked_once_and_skipped(clock):
    with stepped_sim(clock, fleet_from_yaml(OLD_GPUS)) as sim:
        sim.api.nvmlInit()
        try:
            sampler = sampler_for(sim)
            rounds(sampler, clock, 3)
            assert all(sampler.latest(g.uuid) == (None, ()) for g in sim.gpus)
            assert sampler.last_success
            assert sim.calls["nvmlGpmQueryDeviceSupport"] == len(sim.gpus)
            assert sim.calls["nvmlGpmSampleAlloc"] == 0
            sampler.stop()
        finally:
            sim.api.nvmlShutdown()


def test_gpm_can_be_switched_off(sim, make_poller):
    poller = make_poller(sim, replace(FAST, gpm_enabled=False))
    snapshot = poller.sweep()
    text = render(snapshot)
    assert [line for line in text.splitlines() if line.startswith("DCGM_FI_PROF_")] == []
    assert "gpm" not in {c.name for c in snapshot.collectors}
    assert sim.calls["nvmlGpmSampleAlloc"] == 0


def test_a_gpu_tracked_for_the_first_time_is_sampled_at_once(nvml, clock):
    # The clock never moves here: only a round started by track() can take the sample.
    sampler = GpmSampler(GuardedNvml(ErrorTally(), nvml.api), interval_seconds=600.0, clock=clock)
    entities = sum(len(g.live_instances()) if g.mig_enabled else 1 for g in nvml.gpus)
    sampler.start()
    try:
        assert parked(clock, 1) == [600.0], "the sampler's first round never ended"
        assert sampler.rounds == 1
        assert sampler.buffers_allocated == 0  # nothing was tracked yet
        sampler.track(targets(nvml))
        assert wait_for(lambda: sampler.rounds == 2), "tracking new GPUs did not start a round"
        assert parked(clock, 1) == [600.0]  # the interval starts again from that round
        assert sampler.buffers_allocated == 2 * entities
        assert nvml.calls["nvmlGpmSampleGet"] + nvml.calls["nvmlGpmMigSampleGet"] == entities
    finally:
        sampler.stop()


def test_profiling_is_in_the_second_sweep_after_the_gpus_are_known(clock):
    snapshots: list[NodeSnapshot] = []
    # XIDs off: the poller and the GPM sampler are the only threads that wait on the clock.
    config = replace(FAST, interval_seconds=1.0, xid_enabled=False)
    with stepped_sim(clock) as sim, poller_on(clock, sim, config, snapshots.append) as poller:
        poller.start()
        # Sweep 1 finds the GPUs and the first GPM sample follows at once; then both wait an
        # interval.
        assert wait_for(lambda: sim.calls["nvmlGpmSampleGet"] > 0), "no round for the GPUs"
        assert parked(clock, 2) == [1.0, 1.0]
        assert [s.sequence for s in snapshots] == [1]
        assert snapshots[0].gpus[0].profiling is None
        # The second sample comes one interval later, as sweep 2 begins: which of the two goes
        # first is the scheduler's choice, so sweep 3 is the first sure to show values.
        assert step(clock, 2) == 1.0
        assert step(clock, 2) == 1.0
    assert [s.sequence for s in snapshots] == [1, 2, 3]
    assert snapshots[2].gpus[0].profiling is not None
    assert all(g.profiling or g.instance_profiling for g in snapshots[2].gpus)


# ---- a GPM round stuck in NVML must not hold up a driver reload ----
#
# `GpmSampler.invalidate()` used to take the lock the round holds across every GPM call, so one
# hung `nvmlGpmSampleGet` stalled the poller's sweep that found the driver gone, and every sweep
# after it. The round here is really stuck: a simulated GPM call blocks on the simulator's hang
# Event, on a thread of its own, while the test unloads and reloads the simulated driver.

# A sweep or round that has not returned by then is hung: each takes milliseconds here.
HANG_S = 5.0
GPM_CALLS = ("nvmlGpmSampleAlloc", "nvmlGpmSampleGet", "nvmlGpmMigSampleGet", "nvmlGpmMetricsGet")


def _profiled(gpu: GpuSnapshot) -> bool:
    return gpu.profiling is not None or gpu.instance_profiling != ()


def _gpm_ok(snapshot: NodeSnapshot) -> bool:
    [gpm] = [c for c in snapshot.collectors if c.name == "gpm"]
    return gpm.success


def _timed_sweep(poller: Poller, sim: FakeNvml) -> tuple[NodeSnapshot | None, float]:
    """(the sweep, its seconds), or (None, HANG_S) when it did not return in time; the hung GPM
    call is then released so that a failing run unwinds."""
    done: list[NodeSnapshot] = []
    started = time.monotonic()
    thread = threading.Thread(target=lambda: done.append(poller.sweep()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    elapsed = time.monotonic() - started
    if thread.is_alive():
        sim.faults.release_all()
        thread.join(HANG_S)
        return None, elapsed
    return done[0], elapsed


@pytest.fixture
def stepped() -> SteppedHelpers:
    return SteppedHelpers()


@pytest.fixture
def poller(sim: FakeNvml, stepped: SteppedHelpers) -> Iterator[Poller]:
    # GPM alone, without helper threads: the test runs each round on a thread it controls, so
    # that it knows which round published what.
    config = replace(FAST, xid_enabled=False, pcie_enabled=False, gpm_enabled=True)
    poller = Poller(config, lambda s: None, sim.source(), workers=8, runner=stepped)
    yield poller
    sim.faults.release_all()
    poller.stop(timeout=2.0)


def test_a_driver_reload_does_not_wait_for_a_stuck_gpm_round_and_its_late_results_are_dropped(
    sim: FakeNvml, poller: Poller, stepped: SteppedHelpers
) -> None:
    poller.sweep()
    stepped.run_once()
    stepped.run_once()  # two samples per entity: the first readings
    before = poller.sweep()
    assert all(_profiled(g) for g in before.gpus) and _gpm_ok(before)
    entities = sum(len(g.live_instances()) if g.mig_enabled else 1 for g in sim.gpus)
    assert sim.gpm_samples_allocated == 2 * entities

    # The round's last GPU hangs, after it has read all the others from the driver in use.
    last = sim.gpus[-1]
    sim.faults.hang("nvmlGpmMigSampleGet" if last.mig_enabled else "nvmlGpmSampleGet", last.index)
    stuck = threading.Thread(target=stepped.run_once, name="stuck-gpm-round", daemon=True)
    stuck.start()
    assert wait_for(lambda: sim.faults.hung_calls > 0, HANG_S, step=0.001), (
        "the GPM round never reached the hung call"
    )

    sim.unload_driver()
    unloaded, seconds = _timed_sweep(poller, sim)
    assert unloaded is not None, "the sweep that found the driver gone waited on the GPM round"
    assert seconds < 1.0, seconds
    assert not unloaded.nvml_up and not _gpm_ok(unloaded)

    sim.load_driver()
    poller.retry_init_now()
    reloaded, _ = _timed_sweep(poller, sim)
    assert reloaded is not None and reloaded.nvml_up and all(g.up for g in reloaded.gpus)
    # Nothing from the old driver is shown as current, and no round has read the new one.
    assert not any(_profiled(g) for g in reloaded.gpus)
    assert not _gpm_ok(reloaded)

    calls_before_release = {name: sim.calls[name] for name in GPM_CALLS}
    sim.faults.release_all()
    stuck.join(HANG_S)
    assert not stuck.is_alive()
    # The superseded round stopped there: its buffers went with the old library, so none of them
    # reached the new one, and what it read of GPUs 0-6 before it hung is dropped.
    assert {name: sim.calls[name] for name in GPM_CALLS} == calls_before_release
    late = poller.sweep()
    assert not any(_profiled(g) for g in late.gpus), "the stuck round's results were published"
    assert not _gpm_ok(late)

    # The new driver's rounds take over with fresh buffers, as many as before.
    stepped.run_once()
    stepped.run_once()
    after = poller.sweep()
    assert all(_profiled(g) for g in after.gpus) and _gpm_ok(after)
    assert sim.gpm_samples_allocated == 2 * entities

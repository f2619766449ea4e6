"""NVML GPM profiling metrics: the simulator's GPM against nvidia-ml-py's structs, and the
sampler that turns two samples an interval apart into DCGM_FI_PROF_* series, per GPU and per MIG
instance, skipping GPUs without GPM and never leaking a sample buffer."""

from __future__ import annotations

import time
from dataclasses import replace

import pynvml
import pytest

from exporter.nvml.error_tally import ErrorTally
from exporter.nvml.gpm_sampler import GpmSampler, GpmTarget
from exporter.nvml.guarded_calls import GuardedNvml
from exporter.simulator.gpm_model import PIPE_MIX
from exporter.snapshot import NodeSnapshot
from tests.conftest import FAST, fleet_from_yaml, render, unexpected_lint_findings, wait_for

OLD_GPUS = """
    driver_version: "550.54.15"
    gpus:
      - {model: A100-SXM4-80GB}
      - {model: T4}
      - {model: L4}
"""


@pytest.fixture
def nvml(sim):
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


def rounds(sampler: GpmSampler, n: int, gap: float = 0.05) -> None:
    for _ in range(n):
        sampler.sample_once()
        time.sleep(gap)


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


def test_metrics_between_two_samples_match_the_simulated_workload(nvml):
    handle = nvml.api.nvmlDeviceGetHandleByIndex(0)  # training
    first, second = nvml.api.nvmlGpmSampleAlloc(), nvml.api.nvmlGpmSampleAlloc()
    t1 = nvml.now()
    nvml.api.nvmlGpmSampleGet(handle, first)
    time.sleep(0.3)
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


def test_metrics_get_refuses_what_nvml_refuses(nvml):
    a, b, c = (nvml.api.nvmlGpmSampleAlloc() for _ in range(3))
    ids = [pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # samples never filled
        nvml.api.nvmlGpmMetricsGet(metrics_request(a, b, ids))
    nvml.api.nvmlGpmSampleGet(nvml.api.nvmlDeviceGetHandleByIndex(0), a)
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


def test_sampler_reports_every_gpu_and_mig_instance_after_two_samples(nvml):
    sampler = sampler_for(nvml)
    sampler.sample_once()
    assert sampler.latest(nvml.gpus[0].uuid) == (None, ())  # one sample is not a measurement
    rounds(sampler, 2)
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
                assert readings.pcie_tx_bytes is None and readings.nvlink_tx_bytes is None
        else:
            assert instances == ()
            assert board is not None
            assert board.graphics_active is not None and board.pcie_rx_bytes is not None
            assert 0 <= board.graphics_active <= 1 and board.pcie_rx_bytes >= 0
            assert board.nvlink_tx_bytes is not None
    idle = sampler.latest(nvml.gpus[5].uuid)[0]
    assert idle is not None
    assert idle.graphics_active == 0 and idle.tensor_active == 0
    busy = sampler.latest(nvml.gpus[0].uuid)[0]
    assert busy is not None and busy.graphics_active is not None and busy.sm_active is not None
    assert busy.graphics_active > 0.5 and busy.sm_active <= busy.graphics_active
    assert sampler.last_success
    sampler.stop()


def test_mig_instance_activity_follows_its_own_workload(nvml):
    sampler = sampler_for(nvml)
    rounds(sampler, 3, gap=0.2)
    gpu = nvml.gpus[6]
    now = nvml.now()
    for gi, readings in sampler.latest(gpu.uuid)[1]:
        [instance] = [m for m in gpu.live_instances() if m.gpu_instance_id == gi]
        assert readings.graphics_active == pytest.approx(
            gpu.instance_utilization(instance, now - 0.1), abs=0.1
        )
    sampler.stop()


def test_buffers_are_allocated_once_and_freed_on_loss_and_stop(nvml):
    sampler = sampler_for(nvml)
    entities = sum(len(g.live_instances()) if g.mig_enabled else 1 for g in nvml.gpus)
    rounds(sampler, 2)
    assert sampler.buffers_allocated == nvml.gpm_samples_allocated == 2 * entities
    rounds(sampler, 50, gap=0.0)  # a short soak: the same buffers, refilled
    assert nvml.gpm_samples_allocated == 2 * entities
    assert nvml.calls["nvmlGpmSampleAlloc"] == 2 * entities
    nvml.lose_gpu(0)
    sampler.sample_once()  # still a target this round: its sample fails with GPU_IS_LOST
    assert nvml.gpm_samples_allocated == 2 * (entities - 1)
    assert not sampler.last_success
    sampler.sample(targets(nvml))  # the poller drops lost GPUs from the targets
    sampler.sample_once()
    assert sampler.last_success and sampler.latest(nvml.gpus[0].uuid) == (None, ())
    nvml.restore_gpu(0)
    sampler.sample(targets(nvml))
    rounds(sampler, 2)
    assert nvml.gpm_samples_allocated == 2 * entities
    sampler.stop()
    assert nvml.gpm_samples_allocated == 0


def test_gpus_without_gpm_are_asked_once_and_skipped(make_sim):
    sim = make_sim(fleet_from_yaml(OLD_GPUS))
    sim.api.nvmlInit()
    try:
        sampler = sampler_for(sim)
        rounds(sampler, 3)
        assert all(sampler.latest(g.uuid) == (None, ()) for g in sim.gpus)
        assert sampler.last_success
        assert sim.calls["nvmlGpmQueryDeviceSupport"] == len(sim.gpus)
        assert sim.calls["nvmlGpmSampleAlloc"] == 0
        sampler.stop()
    finally:
        sim.api.nvmlShutdown()


def test_poller_exports_profiling_metrics_for_whole_gpus_and_mig_instances(sim, make_poller):
    poller = make_poller(sim, replace(FAST, interval_seconds=0.1))
    poller.sweep()  # initialises NVML and starts the GPM thread
    deadline = time.monotonic() + 10
    while True:
        snapshot = poller.sweep()
        if all(g.profiling or g.instance_profiling for g in snapshot.gpus):
            break
        assert time.monotonic() < deadline, "no GPM readings after 10 s"
        time.sleep(0.1)
    text = render(snapshot)
    assert 'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="0",' in text
    assert 'DCGM_FI_PROF_SM_ACTIVE{gpu="6",' in text and 'GPU_I_ID="7"' in text
    assert 'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",' in text
    assert 'DCGM_FI_PROF_PCIE_TX_BYTES{gpu="6",' not in text  # board-level only
    assert 'kube_gpu_exporter_collector_success{collector="gpm"} 1' in text
    assert unexpected_lint_findings(text) == []


def test_gpm_can_be_switched_off(sim, make_poller):
    poller = make_poller(sim, replace(FAST, gpm_enabled=False))
    snapshot = poller.sweep()
    text = render(snapshot)
    assert [line for line in text.splitlines() if line.startswith("DCGM_FI_PROF_")] == []
    assert "gpm" not in {c.name for c in snapshot.collectors}
    assert sim.calls["nvmlGpmSampleAlloc"] == 0


def test_a_gpu_tracked_for_the_first_time_is_sampled_at_once(nvml):
    # An interval longer than the test: only a round started by track() can take the sample.
    sampler = GpmSampler(GuardedNvml(ErrorTally(), nvml.api), interval_seconds=600.0)
    entities = sum(len(g.live_instances()) if g.mig_enabled else 1 for g in nvml.gpus)
    sampler.start()
    try:
        assert wait_for(lambda: sampler.rounds == 1), "the sampler's first round never ran"
        assert sampler.buffers_allocated == 0  # nothing was tracked yet
        sampler.track(targets(nvml))
        assert wait_for(lambda: sampler.rounds == 2), "tracking new GPUs did not start a round"
        assert sampler.buffers_allocated == 2 * entities
        assert nvml.calls["nvmlGpmSampleGet"] + nvml.calls["nvmlGpmMigSampleGet"] == entities
    finally:
        sampler.stop()


def test_profiling_is_in_the_second_sweep_after_the_gpus_are_known(sim, make_poller):
    snapshots: list[NodeSnapshot] = []
    poller = make_poller(sim, replace(FAST, interval_seconds=1.0), publish=snapshots.append)
    poller.start()

    def first_with_profiling() -> NodeSnapshot | None:
        return next((s for s in list(snapshots) if s.gpus and s.gpus[0].profiling), None)

    assert wait_for(lambda: first_with_profiling() is not None, timeout=10.0)
    first = first_with_profiling()
    assert first is not None
    # Sweep 1 finds the GPUs and the first GPM sample follows at once; the second comes one
    # interval later, just after sweep 2 began, so sweep 3 is the first that can show values.
    assert snapshots[0].sequence == 1 and snapshots[0].gpus[0].profiling is None
    assert first.sequence <= 3, [s.sequence for s in snapshots]

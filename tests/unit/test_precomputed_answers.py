"""The benchmark's precomputed simulated NVML: the same answers as the live one, replayed in turn,
so an exporter's own cost can be measured without the simulator's."""

from __future__ import annotations

import pynvml
import pytest

from benchmarks.precomputed_answers import (
    CYCLE,
    SimulatorCpu,
    precomputed_api,
    simulator_cpu_seconds,
)
from kube_gpu_exporter.exporter.config import CollectionConfig, LabelConfig
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from tests.conftest import quiet, render_body
from tests.unit.test_gpm import metrics_request


@pytest.fixture
def replayed():
    """The simulator, and the replaying api object over it."""
    with FakeNvml(quiet(default_fleet())) as sim:
        api = precomputed_api(sim)
        api.nvmlInit()
        yield sim, api
        api.nvmlShutdown()


def temperatures(api, rounds: int) -> list[int]:
    handle = api.nvmlDeviceGetHandleByIndex(0)
    return [api.nvmlDeviceGetTemperature(handle, 0) for _ in range(rounds)]


def test_the_first_answers_are_computed_then_replayed_in_turn(replayed):
    sim, api = replayed
    before = sim.calls["nvmlDeviceGetTemperature"]
    seen = temperatures(api, 3 * CYCLE)
    # Computed (and counted by the simulator) only for the first CYCLE calls.
    assert sim.calls["nvmlDeviceGetTemperature"] - before == CYCLE
    assert seen[CYCLE:] == seen[:CYCLE] * 2


def test_each_argument_set_has_its_own_answers(replayed):
    sim, api = replayed
    handles = [api.nvmlDeviceGetHandleByIndex(i) for i in range(len(sim.gpus))]
    uuids = [api.nvmlDeviceGetUUID(h) for h in handles for _ in range(CYCLE + 1)]
    assert uuids == [g.uuid for g in sim.gpus for _ in range(CYCLE + 1)]
    # A fresh handle object for the same GPU is the same argument.
    again = api.nvmlDeviceGetHandleByIndex(3)
    assert api.nvmlDeviceGetUUID(again) == sim.gpus[3].uuid


def test_errors_are_replayed_as_fresh_exceptions(replayed):
    sim, api = replayed
    mig_parent = next(i for i, g in enumerate(sim.gpus) if g.mig_enabled)
    handle = api.nvmlDeviceGetHandleByIndex(mig_parent)
    raised = []
    for _ in range(2 * CYCLE):
        with pytest.raises(pynvml.NVMLError_NotSupported) as info:
            api.nvmlDeviceGetUtilizationRates(handle)
        raised.append(info.value)
    assert len({id(e) for e in raised[CYCLE:]}) == CYCLE  # never one object raised twice


def test_stateful_calls_pass_through(replayed):
    _, api = replayed
    first = api.nvmlGpmSampleAlloc()
    second = api.nvmlGpmSampleAlloc()
    assert first.contents is not None and bytes(first) != bytes(second)
    api.nvmlGpmSampleFree(first)
    api.nvmlGpmSampleFree(second)


def test_the_exporter_sees_the_same_node_as_on_the_live_simulator(replayed):
    """Same families, same devices, same label sets: only the cost differs. (The sweep that
    replays the first answer again sees NVLink's counters go back and has no rate: CYCLE + 3
    sweeps end two answers past it.)"""
    labels = LabelConfig(node_name="node-a")
    _, api = replayed
    replayed_series = _series(render_body(_swept(NvmlSource(api), CYCLE + 3), labels))
    with FakeNvml(quiet(default_fleet())) as live:
        live_series = _series(render_body(_swept(live.source(), CYCLE + 3), labels))
    assert replayed_series == live_series
    assert any(name.startswith("DCGM_FI_PROF_") for name, _ in replayed_series)  # GPM replayed


def _swept(nvml: NvmlSource, rounds: int):
    stepped = SteppedHelpers()
    poller = Poller(CollectionConfig(), lambda _: None, nvml, runner=stepped)
    try:
        for _ in range(rounds):
            stepped.run_once()
            snapshot = poller.sweep()
    finally:
        poller.stop()
    return snapshot


def _series(text: str) -> set[tuple[str, str]]:
    """(name, labels) of every sample, values left out."""
    out = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head = line.rsplit(" ", 1)[0]
            name, _, labels = head.partition("{")
            if not name.startswith("kube_gpu_exporter_collector_duration"):
                out.add((name, labels))
    return out


def test_the_models_cpu_is_counted_while_learning_and_not_for_replays(tmp_path):
    shared = tmp_path / "simulator-cpu"
    simulator_cpu = SimulatorCpu(str(shared))
    assert simulator_cpu_seconds(shared) == 0.0
    with FakeNvml(quiet(default_fleet())) as sim:
        api = precomputed_api(sim, simulator_cpu)
        api.nvmlInit()
        handle = api.nvmlDeviceGetHandleByIndex(0)
        fields = [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_MEMORY_TEMP] * 40
        for _ in range(CYCLE):
            api.nvmlDeviceGetFieldValues(handle, fields)
        learnt = simulator_cpu.seconds
        assert learnt > 0
        # What another process reads is the same total.
        assert simulator_cpu_seconds(shared) == pytest.approx(learnt)
        for _ in range(5 * CYCLE):
            api.nvmlDeviceGetFieldValues(handle, fields)
        # Replays reach no model: the total stands (the handle and init calls were learnt above).
        assert simulator_cpu.seconds == learnt
        api.nvmlShutdown()


def test_a_participant_that_has_written_nothing_has_spent_nothing(tmp_path):
    assert simulator_cpu_seconds(tmp_path / "absent") == 0.0
    (tmp_path / "short").write_bytes(b"\x01")
    assert simulator_cpu_seconds(tmp_path / "short") == 0.0


def test_gpm_metrics_are_replayed_whole_into_any_request(replayed):
    sim, api = replayed
    handle = api.nvmlDeviceGetHandleByIndex(0)
    older, newer = api.nvmlGpmSampleAlloc(), api.nvmlGpmSampleAlloc()
    ids = (pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, pynvml.NVML_GPM_METRIC_SM_OCCUPANCY)

    def metrics() -> list[tuple[int, int, float, bytes | None]]:
        # A fresh request each time: nothing a replay leaves out can be left over from before.
        request = metrics_request(older, newer, ids)
        api.nvmlGpmMetricsGet(request)
        return [
            (m.metricId, m.nvmlReturn, m.value, m.metricInfo.shortName)
            for m in (request.metrics[i] for i in range(len(ids)))
        ]

    learnt = []
    for _ in range(CYCLE):
        api.nvmlGpmSampleGet(handle, older)
        api.nvmlGpmSampleGet(handle, newer)
        learnt.append(metrics())
    computed = sim.calls["nvmlGpmMetricsGet"]
    assert all(status == pynvml.NVML_SUCCESS and name for _, status, _, name in learnt[0])
    assert [metrics() for _ in range(CYCLE)] == learnt
    assert sim.calls["nvmlGpmMetricsGet"] == computed  # replayed, not computed
    api.nvmlGpmSampleFree(older)
    api.nvmlGpmSampleFree(newer)

"""The benchmark's precomputed simulated NVML: the same answers as the live one, replayed in turn,
so an exporter's own cost can be measured without the simulator's."""

from __future__ import annotations

import pynvml
import pytest

from exporter.config import CollectionConfig, LabelConfig
from exporter.exposition.renderer import Renderer
from exporter.poller import Poller
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet
from exporter.simulator.precomputed_answers import CYCLE
from tests.conftest import quiet


@pytest.fixture
def replayed():
    sim = FakeNvml(quiet(default_fleet()), precomputed=True).install()
    pynvml.nvmlInit()
    yield sim
    pynvml.nvmlShutdown()
    sim.uninstall()


def temperatures(rounds: int) -> list[int]:
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return [pynvml.nvmlDeviceGetTemperature(handle, 0) for _ in range(rounds)]


def test_the_first_answers_are_computed_then_replayed_in_turn(replayed):
    before = replayed.calls["nvmlDeviceGetTemperature"]
    seen = temperatures(3 * CYCLE)
    # Computed (and counted by the simulator) only for the first CYCLE calls.
    assert replayed.calls["nvmlDeviceGetTemperature"] - before == CYCLE
    assert seen[CYCLE:] == seen[:CYCLE] * 2


def test_each_argument_set_has_its_own_answers(replayed):
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(len(replayed.gpus))]
    uuids = [pynvml.nvmlDeviceGetUUID(h) for h in handles for _ in range(CYCLE + 1)]
    assert uuids == [g.uuid for g in replayed.gpus for _ in range(CYCLE + 1)]
    # A fresh handle object for the same GPU is the same argument.
    again = pynvml.nvmlDeviceGetHandleByIndex(3)
    assert pynvml.nvmlDeviceGetUUID(again) == replayed.gpus[3].uuid


def test_errors_are_replayed_as_fresh_exceptions(replayed):
    mig_parent = next(i for i, g in enumerate(replayed.gpus) if g.mig_enabled)
    handle = pynvml.nvmlDeviceGetHandleByIndex(mig_parent)
    raised = []
    for _ in range(2 * CYCLE):
        with pytest.raises(pynvml.NVMLError_NotSupported) as info:
            pynvml.nvmlDeviceGetUtilizationRates(handle)
        raised.append(info.value)
    assert len({id(e) for e in raised[CYCLE:]}) == CYCLE  # never one object raised twice


def test_stateful_calls_pass_through(replayed):
    first = pynvml.nvmlGpmSampleAlloc()
    second = pynvml.nvmlGpmSampleAlloc()
    assert first.contents is not None and bytes(first) != bytes(second)
    pynvml.nvmlGpmSampleFree(first)
    pynvml.nvmlGpmSampleFree(second)


def test_the_exporter_sees_the_same_node_as_on_the_live_simulator(replayed):
    """Same families, same devices, same label sets: only the cost differs. (The sweep that
    replays the first answer again sees NVLink's counters go back and has no rate: CYCLE + 3
    sweeps end two answers past it.)"""
    renderer = Renderer(LabelConfig(node_name="node-a"))
    replayed_series = _series(renderer.render_body(_swept(CYCLE + 3)))
    pynvml.nvmlShutdown()
    replayed.uninstall()
    live = FakeNvml(quiet(default_fleet())).install()
    try:
        live_series = _series(renderer.render_body(_swept(CYCLE + 3)))
    finally:
        live.uninstall()
        replayed.install()
        pynvml.nvmlInit()
    assert replayed_series == live_series
    assert any(name.startswith("DCGM_FI_PROF_") for name, _ in replayed_series)  # GPM replayed


def _swept(rounds: int):
    poller = Poller(CollectionConfig(), lambda _: None, helper_threads=False)
    try:
        for _ in range(rounds):
            poller.run_helpers_once()
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

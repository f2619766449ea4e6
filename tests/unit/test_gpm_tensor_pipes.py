"""The per-pipe tensor activity DCGM calls PIPE_TENSOR_{HMMA,IMMA,DFMA}_ACTIVE, from NVML GPM's
HMMA, IMMA and DFMA tensor metrics, per GPU and per MIG instance: ratios 0-1, each at most the
"any tensor" activity, and shared out by the kind of work the simulated GPU does."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator import gpm_model
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.gpm_model import PIPE_MIX
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot, ProfilingReadings
from tests.conftest import quiet

STEP_S = 5.0
TENSOR = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
HMMA, IMMA, DFMA = PIPES = (
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
)
# The default node: 0-2 training, 3-4 inference, 5 idle, 6 MIG inference, 7 MIG batch.
TRAINING, INFERENCE, IDLE, MIG_INFERENCE, MIG_BATCH = 0, 3, 5, 6, 7


def profiled(snapshot: NodeSnapshot) -> Iterator[tuple[int, int | None, ProfilingReadings]]:
    """(GPU index, GPU-instance id or None, readings) for every entity GPM measured."""
    for gpu in snapshot.gpus:
        if gpu.profiling is not None:
            yield gpu.identity.index, None, gpu.profiling
        for gi, readings in gpu.instance_profiling:
            yield gpu.identity.index, gi, readings


def measure() -> NodeSnapshot:
    """A sweep after two GPM rounds STEP_S apart, on a clock the test moves."""
    clock = [0.0]
    stepped = SteppedHelpers()
    with FakeNvml(quiet(default_fleet()), clock=lambda: clock[0]) as sim:
        poller = Poller(
            CollectionConfig(xid_enabled=False, pcie_enabled=False),
            lambda snapshot: None,
            sim.source(),
            runner=stepped,
        )
        try:
            for step in range(2):
                clock[0] = step * STEP_S
                poller.sweep()
                stepped.run_once()
            return poller.sweep()
        finally:
            poller.stop()


@pytest.fixture
def measured() -> NodeSnapshot:
    return measure()


def test_every_gpm_entity_reports_the_three_pipes_as_ratios(measured):
    entities = list(profiled(measured))
    mig_instances = sum(len(g.mig_instances) for g in measured.gpus)
    assert len(entities) == 6 + mig_instances  # six whole GPUs, and every MIG instance
    for index, gi, readings in entities:
        assert TENSOR in readings.values, (index, gi)
        for pipe in PIPES:
            value = readings.values.get(pipe)
            assert value is not None, (index, gi, pipe)
            # A pipe is one kind of tensor work: never more than "any tensor".
            assert 0.0 <= value <= readings.values[TENSOR] <= 1.0, (index, gi, pipe)


def test_training_is_mostly_hmma_with_no_integer_or_fp64_tensor_work(measured):
    board = measured.gpus[TRAINING].profiling
    mix = PIPE_MIX["training"]
    assert board.values[HMMA] > 0.3
    assert board.values[HMMA] == pytest.approx(
        board.values[TENSOR] * mix.hmma / mix.tensor, rel=1e-9
    )
    assert board.values[HMMA] >= 0.8 * board.values[TENSOR]
    assert board.values[IMMA] == 0.0 and board.values[DFMA] == 0.0


def test_inference_adds_imma_and_batch_work_adds_dfma(measured):
    inference = measured.gpus[INFERENCE].profiling
    assert inference.values[IMMA] > 0 and inference.values[DFMA] == 0.0
    assert inference.values[HMMA] + inference.values[IMMA] <= (inference.values[TENSOR] + 1e-12)
    for _gi, readings in measured.gpus[MIG_INFERENCE].instance_profiling:
        assert readings.values[IMMA] > 0 and readings.values[DFMA] == 0.0
    batch = measured.gpus[MIG_BATCH].instance_profiling
    assert batch and all(r.values[DFMA] > 0 for _gi, r in batch)
    assert all(r.values[IMMA] == 0.0 for _gi, r in batch)


def test_an_idle_gpu_has_every_pipe_at_zero(measured):
    idle = measured.gpus[IDLE].profiling
    assert idle.values[TENSOR] == 0.0
    assert [idle.values[pipe] for pipe in PIPES] == [0.0, 0.0, 0.0]


def test_a_pipe_nvml_does_not_measure_is_left_out_not_zero(monkeypatch):
    monkeypatch.delitem(gpm_model._ACTIVITY, pynvml.NVML_GPM_METRIC_HMMA_TENSOR_UTIL)
    board = measure().gpus[TRAINING].profiling
    assert board is not None and HMMA not in board.values
    assert TENSOR in board.values
    assert board.values[TENSOR] > 0 and board.values[IMMA] == 0.0

"""The poller drives its helpers only through the PollerHelper protocol: a helper registered into
a Poller is started once NVML is up, told the live GPUs, merged into every snapshot, reported in
`collectors`, invalidated when the driver goes and stopped with the poller."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any, ClassVar

import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.binding import NVMLError
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu, PeriodicHelper, PollerHelper
from kube_gpu_exporter.exporter.nvml.helper_registry import (
    HelperFactory,
    HelperInputs,
    build_helpers,
)
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import (
    CollectorStatus,
    GpuReadings,
    HelperParts,
    ProcessOwner,
    ProfilingReadings,
)
from tests.conftest import FAST, wait_for

# GPM off: the toy helper fills the profiling fields, and nothing else should.
CONFIG = replace(FAST, gpm_enabled=False)


def toy_value(uuid: str) -> float:
    """What the toy helper contributes for a GPU: its own for each uuid."""
    return sum(uuid.encode()) % 97 / 10


class ToyHelper:
    """Records every call the poller makes; its merged data is derived from the GPU's index."""

    collector = "toy"
    on_sweep: ClassVar[bool] = False

    def __init__(self, api: Any) -> None:
        self._api = api
        self.calls: list[str] = []
        self.nvml_up_at_start: list[bool] = []
        self.tracked: tuple[LiveGpu, ...] = ()
        self.stop_timeout: float | None = None
        self.rounds = 0

    def start(self) -> None:
        self.calls.append("start")
        try:
            self._api.nvmlDeviceGetCount()
        except NVMLError:
            self.nvml_up_at_start.append(False)
        else:
            self.nvml_up_at_start.append(True)

    def stop(self, timeout: float = 5.0) -> None:
        self.calls.append("stop")
        self.stop_timeout = timeout

    def problem(self) -> str | None:
        return None

    def status(self) -> CollectorStatus:
        return CollectorStatus(self.collector, self.rounds % 2 == 0, 0.25 + self.rounds)

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self.tracked = tuple(gpus)

    def invalidate(self) -> None:
        self.calls.append("invalidate")

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        return {"profiling": ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=toy_value(uuid))}

    def run_once(self) -> None:
        self.rounds += 1


class SweepToyHelper(ToyHelper):
    """A helper whose round belongs to every sweep, as the XID drain's does."""

    collector = "sweep-toy"
    on_sweep: ClassVar[bool] = True

    def __init__(self, api: Any) -> None:
        super().__init__(api)
        # Per round: how many GPUs had been tracked (the sweep before it found them).
        self.tracked_at_round: list[int] = []

    def run_once(self) -> None:
        super().run_once()
        self.tracked_at_round.append(len(self.tracked))


def plus(*extra: PollerHelper) -> HelperFactory:
    """The registered helpers, then `extra`: the poller drives them all alike."""
    return lambda inputs: (*build_helpers(inputs), *extra)


def _inputs(config: CollectionConfig, source: NvmlSource) -> HelperInputs:
    tally = ErrorTally()
    return HelperInputs(config, source, GuardedNvml(tally, source.api), tally, lambda uuid: None)


@pytest.fixture
def toy(sim: FakeNvml) -> ToyHelper:
    return ToyHelper(sim.api)


@pytest.fixture
def poller(sim: FakeNvml, toy: ToyHelper) -> Iterator[Poller]:
    poller = Poller(CONFIG, lambda s: None, sim.source(), workers=8, helpers=plus(toy))
    yield poller
    poller.stop(timeout=2.0)


def test_the_registry_builds_the_enabled_helpers_in_collector_order(sim: FakeNvml) -> None:
    def names(config: CollectionConfig) -> list[str]:
        helpers = build_helpers(_inputs(config, sim.source()))
        assert all(isinstance(helper, PollerHelper) for helper in helpers)
        return [helper.collector for helper in helpers]

    assert names(CollectionConfig()) == ["xid", "pcie", "gpm"]
    assert names(CollectionConfig(xid_enabled=False)) == ["pcie", "gpm"]
    assert names(CollectionConfig(pcie_enabled=False)) == ["xid", "gpm"]
    assert names(CollectionConfig(gpm_enabled=False)) == ["xid", "pcie"]


def test_a_helper_starts_only_after_nvml_init(sim: FakeNvml, poller: Poller, toy: ToyHelper):
    sim.unload_driver()
    assert not poller.sweep().nvml_up
    assert toy.calls == []
    sim.load_driver()
    poller.retry_init_now()
    assert poller.sweep().nvml_up
    assert toy.calls == ["start"]
    assert toy.nvml_up_at_start == [True]


def test_a_helper_is_told_the_live_gpus_and_their_mig_instances(
    sim: FakeNvml, poller: Poller, toy: ToyHelper
):
    poller.sweep()
    expected = {
        g.index: (
            g.uuid,
            tuple(sorted(m.gpu_instance_id for m in g.live_instances())) if g.mig_enabled else None,
        )
        for g in sim.gpus
    }
    assert any(ids for _, ids in expected.values()), "the default fleet should have MIG GPUs"
    assert {
        g.index: (g.uuid, None if g.gpu_instance_ids is None else tuple(sorted(g.gpu_instance_ids)))
        for g in toy.tracked
    } == expected

    sim.lose_gpu(3)
    poller.sweep()
    assert sorted(g.index for g in toy.tracked) == sorted(set(expected) - {3})


def test_a_helper_is_merged_into_up_gpus_and_reported_in_collectors(
    sim: FakeNvml, poller: Poller, toy: ToyHelper
):
    sim.lose_gpu(2)
    toy.run_once()  # an odd round: the toy reports failure, and a duration of its own
    snapshot = poller.sweep()
    for gpu in snapshot.gpus:
        expected = (
            ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=toy_value(gpu.identity.uuid))
            if gpu.up
            else None
        )
        assert gpu.profiling == expected, gpu.identity.index
    assert not snapshot.gpus[2].up
    assert [c.name for c in snapshot.collectors] == ["nvml", "xid", "toy"]
    assert snapshot.collectors[-1] == CollectorStatus("toy", False, 1.25)


def test_a_driver_reload_invalidates_a_helper_and_starts_it_again(
    sim: FakeNvml, poller: Poller, toy: ToyHelper
):
    poller.sweep()
    sim.unload_driver()
    assert not poller.sweep().nvml_up
    assert toy.calls == ["start", "invalidate"]
    sim.load_driver()
    poller.retry_init_now()
    assert poller.sweep().nvml_up
    assert toy.calls == ["start", "invalidate", "start"]
    assert len(toy.tracked) == len(sim.gpus)


def test_stopping_the_poller_stops_its_helpers(sim: FakeNvml, toy: ToyHelper):
    poller = Poller(CONFIG, lambda s: None, sim.source(), workers=8, helpers=plus(toy))
    poller.sweep()
    poller.stop(timeout=1.5)
    assert toy.calls[-1] == "stop"
    # What is left of the poller's 1.5 s once its own thread has stopped: the helpers share
    # one budget with it, so that SIGTERM ends the process in time.
    assert toy.stop_timeout is not None and 1.0 < toy.stop_timeout <= 1.5


def test_a_stepped_runner_runs_helper_rounds_on_the_callers_thread(sim: FakeNvml):
    rounds, drained = ToyHelper(sim.api), SweepToyHelper(sim.api)
    before = set(threading.enumerate())
    stepped = SteppedHelpers()
    poller = Poller(
        replace(CONFIG, pcie_enabled=True),
        lambda s: None,
        sim.source(),
        workers=8,
        helpers=plus(rounds, drained),
        runner=stepped,
    )
    try:
        snapshot = poller.sweep()
        assert [c.name for c in snapshot.collectors] == [
            "nvml",
            "xid",
            "pcie",
            "toy",
            "sweep-toy",
        ]
        # No helper thread is started; a sweep runs the rounds that belong to it, the rest wait
        # for run_once.
        assert rounds.calls == [] and drained.calls == []
        assert rounds.rounds == 0 and drained.tracked_at_round == [0]
        started = {t.name for t in set(threading.enumerate()) - before}
        assert not started & {"xid-watcher", "pcie-sampler"}
        readings = snapshot.gpus[0].readings
        assert readings is not None and readings.pcie_tx_kbps is None
        stepped.run_once()
        stepped.run_once()
        assert rounds.rounds == 2
        readings = poller.sweep().gpus[0].readings
        assert readings is not None and readings.pcie_tx_kbps is not None
        # Each sweep's round came before its reads: the second saw the first sweep's GPUs.
        assert drained.tracked_at_round[-1] == len(sim.gpus)
    finally:
        poller.stop(timeout=2.0)


def test_a_threaded_runner_runs_a_sweep_helper_in_every_sweep_and_on_no_thread(sim: FakeNvml):
    drained = SweepToyHelper(sim.api)
    poller = Poller(CONFIG, lambda s: None, sim.source(), workers=8, helpers=plus(drained))
    try:
        before = {t.name for t in threading.enumerate()}
        for _ in range(3):
            poller.sweep()
        assert drained.tracked_at_round == [0, len(sim.gpus), len(sim.gpus)]
        assert "xid-watcher" not in {t.name for t in threading.enumerate()} - before
    finally:
        poller.stop(timeout=2.0)


class CountingHelper(PeriodicHelper):
    """A periodic helper whose rounds and wake-ups are only counted; no thread is started."""

    collector = "counting"

    def __init__(self) -> None:
        super().__init__(interval_seconds=600.0)
        self.wakes = 0

    def wake(self) -> None:
        self.wakes += 1
        super().wake()

    def sample_once(self) -> None:
        self.last_success = True

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        return {}


def test_a_periodic_helper_fails_until_tracked_and_after_invalidate() -> None:
    helper = CountingHelper()
    helper.run_once()  # a successful round says nothing while NVML has never been up
    assert not helper.status().success
    helper.track([LiveGpu(0, "GPU-a")])
    assert helper.status().success
    helper.invalidate()
    assert not helper.status().success
    helper.track([LiveGpu(0, "GPU-a")])
    assert helper.status().success


def test_a_periodic_helper_is_woken_only_for_gpus_it_has_not_tracked() -> None:
    helper = CountingHelper()
    a, b = LiveGpu(0, "GPU-a"), LiveGpu(1, "GPU-b", gpu_instance_ids=(1, 2))
    helper.track([a, b])
    assert helper.wakes == 1
    helper.track([a, b])
    helper.track([a])  # a GPU that left needs no early round
    assert helper.wakes == 1
    helper.track([a, b])
    helper.track([a, replace(b, gpu_instance_ids=(1, 2, 3))])  # a new MIG instance
    assert helper.wakes == 3
    helper.invalidate()  # a reloaded driver: every GPU is new again
    helper.track([a])
    assert helper.wakes == 4


class NoOwners:
    def owner(self, pid: int) -> ProcessOwner | str:
        return "not attributed in this test"

    def problem(self) -> str | None:
        return None


def test_nvml_helpers_report_failure_while_nvml_is_down_and_recover(sim: FakeNvml) -> None:
    # On a clock that never moves, no round an interval apart comes: only the NVML state and the
    # round a newly tracked GPU gets can move these statuses.
    config = replace(FAST, pcie_enabled=True, processes_enabled=True, xid_enabled=False)
    names = ("pcie", "gpm", "processes")
    poller = Poller(
        config,
        lambda s: None,
        sim.source(),
        workers=8,
        pid_owners=NoOwners(),
        clock=ManualClock(),
    )

    def statuses() -> dict[str, bool]:
        return {c.name: c.success for c in poller.sweep().collectors if c.name in names}

    try:
        sim.unload_driver()  # down from the start: the helpers were never started
        assert statuses() == dict.fromkeys(names, False)
        sim.load_driver()
        poller.retry_init_now()
        assert wait_for(lambda: all(statuses().values())), statuses()
        sim.unload_driver()
        assert statuses() == dict.fromkeys(names, False)  # at once, not a round later
        assert statuses() == dict.fromkeys(names, False)
        sim.load_driver()
        poller.retry_init_now()
        assert wait_for(lambda: all(statuses().values())), statuses()
    finally:
        poller.stop(timeout=2.0)

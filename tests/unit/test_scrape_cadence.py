"""Work timed by the scrapes: the slow fields (energy, PCIe replays, ECC, row remapping, NVLink,
the power limit) at most once per interval, in the sweep before a learnt scrape, their last
values standing in between, the other fields every sweep; GPM samples and pod-resources Lists
just before a scrape."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.exposition.scrape_schedule import ScrapeSchedule
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.nvml.device_reader import SLOW_FIELDS, DeviceReader
from kube_gpu_exporter.exporter.nvml.energy_estimate import EnergyEstimates
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.gpm_sampler import GpmSampler
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.scrape_cadence import MAX_AGE_SECONDS, ScrapeCadence, helper_cadence
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from kube_gpu_exporter.exporter.snapshot import GpuReadings
from tests.conftest import quiet, wait_for

ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# ---- The decision ----


def cadence(clock: Clock, next_scrape: Sequence[float | None]) -> ScrapeCadence:
    return ScrapeCadence(10.0, 1.0, lambda: next_scrape[0], clock)


def test_first_sweep_reads_then_not_again_within_the_interval() -> None:
    clock, scrape = Clock(), [None]
    slow = cadence(clock, scrape)
    assert slow.due("GPU-a")
    slow.done("GPU-a")
    clock.now += 9.9
    assert not slow.due("GPU-a")
    assert slow.due("GPU-b"), "each GPU keeps its own time"


def test_with_nobody_scraping_the_interval_decides() -> None:
    clock, scrape = Clock(), [None]
    slow = cadence(clock, scrape)
    slow.done("GPU-a")
    clock.now += 10.0
    assert slow.due("GPU-a")


def test_past_the_interval_it_waits_for_the_sweep_before_a_scrape() -> None:
    clock, scrape = Clock(), [4.0]
    slow = cadence(clock, scrape)
    slow.done("GPU-a")
    clock.now += 11.0
    assert not slow.due("GPU-a"), "the next scrape is 4 s away: a later sweep reads"
    scrape[0] = 0.6
    assert slow.due("GPU-a"), "a scrape comes before the next sweep"


def test_however_rare_the_scrapes_a_value_is_never_older_than_the_cap() -> None:
    clock, scrape = Clock(), [300.0]
    slow = cadence(clock, scrape)
    slow.done("GPU-a")
    clock.now += MAX_AGE_SECONDS - 0.1
    assert not slow.due("GPU-a")
    clock.now += 0.1
    assert slow.due("GPU-a")


def test_a_forgotten_gpu_is_read_at_once() -> None:
    clock, scrape = Clock(), [None]
    slow = cadence(clock, scrape)
    slow.done("GPU-a")
    slow.done("GPU-b")
    slow.forget("GPU-a")
    assert slow.due("GPU-a") and not slow.due("GPU-b")
    slow.forget(everything=True)
    assert slow.due("GPU-b")


def test_a_thread_timed_to_scrapes_sleeps_until_its_work_is_due() -> None:
    clock = Clock()
    scrape: list[float | None] = [None]
    cadence = ScrapeCadence(5.0, 2.0, lambda: scrape[0], clock)
    assert cadence.idle_seconds() == 0.0  # never done: at once
    cadence.done()
    assert cadence.idle_seconds() == 10.0  # nobody scrapes: IDLE_SECONDS
    scrape[0] = 12.0
    assert cadence.idle_seconds() == 10.0  # the lead before the scrape
    scrape[0] = 3.0
    assert cadence.idle_seconds() == 5.0  # the interval first
    clock.now += 4.0
    scrape[0] = 200.0
    assert cadence.idle_seconds() == MAX_AGE_SECONDS - 4.0  # never older than the cap


def test_work_on_its_own_thread_comes_two_ticks_ahead_and_at_most_every_two() -> None:
    """A helper ticking every second alongside the sweep: done with 1-2 s left before the scrape,
    so a sweep in between carries it, and not again on the next tick."""
    clock = Clock()
    scrape: list[float | None] = [None]
    gpm = helper_cadence(1.0, lambda: scrape[0], clock)
    gpm.done()
    clock.now += 5.0
    assert not gpm.due(), "nobody scrapes: every 10 s"
    clock.now += 5.0
    assert gpm.due()
    gpm.done()
    scrape[0] = 1.6
    clock.now += 2.0
    assert gpm.due()
    gpm.done()
    scrape[0] = 0.6
    clock.now += 1.0
    assert not gpm.due(), "done a tick ago for the same scrape"
    scrape[0] = 14.6
    clock.now += 1.0
    assert not gpm.due()


def test_the_flag_defaults_to_ten_seconds_and_zero_means_every_sweep() -> None:
    assert parse_config(["--simulate"]).collection.slow_fields_interval_seconds == 10.0
    config = parse_config(["--simulate", "--collector.field-interval=slow-fields=0s"])
    assert config.collection.slow_fields_interval_seconds == 0.0


# ---- The reader, on the simulated node, against a real scrape schedule ----


class Node:
    """One simulated GPU read by DeviceReader as the poller does, on a clock the test steps; every
    field-value request is recorded."""

    def __init__(
        self,
        clock: Clock,
        schedule: ScrapeSchedule,
        interval: float,
        energy: EnergyEstimates | None = None,
    ) -> None:
        self.clock = clock
        self.sim = FakeNvml(quiet(default_fleet()), clock=clock)
        self.sim.api.nvmlInit()
        self.handle = self.sim.api.nvmlDeviceGetHandleByIndex(0)
        self.requests: list[list[Any]] = []
        batch = self.sim.api.nvmlDeviceGetFieldValues

        def recorded(handle: Any, fields: list[Any]) -> Any:
            if fields != [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]:  # asked once, for the plan
                self.requests.append(list(fields))
            return batch(handle, fields)

        self.sim.api.nvmlDeviceGetFieldValues = recorded
        cadence = ScrapeCadence(interval, 1.0, schedule.next_scrape_in, clock)
        self.reader = DeviceReader(
            GuardedNvml(ErrorTally(), self.sim.api), threading.Lock(), cadence, energy
        )
        self.identity = self.reader.read_identity(0, self.handle)

    def sweep(self) -> GpuReadings:
        return self.reader.read_board(self.identity, self.handle)

    def energy_reads(self) -> int:
        return sum(ENERGY in request for request in self.requests)


@pytest.fixture
def node_factory() -> Iterator[Callable[..., Node]]:
    nodes: list[Node] = []

    def make(
        clock: Clock,
        schedule: ScrapeSchedule,
        interval: float = 10.0,
        energy: EnergyEstimates | None = None,
    ) -> Node:
        nodes.append(Node(clock, schedule, interval, energy))
        return nodes[-1]

    yield make
    for node in nodes:
        node.sim.close()


def test_at_a_1s_poll_with_15s_scrapes_energy_is_read_once_a_scrape_and_moves_each_time(
    node_factory: Callable[..., Node],
) -> None:
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    node = node_factory(clock, schedule)
    seen_by_scrapes: list[int] = []
    latest: GpuReadings | None = None
    for second in range(181):
        # The scrape lands half-way between sweeps, and sees the last sweep's readings.
        if second % 15 == 0 and latest is not None:
            clock.now += 0.5
            schedule.scraped("10.0.0.9")
            assert latest.energy_mj is not None  # as the sweep before found it
            seen_by_scrapes.append(latest.energy_mj)
            clock.now += 0.5
        elif second:
            clock.now += 1.0
        latest = node.sweep()
        assert latest.energy_mj is not None, "the last value stands between reads"
        assert latest.values.get("DCGM_FI_DEV_MEMORY_TEMP") is not None
    sweeps = len(node.requests)
    assert sweeps == 181
    assert all(MEMORY_TEMP in request for request in node.requests), "fast fields every sweep"
    # 180 s: at most one read per 10 s (the first sweep's, then one before each scrape).
    assert node.energy_reads() <= 1 + 180 // 10
    assert node.energy_reads() <= 14
    # Once the period is learnt (two scrapes), every scrape sees the counter moved.
    learnt = seen_by_scrapes[2:]
    assert len(learnt) >= 8
    assert all(later > earlier for earlier, later in itertools.pairwise(learnt))


def test_every_slow_field_waits_and_the_fast_batch_carries_none_of_them(
    node_factory: Callable[..., Node],
) -> None:
    clock = Clock()
    node = node_factory(clock, ScrapeSchedule(clock))
    first = node.sweep()
    clock.now += 1.0
    second = node.sweep()
    full, fast = node.requests
    assert set(SLOW_FIELDS) <= set(full)
    assert not set(SLOW_FIELDS) & {f if isinstance(f, int) else f[0] for f in fast}
    for name in SLOW_FIELDS.values():
        assert second.values.get(name) == first.values.get(name), name
    assert second.power_mw is not None


def test_a_lost_gpu_has_its_slow_fields_read_on_return(node_factory: Callable[..., Node]) -> None:
    """Counters may restart across a GPU reset: the stale total must not stand."""
    clock = Clock()
    node = node_factory(clock, ScrapeSchedule(clock))
    node.sweep()
    clock.now += 1.0
    node.reader.lost(node.identity.uuid)
    node.sweep()
    assert node.energy_reads() == 2


def test_with_no_cadence_every_sweep_reads_the_slow_fields(
    node_factory: Callable[..., Node],
) -> None:
    clock = Clock()
    node = node_factory(clock, ScrapeSchedule(clock))
    node.reader = DeviceReader(GuardedNvml(ErrorTally(), node.sim.api), threading.Lock(), None)
    for _ in range(3):
        node.sweep()
        clock.now += 1.0
    assert node.energy_reads() == 3


def test_with_the_estimate_energy_is_read_ever_less_often_and_tracks_the_counter(
    node_factory: Callable[..., Node],
) -> None:
    """At a 1 s poll with 15 s scrapes for ten minutes: NVML's counter read after a minute, then
    after two, four and eight as the drift stays small (energy_estimate.py), the exported
    counter rising on every scrape and never falling, within 3 % of the counter's increase at
    each read (the simulated board's counter is the integral of its power, sampled four times a
    second) and within 1 % over the ten minutes."""
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    energy = EnergyEstimates(60.0, clock)
    node = node_factory(clock, schedule, energy=energy)
    exported: list[int] = []
    seen_by_scrapes: list[int] = []
    for second in range(601):
        if second % 15 == 0 and exported:
            clock.now += 0.5
            schedule.scraped("10.0.0.9")
            seen_by_scrapes.append(exported[-1])
            clock.now += 0.5
        elif second:
            clock.now += 1.0
        readings = node.sweep()
        assert readings.energy_mj is not None
        exported.append(readings.energy_mj)
        drift = energy.drift(node.identity.uuid)
        assert drift is None or abs(drift) < 0.03, drift
    # At 0 s, then about 60, 180 and 420 s (each read falls in the sweep before a scrape).
    assert node.energy_reads() == 4
    assert energy.interval(node.identity.uuid) == 480.0
    assert all(later >= earlier for earlier, later in itertools.pairwise(exported))
    assert all(later > earlier for earlier, later in itertools.pairwise(seen_by_scrapes))
    board = node.sim.gpus[0].energy_mj(clock.now)
    assert exported[-1] == pytest.approx(board, rel=0.01)
    first_read = exported[0]
    assert exported[-1] - first_read == pytest.approx(board - first_read, rel=0.01)
    assert energy.drift(node.identity.uuid) is not None


def test_a_driver_reload_reads_the_counter_at_once(node_factory: Callable[..., Node]) -> None:
    clock = Clock()
    node = node_factory(
        clock, ScrapeSchedule(clock), interval=0.5, energy=EnergyEstimates(60.0, clock)
    )
    node.sweep()
    clock.now += 1.0
    node.sweep()
    assert node.energy_reads() == 1
    node.reader.invalidate()
    clock.now += 1.0
    node.sweep()
    assert node.energy_reads() == 2


# ---- GPM samples and pod-resources Lists, on their own threads ----


def test_gpm_samples_only_when_its_cadence_says(sim: FakeNvml) -> None:
    sim.api.nvmlInit()
    uuid = sim.api.nvmlDeviceGetUUID(sim.api.nvmlDeviceGetHandleByIndex(0))
    clock = Clock()
    scrape: list[float | None] = [None]
    sampler = GpmSampler(
        GuardedNvml(ErrorTally(), sim.api), 1.0, helper_cadence(1.0, lambda: scrape[0], clock)
    )
    sampler.track([LiveGpu(0, uuid)])
    sampler.run_once()  # a GPU new to the sampler: sampled at once
    taken = sim.calls["nvmlGpmSampleGet"]
    assert taken == 1
    for _ in range(5):  # every tick for 5 s, nobody scraping
        clock.now += 1.0
        sampler.run_once()
    assert sim.calls["nvmlGpmSampleGet"] == taken, "no sample between scrapes"
    assert sampler.latest(uuid)[0] is None, "one sample gives no metrics yet"
    scrape[0] = 1.5  # a scraper learnt, due in 1.5 s
    sampler.run_once()
    assert sim.calls["nvmlGpmSampleGet"] == taken + 1
    board, _ = sampler.latest(uuid)
    assert board is not None and board.graphics_active is not None
    # The metrics are the average since the previous sample: over the 5 s, not the last tick.
    clock.now += 1.0
    scrape[0] = 0.5
    sampler.run_once()
    assert sim.calls["nvmlGpmSampleGet"] == taken + 1


def test_pod_resources_are_listed_just_before_scrapes(sim: FakeNvml, tmp_path: Path) -> None:
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock").start()
    clock = ManualClock()
    due_at = clock.monotonic() + 1.0  # a scraper learnt, due in a second

    def scrape_in() -> float:
        return max(0.0, due_at - clock.monotonic())

    cadence = ScrapeCadence(0.1, 0.1, scrape_in, clock.monotonic)
    watcher = PodResourcesWatcher(
        PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5),
        0.05,
        cadence=cadence,
        clock=clock,
    )

    def tick() -> None:
        """One of the watcher's ticks: time moves on by its interval, and the round it wakes
        for is over once it waits again (a wait with time still to go: the old one has none)."""
        clock.advance(0.05)
        assert wait_for(lambda: any(left > 0 for left in clock.waiting()), 10, step=0.001)

    watcher.start()
    try:
        clock.wait_for_waiters(1)  # the first round is over
        assert watcher.latest is not None  # the first List at once
        first = kubelet.calls["List"]
        # Asleep until the List is due, not a tick at a time: one wait, to the lead before the
        # scrape.
        (left,) = clock.waiting()
        assert left == pytest.approx(0.9, abs=0.02)
        for _ in range(16):
            tick()
        assert kubelet.calls["List"] == first
        for _ in range(3):
            tick()
        assert kubelet.calls["List"] == first + 1
    finally:
        watcher.stop()
        kubelet.stop()

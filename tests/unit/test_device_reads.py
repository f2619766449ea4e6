"""A sweep's GPU reads take turns on one worker; a read that hangs hands the rest to other workers,
and what has not started by the deadline comes back cancelled."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import CancelledError
from dataclasses import replace

import pytest

from kube_gpu_exporter.exporter.nvml.device_reads import DaemonWorkers, TurnTakingReads
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import FAST, wait_for


@pytest.fixture
def workers() -> Iterator[DaemonWorkers]:
    pool = DaemonWorkers(4, "test-device")
    yield pool
    pool.shutdown()


class Reads:
    """A read per index that records its thread, and hangs for the indexes told to."""

    def __init__(self, hang: Iterable[int] = frozenset()) -> None:
        self.hang = set(hang)
        self.release = threading.Event()
        self.threads: dict[int, int] = {}
        self.at: dict[int, float] = {}
        self.order: list[int] = []

    def __call__(self, index: int) -> str:
        self.order.append(index)
        self.threads[index] = threading.get_ident()
        self.at[index] = time.monotonic()
        if index in self.hang and not self.release.wait(10):
            raise AssertionError("never released")
        return f"gpu{index}"


def test_reads_take_turns_on_one_worker(workers):
    reads = Reads()
    futures = TurnTakingReads(workers, 1.0).run(range(8), reads, time.monotonic() + 5)
    assert {i: f.result(0) for i, f in futures.items()} == {i: f"gpu{i}" for i in range(8)}
    assert reads.order == list(range(8))
    assert len(set(reads.threads.values())) == 1
    assert threading.get_ident() not in reads.threads.values()


def test_a_hung_read_hands_the_others_to_workers_of_their_own(workers):
    # Real threads stuck in a real wait: run() returns at the deadline, as the hung read never
    # finishes, so the deadline is as short as leaves the takeover room to show.
    reads = Reads(hang={1})
    stall = 0.05
    started = time.monotonic()
    futures = TurnTakingReads(workers, stall).run(range(4), reads, started + 0.4)
    try:
        # Done, not cancelled: they started before the deadline.
        assert [futures[i].result(0) for i in (0, 2, 3)] == ["gpu0", "gpu2", "gpu3"]
        assert not futures[1].done()
        # Taken over after one or two stall windows, well before the deadline.
        assert max(reads.at[2], reads.at[3]) - started < 0.3
        assert reads.threads[2] != reads.threads[1]
    finally:
        reads.release.set()
    assert futures[1].result(5) == "gpu1"


def test_reads_not_started_by_the_deadline_are_cancelled_and_never_run(workers):
    reads = Reads(hang={0})
    started = time.monotonic()
    # A stall window longer than the deadline: nobody takes over before it passes.
    futures = TurnTakingReads(workers, 10.0).run(range(3), reads, started + 0.1)
    assert 0.1 <= time.monotonic() - started < 2.0
    assert not futures[0].done()
    assert futures[1].cancelled() and futures[2].cancelled()
    with pytest.raises(CancelledError):
        futures[1].result(0)
    reads.release.set()
    assert futures[0].result(5) == "gpu0"
    assert reads.order == [0]


def test_a_read_that_raises_fails_only_its_own_future(workers):
    def read(index: int) -> int:
        if index == 1:
            raise ValueError("broken")
        return index

    futures = TurnTakingReads(workers, 1.0).run([0, 1, 2], read, time.monotonic() + 5)
    assert futures[0].result(0) == 0 and futures[2].result(0) == 2
    with pytest.raises(ValueError, match="broken"):
        futures[1].result(0)


def test_nothing_to_read_starts_nothing(workers):
    def read(index: int) -> int:
        raise AssertionError("called")

    assert TurnTakingReads(workers, 1.0).run([], read, time.monotonic() + 5) == {}


def test_gpus_behind_a_hung_read_with_every_worker_busy_are_read_again_next_sweep(
    sim: FakeNvml,
):
    # One worker: the hung read holds it, so nobody can take the GPUs after it this sweep. The
    # sweep waits out this real deadline: short, but long enough for the two reads before it.
    config = replace(FAST, device_timeout_seconds=0.2)
    poller = Poller(config, lambda s: None, sim.source(), workers=1)
    try:
        first = poller.sweep()
        assert all(g.up and not g.stale for g in first.gpus)
        sim.faults.hang("nvmlDeviceGetTemperature", gpu=2)
        snap = poller.sweep()
        assert [g.stale for g in snap.gpus] == [False, False] + [True] * 6
        assert snap.gpus[5].readings == first.gpus[5].readings
        sim.faults.release_all()
        # The cancelled GPUs are not left "in flight": the next sweep asks all of them again.
        assert wait_for(lambda: not any(g.stale for g in poller.sweep().gpus))
    finally:
        sim.faults.release_all()
        poller.stop(timeout=2.0)

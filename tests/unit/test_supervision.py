"""Every background thread is supervised: an exception escaping its loop is logged once with its
traceback, the collector it feeds reports failure until the loop is healthy again, the loop is
re-entered after a backoff, and a thread that cannot be restarted fails /healthz.

Faults are injected into the real threads (the poller, its XID, PCIe and GPM helpers, the
pod-resources watcher and the Kubernetes watches) against the simulated node, the fake kubelet
and the fake Kubernetes API. Every thread runs on a ManualClock with the supervisor's own
settings (restarts 1 s apart, doubling to 30 s; given up after 5 crashes in a row): a restart,
a sweep interval or a backoff lasts until the test moves the clock past it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.app import thread_problem
from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.config import WebConfig
from kube_gpu_exporter.exporter.nvml.gpm_sampler import GpmSampler
from kube_gpu_exporter.exporter.nvml.pcie_sampler import PcieSampler
from kube_gpu_exporter.exporter.nvml.xid_watcher import XidWatcher
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.server import build_app
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import FAST, store_for, wait_for
from tests.support.clock_steps import at_least_parked, run_until, within_jitter
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.kubernetes import kube_status, make_watcher

WEB = WebConfig(stale_after_seconds=15.0, health_max_age_seconds=60.0)
# The supervisor's wait before each restart of a crash streak, until it gives up at the fifth.
RESTART_STEPS = (1.0, 2.0, 4.0, 8.0)
HELD_OPEN = 300  # a Kubernetes watch's timeout: longer than any test here


def crash_logs(caplog: pytest.LogCaptureFixture, thread_name: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.exc_info
        and r.name == "kube_gpu_exporter.exporter.background"
        and thread_name in r.getMessage()
    ]


def crashed_with(record: logging.LogRecord) -> type[BaseException] | None:
    """The exception type a crash log carries."""
    return record.exc_info[0] if record.exc_info else None


class Fault:
    """Wraps `obj.name` so that calls raise while `broken`, or `once` times; otherwise pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, obj: Any, name: str) -> None:
        self.broken = False
        self.once = 0
        self.raised = 0
        original = getattr(obj, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if self.broken or self.once > 0:
                self.once = max(0, self.once - 1)
                self.raised += 1
                raise RuntimeError(f"injected fault in {name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(obj, name, wrapper)


class Published:
    """The poller's publish callback: keeps every snapshot."""

    def __init__(self) -> None:
        self.snapshots: list[NodeSnapshot] = []
        self._lock = threading.Lock()

    def __call__(self, snapshot: NodeSnapshot) -> None:
        with self._lock:
            self.snapshots.append(snapshot)

    @property
    def last(self) -> NodeSnapshot:
        with self._lock:
            return self.snapshots[-1]

    def collector(self, name: str) -> bool | None:
        if not self.snapshots:
            return None
        return {c.name: c.success for c in self.last.collectors}.get(name)


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def running_poller(sim: FakeNvml, published: Published, clock: ManualClock) -> Iterator[Poller]:
    config = replace(FAST, pcie_enabled=True, pcie_interval_seconds=0.2, gpm_enabled=True)
    poller = Poller(config, published, sim.source(), workers=8, clock=clock)
    poller.start()
    assert run_until(clock, lambda: published.collector("pcie") is True)
    yield poller
    poller.stop(timeout=2.0)


def helper_of(poller: Poller, kind: type) -> Any:
    return next(h for h in poller._helpers if isinstance(h, kind))


async def healthz(problem: Callable[[], str | None]) -> int:
    store = store_for()
    client = TestClient(TestServer(build_app(store, WEB, problem)))
    await client.start_server()
    try:
        return (await client.get("/healthz")).status
    finally:
        await client.close()


# ---- the supervisor itself ----


class Loop(BackgroundThread):
    thread_name = "toy-loop"

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.rounds = 0
        self.fail = 0
        self.hook_fails = False

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.fail:
                self.fail -= 1
                raise KeyError("injected")
            self.rounds += 1
            self._progressed()
            self._clock.wait(self._stop, 0.01)

    def _on_crash(self) -> None:
        if self.hook_fails:
            raise OSError("cannot reset")


def test_a_crash_is_logged_once_and_the_loop_restarts(clock, caplog):
    loop = Loop(clock)
    loop.fail = 3  # three crashes in a row, then healthy rounds
    loop.start()
    try:
        waits: list[float] = []
        for crashes in (1, 2, 3):
            [wait] = at_least_parked(clock)
            waits.append(wait)
            # Down from the crash until a healthy round, but not given up on.
            assert loop.consecutive_crashes == crashes and loop.restarts == crashes - 1
            assert not loop.thread_healthy and loop.problem() is None
            clock.advance(wait)
        # Restarted after 1, 2 and 4 s, each within the jitter.
        assert all(map(within_jitter, waits, RESTART_STEPS)), waits
        assert run_until(clock, lambda: loop.restarts == 3 and loop.rounds >= 3)
        assert loop.alive and loop.thread_healthy and loop.problem() is None
    finally:
        loop.stop()
    records = crash_logs(caplog, "toy-loop")
    assert len(records) == 1, [r.getMessage() for r in caplog.records]
    assert crashed_with(records[0]) is KeyError


def test_a_thread_whose_restart_raises_gives_up(clock, caplog):
    loop = Loop(clock)
    loop.fail, loop.hook_fails = 1, True
    loop.start()
    try:
        assert wait_for(lambda: loop.gave_up is not None and not loop.alive)
        assert "could not be restarted: OSError: cannot reset" in str(loop.problem())
        assert not loop.thread_healthy
        assert clock.waiting() == []  # no restart was waited for
    finally:
        loop.stop()


# ---- the poller and its helpers ----


def test_a_crashing_sweep_marks_every_collector_failed_then_recovers(
    running_poller: Poller, published: Published, clock: ManualClock, monkeypatch, caplog
):
    fault = Fault(monkeypatch, running_poller, "_read_devices")
    fault.broken = True
    # The last snapshot is republished with its collectors failed; its age keeps growing.
    assert run_until(clock, lambda: published.collector("nvml") is False)
    assert not any(c.success for c in published.last.collectors)
    frozen = published.last.sequence
    fault.broken = False
    assert run_until(clock, lambda: published.last.sequence > frozen + 1)
    assert all(published.last.collectors[i].success for i in range(2))  # nvml, xid
    assert running_poller.alive and running_poller.problem() is None
    assert len(crash_logs(caplog, "nvml-poller")) == 1


async def test_a_poller_that_keeps_crashing_fails_healthz(
    running_poller: Poller, published: Published, clock: ManualClock, monkeypatch
):
    assert await healthz(running_poller.problem) == 200
    Fault(monkeypatch, running_poller, "_read_devices").broken = True
    assert run_until(clock, lambda: running_poller.gave_up is not None)
    assert "nvml-poller thread crashed 5 times in a row" in str(running_poller.problem())
    assert await healthz(running_poller.problem) == 503


@pytest.mark.parametrize(
    ("kind", "method", "collector", "thread_name"),
    [
        (PcieSampler, "sample_once", "pcie", "pcie-sampler"),
        (GpmSampler, "_sample_device", "gpm", "gpm-sampler"),
    ],
)
def test_a_crashing_helper_reports_failure_and_restarts(
    running_poller: Poller,
    published: Published,
    sim: FakeNvml,
    clock: ManualClock,
    monkeypatch,
    caplog,
    kind: type,
    method: str,
    collector: str,
    thread_name: str,
):
    helper = helper_of(running_poller, kind)
    assert run_until(clock, lambda: published.collector(collector) is True)
    fault = Fault(monkeypatch, helper, method)
    fault.broken = True
    assert run_until(clock, lambda: fault.raised >= 2 and published.collector(collector) is False)
    assert helper.alive and helper.gave_up is None
    fault.broken = False
    assert run_until(clock, lambda: published.collector(collector) is True)
    assert helper.thread_healthy and running_poller.problem() is None
    # Data refreshing again.
    if kind is PcieSampler:
        tick = published.last.sequence
        assert run_until(
            clock,
            lambda: (
                published.last.sequence > tick
                and (readings := published.last.gpus[0].readings) is not None
                and readings.pcie_tx_kbps is not None
            ),
        )
    records = crash_logs(caplog, thread_name)
    assert len(records) == 1 and crashed_with(records[0]) is RuntimeError


def test_a_failing_xid_drain_reports_failure_and_the_sweeps_go_on(
    running_poller: Poller,
    published: Published,
    sim: FakeNvml,
    clock: ManualClock,
    monkeypatch,
    caplog,
):
    """The XID drain runs inside the sweep: an unexpected error in it fails the xid collector,
    never the sweep, and a fresh event set is registered after the backoff."""
    helper = helper_of(running_poller, XidWatcher)
    assert run_until(clock, lambda: published.collector("xid") is True)
    fault = Fault(monkeypatch, helper, "_register")
    fault.broken = True
    helper._registered = None  # it registers only when its set of GPUs changes
    assert run_until(clock, lambda: fault.raised >= 2 and published.collector("xid") is False)
    assert published.collector("nvml") is True and running_poller.problem() is None
    sequence = published.last.sequence
    assert run_until(clock, lambda: published.last.sequence > sequence + 2)
    fault.broken = False
    assert run_until(clock, lambda: published.collector("xid") is True)
    assert sim.registered_gpus() == set(range(len(sim.gpus)))
    sim.inject_xid(0, 79)
    assert run_until(clock, lambda: published.last.gpus[0].xid.last_xid == 79)
    logged = [r for r in caplog.records if "XID events: unexpected error" in r.getMessage()]
    assert logged and crashed_with(logged[0]) is RuntimeError


async def test_a_helper_that_cannot_restart_fails_healthz(
    running_poller: Poller, published: Published, clock: ManualClock, monkeypatch
):
    helper = helper_of(running_poller, PcieSampler)
    Fault(monkeypatch, helper, "sample_once").broken = True
    assert run_until(clock, lambda: helper.gave_up is not None and not helper.alive)
    assert run_until(clock, lambda: published.collector("pcie") is False)
    assert "pcie-sampler thread crashed 5 times" in str(running_poller.problem())
    assert await healthz(running_poller.problem) == 503


# ---- pod-resources ----


@pytest.fixture
def kubelet(sim, tmp_path) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(sim, tmp_path / "pod-resources" / "kubelet.sock").start()
    yield fake
    fake.stop()


async def test_a_crashing_podresources_loop_is_down_until_it_recovers(
    kubelet: FakeKubelet, clock: ManualClock, monkeypatch, caplog
):
    watcher = PodResourcesWatcher(
        PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5), 0.05, clock=clock
    )
    # In the round's own code, not in parsing: an unchanged answer is not parsed again.
    fault = Fault(monkeypatch, watcher._client, "list")
    watcher.start()
    try:
        assert wait_for(lambda: watcher.status.up)
        fault.broken = True
        assert run_until(clock, lambda: not watcher.status.up)
        context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)
        assert [(c.name, c.success) for c in context.collector_statuses()] == [
            ("podresources", False)
        ]
        assert "thread crashed: RuntimeError" in str(watcher.status.last_error)
        fault.broken = False
        assert run_until(clock, lambda: watcher.status.up)
        assert watcher.alive and thread_problem(watcher) is None
        assert len(crash_logs(caplog, "podresources")) == 1
        # Crashing for good: the thread gives up, and /healthz fails.
        fault.broken = True
        assert run_until(clock, lambda: watcher.gave_up is not None)
        assert not watcher.status.up
        assert await healthz(lambda: thread_problem(watcher)) == 503
    finally:
        watcher.stop()


# ---- Kubernetes watches ----


def hostile_pod(api: FakeKubeApi) -> dict:
    # Labels as a list, not a map: reading its owner from the event, or from the LIST that
    # follows a restart, raises inside the watch loop.
    pod = api.pod("ml", "odd-0", owner=("ReplicaSet", "odd-5d4c"))
    pod["metadata"]["labels"] = ["not", "a", "map"]
    return pod


async def test_a_crashing_pods_watch_is_unsynced_until_the_object_is_fixed(
    api: FakeKubeApi, clock: ManualClock, caplog
):
    api.put_pod(api.pod("ml", "trainer-0"))
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        assert wait_for(lambda: kube_status(watcher))
        api.put_pod(hostile_pod(api))
        # Crashed on the event; restarted after 1 s, it crashes on the LIST, and waits 2 s.
        waits = [at_least_parked(clock)[0]]
        assert not kube_status(watcher)
        clock.advance(waits[0])
        waits.append(at_least_parked(clock)[0])
        assert all(map(within_jitter, waits, RESTART_STEPS)), waits
        assert watcher.restarts == 1 and watcher.consecutive_crashes == 2
        assert not kube_status(watcher)
        assert watcher.alive and watcher.gave_up is None
        api.put_pod(api.pod("ml", "odd-0"))  # the object is fixed
        clock.advance(waits[1])
        assert wait_for(lambda: kube_status(watcher) and ("ml", "odd-0") in watcher.view().pods)
        assert watcher.thread_healthy and thread_problem(watcher) is None
        records = crash_logs(caplog, "kubernetes-pods")
        assert len(records) == 1 and crashed_with(records[0]) is AttributeError
    finally:
        watcher.stop(timeout=3)


async def test_a_kubernetes_watch_that_keeps_crashing_fails_healthz(
    api: FakeKubeApi, clock: ManualClock
):
    api.put_pod(hostile_pod(api))
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        # Restarted after 1, 2, 4 and 8 s; the fifth crash in a row is the last.
        waits: list[float] = []
        for _ in RESTART_STEPS:
            waits.append(at_least_parked(clock)[0])
            clock.advance(waits[-1])
        assert wait_for(lambda: watcher.gave_up is not None)
        assert all(map(within_jitter, waits, RESTART_STEPS)), waits
        assert not kube_status(watcher)
        assert "kubernetes-pods thread crashed 5 times" in str(thread_problem(watcher))
        assert await healthz(lambda: thread_problem(watcher)) == 503
    finally:
        watcher.stop(timeout=3)


def test_the_node_watch_is_supervised_too(
    api: FakeKubeApi, clock: ManualClock, monkeypatch, caplog
):
    from kube_gpu_exporter.exporter.kubernetes import watcher as watcher_module

    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    node_watch = watcher._node_watch
    fault = Fault(monkeypatch, watcher_module, "node_gpu_labels")
    fault.once = 1
    watcher.start()
    try:
        [wait] = at_least_parked(clock)
        assert within_jitter(wait, RESTART_STEPS[0]), wait
        assert node_watch.restarts == 0 and not node_watch.thread_healthy
        clock.advance(wait)
        assert wait_for(lambda: node_watch.restarts == 1 and kube_status(watcher))
        assert node_watch.alive and node_watch.thread_healthy
        assert len(crash_logs(caplog, "kubernetes-node")) == 1
    finally:
        watcher.stop(timeout=3)

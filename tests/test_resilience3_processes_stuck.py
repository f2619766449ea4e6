"""One stuck read must neither freeze process accounting nor wedge the exporter (resilience round
3, item B).

A FIFO in a proc root blocks open() until something writes to it, and a round that never ends
kept `collector_success{collector="processes"}` at 1 over frozen per-pod figures, then blocked
the driver-reload path on the sampler's lock. The FIFOs here are real ones (os.mkfifo); the stuck
round is a real helper thread blocked on an Event inside its round."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.background import PeriodicSampler
from exporter.nvml.error_tally import ErrorTally
from exporter.nvml.guarded_calls import GuardedNvml
from exporter.nvml.helper import LiveGpu
from exporter.nvml.mig_reader import MigReader
from exporter.nvml.process_sampler import ProcessSampler
from exporter.poller import Poller
from exporter.processes.host_pids import HostPidOwners
from exporter.processes.owner import OTHER_PID_NAMESPACE
from exporter.simulator.fake_kubelet import FakeKubelet
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.host_tree import HostTree
from exporter.simulator.processes import ProcessTable
from exporter.snapshot import NodeSnapshot, ProcessOwner
from tests import test_pid_owners as owners_tests
from tests.conftest import FAST, fast_source, wait_for

# A round that has not returned by then is hung, not slow: every read here takes microseconds.
HANG_S = 5.0


def _run_bounded(work: Callable[[], object], fifos: list[Path]) -> tuple[bool, object]:
    """Run `work` on a daemon thread; (whether it returned within HANG_S, its result). A thread
    still blocked in a FIFO's open() is released by opening the FIFOs for writing, so that a
    failing run does not leave it behind."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    finished = not thread.is_alive()
    deadline = time.monotonic() + HANG_S
    while thread.is_alive() and time.monotonic() < deadline:
        for fifo in fifos:
            with contextlib.suppress(OSError):  # no reader waits on this one
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(0.05)
    return finished, result[0] if result else None


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    return owners_tests.host_proc(tmp_path)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "log"
    owners_tests.add_container_log(root, "trainer-0", "ml", "main", owners_tests.CID)
    return root


def test_fifos_and_devices_in_the_proc_root_are_refused_at_once_with_one_line_each(
    proc: Path, logs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="exporter.processes")
    pod = owners_tests.POD_CGROUP
    for pid in (300, 301, 302, 303):
        owners_tests.add_process(proc, pid, 9000 + pid, pod)
    fifos = [proc / "300" / "stat", proc / "301" / "cgroup"]
    for fifo in fifos:
        fifo.unlink()
        os.mkfifo(fifo)
    (proc / "302" / "stat").unlink()
    (proc / "302" / "stat").symlink_to("/dev/zero")
    owners = HostPidOwners(proc, logs, owners_tests.Clock())

    def lookups() -> list[ProcessOwner | str]:
        # Twice: a hostile entry is logged once, not once per sweep.
        return [owners.owner(pid) for _ in range(2) for pid in (300, 301, 302, 303)]

    finished, found = _run_bounded(lookups, fifos)
    assert finished, "a FIFO in the proc root blocked the lookup"
    trainer = ProcessOwner(owners_tests.UID, owners_tests.CID, "ml", "trainer-0", "main")
    assert found == [OTHER_PID_NAMESPACE] * 3 + [trainer] + [OTHER_PID_NAMESPACE] * 3 + [trainer]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    for path, kind in zip(
        (fifos[0], fifos[1], proc / "302" / "stat"),
        ("FIFO", "FIFO", "character device"),
        strict=True,
    ):
        assert any(str(path) in line and kind in line for line in said), (path, said)
    assert all("\n" not in line for line in said)


# ---- the sampler over the simulated node's host tree ----


@pytest.fixture
def node(sim: FakeNvml, tmp_path: Path) -> Iterator[tuple[ProcessTable, HostTree]]:
    table = ProcessTable(sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    sim.processes = table
    sim.api.nvmlInit()
    yield table, HostTree(table, tmp_path / "host").refresh()
    sim.api.nvmlShutdown()


def test_a_fifo_skips_its_pid_and_the_round_reads_every_other(
    sim: FakeNvml, node: tuple[ProcessTable, HostTree], caplog: pytest.LogCaptureFixture
) -> None:
    table, tree = node
    caplog.set_level(logging.WARNING, logger="exporter.processes")
    victim = next(p for p in table.processes() if p.container is not None)
    fifo = tree.proc_root / str(victim.pid) / "stat"
    fifo.unlink()
    os.mkfifo(fifo)
    nvml = GuardedNvml(ErrorTally(), sim.api)
    owners = HostPidOwners(tree.proc_root, tree.log_root)
    sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), owners, interval_seconds=1.0)
    sampler.track(
        [
            LiveGpu(
                g.index,
                g.uuid,
                tuple(m.gpu_instance_id for m in g.live_instances()) if g.mig_enabled else None,
            )
            for g in sim.gpus
        ]
    )
    finished, _ = _run_bounded(sampler.sample_once, [fifo])
    assert finished, "the sampler hung on a FIFO"
    assert sampler.last_success
    seen = {p.pid: p for g in sim.gpus for p in sampler.latest(g.uuid) or ()}
    assert seen[victim.pid].owner is None
    assert seen[victim.pid].unattributed_reason == OTHER_PID_NAMESPACE
    others = [p for p in table.processes() if p.container is not None and p.pid != victim.pid]
    assert others and all(seen[p.pid].owner is not None for p in others)
    assert [r.getMessage() for r in caplog.records if str(fifo) in r.getMessage()] != []


# ---- a round that never ends ----


class StuckOwners:
    """Answers at once until armed; then the next lookup blocks until released, as a read of a
    hung file would."""

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.entered = threading.Event()
        self.release = threading.Event()

    def owner(self, pid: int) -> ProcessOwner | str:
        if self.armed.is_set():
            self.entered.set()
            self.release.wait()
        return ProcessOwner("uid", f"{pid:064x}")

    def problem(self) -> str | None:
        return None


def _statuses(snapshot: NodeSnapshot) -> dict[str, bool]:
    return {c.name: c.success for c in snapshot.collectors}


def _sweep_bounded(poller: Poller, owners: StuckOwners) -> NodeSnapshot | None:
    done: list[NodeSnapshot] = []
    thread = threading.Thread(target=lambda: done.append(poller.sweep()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    if thread.is_alive():
        owners.release.set()  # let a failing run unwind
        thread.join(HANG_S)
        return None
    return done[0]


def test_a_stuck_round_reads_failed_and_a_driver_reload_does_not_wait_for_it(
    sim: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Overdue after max(2 intervals, floor): a shorter floor than production's keeps this quick.
    monkeypatch.setattr(PeriodicSampler, "overdue_floor_seconds", 0.5, raising=False)
    sim.processes = ProcessTable(sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    config = replace(
        FAST,
        processes_enabled=True,
        xid_enabled=False,
        pcie_enabled=True,
        pcie_interval_seconds=0.2,
    )
    owners = StuckOwners()
    poller = Poller(config, lambda s: None, fast_source(sim), workers=8, pid_owners=owners)
    try:
        # A round has run: its processes are merged into the sweep.
        assert wait_for(lambda: any(g.processes for g in poller.sweep().gpus), timeout=HANG_S)
        assert all(_statuses(poller.sweep()).values())

        owners.armed.set()
        assert owners.entered.wait(HANG_S), "no round started"
        assert wait_for(lambda: not _statuses(poller.sweep())["processes"], HANG_S)
        snapshot = poller.sweep()
        assert _statuses(snapshot) == {"nvml": True, "pcie": True, "gpm": True, "processes": False}
        # The per-pod figures of a round that never ended are not shown as if current.
        assert all(g.processes is None for g in snapshot.gpus)

        sim.unload_driver()
        unloaded = _sweep_bounded(poller, owners)
        assert unloaded is not None, "the driver-reload path waited on the stuck round"
        assert not unloaded.nvml_up
        sim.load_driver()
        poller.retry_init_now()
        reloaded = poller.sweep()
        assert reloaded.nvml_up and all(g.up for g in reloaded.gpus)
        assert _statuses(reloaded)["processes"] is False, "still stuck"
        assert poller.problem() is None

        owners.armed.clear()
        owners.release.set()
        assert wait_for(lambda: _statuses(poller.sweep())["processes"], timeout=HANG_S)
        assert wait_for(lambda: any(g.processes for g in poller.sweep().gpus), timeout=HANG_S)
    finally:
        owners.release.set()
        poller.stop(timeout=2.0)

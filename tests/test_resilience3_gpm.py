"""A GPM round stuck in NVML must not hold up a driver reload (resilience round 3, follow-up).

`GpmSampler.invalidate()` used to take the lock the round holds across every GPM call, so one
hung `nvmlGpmSampleGet` stalled the poller's sweep that found the driver gone, and every sweep
after it. The round here is really stuck: a simulated GPM call blocks on the simulator's hang
Event, on a thread of its own, while the test unloads and reloads the simulated driver."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from exporter.poller import Poller
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.stepped_time import SteppedHelpers
from exporter.snapshot import GpuSnapshot, NodeSnapshot
from tests.conftest import FAST, fast_source

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
    poller = Poller(config, lambda s: None, fast_source(sim), workers=8, runner=stepped)
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
    deadline = time.monotonic() + HANG_S
    while sim.faults.hung_calls == 0:
        assert time.monotonic() < deadline, "the GPM round never reached the hung call"
        time.sleep(0.001)

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

"""NVML process accounting: memory per process over the three process lists, SM use per process
in timestamp windows, MIG instances (memory only, never the parent handle), the v2 -> v1 and
_v3 -> _v2 fallbacks, owners from a `PidOwners`, and failures that stay on their GPU.

Most tests put stand-ins for the process calls on the simulator's api object, so that each NVML
answer (NOT_FOUND, a missing symbol, a windowed sample list) is exactly the one a test needs; the
last ones run against the simulator's own process table, and against reads that never return
(a FIFO in the proc root, an owner lookup stuck in its round)."""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

import pynvml
import pytest

from benchmarks import process_accounting
from kube_gpu_exporter.exporter.background import PeriodicSampler
from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.nvml.helper_registry import HelperInputs, build_helpers
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.nvml.process_sampler import ProcessSampler
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.processes.host_pids import HostPidOwners
from kube_gpu_exporter.exporter.processes.owner import EXITED, HOST, OTHER_PID_NAMESPACE
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuSnapshot,
    NodeSnapshot,
    ProcessOwner,
)
from tests.conftest import FAST, fleet_from_yaml, quiet, wait_for
from tests.support.clock_steps import parked, step
from tests.support.stepped_node import poller_on
from tests.unit.test_pid_owners import run_bounded

# Two whole GPUs and a MIG GPU with two instances.
FLEET = """
    gpus:
      - {model: H100-80GB-HBM3, workload: training}
      - {model: H100-80GB-HBM3, workload: inference}
      - model: H100-80GB-HBM3
        workload: inference
        mig: [1g.10gb, 3g.40gb]
"""
GIB = 1 << 30
NO_INSTANCE = 0xFFFFFFFF
# What nvidia-ml-py's unversioned list wrappers raise on a driver without the _v3 symbols.
MISMATCH = pynvml.NVMLLibraryMismatchError("the driver has no _v3 symbol")
_LIST_FUNCTIONS = {
    "Compute": "compute",
    "Graphics": "graphics",
    "MPSCompute": "mps",
}


@dataclass
class StandIn:
    """Process answers per device uuid (a GPU's, or a MIG device's), in NVML's shapes."""

    compute: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    graphics: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    mps: dict[str, list[tuple[int, int | None]]] = field(default_factory=dict)
    # uuid -> (pid, timestamp µs, SM %) samples the driver holds.
    samples: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    # function name -> uuid -> what it raises instead of answering; "*" for every device.
    errors: dict[str, dict[str, BaseException]] = field(default_factory=dict)
    # (function, uuid) per call, and the timestamps each utilization call asked from.
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    asked_since: dict[str, list[int]] = field(default_factory=dict)
    # The simulator's api object the stand-ins are put on; they ask it for device uuids.
    api: Any = None

    def install(self, api: Any) -> ExitStack:
        self.api = api
        stack = ExitStack()
        for kind, table in _LIST_FUNCTIONS.items():
            for suffix in ("", "_v2"):
                name = f"nvmlDeviceGet{kind}RunningProcesses{suffix}"
                stack.enter_context(
                    mock.patch.object(api, name, self._lister(name, getattr(self, table)))
                )
        stack.enter_context(
            mock.patch.object(
                api,
                "nvmlDeviceGetProcessesUtilizationInfo",
                self._sampler(
                    "nvmlDeviceGetProcessesUtilizationInfo",
                    lambda pid, stamp, sm: pynvml.c_nvmlProcessUtilizationInfo_v1_t(
                        timeStamp=stamp, pid=pid, smUtil=sm, memUtil=sm // 2
                    ),
                ),
            )
        )
        stack.enter_context(
            mock.patch.object(
                api,
                "nvmlDeviceGetProcessUtilization",
                self._sampler(
                    "nvmlDeviceGetProcessUtilization",
                    lambda pid, stamp, sm: pynvml.c_nvmlProcessUtilizationSample_t(
                        pid=pid, timeStamp=stamp, smUtil=sm, memUtil=sm // 2
                    ),
                ),
            )
        )
        return stack

    def _raise_if_told(self, name: str, uuid: str) -> None:
        told = self.errors.get(name, {})
        error = told.get(uuid) or told.get("*")
        if error is not None:
            raise error

    def _lister(self, name: str, table: dict[str, list[tuple[int, int | None]]]) -> Callable:
        def list_processes(handle: Any) -> list[Any]:
            uuid = self.api.nvmlDeviceGetUUID(handle)
            self.calls[(name, uuid)] += 1
            self._raise_if_told(name, uuid)
            rows = []
            for pid, memory in table.get(uuid, []):
                row = pynvml.nvmlStructToFriendlyObject(
                    pynvml.c_nvmlProcessInfo_v3_t(
                        pid=pid,
                        usedGpuMemory=memory or 0,
                        gpuInstanceId=NO_INSTANCE,
                        computeInstanceId=NO_INSTANCE,
                    )
                )
                if memory is None:  # what nvidia-ml-py makes of NVML_VALUE_NOT_AVAILABLE
                    row.usedGpuMemory = None
                rows.append(row)
            return rows

        return list_processes

    def _sampler(self, name: str, make: Callable[[int, int, int], Any]) -> Callable:
        def utilization(handle: Any, since: int) -> list[Any]:
            uuid = self.api.nvmlDeviceGetUUID(handle)
            self.calls[(name, uuid)] += 1
            self.asked_since.setdefault(uuid, []).append(since)
            self._raise_if_told(name, uuid)
            newer = [make(*s) for s in self.samples.get(uuid, []) if s[1] > since]
            if not newer:
                raise pynvml.NVMLError_NotFound()
            return newer

        return utilization

    def called(self, name: str, uuid: str | None = None) -> int:
        return sum(n for (f, u), n in self.calls.items() if f == name and uuid in (None, u))


class FakeOwners:
    """A `PidOwners` answering from a table; unknown PIDs have exited."""

    def __init__(self, table: dict[int, ProcessOwner | str], problem: str | None = None) -> None:
        self.table = table
        self.trouble = problem
        self.lookups: Counter[int] = Counter()

    def owner(self, pid: int) -> ProcessOwner | str:
        self.lookups[pid] += 1
        return self.table.get(pid, EXITED)

    def problem(self) -> str | None:
        return self.trouble


TRAINER = ProcessOwner("uid-a", "c-a", "ml", "trainer-0", "main")
SERVER = ProcessOwner("uid-b", "c-b", "web", "server-1", "model")


@pytest.fixture
def sim(make_sim: Callable[..., FakeNvml]) -> Iterator[FakeNvml]:
    sim = make_sim(fleet_from_yaml(FLEET))
    sim.api.nvmlInit()
    yield sim
    sim.api.nvmlShutdown()


@pytest.fixture
def nvml(sim: FakeNvml) -> Iterator[StandIn]:
    stand_in = StandIn()
    with stand_in.install(sim.api):
        yield stand_in


@pytest.fixture
def tally() -> ErrorTally:
    return ErrorTally()


@pytest.fixture
def owners() -> FakeOwners:
    return FakeOwners({101: TRAINER, 102: TRAINER, 201: SERVER, 7: HOST})


def live(sim: FakeNvml) -> list[LiveGpu]:
    return [
        LiveGpu(
            g.index,
            g.uuid,
            tuple(m.gpu_instance_id for m in g.live_instances()) if g.mig_enabled else None,
        )
        for g in sim.gpus
    ]


def mig_uuids(sim: FakeNvml) -> dict[int, str]:
    """GPU-instance id -> MIG device uuid, for the MIG GPU."""
    return {m.gpu_instance_id: m.uuid for m in sim.gpus[2].live_instances()}


@pytest.fixture
def make_sampler(
    sim: FakeNvml, tally: ErrorTally, owners: FakeOwners
) -> Iterator[Callable[..., ProcessSampler]]:
    samplers: list[ProcessSampler] = []

    def make(pid_owners: FakeOwners = owners) -> ProcessSampler:
        nvml = GuardedNvml(tally, sim.api)
        sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), pid_owners, interval_seconds=0.05)
        sampler.track(live(sim))
        samplers.append(sampler)
        return sampler

    yield make
    for sampler in samplers:
        sampler.stop()


def by_pid(processes: tuple[GpuProcess, ...] | None) -> dict[int, GpuProcess]:
    assert processes is not None
    return {p.pid: p for p in processes}


def errors(tally: ErrorTally) -> dict[tuple[str, ...], int]:
    return dict(tally.snapshot())


def snapshot_of(sim: FakeNvml, index: int) -> GpuSnapshot:
    gpu = sim.gpus[index]
    return GpuSnapshot(
        GpuIdentity(index, gpu.uuid, "", "", mig_enabled=gpu.mig_enabled), up=True, readings=None
    )


# ---- memory per process ----


def test_memory_per_process_over_the_three_lists(sim, nvml, owners, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(201, 4 * GIB), (101, 10 * GIB), (7, GIB)]
    nvml.graphics[uuid] = [(101, 12 * GIB)]  # also a graphics client: its larger figure wins
    nvml.mps[uuid] = [(102, None), (201, 2 * GIB)]  # NVML could not tell 102's memory
    sampler = make_sampler()
    sampler.sample_once()

    processes = sampler.latest(uuid)
    assert [p.pid for p in processes] == [7, 101, 102, 201]
    found = by_pid(processes)
    assert found[101].used_memory_bytes == 12 * GIB
    assert found[201].used_memory_bytes == 4 * GIB
    assert found[102].used_memory_bytes is None
    assert found[101].owner == TRAINER and found[101].unattributed_reason == ""
    assert found[7].owner is None and found[7].unattributed_reason == HOST
    assert all(p.gpu_instance_id is None for p in processes)
    assert sampler.latest(sim.gpus[1].uuid) == ()  # asked, and nothing runs there
    assert sampler.last_success


def test_a_pid_in_two_lists_keeps_the_figure_nvml_knows(sim, nvml, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, None)]
    nvml.graphics[uuid] = [(101, 3 * GIB)]
    sampler = make_sampler()
    sampler.sample_once()
    [process] = sampler.latest(uuid)
    assert (process.pid, process.used_memory_bytes) == (101, 3 * GIB)


def test_merge_fills_the_gpu_snapshot(sim, nvml, make_sampler):
    nvml.compute[sim.gpus[1].uuid] = [(201, GIB)]
    sampler = make_sampler()
    uuid = sim.gpus[1].uuid
    assert sampler.contribution(uuid, None) == {}  # nothing sampled yet: not collected, not empty
    sampler.sample_once()
    assert sampler.contribution(uuid, None)["processes"] == (
        GpuProcess(201, None, GIB, sm_util_pct=0, owner=SERVER, unattributed_reason=""),
    )


def test_one_owner_lookup_per_pid_per_round(sim, nvml, owners, make_sampler):
    # An MPS server's clients, or one process driving two GPUs, appear on both.
    for gpu in sim.gpus[:2]:
        nvml.compute[gpu.uuid] = [(101, GIB), (201, GIB)]
    sampler = make_sampler()
    sampler.sample_once()
    assert owners.lookups == {101: 1, 201: 1}
    sampler.sample_once()
    assert owners.lookups == {101: 2, 201: 2}  # the resolver caches; a round asks it again


def test_an_unsupported_list_is_empty_and_not_asked_again(sim, nvml, tally, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB)]
    nvml.errors["nvmlDeviceGetGraphicsRunningProcesses"] = {uuid: pynvml.NVMLError_NotSupported()}
    sampler = make_sampler()
    for _ in range(3):
        sampler.sample_once()
        assert [p.pid for p in sampler.latest(uuid)] == [101]
        assert sampler.last_success
    assert nvml.called("nvmlDeviceGetGraphicsRunningProcesses", uuid) == 1
    assert errors(tally) == {("nvmlDeviceGetGraphicsRunningProcesses", "NOT_SUPPORTED"): 1}


def test_a_driver_without_the_v3_lists_is_read_through_v2(sim, nvml, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, 5 * GIB)]
    for kind in _LIST_FUNCTIONS:
        nvml.errors[f"nvmlDeviceGet{kind}RunningProcesses"] = {"*": MISMATCH}
    sampler = make_sampler()
    sampler.sample_once()
    sampler.sample_once()
    assert by_pid(sampler.latest(uuid))[101].used_memory_bytes == 5 * GIB
    assert sampler.last_success
    assert nvml.called("nvmlDeviceGetComputeRunningProcesses", uuid) == 1  # remembered
    assert nvml.called("nvmlDeviceGetComputeRunningProcesses_v2", uuid) == 2


# ---- SM use per process ----


def test_not_found_means_no_busy_process(sim, nvml, tally, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB), (201, GIB)]  # no samples: NVML answers NOT_FOUND
    sampler = make_sampler()
    sampler.sample_once()
    assert [p.sm_util_pct for p in sampler.latest(uuid)] == [0, 0]
    assert sampler.last_success
    assert errors(tally) == {}


def test_samples_are_averaged_per_window_and_the_next_window_starts_after_the_newest(
    sim, nvml, make_sampler
):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB), (201, GIB)]
    nvml.samples[uuid] = [(101, 1_000, 40), (201, 1_500, 10), (101, 2_000, 60)]
    sampler = make_sampler()
    sampler.sample_once()
    assert {p.pid: p.sm_util_pct for p in sampler.latest(uuid)} == {101: 50, 201: 10}

    nvml.samples[uuid].append((201, 3_000, 30))
    sampler.sample_once()
    # Only the new sample counts: 101 was idle in this window.
    assert {p.pid: p.sm_util_pct for p in sampler.latest(uuid)} == {101: 0, 201: 30}
    sampler.sample_once()  # nothing newer than 3000: NOT_FOUND
    assert {p.pid: p.sm_util_pct for p in sampler.latest(uuid)} == {101: 0, 201: 0}
    assert nvml.asked_since[uuid] == [0, 2_000, 3_000]


def test_samples_at_or_before_the_window_start_are_ignored(sim, nvml, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB)]
    nvml.samples[uuid] = [(101, 2_000, 90)]
    sampler = make_sampler()
    sampler.sample_once()
    # A driver that hands back the boundary sample with a new one must not count it twice.
    with mock.patch.object(
        sim.api,
        "nvmlDeviceGetProcessesUtilizationInfo",
        lambda handle, since: [
            pynvml.c_nvmlProcessUtilizationInfo_v1_t(timeStamp=2_000, pid=101, smUtil=90),
            pynvml.c_nvmlProcessUtilizationInfo_v1_t(timeStamp=2_500, pid=101, smUtil=20),
        ],
    ):
        sampler.sample_once()
    assert by_pid(sampler.latest(uuid))[101].sm_util_pct == 20


@pytest.mark.parametrize(
    "missing",
    [pynvml.NVMLError_FunctionNotFound(), pynvml.NVMLError_NotSupported(), MISMATCH],
    ids=["function-not-found", "not-supported", "library-mismatch"],
)
def test_utilization_falls_back_to_v1_per_device(sim, nvml, make_sampler, missing):
    old, new = sim.gpus[0].uuid, sim.gpus[1].uuid
    for uuid in (old, new):
        nvml.compute[uuid] = [(101, GIB)]
        nvml.samples[uuid] = [(101, 1_000, 70)]
    nvml.errors["nvmlDeviceGetProcessesUtilizationInfo"] = {old: missing}
    sampler = make_sampler()
    sampler.sample_once()
    assert by_pid(sampler.latest(old))[101].sm_util_pct == 70
    sampler.sample_once()
    assert by_pid(sampler.latest(old))[101].sm_util_pct == 0  # nothing newer: idle
    assert nvml.called("nvmlDeviceGetProcessesUtilizationInfo", old) == 1  # remembered
    assert nvml.called("nvmlDeviceGetProcessUtilization", old) == 2
    assert nvml.asked_since[old] == [0, 0, 1_000]  # v2 refused at 0; v1 asked twice
    assert nvml.called("nvmlDeviceGetProcessUtilization", new) == 0  # its driver path is v2
    assert sampler.last_success


def test_v1_window_values(sim, nvml, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB), (201, GIB)]
    nvml.samples[uuid] = [(101, 1_000, 70), (201, 1_100, 20), (201, 1_200, 30)]
    nvml.errors["nvmlDeviceGetProcessesUtilizationInfo"] = {"*": pynvml.NVMLError_NotSupported()}
    sampler = make_sampler()
    sampler.sample_once()
    assert {p.pid: p.sm_util_pct for p in sampler.latest(uuid)} == {101: 70, 201: 25}


def test_no_per_process_utilization_at_all_keeps_the_memory(sim, nvml, tally, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB)]
    nvml.errors["nvmlDeviceGetProcessesUtilizationInfo"] = {"*": pynvml.NVMLError_NotSupported()}
    nvml.errors["nvmlDeviceGetProcessUtilization"] = {"*": pynvml.NVMLError_NotSupported()}
    sampler = make_sampler()
    sampler.sample_once()
    sampler.sample_once()
    [process] = sampler.latest(uuid)
    assert process.sm_util_pct is None and process.used_memory_bytes == GIB
    assert sampler.last_success
    assert nvml.called("nvmlDeviceGetProcessUtilization", uuid) == 1
    # Counted once per whole GPU (the MIG GPU is never asked), as the guard counts refusals.
    assert errors(tally)[("nvmlDeviceGetProcessUtilization", "NOT_SUPPORTED")] == 2


# ---- MIG ----


def test_mig_instances_give_memory_only_and_the_parent_is_never_asked(sim, nvml, make_sampler):
    parent = sim.gpus[2].uuid
    instances = mig_uuids(sim)
    small, large = sorted(instances)
    nvml.compute[instances[small]] = [(101, GIB)]
    nvml.compute[instances[large]] = [(201, 20 * GIB), (7, GIB)]
    # Unprivileged, the parent handle's answers are refusals; the sampler must not need them.
    for name in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetProcessesUtilizationInfo"):
        nvml.errors[name] = {parent: pynvml.NVMLError_NoPermission()}
    sampler = make_sampler()
    sampler.sample_once()

    processes = sampler.latest(parent)
    assert [(p.pid, p.gpu_instance_id, p.used_memory_bytes) for p in processes] == [
        (7, large, GIB),
        (101, small, GIB),
        (201, large, 20 * GIB),
    ]
    assert all(p.sm_util_pct is None for p in processes)
    assert by_pid(processes)[201].owner == SERVER
    assert [u for (_f, u) in nvml.calls if u == parent] == []
    assert sampler.last_success


# ---- failures ----


def test_one_failing_gpu_does_not_lose_the_others(sim, nvml, tally, make_sampler):
    broken, fine = sim.gpus[0].uuid, sim.gpus[1].uuid
    nvml.compute[broken] = [(101, GIB)]
    nvml.compute[fine] = [(201, GIB)]
    sampler = make_sampler()
    sampler.sample_once()
    assert sampler.latest(broken) is not None
    nvml.errors["nvmlDeviceGetComputeRunningProcesses"] = {broken: pynvml.NVMLError_Unknown()}
    sampler.sample_once()
    assert not sampler.last_success
    assert sampler.latest(broken) is None  # a partial list would undercount its pods
    assert sampler.contribution(sim.gpus[0].uuid, None) == {}
    assert [p.pid for p in sampler.latest(fine)] == [201]
    assert errors(tally) == {("nvmlDeviceGetComputeRunningProcesses", "UNKNOWN"): 1}

    del nvml.errors["nvmlDeviceGetComputeRunningProcesses"]
    sampler.sample_once()  # a transient error is asked again next round
    assert sampler.last_success and [p.pid for p in sampler.latest(broken)] == [101]


def test_a_failing_utilization_window_fails_its_gpu_only(sim, nvml, tally, make_sampler):
    broken, fine = sim.gpus[0].uuid, sim.gpus[1].uuid
    for uuid in (broken, fine):
        nvml.compute[uuid] = [(101, GIB)]
    nvml.errors["nvmlDeviceGetProcessesUtilizationInfo"] = {broken: pynvml.NVMLError_Unknown()}
    sampler = make_sampler()
    sampler.sample_once()
    assert not sampler.last_success
    assert sampler.latest(broken) is None and sampler.latest(fine) is not None
    assert errors(tally) == {("nvmlDeviceGetProcessesUtilizationInfo", "UNKNOWN"): 1}


def test_a_lost_gpu_does_not_lose_the_others(sim, nvml, make_sampler):
    nvml.compute[sim.gpus[1].uuid] = [(201, GIB)]
    sampler = make_sampler()
    sim.lose_gpu(0)
    sampler.sample_once()
    assert not sampler.last_success
    assert sampler.latest(sim.gpus[0].uuid) is None
    assert [p.pid for p in sampler.latest(sim.gpus[1].uuid)] == [201]


def test_attribution_impossible_fails_the_round_with_one_log_line(sim, nvml, make_sampler, caplog):
    nvml.compute[sim.gpus[0].uuid] = [(101, GIB)]
    owners = FakeOwners({101: TRAINER}, problem="/proc is not the host's PID namespace")
    sampler = make_sampler(owners)
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.nvml.process_sampler")
    for _ in range(3):
        sampler.sample_once()
        assert not sampler.last_success
        assert not sampler.status().success
        assert sampler.latest(sim.gpus[0].uuid) is None
        assert sampler.contribution(sim.gpus[0].uuid, None) == {}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "host's PID namespace" in warnings[0].getMessage()
    assert sum(nvml.calls.values()) == 0  # nothing asked of NVML for data nobody can attribute

    owners.trouble = None
    sampler.sample_once()
    assert sampler.last_success
    assert by_pid(sampler.latest(sim.gpus[0].uuid))[101].owner == TRAINER


def test_invalidate_starts_the_windows_again(sim, nvml, make_sampler):
    uuid = sim.gpus[0].uuid
    nvml.compute[uuid] = [(101, GIB)]
    nvml.samples[uuid] = [(101, 1_000, 70)]
    sampler = make_sampler()
    sampler.sample_once()
    sampler.invalidate()
    assert sampler.latest(uuid) is None
    sampler.sample_once()
    # A reloaded driver's clock and samples are its own: the window starts from nothing.
    assert nvml.asked_since[uuid] == [0, 0]


# ---- wiring ----


def test_the_registry_adds_the_sampler_only_when_enabled(sim, owners):
    tally = ErrorTally()
    source = sim.source()
    nvml = GuardedNvml(tally, source.api)

    def names(config: CollectionConfig, **kwargs: Any) -> list[str]:
        inputs = HelperInputs(config, source, nvml, tally, lambda u: None, **kwargs)
        return [h.collector for h in build_helpers(inputs)]

    enabled = CollectionConfig(processes_enabled=True)
    assert names(enabled, pid_owners=owners) == ["xid", "pcie", "gpm", "processes"]
    # Without owners given, the host's /proc and /var/log at the configured roots serve.
    assert names(enabled) == ["xid", "pcie", "gpm", "processes"]
    assert names(CollectionConfig(), pid_owners=owners) == ["xid", "pcie", "gpm"]


def test_the_poller_reports_processes_per_gpu(sim, nvml, owners):
    nvml.compute[sim.gpus[0].uuid] = [(101, GIB)]
    nvml.compute[mig_uuids(sim)[min(mig_uuids(sim))]] = [(201, GIB)]
    config = replace(FAST, processes_enabled=True, xid_enabled=False, gpm_enabled=False)
    stepped = SteppedHelpers()
    poller = Poller(
        config, lambda s: None, sim.source(), workers=4, runner=stepped, pid_owners=owners
    )
    try:
        poller.sweep()  # tells the helpers which GPUs answered
        stepped.run_once()
        snapshot = poller.sweep()
    finally:
        poller.stop(timeout=2.0)
    statuses = {c.name: c.success for c in snapshot.collectors}
    assert statuses["processes"] is True
    processes = {g.identity.index: g.processes for g in snapshot.gpus}
    assert [p.owner for p in processes[0] or ()] == [TRAINER]
    assert processes[1] == ()
    assert [(p.pid, p.sm_util_pct) for p in processes[2] or ()] == [(201, None)]


def test_the_benchmark_times_full_rounds_of_every_process():
    # It raises unless every round succeeded and found all 2 x 5 processes.
    figures = process_accounting.measure(gpus=2, processes=5, repeat=1)
    assert set(figures) == {"table", "host", "binding"}
    assert all(ms > 0 for ms in figures.values())


# ---- against the simulator's processes ----


class SimNode:
    """The default simulated node with its pods' processes, on a clock the test steps."""

    def __init__(self, tmp_path: Any, driver_version: str | None = None) -> None:
        fleet = quiet(default_fleet())
        if driver_version is not None:
            fleet = replace(fleet, driver_version=driver_version)
        self.t = 0.0
        self.nvml = FakeNvml(fleet, clock=lambda: self.t)
        self.nvml.api.nvmlInit()
        self.table = ProcessTable(self.nvml, FakeKubelet(self.nvml, tmp_path / "k.sock"))
        self.nvml.processes = self.table
        self.tally = ErrorTally()
        guarded = GuardedNvml(self.tally, self.nvml.api)
        self.sampler = ProcessSampler(
            guarded, MigReader(guarded, 60.0), self.owners(), interval_seconds=1.0
        )
        self.sampler.track(live(self.nvml))

    def owners(self) -> FakeOwners:
        table = self.table
        return FakeOwners(
            {
                p.pid: HOST
                if p.container is None
                else ProcessOwner(
                    p.container.pod_uid,
                    p.container.container_id,
                    p.container.namespace,
                    p.container.pod,
                    p.container.name,
                )
                for p in table.processes()
            }
        )

    def round(self, step_s: float = 1.0) -> None:
        self.t += step_s
        self.sampler.sample_once()

    def close(self) -> None:
        self.sampler.stop()
        self.nvml.api.nvmlShutdown()
        self.nvml.close()


@pytest.fixture
def node(tmp_path: Any) -> Iterator[SimNode]:
    node = SimNode(tmp_path)
    yield node
    node.close()


def test_simulated_processes_add_up_to_their_devices(node: SimNode):
    node.round()
    node.round()
    assert node.sampler.last_success and node.tally.snapshot() == ()
    now = node.nvml.now()
    for gpu in node.nvml.gpus:
        processes = node.sampler.latest(gpu.uuid)
        assert processes is not None
        memory = sum(p.used_memory_bytes or 0 for p in processes)
        assert memory <= gpu.memory(now)[2]  # the rest stays with the driver
        if gpu.mig_enabled:
            live_ids = {m.gpu_instance_id for m in gpu.live_instances()}
            assert processes and {p.gpu_instance_id for p in processes} <= live_ids
            assert all(p.sm_util_pct is None for p in processes)
        else:
            # One sample per busy process at the query's instant: the shares are the device's.
            assert sum(p.sm_util_pct or 0 for p in processes) == round(gpu.utilization(now) * 100)
    # The time-sliced GPU's pods each get their own share.
    shared = {p.owner.pod for p in node.sampler.latest(node.nvml.gpus[3].uuid) or () if p.owner}
    assert len(shared) >= 3


def test_simulated_mig_parent_is_never_asked(node: SimNode):
    node.round()
    asked = node.nvml.calls
    assert node.sampler.last_success
    # The unprivileged parent would refuse (NO_PERMISSION), and the guard would count it.
    assert not any(error == "NO_PERMISSION" for (_f, error), _n in node.tally.snapshot())
    assert asked["nvmlDeviceGetProcessesUtilizationInfo"] == 6  # the six whole GPUs only


def test_an_exited_process_leaves_the_next_round(node: SimNode):
    node.round()
    gpu = node.nvml.gpus[3]
    before = node.sampler.latest(gpu.uuid) or ()
    gone = before[0].pid
    node.table.exit(gone)
    node.round()
    after = node.sampler.latest(gpu.uuid) or ()
    assert gone not in {p.pid for p in after} and len(after) == len(before) - 1


def test_simulated_older_driver_uses_v2_lists_and_v1_utilization(tmp_path: Any):
    node = SimNode(tmp_path, driver_version="535.98")  # no _v3 lists, no v2 utilization
    try:
        node.round()
        node.round()
        assert node.sampler.last_success
        calls = node.nvml.calls
        assert calls["nvmlDeviceGetComputeRunningProcesses_v2"] > 0
        assert calls["nvmlDeviceGetProcessUtilization"] == 12  # 6 whole GPUs x 2 rounds
        assert calls["nvmlDeviceGetProcessesUtilizationInfo"] == 6  # refused once per GPU
        now = node.nvml.now()
        busy = node.nvml.gpus[0]
        processes = node.sampler.latest(busy.uuid) or ()
        assert sum(p.sm_util_pct or 0 for p in processes) == round(busy.utilization(now) * 100)
        assert all(p.used_memory_bytes for p in processes)
    finally:
        node.close()


# ---- stuck reads: one must neither freeze process accounting nor wedge the exporter ----
#
# A FIFO in a proc root blocks open() until something writes to it, and a round that never ended
# kept `collector_success{collector="processes"}` at 1 over frozen per-pod figures, then blocked
# the driver-reload path on the sampler's lock. The FIFOs here are real ones (os.mkfifo); the
# stuck round is a real helper thread blocked on an Event inside its round, overdue on a
# ManualClock.

# A round or sweep that has not returned by then is hung, not slow: each takes milliseconds here.
HANG_S = 5.0


@pytest.fixture
def node_sim(make_sim: Callable[..., FakeNvml]) -> FakeNvml:
    """The default simulated node (this file's `sim` is a smaller fleet of its own)."""
    return make_sim(None)


@pytest.fixture
def host_tree_node(node_sim: FakeNvml, tmp_path: Path) -> Iterator[tuple[ProcessTable, HostTree]]:
    table = ProcessTable(node_sim, FakeKubelet(node_sim, tmp_path / "kubelet.sock"))
    node_sim.processes = table
    node_sim.api.nvmlInit()
    yield table, HostTree(table, tmp_path / "host").refresh()
    node_sim.api.nvmlShutdown()


def test_a_fifo_skips_its_pid_and_the_round_reads_every_other(
    node_sim: FakeNvml,
    host_tree_node: tuple[ProcessTable, HostTree],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = node_sim
    table, tree = host_tree_node
    caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.processes")
    victim = next(p for p in table.processes() if p.container is not None)
    fifo = tree.proc_root / str(victim.pid) / "stat"
    fifo.unlink()
    os.mkfifo(fifo)
    nvml = GuardedNvml(ErrorTally(), sim.api)
    owners = HostPidOwners(tree.proc_root, tree.log_root)
    sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), owners, interval_seconds=1.0)
    sampler.track(live(sim))
    finished, _ = run_bounded(sampler.sample_once, [fifo])
    assert finished, "the sampler hung on a FIFO"
    assert sampler.last_success
    seen = {p.pid: p for g in sim.gpus for p in sampler.latest(g.uuid) or ()}
    assert seen[victim.pid].owner is None
    assert seen[victim.pid].unattributed_reason == OTHER_PID_NAMESPACE
    others = [p for p in table.processes() if p.container is not None and p.pid != victim.pid]
    assert others and all(seen[p.pid].owner is not None for p in others)
    assert [r.getMessage() for r in caplog.records if str(fifo) in r.getMessage()] != []


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
    node_sim: FakeNvml, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    sim = node_sim
    sim.processes = ProcessTable(sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    config = replace(
        FAST,
        processes_enabled=True,
        xid_enabled=False,
        pcie_enabled=True,
        pcie_interval_seconds=0.2,
    )
    # Overdue after max(2 intervals, the floor): the production floor, passed on the clock.
    limit = max(
        PeriodicSampler.overdue_after_intervals * config.interval_seconds,
        PeriodicSampler.overdue_floor_seconds,
    )
    owners = StuckOwners()
    clock = ManualClock()
    caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.background")
    with poller_on(clock, sim, config, pid_owners=owners) as poller:
        try:
            # The sweep that finds the GPUs starts a round of each helper: its processes show.
            assert wait_for(lambda: any(g.processes for g in poller.sweep().gpus), HANG_S)
            # The PCIe, GPM and process samplers then wait for their next round on the clock. One
            # more round each: GPM measures between two samples, which the clock must set apart.
            assert parked(clock, 3) == pytest.approx([0.2] * 3)
            assert step(clock, 3) == pytest.approx(0.2)
            assert all(_statuses(poller.sweep()).values())

            owners.armed.set()
            clock.advance(0.2)
            assert owners.entered.wait(HANG_S), "no round started"
            parked(clock, 2)  # PCIe and GPM wait again; the process round does not return
            clock.advance(limit)
            parked(clock, 2)
            # At its limit, not past it: a round as slow as a busy driver still counts.
            assert _statuses(poller.sweep())["processes"]
            clock.advance(0.5)
            parked(clock, 2)
            snapshot = poller.sweep()
            assert _statuses(snapshot) == {
                "nvml": True,
                "pcie": True,
                "gpm": True,
                "processes": False,
            }
            # The per-pod figures of a round that never ended are not shown as if current.
            assert all(g.processes is None for g in snapshot.gpus)
            # Said once, with how long the round has run on the clock.
            overdue = [r.getMessage() for r in caplog.records if "past its" in r.getMessage()]
            assert len(overdue) == 1, overdue
            assert overdue[0].startswith("process-sampler: a round has run for 10.5s, past its")

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
            # The round that ended ran past its interval: the next one starts at once, without
            # the clock moving, and reads the reloaded driver.
            assert wait_for(lambda: _statuses(poller.sweep())["processes"], HANG_S)
            assert wait_for(lambda: any(g.processes for g in poller.sweep().gpus), HANG_S)
        finally:
            owners.release.set()

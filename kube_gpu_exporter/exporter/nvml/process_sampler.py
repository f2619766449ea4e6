"""NVML process accounting, once per collection interval: which processes hold memory on each GPU
(and on each MIG instance), how busy each kept the SMs since the previous round, and whom each
belongs to.

Every GPU costs a fixed handful of NVML calls whatever its process count (three lists per handle
and one utilization window per whole GPU), never one per process; owners come from a `PidOwners`
that caches per process. Facts relied on, from nvidia-ml-py's pynvml.py and the NVML reference:

- the list calls are the `_v3` symbols; a driver without them makes nvidia-ml-py raise
  `NVMLLibraryMismatchError` (not an NVMLError), and the `_v2` symbols answer instead;
- per-process utilization is windowed by timestamp: NVML returns the samples newer than the
  timestamp it is given, NOT_FOUND when there are none (no process was busy);
  `nvmlDeviceGetProcessesUtilizationInfo` is the newer call, `nvmlDeviceGetProcessUtilization`
  the one older drivers have;
- under MIG the parent handle's process answers need a privileged caller and there is no
  per-process utilization at all, so only the MIG device handles are asked, for memory.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.nvml.binding import (
    GPU_GONE,
    PERMANENTLY_UNAVAILABLE,
    NVMLError,
    error_name,
)
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu, PeriodicHelper
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.processes.owner import PidOwners, log_name_conflicts
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuReadings,
    HelperParts,
    ProcessOwner,
)

log = logging.getLogger(__name__)

# The process lists, as the middle of nvmlDeviceGet<kind>RunningProcesses.
LIST_KINDS = ("Compute", "Graphics", "MPSCompute")
# Per-process utilization calls, newest first; a device that lacks one is not asked it again.
UTILIZATION_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
# How a driver says it lacks a call: nvidia-ml-py turns FunctionNotFound into
# NVMLLibraryMismatchError for its unversioned wrappers.
_LACKS_CALL = (*PERMANENTLY_UNAVAILABLE, pynvml.NVMLLibraryMismatchError)

# (pid, GPU-instance id or None on a whole GPU)
ProcessKey = tuple[int, int | None]


class _Unreadable(Exception):
    """This GPU's processes could not all be read this round: report none rather than a part."""


@dataclass(frozen=True, slots=True)
class _Handle:
    """One handle to list processes on: the whole GPU, or one MIG device of it."""

    uuid: str
    handle: Any
    gpu_instance_id: int | None


@dataclass
class _Round:
    processes: dict[str, tuple[GpuProcess, ...]] = field(default_factory=dict)
    ok: bool = True


@dataclass
class _DriverState:
    """What rounds learn about the loaded driver and carry to the next. Replaced whole when NVML
    goes, never cleared in place: a round still running then keeps the old one to itself."""

    # GPU uuid -> index into UTILIZATION_CALLS of the call it answers (len: none).
    utilization_call: dict[str, int] = field(default_factory=dict)
    # GPU uuid -> newest sample timestamp seen (µs); the next window starts after it.
    last_seen: dict[str, int] = field(default_factory=dict)
    # Handles (uuid) whose driver has only the _v2 process lists.
    v2_lists: set[str] = field(default_factory=set)


class ProcessSampler(PeriodicHelper):
    thread_name = "process-sampler"
    collector = "processes"

    def __init__(
        self,
        nvml: GuardedNvml,
        mig: MigReader,
        owners: PidOwners,
        interval_seconds: float,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(interval_seconds, clock)
        self._nvml = nvml
        # The poller's reader: its cached topology already holds the MIG device handles, and the
        # poller invalidates it when a MIG configuration changes.
        self._mig = mig
        self._owners = owners
        self._targets: tuple[LiveGpu, ...] = ()
        # One round at a time (the thread's, or run_once's). invalidate() never takes it: a
        # round stuck in NVML or in a /proc read must not hold up the driver-reload path.
        self._round_lock = threading.Lock()
        # Held only to publish a round's results or to swap the driver state, never over work.
        self._publish_lock = threading.Lock()
        self._driver = _DriverState()
        self._logged_problem: str | None = None
        # Swapped whole, never mutated: the sweep's workers read it without the lock.
        self._latest: dict[str, tuple[GpuProcess, ...]] = {}

    # What the poller sees

    def track(self, gpus: Sequence[LiveGpu]) -> None:
        self._targets = tuple(gpus)
        super().track(gpus)

    def contribution(self, uuid: str, readings: GpuReadings | None) -> HelperParts:
        if self.overdue_seconds() is not None:
            # A round that never ends leaves per-pod figures frozen while the device's own move
            # on: show none, as collector_success already says, rather than old ones as current.
            return {}
        processes = self._latest.get(uuid)
        return {} if processes is None else {"processes": processes}

    def latest(self, uuid: str) -> tuple[GpuProcess, ...] | None:
        return self._latest.get(uuid)

    @property
    def log_name_conflicts(self) -> int | None:
        """Container IDs and pod UIDs the kubelet's log names give more than one name, as of
        the owners' last log scan; None where the owners do not count them. Never waits for a
        round: the sweep thread reads it."""
        return log_name_conflicts(self._owners)

    def invalidate(self) -> None:
        """NVML was shut down: handles are gone and the driver may be another one now. Never
        waits for a round in progress: that round's results are dropped when it ends."""
        with self._publish_lock:
            self._driver = _DriverState()
            self._latest = {}
            # No round has read the new driver yet.
            self.last_success = False
        super().invalidate()

    # One round

    def sample_once(self) -> None:
        with self._round_lock:
            driver = self._driver
            round_ = self._sample_round(driver)
            with self._publish_lock:
                if driver is not self._driver:
                    return  # NVML went during the round: what it read is of a library now gone
                self._latest = round_.processes
                self.last_success = round_.ok

    def _sample_round(self, driver: _DriverState) -> _Round:
        if self._attribution_impossible():
            # Nothing is asked of NVML: processes nobody can attribute would only be exported as
            # one unattributed lump, which the device's own memory figure already says.
            return _Round(ok=False)
        round_ = _Round()
        owners: dict[int, ProcessOwner | str] = {}
        targets = self._targets
        for target in targets:
            try:
                usage, sm = self._sample_gpu(target, driver)
            except GPU_GONE:
                round_.ok = False
                continue
            except (_Unreadable, NVMLError) as exc:
                log.debug("process accounting of GPU %d failed: %s", target.index, exc)
                round_.ok = False
                continue
            round_.processes[target.uuid] = self._processes(usage, sm, owners)
        _retain(driver, (t.uuid for t in targets))
        return round_

    def _attribution_impossible(self) -> bool:
        problem = self._owners.problem()
        if problem is not None and problem != self._logged_problem:
            log.warning("processes collector: %s", problem)
        elif problem is None and self._logged_problem is not None:
            log.info("processes collector: process attribution works again")
        self._logged_problem = problem
        return problem is not None

    def _sample_gpu(
        self, target: LiveGpu, driver: _DriverState
    ) -> tuple[dict[ProcessKey, int | None], dict[int, int] | None]:
        handle = self._nvml.api.nvmlDeviceGetHandleByIndex(target.index)
        if target.gpu_instance_ids is None:
            whole = _Handle(target.uuid, handle, None)
            return self._usage([whole], driver), self._sm_utilization(target.uuid, handle, driver)
        return self._usage(self._mig_handles(target, handle), driver), None

    def _mig_handles(self, target: LiveGpu, handle: Any) -> list[_Handle]:
        # MigReader needs only the parent's uuid; the rest of the identity is the sweep's business.
        parent = GpuIdentity(target.index, target.uuid, name="", pci_bus_id="", mig_enabled=True)
        return [_Handle(u, h, gi) for u, gi, h in self._mig.device_handles(parent, handle)]

    # Memory per process

    def _usage(
        self, handles: Iterable[_Handle], driver: _DriverState
    ) -> dict[ProcessKey, int | None]:
        """Used memory per process over every list; a process in several lists counts once,
        with its largest figure (the lists overlap for a process that is, say, both a CUDA and
        a graphics client)."""
        usage: dict[ProcessKey, int | None] = {}
        for entry in handles:
            for kind in LIST_KINDS:
                for row in self._list(entry, kind, driver):
                    key = (int(row.pid), entry.gpu_instance_id)
                    memory = None if row.usedGpuMemory is None else int(row.usedGpuMemory)
                    usage[key] = _larger(usage.get(key), memory)
        return usage

    def _list(self, entry: _Handle, kind: str, driver: _DriverState) -> list[Any]:
        function = f"nvmlDeviceGet{kind}RunningProcesses"
        key = f"processes_{kind.lower()}"
        if entry.uuid not in driver.v2_lists:
            try:
                rows = self._nvml.call(entry.uuid, key, function, entry.handle)
            except pynvml.NVMLLibraryMismatchError:
                log.info("%s: the driver lacks %s_v3; using _v2", entry.uuid, function)
                driver.v2_lists.add(entry.uuid)
            else:
                return self._rows(entry, key, rows)
        key, function = f"{key}_v2", f"{function}_v2"
        return self._rows(entry, key, self._nvml.call(entry.uuid, key, function, entry.handle))

    def _rows(self, entry: _Handle, key: str, rows: list[Any] | None) -> list[Any]:
        if rows is not None:
            return rows
        if self._nvml.is_unavailable(entry.uuid, f"{key}:0"):
            return []  # the device keeps no such list (NOT_SUPPORTED): nothing of that kind
        raise _Unreadable(f"{entry.uuid}: {key} failed")  # counted by the guard

    # SM use per process

    def _sm_utilization(
        self, uuid: str, handle: Any, driver: _DriverState
    ) -> dict[int, int] | None:
        """Average SM use per busy process since the previous round, in percent; {} when no
        process was busy; None where the GPU has no per-process utilization."""
        position = driver.utilization_call.get(uuid, 0)
        since = driver.last_seen.get(uuid, 0)
        while position < len(UTILIZATION_CALLS):
            function = UTILIZATION_CALLS[position]
            try:
                samples = self._nvml.raw(
                    function, handle, since, answers=(pynvml.NVMLError_NotFound,)
                )
            except pynvml.NVMLError_NotFound:
                return {}
            except _LACKS_CALL as exc:
                position += 1
                driver.utilization_call[uuid] = position
                log.info("%s: %s is %s; not asking again", uuid, function, _why(exc))
                continue
            except NVMLError as exc:
                if exc.value == pynvml.NVML_SUCCESS:
                    return {}  # nvidia-ml-py raises the sizing call's SUCCESS: no samples
                raise
            return _window(driver, uuid, since, samples)
        return None

    # Owners

    def _processes(
        self,
        usage: dict[ProcessKey, int | None],
        sm: dict[int, int] | None,
        owners: dict[int, ProcessOwner | str],
    ) -> tuple[GpuProcess, ...]:
        processes = []
        for pid, gpu_instance_id in sorted(usage, key=_by_pid):
            found = owners.get(pid)
            if found is None:
                found = owners[pid] = self._owners.owner(pid)
            owner = found if isinstance(found, ProcessOwner) else None
            processes.append(
                GpuProcess(
                    pid=pid,
                    gpu_instance_id=gpu_instance_id,
                    used_memory_bytes=usage[(pid, gpu_instance_id)],
                    # A process the window has no sample for was idle in it.
                    sm_util_pct=None if sm is None else sm.get(pid, 0),
                    owner=owner,
                    unattributed_reason="" if owner is not None else str(found),
                )
            )
        return tuple(processes)


def _larger(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)


def _by_pid(key: ProcessKey) -> tuple[int, int]:
    pid, gpu_instance_id = key
    return pid, -1 if gpu_instance_id is None else gpu_instance_id


def _why(exc: BaseException) -> str:
    if isinstance(exc, pynvml.NVMLLibraryMismatchError):
        return "missing from this driver"
    return error_name(exc)


def _window(driver: _DriverState, uuid: str, since: int, samples: Iterable[Any]) -> dict[int, int]:
    """Average SM use per PID over the samples newer than `since`; the newest one seen starts
    the GPU's next window."""
    sums: dict[int, int] = {}
    counts: dict[int, int] = {}
    newest = since
    for sample in samples:
        stamp = sample.timeStamp
        if stamp <= since:
            continue  # NVML may hand back the boundary sample again
        newest = max(newest, stamp)
        pid = sample.pid
        sums[pid] = sums.get(pid, 0) + min(100, sample.smUtil)
        counts[pid] = counts.get(pid, 0) + 1
    driver.last_seen[uuid] = newest
    return {pid: round(total / counts[pid]) for pid, total in sums.items()}


def _retain(driver: _DriverState, uuids: Iterable[str]) -> None:
    """Per-GPU memory of GPUs that left the sweep goes with them."""
    present = set(uuids)
    for table in (driver.utilization_call, driver.last_seen):
        for uuid in [u for u in table if u not in present]:
            del table[uuid]

"""NVML's event API: event sets, registration, and the XID, ECC and lost-GPU events the simulator
emits into them."""

from __future__ import annotations

import ctypes
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec
from kube_gpu_exporter.exporter.simulator.nvml.core import NO_INSTANCE, NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu

_EVENT_SET_BASE = 0x7E570000
EVENT_QUEUE_DEPTH = 4096
_BASE_EVENTS = (
    pynvml.nvmlEventTypeXidCriticalError
    | pynvml.nvmlEventTypeSingleBitEccError
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypePState
    | pynvml.nvmlEventTypeClock
)


@dataclass
class _EventSet:
    address: int
    cond: threading.Condition = field(default_factory=threading.Condition)
    queue: deque[pynvml.c_nvmlEventData_t] = field(
        default_factory=lambda: deque(maxlen=EVENT_QUEUE_DEPTH)
    )
    masks: dict[int, int] = field(default_factory=dict)  # gpu index -> registered event mask
    lost_pending: set[int] = field(default_factory=set)
    dropped: int = 0
    destroyed: bool = False  # the driver went away under it


class EventCalls(NvmlCore):
    def __init__(self, fleet: FleetSpec, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(fleet, clock)
        self._event_sets: dict[int, _EventSet] = {}
        self._event_lock = threading.Lock()
        self._next_event_set = 1

    @nvml_call()
    def nvmlDeviceGetSupportedEventTypes(self, gpu: SimGpu, instance: None) -> int:
        mask = _BASE_EVENTS
        if gpu.model.mig_capable:
            mask |= pynvml.nvmlEventMigConfigChange
        return mask

    @nvml_call(device=False)
    def nvmlEventSetCreate(self) -> Any:
        with self._event_lock:
            address = _EVENT_SET_BASE + self._next_event_set * 16
            self._next_event_set += 1
            self._event_sets[address] = _EventSet(address)
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlEventSet_t)

    def _event_set(self, handle: Any) -> _EventSet:
        address = ctypes.cast(handle, ctypes.c_void_p).value or 0
        with self._event_lock:
            event_set = self._event_sets.get(address)
        if event_set is None:
            raise pynvml.NVMLError_InvalidArgument()
        return event_set

    @nvml_call()
    def nvmlDeviceRegisterEvents(
        self, gpu: SimGpu, instance: None, event_types: int, event_set: Any
    ) -> None:
        target = self._event_set(event_set)
        supported = event_types & self.nvmlDeviceGetSupportedEventTypes(gpu, None)
        if not supported:
            raise pynvml.NVMLError_NotSupported()
        with target.cond:
            target.masks[gpu.index] = target.masks.get(gpu.index, 0) | supported

    @nvml_call(device=False)
    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        target = self._event_set(event_set)
        deadline = time.monotonic() + timeout_ms / 1000
        with target.cond:
            while True:
                if target.destroyed:
                    raise pynvml.NVMLError_Uninitialized()
                if target.lost_pending:
                    target.lost_pending.pop()
                    raise pynvml.NVMLError_GpuIsLost()
                if target.queue:
                    return target.queue.popleft()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise pynvml.NVMLError_Timeout()
                target.cond.wait(remaining)

    @nvml_call(device=False)
    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        return self.nvmlEventSetWait_v2(event_set, timeout_ms)

    @nvml_call(device=False)
    def nvmlEventSetFree(self, event_set: Any) -> None:
        target = self._event_set(event_set)
        with self._event_lock:
            self._event_sets.pop(target.address, None)
        with target.cond:
            target.cond.notify_all()

    def registered_gpus(self) -> set[int]:
        """GPU indexes some event set listens to for XIDs (test helper)."""
        return {
            index
            for event_set in self._sets()
            for index, mask in event_set.masks.items()
            if mask & pynvml.nvmlEventTypeXidCriticalError
        }

    def events_dropped(self) -> int:
        """Events lost because an event set's queue was full, as the driver drops them (test
        helper)."""
        return sum(event_set.dropped for event_set in self._sets())

    def event_sets_open(self) -> int:
        with self._event_lock:
            return len(self._event_sets)

    # What the simulator's faults do to event sets (fake_nvml.py's control API)

    def _sets(self) -> list[_EventSet]:
        with self._event_lock:
            return list(self._event_sets.values())

    def _emit(self, index: int, event_type: int, data: int, gpu_instance_id: int | None) -> None:
        gi = NO_INSTANCE if gpu_instance_id is None else gpu_instance_id
        ci = NO_INSTANCE if gpu_instance_id is None else 0
        for event_set in self._sets():
            with event_set.cond:
                if not event_set.masks.get(index, 0) & event_type:
                    continue
                if len(event_set.queue) == event_set.queue.maxlen:
                    event_set.dropped += 1
                event_set.queue.append(
                    pynvml.c_nvmlEventData_t(
                        device=self._handle(index),
                        eventType=event_type,
                        eventData=data,
                        gpuInstanceId=gi,
                        computeInstanceId=ci,
                    )
                )
                event_set.cond.notify()

    def _wake_for_lost(self, index: int) -> None:
        """A waiter on a set that listens to GPU `index` wakes to GPU_IS_LOST."""
        for event_set in self._sets():
            with event_set.cond:
                if index in event_set.masks:
                    event_set.lost_pending.add(index)
                    event_set.cond.notify_all()

    def _destroy_event_sets(self) -> None:
        """Event sets live in the driver: they go with it, and a waiter wakes to an error instead
        of queueing events for a handle nobody can free any more."""
        with self._event_lock:
            sets = list(self._event_sets.values())
            self._event_sets.clear()
        for event_set in sets:
            with event_set.cond:
                event_set.destroyed = True
                event_set.queue.clear()
                event_set.cond.notify_all()

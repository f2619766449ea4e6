"""MIG instances of a MIG-enabled GPU: topology (cached) and per-instance memory (every sweep).

Enumeration follows NVML's rules: walk indexes up to nvmlDeviceGetMaxMigDeviceCount, skipping
empty slots (NOT_FOUND / INVALID_ARGUMENT), since GPU-instance ids are not sequential. The topology
is cached per parent UUID and refreshed on a slow timer or when a MigConfigChange event arrives.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.nvml.device_reader import memory_values
from exporter.nvml.guarded_calls import GuardedNvml, alt
from exporter.nvml.mig_profile import profile_from_attributes, profile_from_name
from exporter.snapshot import GpuIdentity, MigInstance

_EMPTY_SLOT = (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument)


@dataclass(frozen=True, slots=True)
class _MigSlot:
    handle: Any
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    multiprocessor_count: int | None


@dataclass(frozen=True, slots=True)
class _Topology:
    slots: tuple[_MigSlot, ...]
    read_at: float


class MigReader:
    def __init__(self, nvml: GuardedNvml, refresh_seconds: float) -> None:
        self._nvml = nvml
        self._refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        self._topologies: dict[str, _Topology] = {}

    def invalidate(self, parent_uuid: str | None = None) -> None:
        with self._lock:
            if parent_uuid is None:
                self._topologies.clear()
            else:
                self._topologies.pop(parent_uuid, None)

    def read(self, parent: GpuIdentity, parent_handle: Any) -> tuple[MigInstance, ...]:
        topology = self._topology(parent, parent_handle)
        instances = []
        for slot in topology.slots:
            mem = self._nvml.first_available(
                slot.uuid,
                "memory",
                [
                    alt("nvmlDeviceGetMemoryInfo", slot.handle, version=pynvml.nvmlMemory_v2),
                    alt("nvmlDeviceGetMemoryInfo", slot.handle),
                ],
            )
            instances.append(
                MigInstance(
                    uuid=slot.uuid,
                    gpu_instance_id=slot.gpu_instance_id,
                    compute_instance_id=slot.compute_instance_id,
                    profile=slot.profile,
                    multiprocessor_count=slot.multiprocessor_count,
                    **memory_values(mem),
                )
            )
        return tuple(instances)

    def _topology(self, parent: GpuIdentity, parent_handle: Any) -> _Topology:
        now = time.monotonic()
        with self._lock:
            cached = self._topologies.get(parent.uuid)
        if cached is not None and now - cached.read_at < self._refresh_seconds:
            return cached
        topology = _Topology(self._enumerate(parent, parent_handle), now)
        with self._lock:
            self._topologies[parent.uuid] = topology
        return topology

    def _enumerate(self, parent: GpuIdentity, parent_handle: Any) -> tuple[_MigSlot, ...]:
        raw = self._nvml.raw
        max_count = raw("nvmlDeviceGetMaxMigDeviceCount", parent_handle)
        parent_total: int | None = None
        slots = []
        for index in range(max_count):
            try:
                handle = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, index)
            except _EMPTY_SLOT:
                continue
            uuid = str(raw("nvmlDeviceGetUUID", handle))
            attributes = self._nvml.call(uuid, "attributes", "nvmlDeviceGetAttributes", handle)
            profile = profile_from_name(str(raw("nvmlDeviceGetName", handle)))
            if profile is None and attributes is not None:
                if parent_total is None:
                    parent_total = self._parent_total(parent, parent_handle)
                profile = profile_from_attributes(
                    attributes.gpuInstanceSliceCount,
                    attributes.computeInstanceSliceCount,
                    attributes.memorySizeMB,
                    parent_total or 0,
                )
            slots.append(
                _MigSlot(
                    handle=handle,
                    uuid=uuid,
                    gpu_instance_id=int(raw("nvmlDeviceGetGpuInstanceId", handle)),
                    compute_instance_id=int(raw("nvmlDeviceGetComputeInstanceId", handle)),
                    profile=profile or "unknown",
                    multiprocessor_count=(
                        None if attributes is None else int(attributes.multiprocessorCount)
                    ),
                )
            )
        return tuple(slots)

    def _parent_total(self, parent: GpuIdentity, parent_handle: Any) -> int | None:
        mem = self._nvml.call(parent.uuid, "memory_total", "nvmlDeviceGetMemoryInfo", parent_handle)
        return None if mem is None else int(mem.total)

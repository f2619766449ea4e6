"""MIG instances of a MIG-enabled GPU: topology (cached) and per-instance memory (every sweep).

Enumeration follows NVML's rules: walk indexes up to nvmlDeviceGetMaxMigDeviceCount, skipping
empty slots (NOT_FOUND / INVALID_ARGUMENT), since GPU-instance ids are not sequential. The topology
is cached per parent UUID and refreshed on a slow timer or when a MigConfigChange event arrives.

Each refresh also asks where every GPU instance sits on the memory slices and which driver profile
ID it has, which NVIDIA's DRA driver writes into MIG device names. That answer needs a privileged
caller; without one, the profile ID still comes from the parent's profile table (docs/nvml.md,
'GPU-instance placement and profile id').
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.nvml.binding import GPU_GONE, NVMLError
from kube_gpu_exporter.exporter.nvml.device_reader import memory_values
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml, alt
from kube_gpu_exporter.exporter.nvml.mig_profile import profile_from_attributes, profile_from_name
from kube_gpu_exporter.exporter.snapshot import GpuIdentity, MigInstance

log = logging.getLogger(__name__)

_EMPTY_SLOT = (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument)
# How NVML declines the GPU-instance queries: no admin rights, a board or guest without them, a
# driver without the symbol. That describes the deployment, not a failing GPU, so it is not
# counted as an NVML error (every healthy MIG node of an unprivileged exporter would show one).
_REFUSED = (
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
)
# NVML_GPU_INSTANCE_PROFILE_* enum indexes in the order worth asking: the kinds A100 and H100
# offer (1g, 2g, 3g, 4g, 7g, 1g+me, 1g with twice the memory) first, so that the table for their
# instances is complete before an index the board lacks is tried.
_COMMON_PROFILE_INDEXES = (0, 1, 2, 3, 4, 7, 9)
_PROFILE_INDEXES = _COMMON_PROFILE_INDEXES + tuple(
    i for i in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT) if i not in _COMMON_PROFILE_INDEXES
)
# A compute-instance sub-partition (1c.3g.40gb) lives in the GPU instance of the bare profile.
_COMPUTE_PREFIX = re.compile(r"^\d+c\.")


@dataclass(frozen=True, slots=True)
class _MigSlot:
    handle: Any
    uuid: str
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    multiprocessor_count: int | None
    placement_start: int | None = None
    placement_size: int | None = None
    gpu_instance_profile_id: int | None = None


@dataclass(frozen=True, slots=True)
class _GpuInstanceInfo:
    profile_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class _Topology:
    slots: tuple[_MigSlot, ...]
    read_at: float


class MigReader:
    def __init__(
        self,
        nvml: GuardedNvml,
        refresh_seconds: float,
        expected_refusal: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nvml = nvml
        # What the topology's refresh timer reads: the poller's clock, so a test can step it.
        self._clock = clock
        # NvmlSource.expected_refusal: why a refusal of the GPU-instance queries is intended.
        self._expected_refusal = expected_refusal
        self._refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        self._topologies: dict[str, _Topology] = {}
        # Parents whose refusal of the GPU-instance queries was logged: once is enough.
        self._refusal_logged: set[str] = set()

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
                    placement_start=slot.placement_start,
                    placement_size=slot.placement_size,
                    gpu_instance_profile_id=slot.gpu_instance_profile_id,
                    **memory_values(mem),
                )
            )
        return tuple(instances)

    def device_handles(
        self, parent: GpuIdentity, parent_handle: Any
    ) -> tuple[tuple[str, int, Any], ...]:
        """(MIG device UUID, GPU-instance id, handle) per MIG device, from the cached topology."""
        topology = self._topology(parent, parent_handle)
        return tuple((s.uuid, s.gpu_instance_id, s.handle) for s in topology.slots)

    def _topology(self, parent: GpuIdentity, parent_handle: Any) -> _Topology:
        now = self._clock()
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
                handle = self._nvml.api.nvmlDeviceGetMigDeviceHandleByIndex(parent_handle, index)
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
        return self._with_gpu_instance_info(parent, parent_handle, slots)

    def _with_gpu_instance_info(
        self, parent: GpuIdentity, parent_handle: Any, slots: list[_MigSlot]
    ) -> tuple[_MigSlot, ...]:
        """Placement and driver profile ID per slot: from the GPU instance itself where NVML
        lets us ask, else the profile ID alone from the parent's profile table."""
        infos = self._gpu_instance_infos(
            parent, parent_handle, dict.fromkeys(s.gpu_instance_id for s in slots)
        )
        placed = []
        for slot in slots:
            info = infos.get(slot.gpu_instance_id)
            if info is not None:
                slot = replace(
                    slot,
                    placement_start=info.placement_start,
                    placement_size=info.placement_size,
                    gpu_instance_profile_id=info.profile_id,
                )
            placed.append(slot)
        unplaced = {
            name
            for s in placed
            if s.gpu_instance_profile_id is None
            and (name := _gpu_instance_profile(s.profile)) is not None
        }
        if not unplaced:
            return tuple(placed)
        ids = self._profile_ids(parent, parent_handle, unplaced)
        return tuple(
            replace(s, gpu_instance_profile_id=ids.get(_gpu_instance_profile(s.profile) or ""))
            if s.gpu_instance_profile_id is None
            else s
            for s in placed
        )

    def _gpu_instance_infos(
        self, parent: GpuIdentity, parent_handle: Any, gpu_instance_ids: Iterable[int]
    ) -> dict[int, _GpuInstanceInfo]:
        infos: dict[int, _GpuInstanceInfo] = {}
        for gpu_instance_id in gpu_instance_ids:
            try:
                handle = self._nvml.raw(
                    "nvmlDeviceGetGpuInstanceById", parent_handle, gpu_instance_id, answers=_REFUSED
                )
                info = self._nvml.raw("nvmlGpuInstanceGetInfo", handle, answers=_REFUSED)
            except _REFUSED as exc:
                self._note_refusal(parent, exc)
                # The answer would be the same for the parent's other instances: one refused call
                # per refresh, not one per instance.
                break
            except GPU_GONE:
                raise
            except NVMLError as exc:
                # Counted by raw(); this instance stays unplaced, the others do not.
                log.debug("%s: GPU instance %d: %s", parent.uuid, gpu_instance_id, exc)
                continue
            infos[gpu_instance_id] = _GpuInstanceInfo(
                profile_id=int(info.profileId),
                placement_start=int(info.placement.start),
                placement_size=int(info.placement.size),
            )
        return infos

    def _note_refusal(self, parent: GpuIdentity, exc: BaseException) -> None:
        if parent.uuid in self._refusal_logged:
            return
        self._refusal_logged.add(parent.uuid)
        if self._expected_refusal is not None:
            log.debug(
                "%s: NVML refused the GPU-instance queries (%s), as expected: %s",
                parent.uuid,
                exc,
                self._expected_refusal,
            )
            return
        log.info(
            "%s: NVML refused the GPU-instance queries (%s): MIG placements stay unknown and "
            "GI profile IDs come from the profile table; run privileged to get placements",
            parent.uuid,
            exc,
        )

    def _profile_ids(
        self, parent: GpuIdentity, parent_handle: Any, wanted: set[str]
    ) -> dict[str, int]:
        """Driver profile ID by GPU-instance profile name, from GetGpuInstanceProfileInfo, which
        works unprivileged. Its argument is an enum index; the `id` it returns is the driver's
        profile ID (docs/nvml.md, 'GPU-instance profile ids'). Stops once `wanted` is covered."""
        table: dict[str, int] = {}
        for index in _PROFILE_INDEXES:
            if wanted <= table.keys():
                break
            info = self._nvml.call(
                parent.uuid,
                f"gpu_instance_profile:{index}",
                "nvmlDeviceGetGpuInstanceProfileInfo",
                parent_handle,
                index,
                version=2,
            )
            if info is None:
                continue
            name = _profile_info_name(info.name)
            if name is not None:
                table.setdefault(name, int(info.id))
        return table

    def _parent_total(self, parent: GpuIdentity, parent_handle: Any) -> int | None:
        mem = self._nvml.call(parent.uuid, "memory_total", "nvmlDeviceGetMemoryInfo", parent_handle)
        return None if mem is None else int(mem.total)


def _gpu_instance_profile(profile: str) -> str | None:
    if profile == "unknown":
        return None
    return _COMPUTE_PREFIX.sub("", profile)


def _profile_info_name(raw: bytes | str) -> str | None:
    """The profile in a profile-info name: "MIG 1g.10gb" as nvidia-smi prints it, or the bare
    profile, since the exact NVML string is not documented."""
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return profile_from_name(text if "MIG" in text else f"MIG {text.strip()}")

"""MIG: the mode, MIG device handles and their attributes, GPU-instance profiles, and GPU-instance
handles with their placement (privileged fleets only)."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance


class MigCalls(NvmlCore):
    @nvml_call()
    def nvmlDeviceGetMigMode(self, gpu: SimGpu, instance: None) -> list[int]:
        if not gpu.model.mig_capable:
            raise pynvml.NVMLError_NotSupported()
        mode = int(gpu.mig_enabled)
        return [mode, mode]

    @nvml_call()
    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: SimGpu, instance: None) -> int:
        return 7 if gpu.mig_enabled else 0

    @nvml_call()
    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: SimGpu, instance: None, index: int) -> Any:
        if not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= index < 7:
            raise pynvml.NVMLError_InvalidArgument()
        if index >= len(gpu.mig_slots) or gpu.mig_slots[index] is None:
            raise pynvml.NVMLError_NotFound()
        return self._handle(gpu.index, index)

    @nvml_call(on_mig="ok")
    def nvmlDeviceIsMigDeviceHandle(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return ctypes.c_uint(int(instance is not None))

    @nvml_call(on_mig="only")
    def nvmlDeviceGetGpuInstanceId(self, gpu: SimGpu, instance: SimMigInstance) -> int:
        return instance.gpu_instance_id

    @nvml_call(on_mig="only")
    def nvmlDeviceGetComputeInstanceId(self, gpu: SimGpu, instance: SimMigInstance) -> int:
        return instance.compute_instance_id

    @nvml_call(on_mig="only")
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, gpu: SimGpu, instance: SimMigInstance
    ) -> Any:
        return self._handle(gpu.index)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetAttributes_v2(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        if instance is None:
            raise pynvml.NVMLError_NotSupported()
        slices = instance.compute_slices
        return pynvml.c_nvmlDeviceAttributes(
            multiprocessorCount=instance.multiprocessors,
            sharedCopyEngineCount=slices,
            sharedDecoderCount=max(0, slices // 2),
            sharedEncoderCount=0,
            sharedJpegCount=max(0, slices // 3),
            sharedOfaCount=int(slices == 7),
            gpuInstanceSliceCount=slices,
            computeInstanceSliceCount=slices,
            memorySizeMB=instance.memory_mib,
        )

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetAttributes(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return self.nvmlDeviceGetAttributes_v2(gpu, instance)

    @nvml_call()
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, gpu: SimGpu, instance: None, profile: int, version: int = 2
    ) -> Any:
        # A MIG-capable board answers with MIG off too (seen on a real H200, driver 580); a
        # board without MIG has no profile to match.
        match = next((p for p in gpu.model.mig_profiles if p.enum_index == profile), None)
        if match is None:
            raise pynvml.NVMLError_NotSupported()
        info = (
            pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            if version == 2
            else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        )
        info.id = match.profile_id  # the driver's id, not the enum index passed in
        info.isP2pSupported = 0
        info.sliceCount = match.compute_slices
        info.instanceCount = match.max_count
        info.multiprocessorCount = match.multiprocessors
        info.copyEngineCount = match.compute_slices
        info.decoderCount = match.compute_slices // 2
        info.encoderCount = 0
        info.jpegCount = match.compute_slices // 3
        info.ofaCount = int(match.compute_slices == 7)
        info.memorySizeMB = match.memory_mib
        if version == 2:
            info.name = f"MIG {match.name}".encode()
        return info

    @nvml_call()
    def nvmlDeviceGetGpuInstanceById(self, gpu: SimGpu, instance: None, gi: int) -> Any:
        if not self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NoPermission()
        if not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if self._live_gpu_instance(gpu, gi) is None:
            raise pynvml.NVMLError_NotFound()
        return self._gpu_instance_handle(gpu.index, gi)

    @nvml_call(gpu_instance=True)
    def nvmlGpuInstanceGetInfo(self, gpu: SimGpu, instance: SimMigInstance) -> Any:
        return pynvml.c_nvmlGpuInstanceInfo_t(
            device=self._handle(gpu.index),
            id=instance.gpu_instance_id,
            profileId=instance.profile_id,  # the driver's id (19 for 1g), not the enum index
            placement=pynvml.c_nvmlGpuInstancePlacement_t(
                start=instance.placement_start, size=instance.placement_size
            ),
        )

    @nvml_call()
    def nvmlDeviceGetGpuInstances(self, gpu: SimGpu, instance: None, *args: Any) -> Any:
        # Not modelled for a privileged caller (nothing reads it): NOT_SUPPORTED, as for any
        # unmodelled call.
        if self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NotSupported()
        raise pynvml.NVMLError_NoPermission()

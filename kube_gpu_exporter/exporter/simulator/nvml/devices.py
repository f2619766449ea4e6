"""The library, the system and the boards: init and shutdown, the driver's version, handles by
index, UUID and PCI bus id, each board's identity, and its vGPU licence."""

from __future__ import annotations

from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance

_ERROR_TEXT = dict(pynvml.NVMLError._errcode_to_string)


class DeviceCalls(NvmlCore):
    @nvml_call(device=False)
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    @nvml_call(device=False)
    def nvmlInitWithFlags(self, flags: int) -> None:
        self.faults.before_call("nvmlInit", None)
        if not self.driver_loaded:
            raise pynvml.NVMLError_DriverNotLoaded()
        with self._init_lock:
            self._init_count += 1

    @nvml_call(device=False)
    def nvmlShutdown(self) -> None:
        with self._init_lock:
            self._init_count = max(0, self._init_count - 1)

    @nvml_call(device=False)
    def nvmlErrorString(self, result: int) -> bytes:
        return _ERROR_TEXT.get(result, "Unknown Error").encode()

    @nvml_call(device=False)
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.fleet.driver_version

    @nvml_call(device=False)
    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"12.{self.fleet.driver_version}"

    @nvml_call(device=False)
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12040

    @nvml_call(device=False)
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    @nvml_call(device=False)
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not isinstance(index, int) or not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        self.faults.before_call("nvmlDeviceGetHandleByIndex", index)
        if self.gpus[index].lost:
            raise pynvml.NVMLError_GpuIsLost()
        return self._handle(index)

    @nvml_call(device=False)
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for gpu in self.gpus:
            if gpu.uuid == text:
                return self._handle(gpu.index)
            for m in gpu.live_instances():
                if m.uuid == text and gpu.mig_enabled:
                    return self._handle(gpu.index, m.slot)
        raise pynvml.NVMLError_NotFound()

    @nvml_call(device=False)
    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> Any:
        text = (bus_id.decode() if isinstance(bus_id, bytes) else bus_id).upper()
        for gpu in self.gpus:
            if text in (gpu.pci_bus_id, gpu.pci_bus_id[4:]):
                return self._handle(gpu.index)
        raise pynvml.NVMLError_NotFound()

    # Identity

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetUUID(self, gpu: SimGpu, instance: SimMigInstance | None) -> str:
        return gpu.uuid if instance is None else instance.uuid

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetName(self, gpu: SimGpu, instance: SimMigInstance | None) -> str:
        if instance is None:
            return gpu.model.name
        return f"{gpu.model.name} MIG {instance.profile_name}"

    @nvml_call()
    def nvmlDeviceGetSerial(self, gpu: SimGpu, instance: None) -> str:
        return gpu.serial

    @nvml_call()
    def nvmlDeviceGetIndex(self, gpu: SimGpu, instance: None) -> int:
        return gpu.index

    @nvml_call()
    def nvmlDeviceGetMinorNumber(self, gpu: SimGpu, instance: None) -> int:
        return gpu.index

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetPciInfo_v3(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return pynvml.nvmlPciInfo_t(
            busIdLegacy=f"0000:{gpu.pci_bus:02X}:00.0".encode(),
            domain=0,
            bus=gpu.pci_bus,
            device=0,
            pciDeviceId=gpu.model.pci_device_id,
            pciSubSystemId=(gpu.model.pci_device_id & 0xFFFF0000) | 0x10DE,
            busId=gpu.pci_bus_id.encode(),
        )

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetPciInfo(self, gpu: SimGpu, instance: SimMigInstance | None) -> Any:
        return self.nvmlDeviceGetPciInfo_v3(gpu, instance)

    @nvml_call()
    def nvmlDeviceGetArchitecture(self, gpu: SimGpu, instance: None) -> int:
        return gpu.model.architecture

    @nvml_call()
    def nvmlDeviceGetCudaComputeCapability(self, gpu: SimGpu, instance: None) -> tuple[int, int]:
        return gpu.model.compute_capability

    # vGPU licensing

    @nvml_call()
    def nvmlDeviceGetGridLicensableFeatures_v4(self, gpu: SimGpu, instance: None) -> Any:
        features = pynvml.c_nvmlGridLicensableFeatures_v4_t()
        if gpu.vgpu_license is None:
            return features  # bare metal: isGridLicenseSupported = 0, no features
        features.isGridLicenseSupported = 1
        features.licensableFeaturesCount = 1
        vgpu = features.gridLicensableFeatures[0]
        vgpu.featureCode = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
        vgpu.featureState = int(gpu.vgpu_license == "licensed")
        vgpu.featureEnabled = 1
        vgpu.productName = b"NVIDIA Virtual Compute Server"
        return features

    @nvml_call()
    def nvmlDeviceGetGridLicensableFeatures(self, gpu: SimGpu, instance: None) -> Any:
        return self.nvmlDeviceGetGridLicensableFeatures_v4(gpu, instance)

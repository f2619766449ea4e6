"""What a board measures: utilization, memory, power, energy and clocks, where one call answers
several fields or is not a field of the table; the rest are field models (field_models.py)."""

from __future__ import annotations

from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import MIN_DRIVER_FOR, NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance

# nvmlPerfPolicyType_t -> the simulator's policy (violations.POLICIES).
_POLICY_NAMES = {
    pynvml.NVML_PERF_POLICY_POWER: "power",
    pynvml.NVML_PERF_POLICY_THERMAL: "thermal",
    pynvml.NVML_PERF_POLICY_SYNC_BOOST: "sync_boost",
    pynvml.NVML_PERF_POLICY_BOARD_LIMIT: "board_limit",
    pynvml.NVML_PERF_POLICY_LOW_UTILIZATION: "low_util",
    pynvml.NVML_PERF_POLICY_RELIABILITY: "reliability",
    pynvml.NVML_PERF_POLICY_TOTAL_APP_CLOCKS: "total_app_clocks",
    pynvml.NVML_PERF_POLICY_TOTAL_BASE_CLOCKS: "total_base_clocks",
}


class SensorCalls(NvmlCore):
    @nvml_call()
    def nvmlDeviceGetUtilizationRates(self, gpu: SimGpu, instance: None) -> Any:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        t = self.now()
        return pynvml.c_nvmlUtilization_t(
            gpu=round(gpu.utilization(t) * 100), memory=round(gpu.memory_copy_utilization(t) * 100)
        )

    @nvml_call()
    def nvmlDeviceGetEncoderUtilization(self, gpu: SimGpu, instance: None) -> list[int]:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        return [0, 167_000]

    @nvml_call()
    def nvmlDeviceGetDecoderUtilization(self, gpu: SimGpu, instance: None) -> list[int]:
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        return [round(gpu.decoder_utilization(self.now()) * 100), 167_000]

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetMemoryInfo(
        self, gpu: SimGpu, instance: SimMigInstance | None, version: int | None = None
    ) -> Any:
        if version and self.fleet.driver_major < MIN_DRIVER_FOR["nvmlDeviceGetMemoryInfo_v2"]:
            raise pynvml.NVMLError_FunctionNotFound()
        t = self.now()
        if instance is not None:
            total, used, free = gpu.instance_memory(instance, t)
            reserved = 0
        else:
            total, reserved, used, free = gpu.memory(t)
        # v2 splits the board into used + free + reserved; v1, which has no reserved field,
        # counts the reservation as used (docs/nvml.md, 'Framebuffer memory').
        if version:
            return pynvml.c_nvmlMemory_v2_t(
                version=version, total=total, reserved=reserved, free=free, used=used
            )
        return pynvml.c_nvmlMemory_t(total=total, free=free, used=used + reserved)

    @nvml_call()
    def nvmlDeviceGetPowerUsage(self, gpu: SimGpu, instance: None) -> int:
        return gpu.reported_power_mw(self.now(), gpu.model.averaged_power)

    @nvml_call()
    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: SimGpu, instance: None) -> int:
        return gpu.model.tdp_mw

    @nvml_call()
    def nvmlDeviceGetPowerManagementLimitConstraints(
        self, gpu: SimGpu, instance: None
    ) -> list[int]:
        # [min, max] in mW, as the binding returns them; a model without published bounds
        # answers its default limit for both.
        model = gpu.model
        return [model.power_limit_min_mw or model.tdp_mw, model.power_limit_max_mw or model.tdp_mw]

    @nvml_call()
    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: SimGpu, instance: None) -> int:
        return gpu.energy_mj(self.now())

    @nvml_call()
    def nvmlDeviceGetClockInfo(self, gpu: SimGpu, instance: None, clock_type: int) -> int:
        t = self.now()
        if clock_type in (pynvml.NVML_CLOCK_GRAPHICS, pynvml.NVML_CLOCK_SM):
            return gpu.sm_clock_mhz(t)
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz(t)
        if clock_type == pynvml.NVML_CLOCK_VIDEO:
            return int(gpu.sm_clock_mhz(t) * 0.9)
        raise pynvml.NVMLError_InvalidArgument()

    @nvml_call()
    def nvmlDeviceGetMaxClockInfo(self, gpu: SimGpu, instance: None, clock_type: int) -> int:
        if clock_type == pynvml.NVML_CLOCK_MEM:
            return gpu.model.mem_clock_mhz
        return gpu.model.max_sm_clock_mhz

    @nvml_call()
    def nvmlDeviceGetViolationStatus(self, gpu: SimGpu, instance: None, policy: int) -> Any:
        """What the field values NVML_FI_DEV_PERF_POLICY_* give, one policy a call: the time
        the policy held the clocks back (ns) and the reference time it is measured against
        (µs, here the driver's wall clock, as the field values' timestamps)."""
        name = _POLICY_NAMES.get(policy)
        if name is None:
            raise pynvml.NVMLError_InvalidArgument()
        return pynvml.c_nvmlViolationTime_t(
            referenceTime=self.timestamp_us(), violationTime=gpu.violation_ns(name, self.now())
        )

    @nvml_call()
    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: SimGpu, instance: None) -> int:
        return gpu.clock_event_reasons(self.now())

    @nvml_call()
    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: SimGpu, instance: None) -> int:
        return gpu.clock_event_reasons(self.now())

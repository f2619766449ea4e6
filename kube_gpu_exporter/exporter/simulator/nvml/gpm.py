"""GPU Performance Monitoring (Hopper and newer): sample buffers, samples, and metrics between two
samples (gpm_model.py)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator import gpm_model
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec
from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu

_GPM_SAMPLE_BASE = 0x69500000


@dataclass
class GpmSample:
    """What one allocated GPM sample buffer holds: nothing until nvmlGpm*SampleGet fills it."""

    gpu: int | None = None
    gpu_instance_id: int | None = None
    taken_at: float | None = None


class GpmCalls(NvmlCore):
    def __init__(self, fleet: FleetSpec, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(fleet, clock)
        self._gpm_samples: dict[int, GpmSample] = {}
        self._gpm_lock = threading.Lock()
        self._next_gpm_sample = 1

    @property
    def gpm_samples_allocated(self) -> int:
        """Sample buffers allocated and not yet freed: a leak check for tests."""
        with self._gpm_lock:
            return len(self._gpm_samples)

    def gpm_sample(self, sample: Any) -> GpmSample:
        """What a sample handle's buffer holds; INVALID_ARGUMENT for a handle never allocated."""
        try:
            address = ctypes.cast(sample, ctypes.c_void_p).value or 0
        except (TypeError, ctypes.ArgumentError):
            raise pynvml.NVMLError_InvalidArgument() from None
        with self._gpm_lock:
            found = self._gpm_samples.get(address)
        if found is None:
            raise pynvml.NVMLError_InvalidArgument()
        return found

    @nvml_call(on_mig="unsupported")
    def nvmlGpmQueryDeviceSupport(self, gpu: SimGpu, instance: None) -> Any:
        support = pynvml.c_nvmlGpmSupport_t()
        support.version = pynvml.NVML_GPM_SUPPORT_VERSION
        support.isSupportedDevice = int(gpu.model.gpm_supported)
        return support

    @nvml_call(device=False)
    def nvmlGpmSampleAlloc(self) -> Any:
        with self._gpm_lock:
            address = _GPM_SAMPLE_BASE + self._next_gpm_sample * 0x100
            self._next_gpm_sample += 1
            self._gpm_samples[address] = GpmSample()
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlGpmSample_t)

    @nvml_call(device=False)
    def nvmlGpmSampleFree(self, sample: Any) -> None:
        address = ctypes.cast(sample, ctypes.c_void_p).value or 0
        with self._gpm_lock:
            if self._gpm_samples.pop(address, None) is None:
                raise pynvml.NVMLError_InvalidArgument()

    @nvml_call(on_mig="unsupported")
    def nvmlGpmSampleGet(self, gpu: SimGpu, instance: None, sample: Any) -> Any:
        record = self.gpm_sample(sample)
        if not gpu.model.gpm_supported:
            raise pynvml.NVMLError_NotSupported()
        record.gpu, record.gpu_instance_id, record.taken_at = gpu.index, None, self.now()
        return sample

    @nvml_call(on_mig="unsupported")
    def nvmlGpmMigSampleGet(self, gpu: SimGpu, instance: None, gi: int, sample: Any) -> Any:
        record = self.gpm_sample(sample)
        if not gpu.model.gpm_supported or not gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()
        if gi not in {m.gpu_instance_id for m in gpu.live_instances()}:
            raise pynvml.NVMLError_NotFound()
        record.gpu, record.gpu_instance_id, record.taken_at = gpu.index, gi, self.now()
        return sample

    @nvml_call(device=False)
    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        first, second = self.gpm_sample(request.sample1), self.gpm_sample(request.sample2)
        if (
            first.taken_at is None
            or second.taken_at is None
            or (first.gpu, first.gpu_instance_id) != (second.gpu, second.gpu_instance_id)
            or second.taken_at <= first.taken_at
            or not 0 < request.numMetrics <= pynvml.NVML_GPM_METRIC_MAX
        ):
            raise pynvml.NVMLError_InvalidArgument()
        assert first.gpu is not None
        gpu = self.gpus[first.gpu]
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        instance = None
        if first.gpu_instance_id is not None:
            instance = next(
                (m for m in gpu.live_instances() if m.gpu_instance_id == first.gpu_instance_id),
                None,
            )
            if instance is None:
                raise pynvml.NVMLError_NotFound()
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            value = gpm_model.metric_value(
                metric.metricId, gpu, instance, first.taken_at, second.taken_at
            )
            if value is None:
                metric.nvmlReturn, metric.value = pynvml.NVML_ERROR_NOT_SUPPORTED, 0.0
                continue
            glitch = gpu.gpm_glitches.get(first.gpu_instance_id)
            if glitch is not None and glitch[1] <= second.taken_at < glitch[2]:
                value = glitch[0]
            metric.nvmlReturn, metric.value = pynvml.NVML_SUCCESS, value
            short, long, unit = gpm_model.metric_names(metric.metricId)
            metric.metricInfo.shortName, metric.metricInfo.longName = short, long
            metric.metricInfo.unit = unit
        return request

    def _drop_gpm_samples(self) -> None:
        """The driver went away, and every buffer with it: the exporter drops its handles when
        NVML goes (GpmSampler.invalidate), since freeing a buffer the library already released
        could crash it."""
        with self._gpm_lock:
            self._gpm_samples.clear()

"""The process lists and per-process utilization, from the node's process table (docs/nvml.md,
'Process accounting')."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any, Protocol

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import NO_INSTANCE, NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance
from kube_gpu_exporter.exporter.simulator.sim_process import ProcessUse, SimProcess


class NodeProcesses(Protocol):
    """Who runs what on the node's GPUs: simulator/processes.py's ProcessTable."""

    def memory(
        self, gpu: SimGpu, instance: SimMigInstance | None, t: float
    ) -> Sequence[tuple[SimProcess, int]]: ...

    def utilization(self, gpu: SimGpu, t: float) -> Sequence[ProcessUse]: ...


class ProcessCalls(NvmlCore):
    # The node's GPU processes; None answers every process query with nothing running.
    processes: NodeProcesses | None = None

    def _running(
        self, gpu: SimGpu, instance: SimMigInstance | None, compute: bool = True
    ) -> list[Any]:
        # A MIG-enabled parent's handle answers with every instance's processes, and only to a
        # privileged caller; a MIG device handle lists its own instance's.
        if gpu.mig_enabled and instance is None and not self.fleet.nvml_privileged:
            raise pynvml.NVMLError_NoPermission()
        if self.processes is None or not compute:
            return []  # no display and no MPS server on the simulated node
        compute_instances = {m.gpu_instance_id: m.compute_instance_id for m in gpu.live_instances()}
        listed = []
        for process, used in self.processes.memory(gpu, instance, self.now()):
            gi = process.gpu_instance_id
            info = pynvml.c_nvmlProcessInfo_v2_t(
                pid=process.pid,
                usedGpuMemory=used,
                gpuInstanceId=NO_INSTANCE if gi is None else gi,
                computeInstanceId=NO_INSTANCE if gi is None else compute_instances[gi],
            )
            listed.append(pynvml.nvmlStructToFriendlyObject(info))
        return listed

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetComputeRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetGraphicsRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses_v3(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses_v2(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    @nvml_call(on_mig="ok")
    def nvmlDeviceGetMPSComputeRunningProcesses(
        self, gpu: SimGpu, instance: SimMigInstance | None
    ) -> list[Any]:
        return self._running(gpu, instance, compute=False)

    def _samples(self, gpu: SimGpu, last_seen: int) -> tuple[int, list[ProcessUse]]:
        """(timestamp, busy processes) of the sample newer than `last_seen`, or NOT_FOUND.

        The simulated board samples continuously, as its utilization rates do: a query sees one
        sample per busy process, stamped with the query's instant."""
        if gpu.mig_enabled:
            raise pynvml.NVMLError_NotSupported()  # no per-process utilization under MIG
        since = ctypes.c_ulonglong(last_seen).value  # what the binding passes to the driver
        stamp = self.timestamp_us()
        if self.processes is None or stamp <= since:
            raise pynvml.NVMLError_NotFound()
        busy = [use for use in self.processes.utilization(gpu, self.now()) if use.busy]
        if not busy:
            raise pynvml.NVMLError_NotFound()
        return stamp, busy

    @nvml_call()
    def nvmlDeviceGetProcessUtilization(
        self, gpu: SimGpu, instance: None, last_seen: int
    ) -> list[Any]:
        stamp, busy = self._samples(gpu, last_seen)
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=use.process.pid,
                timeStamp=stamp,
                smUtil=use.sm_pct,
                memUtil=use.memory_pct,
                encUtil=use.encoder_pct,
                decUtil=use.decoder_pct,
            )
            for use in busy
        ]

    @nvml_call()
    def nvmlDeviceGetProcessesUtilizationInfo(
        self, gpu: SimGpu, instance: None, last_seen: int
    ) -> list[Any]:
        stamp, busy = self._samples(gpu, last_seen)
        return [
            pynvml.c_nvmlProcessUtilizationInfo_v1_t(
                timeStamp=stamp,
                pid=use.process.pid,
                smUtil=use.sm_pct,
                memUtil=use.memory_pct,
                encUtil=use.encoder_pct,
                decUtil=use.decoder_pct,
                jpgUtil=0,
                ofaUtil=0,
            )
            for use in busy
        ]

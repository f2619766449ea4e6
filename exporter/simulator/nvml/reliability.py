"""Reliability counters: ECC errors, row remapping, and the PCIe link's replays and throughput."""

from __future__ import annotations

import time

import pynvml

from exporter.simulator.nvml.core import NvmlCore, nvml_call
from exporter.simulator.sim_gpu import SimGpu


def ecc_count(gpu: SimGpu, key: str) -> int:
    """One of SimGpu.ecc_totals()'s counters, or NOT_SUPPORTED where the board keeps none."""
    if not gpu.ecc_enabled:
        raise pynvml.NVMLError_NotSupported()
    # On a MIG-enabled board the volatile single-bit counter is not available.
    if gpu.mig_enabled and key == "sbe_volatile":
        raise pynvml.NVMLError_NotSupported()
    return gpu.ecc_totals()[key]


def remapped_rows(gpu: SimGpu) -> tuple[int, int, int, int]:
    """(correctable, uncorrectable, pending, failure), as nvmlDeviceGetRemappedRows answers."""
    if not gpu.model.row_remapping or (gpu.mig_enabled and gpu.live_instances()):
        raise pynvml.NVMLError_NotSupported()
    return (
        gpu.remapped_correctable,
        gpu.remapped_uncorrectable,
        gpu.remapped_pending,
        gpu.remapped_failure,
    )


class ReliabilityCalls(NvmlCore):
    @nvml_call()
    def nvmlDeviceGetEccMode(self, gpu: SimGpu, instance: None) -> list[int]:
        mode = int(gpu.ecc_enabled)
        return [mode, mode]

    @nvml_call()
    def nvmlDeviceGetTotalEccErrors(
        self, gpu: SimGpu, instance: None, error_type: int, counter_type: int
    ) -> int:
        key = ("sbe" if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED else "dbe") + (
            "_volatile" if counter_type == pynvml.NVML_VOLATILE_ECC else "_aggregate"
        )
        return ecc_count(gpu, key)

    @nvml_call()
    def nvmlDeviceGetRemappedRows(self, gpu: SimGpu, instance: None) -> tuple[int, int, int, int]:
        return remapped_rows(gpu)

    @nvml_call()
    def nvmlDeviceGetPcieReplayCounter(self, gpu: SimGpu, instance: None) -> int:
        return gpu.pcie_replays

    @nvml_call()
    def nvmlDeviceGetPcieThroughput(self, gpu: SimGpu, instance: None, counter: int) -> int:
        if counter not in (pynvml.NVML_PCIE_UTIL_TX_BYTES, pynvml.NVML_PCIE_UTIL_RX_BYTES):
            raise pynvml.NVMLError_InvalidArgument()
        if self.pcie_window_s > 0:
            time.sleep(self.pcie_window_s)  # the real call blocks for its sample window
        return gpu.pcie_kbps(self.now(), counter == pynvml.NVML_PCIE_UTIL_TX_BYTES)

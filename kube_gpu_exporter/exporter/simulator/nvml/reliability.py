"""Reliability counters: ECC errors, row remapping, page retirement, and the PCIe link's replays
and throughput."""

from __future__ import annotations

import time

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu


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


# nvmlPageRetirementCause_t -> SimGpu.retired_pages' key.
_CAUSES = {
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS: "sbe",
    pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR: "dbe",
}


def retired_pages(gpu: SimGpu) -> tuple[int, int, int]:
    """(pages retired for single-bit errors, for double-bit errors, whether one is pending), as
    NVML's fields 29-31 answer; NOT_SUPPORTED on Ampere and newer, which remap rows instead
    (docs/nvml.md, 'Page retirement')."""
    if gpu.model.row_remapping:
        raise pynvml.NVMLError_NotSupported()
    pages = gpu.retired_pages
    return len(pages["sbe"]), len(pages["dbe"]), gpu.retired_pending


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
    def nvmlDeviceGetRetiredPages(self, gpu: SimGpu, instance: None, cause: int) -> list[int]:
        """The addresses of the pages retired for `cause`, pending ones included."""
        if cause not in _CAUSES:
            raise pynvml.NVMLError_InvalidArgument()
        retired_pages(gpu)  # NOT_SUPPORTED where the board remaps rows
        return list(gpu.retired_pages[_CAUSES[cause]])

    @nvml_call()
    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: SimGpu, instance: None) -> int:
        """NVML_FEATURE_ENABLED (1) while a retirement waits for the next reset, else 0."""
        return retired_pages(gpu)[2]

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

"""dcgm-exporter's classic metric families: names, types, units and HELP, and how each value is
derived from NVML's units (docs/dcgm-exporter-compatibility.md, 'Classic units')."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.exposition.metric_family import MetricFamily

MIB = 1 << 20

Value = int | float | None


@dataclass(frozen=True, slots=True)
class DcgmFamily:
    name: str
    kind: str
    help: str
    # Reads GpuReadings for FAMILIES, ProfilingReadings for PROFILING_FAMILIES.
    value: Callable[[Any], Value]
    # dcgm-exporter prints DCGM doubles with six decimals.
    fixed: bool = False


def _watts(milliwatts: int | None) -> float | None:
    return None if milliwatts is None else milliwatts / 1000


def _mib(nbytes: int | None) -> int | None:
    return None if nbytes is None else nbytes // MIB


def _sum(a: int | None, b: int | None) -> int | None:
    return None if a is None and b is None else (a or 0) + (b or 0)


FAMILIES: tuple[DcgmFamily, ...] = (
    DcgmFamily(
        "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda r: r.sm_clock_mhz
    ),
    DcgmFamily(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda r: r.mem_clock_mhz,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "Memory temperature (in C).",
        lambda r: r.memory_temperature_c,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda r: r.temperature_c
    ),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        lambda r: _watts(r.power_mw),
        fixed=True,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gauge",
        "Power management limit (in W).",
        lambda r: _watts(r.power_limit_mw),
        fixed=True,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "gauge",
        "Enforced power limit (in W).",
        lambda r: _watts(r.enforced_power_limit_mw),
        fixed=True,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda r: r.energy_mj,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        lambda r: r.pcie_replay_count,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "gauge",
        "PCIe transmit throughput over NVML's 20 ms sample window (in KB/s).",
        lambda r: r.pcie_tx_kbps,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "gauge",
        "PCIe receive throughput over NVML's 20 ms sample window (in KB/s).",
        lambda r: r.pcie_rx_kbps,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda r: r.gpu_util_pct
    ),
    DcgmFamily(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        lambda r: r.mem_copy_util_pct,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", lambda r: r.encoder_util_pct
    ),
    DcgmFamily(
        "DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", lambda r: r.decoder_util_pct
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "Framebuffer memory free (in MiB).",
        lambda r: _mib(r.fb_free_bytes),
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        lambda r: _mib(r.fb_used_bytes),
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        lambda r: _mib(r.fb_reserved_bytes),
    ),
    DcgmFamily(
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "Framebuffer memory total (in MiB).",
        lambda r: _mib(r.fb_total_bytes),
    ),
    DcgmFamily(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "counter",
        "Total NVLink data transmitted and received over all links (in KiB).",
        lambda r: _sum(r.nvlink_tx_kib, r.nvlink_rx_kib),
    ),
    DcgmFamily(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock event (throttle) reasons as an NVML bitmask.",
        lambda r: r.clock_event_reasons,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        lambda r: r.ecc_sbe_volatile,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        lambda r: r.ecc_dbe_volatile,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        lambda r: r.ecc_sbe_aggregate,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        lambda r: r.ecc_dbe_aggregate,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors.",
        lambda r: r.remapped_rows_uncorrectable,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors.",
        lambda r: r.remapped_rows_correctable,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether a row remapping is pending until the next GPU reset (1 = yes).",
        lambda r: r.remapped_rows_pending,
    ),
    DcgmFamily(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed (1 = yes).",
        lambda r: r.remapped_rows_failure,
    ),
)


def _profiling(name: str, help_text: str, field: str) -> DcgmFamily:
    return DcgmFamily(name, "gauge", help_text, lambda p: getattr(p, field), fixed=True)


# DCGM's profiling (DCP) fields 1001-1012, filled from NVML GPM instead of DCGM.
PROFILING_FAMILIES: tuple[DcgmFamily, ...] = (
    _profiling(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        "graphics_active",
    ),
    _profiling(
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        "sm_active",
    ),
    _profiling(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        "sm_occupancy",
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        "tensor_active",
    ),
    _profiling(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "dram_active",
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active.", "fp64_active"
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active.", "fp32_active"
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active.", "fp16_active"
    ),
    _profiling(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        "pcie_tx_bytes",
    ),
    _profiling(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus, in bytes per second.",
        "pcie_rx_bytes",
    ),
    _profiling(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, in bytes per second.",
        "nvlink_tx_bytes",
    ),
    _profiling(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, in bytes per second.",
        "nvlink_rx_bytes",
    ),
)


# Both carry their entity's labels, then err_code and err_msg (gauge) or xid (counter).
XID_ERRORS = MetricFamily(
    "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."
)
XID_ERRORS_TOTAL = MetricFamily(
    "DCGM_EXP_XID_ERRORS_TOTAL",
    "counter",
    "Number of XID errors since the exporter started, by XID code.",
)

# Bit -> `clock_event` label value, as dcgm-exporter's DCGM_EXP_CLOCK_EVENTS_COUNT names them.
CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)

"""dcgm-exporter's metric families, one row per reading, and their spelling in each release.

A row names the reading it comes from and that reading's NVML unit, plus its classic spelling
(name, type, unit, HELP). `families_for(profile)` resolves the rows for a `--compat.dcgm-exporter`
profile: the classic spelling, or under 4.9 the RENAMES_4_9 one, with the value converted through
`dcgm_compat.converter` (the only place units change; docs/dcgm-exporter-compatibility.md,
'Classic units' and 'Version profiles').
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from exporter.dcgm_compat import Number, Profile, converter
from exporter.exposition.metric_family import Declared, MetricFamily

Value = Number | None

# The row's TYPE is the profile's: field 449 is a rate typed counter up to 4.8.2, gauge from 4.8.3.
NVLINK_BANDWIDTH_KIND = "<profile's NVLink bandwidth kind>"

# DCGM stores these as doubles, which dcgm-exporter prints with six decimals. Every other unit
# here is an INT64 field upstream (Hz, J, bytes, B/s, %, MiB, MB/s...), printed as an integer.
DOUBLE_UNITS = frozenset({"W", "ratio"})


@dataclass(frozen=True, slots=True)
class DcgmRow:
    """One DCGM family as NVML gives it and as dcgm-exporter classically spells it."""

    name: str
    kind: str
    unit: str
    help: str
    # Reads GpuReadings for GPU_ROWS, ProfilingReadings for PROFILING_ROWS.
    reading: Callable[[Any], Value]
    native_unit: str


@dataclass(frozen=True, slots=True)
class DcgmFamily:
    """A row resolved for one profile: what the exposition writes."""

    name: str
    kind: str
    help: str
    unit: str
    # The classic name of the row, the same in every profile: what the family means.
    classic: str
    reading: Callable[[Any], Value]
    convert: Callable[[Number], Number]
    double: bool

    def value(self, source: Any) -> Value:
        raw = self.reading(source)
        return None if raw is None else self.convert(raw)


def _row(
    name: str,
    kind: str,
    unit: str,
    help_text: str,
    reading: Callable[[Any], Value],
    native_unit: str | None = None,
) -> DcgmRow:
    return DcgmRow(name, kind, unit, help_text, reading, native_unit or unit)


GPU_ROWS: tuple[DcgmRow, ...] = (
    _row(
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "MHz",
        "SM clock frequency (in MHz).",
        lambda r: r.sm_clock_mhz,
    ),
    _row(
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "MHz",
        "Memory clock frequency (in MHz).",
        lambda r: r.mem_clock_mhz,
    ),
    _row(
        "DCGM_FI_DEV_MEMORY_TEMP",
        "gauge",
        "C",
        "Memory temperature (in C).",
        lambda r: r.memory_temperature_c,
    ),
    _row(
        "DCGM_FI_DEV_GPU_TEMP", "gauge", "C", "GPU temperature (in C).", lambda r: r.temperature_c
    ),
    _row("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", "Power draw (in W).", lambda r: r.power_mw, "mW"),
    _row(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "gauge",
        "W",
        "Power management limit (in W).",
        lambda r: r.power_limit_mw,
        "mW",
    ),
    _row(
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "gauge",
        "W",
        "Enforced power limit (in W).",
        lambda r: r.enforced_power_limit_mw,
        "mW",
    ),
    _row(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "mJ",
        "Total energy consumption since boot (in mJ).",
        lambda r: r.energy_mj,
    ),
    _row(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "count",
        "Total number of PCIe retries.",
        lambda r: r.pcie_replay_count,
    ),
    _row(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        "gauge",
        "KB/s",
        "PCIe transmit throughput over NVML's 20 ms sample window (in KB/s).",
        lambda r: r.pcie_tx_kbps,
    ),
    _row(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        "gauge",
        "KB/s",
        "PCIe receive throughput over NVML's 20 ms sample window (in KB/s).",
        lambda r: r.pcie_rx_kbps,
    ),
    _row("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", "GPU utilization (in %).", lambda r: r.gpu_util_pct),
    _row(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "%",
        "Memory utilization (in %).",
        lambda r: r.mem_copy_util_pct,
    ),
    _row(
        "DCGM_FI_DEV_ENC_UTIL",
        "gauge",
        "%",
        "Encoder utilization (in %).",
        lambda r: r.encoder_util_pct,
    ),
    _row(
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "%",
        "Decoder utilization (in %).",
        lambda r: r.decoder_util_pct,
    ),
    _row(
        "DCGM_FI_DEV_FB_FREE",
        "gauge",
        "MiB",
        "Framebuffer memory free (in MiB).",
        lambda r: r.fb_free_bytes,
        "B",
    ),
    _row(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "MiB",
        "Framebuffer memory used (in MiB).",
        lambda r: r.fb_used_bytes,
        "B",
    ),
    _row(
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "MiB",
        "Framebuffer memory reserved (in MiB).",
        lambda r: r.fb_reserved_bytes,
        "B",
    ),
    _row(
        "DCGM_FI_DEV_FB_TOTAL",
        "gauge",
        "MiB",
        "Framebuffer memory total (in MiB).",
        lambda r: r.fb_total_bytes,
        "B",
    ),
    _row(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        NVLINK_BANDWIDTH_KIND,
        "MB/s",
        "NVLink throughput over all links, received and transmitted (in MB/s).",
        lambda r: r.nvlink_kib_per_second,
        "KiB/s",
    ),
    _row(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "gauge",
        "count",
        "vGPU license status (1 = licensed; 0 = not licensed, or licensing unsupported).",
        lambda r: r.vgpu_license_status,
    ),
    _row(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "count",
        "Current clock event (throttle) reasons as an NVML bitmask.",
        lambda r: r.clock_event_reasons,
    ),
    _row(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "count",
        "Total number of single-bit volatile ECC errors.",
        lambda r: r.ecc_sbe_volatile,
    ),
    _row(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "count",
        "Total number of double-bit volatile ECC errors.",
        lambda r: r.ecc_dbe_volatile,
    ),
    _row(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "count",
        "Total number of single-bit persistent ECC errors.",
        lambda r: r.ecc_sbe_aggregate,
    ),
    _row(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "count",
        "Total number of double-bit persistent ECC errors.",
        lambda r: r.ecc_dbe_aggregate,
    ),
    _row(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "count",
        "Number of remapped rows for uncorrectable errors.",
        lambda r: r.remapped_rows_uncorrectable,
    ),
    _row(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "count",
        "Number of remapped rows for correctable errors.",
        lambda r: r.remapped_rows_correctable,
    ),
    _row(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "count",
        "Whether a row remapping is pending until the next GPU reset (1 = yes).",
        lambda r: r.remapped_rows_pending,
    ),
    _row(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "count",
        "Whether remapping of rows has failed (1 = yes).",
        lambda r: r.remapped_rows_failure,
    ),
)


def _profiling(name: str, help_text: str, field: str, unit: str = "ratio") -> DcgmRow:
    return _row(name, "gauge", unit, help_text, lambda p: getattr(p, field))


# DCGM's profiling (DCP) fields, filled from NVML GPM instead of DCGM.
PROFILING_ROWS: tuple[DcgmRow, ...] = (
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
    # Where DCGM reads profiling fields from GPM (Hopper and newer), field 1004 is GPM's "any
    # tensor" metric and the HMMA pipe alone is field 1014 (DCGM dcgm_fields.cpp); upstream's CSV
    # HELP still says HMMA, which only older, non-GPM DCGM builds measured.
    _profiling(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles any tensor pipe is active.",
        "tensor_active",
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "Ratio of cycles the half-precision tensor (HMMA) pipe is active.",
        "tensor_hmma_active",
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "Ratio of cycles the integer tensor (IMMA) pipe is active.",
        "tensor_imma_active",
    ),
    _profiling(
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "Ratio of cycles the double-precision tensor (DFMA) pipe is active.",
        "tensor_dfma_active",
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
        "B/s",
    ),
    _profiling(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus, in bytes per second.",
        "pcie_rx_bytes",
        "B/s",
    ),
    _profiling(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, in bytes per second.",
        "nvlink_tx_bytes",
        "B/s",
    ),
    _profiling(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, in bytes per second.",
        "nvlink_rx_bytes",
        "B/s",
    ),
)

XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
XID_ERRORS_HELP = "Value of the last XID error encountered."


@dataclass(frozen=True, slots=True)
class DcgmFamilies:
    """Every DCGM_* family one profile writes, resolved once per Renderer."""

    profile: Profile
    gpu: tuple[DcgmFamily, ...]
    profiling: tuple[DcgmFamily, ...]
    # Entity labels, then err_code and err_msg; the value is the last XID.
    xid: MetricFamily
    # Entity labels, then xid: events since the exporter started.
    xid_total: MetricFamily
    # Entity labels, then clock_event: sweeps in which that reason was active.
    clock_events_total: MetricFamily

    @property
    def declared(self) -> tuple[Declared, ...]:
        return (*self.gpu, *self.profiling, self.xid, self.xid_total, self.clock_events_total)

    def meanings(self) -> Iterator[tuple[str, str]]:
        """(name written, classic name of what it means) for every family."""
        for family in (*self.gpu, *self.profiling):
            yield family.name, family.classic
        yield self.xid.name, XID_ERRORS
        for counter in (self.xid_total, self.clock_events_total):
            yield counter.name, counter.name


def resolve(row: DcgmRow, profile: Profile) -> DcgmFamily:
    kind = profile.nvlink_bandwidth_kind if row.kind == NVLINK_BANDWIDTH_KIND else row.kind
    spelling = profile.spelling(row.name)
    name, unit, help_text = (
        (row.name, row.unit, row.help)
        if spelling is None
        else (spelling.name, spelling.unit, spelling.help)
    )
    return DcgmFamily(
        name=name,
        kind=kind,
        help=help_text,
        unit=unit,
        classic=row.name,
        reading=row.reading,
        convert=converter(row.native_unit, unit),
        double=unit in DOUBLE_UNITS,
    )


@cache
def families_for(profile: Profile) -> DcgmFamilies:
    xid = profile.spelling(XID_ERRORS)
    return DcgmFamilies(
        profile=profile,
        gpu=tuple(resolve(row, profile) for row in GPU_ROWS),
        profiling=tuple(resolve(row, profile) for row in PROFILING_ROWS),
        xid=MetricFamily(
            XID_ERRORS if xid is None else xid.name,
            "gauge",
            XID_ERRORS_HELP if xid is None else xid.help,
        ),
        xid_total=MetricFamily(
            "DCGM_EXP_XID_ERRORS_TOTAL",
            "counter",
            "Number of XID errors since the exporter started, by XID code.",
        ),
        clock_events_total=MetricFamily(
            "DCGM_EXP_CLOCK_EVENTS_TOTAL",
            "counter",
            "Number of sweeps in which a clock event reason was active, since the exporter "
            "started, by clock event.",
        ),
    )

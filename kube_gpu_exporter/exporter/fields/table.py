"""The DCGM field table: one row per field we export, the single source of truth for it.

A row says where NVML gives the value, its native and published units, its Prometheus type and
HELP, its 4.9 spelling, which entities carry it, whether it is exported by default and how often
it is read. The device reader builds its batch and getter calls from the rows, the GPM sampler its
metric list, the simulator answers each through one model entry (simulator/nvml/field_models.py),
the exposition and the bundle's units resolve families from them, a --collectors file selects among
them, and docs/fields.md is generated from them.

Row order is the order families are written in /metrics.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.fields.model import (
    DCGM_4_7_DOCS,
    DCGM_ALIAS,
    GO_DCGM_FIELD,
    Cadence,
    Computed,
    DcgmField,
    FieldValue,
    Getter,
    Gpm,
    Scope,
    Spelling,
)
from kube_gpu_exporter.exporter.fields.nvlink_health_rows import (
    FABRIC_CLUSTER_UUID_ROW,
    NVLINK_HEALTH_FIELDS,
)
from kube_gpu_exporter.exporter.fields.pcie_link_rows import PCIE_LINK_FIELDS
from kube_gpu_exporter.exporter.fields.violation_rows import RETIRED_PAGE_FIELDS, VIOLATION_FIELDS
from kube_gpu_exporter.exporter.struct_views import view

# The type of DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is the profile's: a counter up to 4.8.2, a
# gauge from 4.8.3.
NVLINK_BANDWIDTH_KIND = "<profile's NVLink bandwidth kind>"


def _fv(name: str) -> FieldValue:
    return FieldValue(getattr(pynvml, name), name)


def _memory(attribute: str) -> Getter:
    return Getter(
        "memory",
        ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetMemoryInfo"),
        # The first alternative asks for nvmlMemory_v2, which splits out the reservation.
        kwargs=(("version", pynvml.nvmlMemory_v2),),
        pick=lambda mem: getattr(view(mem), attribute, None),
        whole_gpu_only=True,
        note="v2, else v1",
    )


def _first(answer: Any) -> int:
    return int(answer[0])


_UTILIZATION = ("nvmlDeviceGetUtilizationRates",)

# Board power: field 185 (the 1 s average) where the GPU has one, else 186 (instantaneous), else
# nvmlDeviceGetPowerUsage (docs/nvml.md, 'Power fields').
BOARD_POWER = Computed(
    "field values `NVML_FI_DEV_POWER_AVERAGE` (185), else `NVML_FI_DEV_POWER_INSTANT` (186), "
    "else `nvmlDeviceGetPowerUsage`"
)


def _gpu(
    name: str,
    field_id: int,
    source: Any,
    kind: str,
    unit: str,
    help_text: str,
    *,
    native_unit: str | None = None,
    cadence: Cadence = Cadence.SWEEP,
    scope: Scope = Scope.GPU,
    default: bool = True,
    spelling_4_9: Spelling | None = None,
) -> DcgmField:
    return DcgmField(
        name=name,
        field_id=field_id,
        source=source,
        native_unit=native_unit or unit,
        unit=unit,
        kind=kind,
        help=help_text,
        scope=scope,
        cadence=cadence,
        default=default,
        spelling_4_9=spelling_4_9,
    )


def _spell(name: str, unit: str, help_text: str, source: str) -> Spelling:
    return Spelling(name, unit, help_text, source)


GPU_FIELDS: tuple[DcgmField, ...] = (
    _gpu(
        "DCGM_FI_DEV_SM_CLOCK",
        100,
        Getter("sm_clock", ("nvmlDeviceGetClockInfo",), args=(pynvml.NVML_CLOCK_SM,)),
        "gauge",
        "MHz",
        "SM clock frequency (in MHz).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_SM_CLOCK_HERTZ", "Hz", "SM clock frequency (in Hz).", GO_DCGM_FIELD
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_MEM_CLOCK",
        101,
        Getter("mem_clock", ("nvmlDeviceGetClockInfo",), args=(pynvml.NVML_CLOCK_MEM,)),
        "gauge",
        "MHz",
        "Memory clock frequency (in MHz).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "Hz", "Memory clock frequency (in Hz).", GO_DCGM_FIELD
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_MEMORY_TEMP",
        140,
        _fv("NVML_FI_DEV_MEMORY_TEMP"),
        "gauge",
        "C",
        "Memory temperature (in C).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "C", "Memory temperature (in C).", DCGM_ALIAS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_GPU_TEMP",
        150,
        Getter("temperature", ("nvmlDeviceGetTemperature",), args=(pynvml.NVML_TEMPERATURE_GPU,)),
        "gauge",
        "C",
        "GPU temperature (in C).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "C", "GPU temperature (in C).", DCGM_ALIAS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_POWER_USAGE",
        155,
        BOARD_POWER,
        "gauge",
        "W",
        "Power draw (in W).",
        native_unit="mW",
        spelling_4_9=_spell("DCGM_FI_DEV_BOARD_POWER_WATTS", "W", "Power draw (in W).", DCGM_ALIAS),
    ),
    _gpu(
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        160,
        # A setting, not a reading, and 85 µs a call on an H200: at the slow fields' cadence.
        Getter("power_limit", ("nvmlDeviceGetPowerManagementLimit",)),
        "gauge",
        "W",
        "Power management limit (in W).",
        native_unit="mW",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",
            "W",
            "Power management limit (in W).",
            DCGM_ALIAS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        164,
        # A limit too: it moves when a limit is set or a node's power cap changes, and the slow
        # fields are read in the sweep before each scrape, so a scrape still sees it current.
        Getter("enforced_power_limit", ("nvmlDeviceGetEnforcedPowerLimit",)),
        "gauge",
        "W",
        "Enforced power limit (in W).",
        native_unit="mW",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
            "W",
            "Enforced power limit (in W).",
            DCGM_ALIAS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        156,
        # 4 ms of kernel CPU per read on an H200.
        _fv("NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        "counter",
        "mJ",
        "Total energy consumption since boot (in mJ).",
        cadence=Cadence.ENERGY,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            "J",
            "Total energy consumption since the driver was loaded (in J).",
            GO_DCGM_FIELD,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        202,
        # 150 µs per read on an H200.
        _fv("NVML_FI_DEV_PCIE_REPLAY_COUNTER"),
        "counter",
        "count",
        "Total number of PCIe retries.",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "count", "Total number of PCIe retries.", DCGM_ALIAS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
        200,
        Computed("`nvmlDeviceGetPcieThroughput` (TX), in the PCIe sampler thread"),
        "gauge",
        "KB/s",
        "PCIe transmit throughput over NVML's 20 ms sample window (in KB/s).",
        cadence=Cadence.SAMPLER,
    ),
    _gpu(
        "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
        201,
        Computed("`nvmlDeviceGetPcieThroughput` (RX), in the PCIe sampler thread"),
        "gauge",
        "KB/s",
        "PCIe receive throughput over NVML's 20 ms sample window (in KB/s).",
        cadence=Cadence.SAMPLER,
    ),
    _gpu(
        "DCGM_FI_DEV_GPU_UTIL",
        203,
        Getter("utilization", _UTILIZATION, pick=lambda u: u.gpu, whole_gpu_only=True),
        "gauge",
        "%",
        "GPU utilization (in %).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio", "GPU utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        204,
        Getter("utilization", _UTILIZATION, pick=lambda u: u.memory, whole_gpu_only=True),
        "gauge",
        "%",
        "Memory utilization (in %).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
            "ratio",
            "Memory interface utilization (ratio 0-1).",
            DCGM_4_7_DOCS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_ENC_UTIL",
        206,
        Getter("encoder", ("nvmlDeviceGetEncoderUtilization",), pick=_first, whole_gpu_only=True),
        "gauge",
        "%",
        "Encoder utilization (in %).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_ENC_UTIL_RATIO", "ratio", "Encoder utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_DEC_UTIL",
        207,
        Getter("decoder", ("nvmlDeviceGetDecoderUtilization",), pick=_first, whole_gpu_only=True),
        "gauge",
        "%",
        "Decoder utilization (in %).",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_DEC_UTIL_RATIO", "ratio", "Decoder utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_FB_FREE",
        251,
        _memory("free"),
        "gauge",
        "MiB",
        "Framebuffer memory free (in MiB).",
        native_unit="B",
        scope=Scope.BOTH,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_FB_FREE_BYTES", "B", "Framebuffer memory free (in bytes).", DCGM_4_7_DOCS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_FB_USED",
        252,
        _memory("used"),
        "gauge",
        "MiB",
        "Framebuffer memory used (in MiB).",
        native_unit="B",
        scope=Scope.BOTH,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_FB_USED_BYTES", "B", "Framebuffer memory used (in bytes).", DCGM_4_7_DOCS
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_FB_RESERVED",
        253,
        _memory("reserved"),
        "gauge",
        "MiB",
        "Framebuffer memory reserved (in MiB).",
        native_unit="B",
        scope=Scope.BOTH,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_FB_RESERVED_BYTES",
            "B",
            "Framebuffer memory reserved (in bytes).",
            DCGM_4_7_DOCS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_FB_TOTAL",
        250,
        _memory("total"),
        "gauge",
        "MiB",
        "Framebuffer memory total (in MiB).",
        native_unit="B",
        scope=Scope.BOTH,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_FB_CAPACITY_BYTES",
            "B",
            "Framebuffer memory capacity (in bytes).",
            DCGM_4_7_DOCS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        449,
        Computed(
            "per-link field values `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX`/`_RX`, summed, as a "
            "rate between two reads"
        ),
        NVLINK_BANDWIDTH_KIND,
        "MB/s",
        "NVLink throughput over all links, received and transmitted (in MB/s).",
        native_unit="KiB/s",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
            "B/s",
            "NVLink throughput over all links, received and transmitted (in B/s).",
            DCGM_4_7_DOCS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        526,
        Computed("`nvmlDeviceGetGridLicensableFeatures_v4`"),
        "gauge",
        "count",
        "vGPU license status (1 = licensed; 0 = not licensed, or licensing unsupported).",
        cadence=Cadence.IDENTITY,
    ),
    _gpu(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        112,
        Getter(
            "clock_events",
            (
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            ),
        ),
        "gauge",
        "count",
        "Current clock event (throttle) reasons as an NVML bitmask.",
        spelling_4_9=_spell(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "count",
            "Current clock event reasons as an NVML bitmask.",
            DCGM_ALIAS,
        ),
    ),
    # How long each performance policy held the clocks back (on by default: violation_rows.py).
    *VIOLATION_FIELDS,
    _gpu(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        310,
        _fv("NVML_FI_DEV_ECC_SBE_VOL_TOTAL"),
        "counter",
        "count",
        "Total number of single-bit volatile ECC errors.",
        cadence=Cadence.SLOW,
    ),
    _gpu(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        311,
        _fv("NVML_FI_DEV_ECC_DBE_VOL_TOTAL"),
        "counter",
        "count",
        "Total number of double-bit volatile ECC errors.",
        cadence=Cadence.SLOW,
    ),
    _gpu(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        312,
        _fv("NVML_FI_DEV_ECC_SBE_AGG_TOTAL"),
        "counter",
        "count",
        "Total number of single-bit persistent ECC errors.",
        cadence=Cadence.SLOW,
    ),
    _gpu(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        313,
        _fv("NVML_FI_DEV_ECC_DBE_AGG_TOTAL"),
        "counter",
        "count",
        "Total number of double-bit persistent ECC errors.",
        cadence=Cadence.SLOW,
    ),
    _gpu(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        393,
        _fv("NVML_FI_DEV_REMAPPED_UNC"),
        "counter",
        "count",
        "Number of remapped rows for uncorrectable errors.",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "count",
            "Number of remapped rows for uncorrectable errors.",
            DCGM_ALIAS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        394,
        _fv("NVML_FI_DEV_REMAPPED_COR"),
        "counter",
        "count",
        "Number of remapped rows for correctable errors.",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
            "count",
            "Number of remapped rows for correctable errors.",
            DCGM_ALIAS,
        ),
    ),
    _gpu(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        396,
        _fv("NVML_FI_DEV_REMAPPED_PENDING"),
        "gauge",
        "count",
        "Whether a row remapping is pending until the next GPU reset (1 = yes).",
        cadence=Cadence.SLOW,
    ),
    _gpu(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        395,
        _fv("NVML_FI_DEV_REMAPPED_FAILURE"),
        "gauge",
        "count",
        "Whether remapping of rows has failed (1 = yes).",
        cadence=Cadence.SLOW,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "count",
            "Whether remapping of rows has failed (1 = yes).",
            DCGM_ALIAS,
        ),
    ),
    # Page retirement, before Ampere (NOT_SUPPORTED on boards that remap rows).
    *RETIRED_PAGE_FIELDS,
    # Not in dcgm-exporter's default CSV, and NOT_SUPPORTED on passively cooled data-centre
    # boards (the H200 among them): exported when a --collectors file lists it.
    _gpu(
        "DCGM_FI_DEV_FAN_SPEED",
        191,
        Getter("fan_speed", ("nvmlDeviceGetFanSpeed",)),
        "gauge",
        "%",
        "Fan speed (in 0-100%).",
        default=False,
        spelling_4_9=_spell(
            "DCGM_FI_DEV_FAN_SPEED_RATIO", "ratio", "Fan speed (ratio 0-1).", GO_DCGM_FIELD
        ),
    ),
    # Blackwell and Grace: NVLink errors, the fabric, C2C, the recovery action (off by default).
    *NVLINK_HEALTH_FIELDS,
    # PCIe link training (off by default; read for the health verdict).
    *PCIE_LINK_FIELDS,
)

PERCENT = 0.01
MIB = 1 << 20


def _prof(
    name: str,
    field_id: int,
    metric: str,
    help_text: str,
    *,
    unit: str = "ratio",
    factor: float = PERCENT,
    spelling_4_9: Spelling | None = None,
) -> DcgmField:
    return DcgmField(
        name=name,
        field_id=field_id,
        source=Gpm(getattr(pynvml, metric), metric, factor),
        native_unit=unit,
        unit=unit,
        kind="gauge",
        help=help_text,
        scope=Scope.BOTH,
        cadence=Cadence.SAMPLER,
        spelling_4_9=spelling_4_9,
    )


def _ratio(name: str, help_text: str) -> Spelling:
    return Spelling(name, "ratio", help_text, DCGM_ALIAS)


_GR = "Ratio of time the graphics engine is active."
_SM = "The ratio of cycles an SM has at least 1 warp assigned."
_OCC = "The ratio of number of warps resident on an SM."
_TENSOR = "Ratio of cycles any tensor pipe is active."
_HMMA = "Ratio of cycles the half-precision tensor (HMMA) pipe is active."
_IMMA = "Ratio of cycles the integer tensor (IMMA) pipe is active."
_DFMA = "Ratio of cycles the double-precision tensor (DFMA) pipe is active."
_DRAM = "Ratio of cycles the device memory interface is active sending or receiving data."
_FP64 = "Ratio of cycles the fp64 pipes are active."
_FP32 = "Ratio of cycles the fp32 pipes are active."
_FP16 = "Ratio of cycles the fp16 pipes are active."

# DCGM's profiling (DCP) fields, filled from NVML GPM instead of DCGM (docs/nvml.md, 'GPM').
PROFILING_FIELDS: tuple[DcgmField, ...] = (
    _prof(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        1001,
        "NVML_GPM_METRIC_GRAPHICS_UTIL",
        _GR,
        spelling_4_9=_ratio("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", _GR),
    ),
    _prof(
        "DCGM_FI_PROF_SM_ACTIVE",
        1002,
        "NVML_GPM_METRIC_SM_UTIL",
        _SM,
        spelling_4_9=_ratio("DCGM_FI_PROF_SM_UTIL_RATIO", _SM),
    ),
    _prof(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        1003,
        "NVML_GPM_METRIC_SM_OCCUPANCY",
        _OCC,
        spelling_4_9=_ratio("DCGM_FI_PROF_SM_OCCUPANCY_RATIO", _OCC),
    ),
    # Where DCGM reads profiling fields from GPM (Hopper and newer), field 1004 is GPM's "any
    # tensor" metric and the HMMA pipe alone is field 1014 (DCGM dcgm_fields.cpp); upstream's CSV
    # HELP still says HMMA, which only older, non-GPM DCGM builds measured.
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        1004,
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        _TENSOR,
        spelling_4_9=_ratio("DCGM_FI_PROF_TENSOR_UTIL_RATIO", _TENSOR),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        1014,
        "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
        _HMMA,
        spelling_4_9=_ratio("DCGM_FI_PROF_HMMA_UTIL_RATIO", _HMMA),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        1013,
        "NVML_GPM_METRIC_IMMA_TENSOR_UTIL",
        _IMMA,
        spelling_4_9=_ratio("DCGM_FI_PROF_IMMA_UTIL_RATIO", _IMMA),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        1015,
        "NVML_GPM_METRIC_DFMA_TENSOR_UTIL",
        _DFMA,
        spelling_4_9=_ratio("DCGM_FI_PROF_DFMA_UTIL_RATIO", _DFMA),
    ),
    _prof(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        1005,
        "NVML_GPM_METRIC_DRAM_BW_UTIL",
        _DRAM,
        spelling_4_9=_ratio("DCGM_FI_PROF_DRAM_UTIL_RATIO", _DRAM),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        1006,
        "NVML_GPM_METRIC_FP64_UTIL",
        _FP64,
        spelling_4_9=_ratio("DCGM_FI_PROF_FP64_UTIL_RATIO", _FP64),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        1007,
        "NVML_GPM_METRIC_FP32_UTIL",
        _FP32,
        spelling_4_9=_ratio("DCGM_FI_PROF_FP32_UTIL_RATIO", _FP32),
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        1008,
        "NVML_GPM_METRIC_FP16_UTIL",
        _FP16,
        spelling_4_9=_ratio("DCGM_FI_PROF_FP16_UTIL_RATIO", _FP16),
    ),
    _prof(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        1009,
        "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
        "The rate of data transmitted over the PCIe bus, in bytes per second.",
        unit="B/s",
        factor=MIB,
    ),
    _prof(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        1010,
        "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
        "The rate of data received over the PCIe bus, in bytes per second.",
        unit="B/s",
        factor=MIB,
    ),
    _prof(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        1011,
        "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
        "The rate of data transmitted over NVLink, in bytes per second.",
        unit="B/s",
        factor=MIB,
    ),
    _prof(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        1012,
        "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
        "The rate of data received over NVLink, in bytes per second.",
        unit="B/s",
        factor=MIB,
    ),
)

# The families built from events and counts rather than read values; the renderer writes them.
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
XID_ERRORS_TOTAL = "DCGM_EXP_XID_ERRORS_TOTAL"
CLOCK_EVENTS_TOTAL = "DCGM_EXP_CLOCK_EVENTS_TOTAL"
XID_ERRORS_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_EVENTS_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
DRIVER_VERSION = "DCGM_FI_DRIVER_VERSION"

_XID_HELP = "Value of the last XID error encountered."
EVENT_FIELDS: tuple[DcgmField, ...] = (
    DcgmField(
        name=XID_ERRORS,
        field_id=230,
        source=Computed("the XID event thread (`nvmlEventSetWait_v2`)"),
        native_unit="count",
        unit="count",
        kind="gauge",
        help=_XID_HELP,
        scope=Scope.BOTH,
        cadence=Cadence.EVENTS,
        spelling_4_9=Spelling("DCGM_FI_DEV_XID_ERROR", "count", _XID_HELP, DCGM_ALIAS),
    ),
    DcgmField(
        name=XID_ERRORS_TOTAL,
        field_id=0,
        source=Computed("the XID event thread, counted per XID since the exporter started"),
        native_unit="count",
        unit="count",
        kind="counter",
        help="Number of XID errors since the exporter started, by XID code.",
        scope=Scope.BOTH,
        cadence=Cadence.EVENTS,
    ),
    DcgmField(
        name=CLOCK_EVENTS_TOTAL,
        field_id=0,
        source=Computed("the clock event reasons of each sweep, counted per reason"),
        native_unit="count",
        unit="count",
        kind="counter",
        help="Number of sweeps in which a clock event reason was active, since the exporter "
        "started, by clock event.",
        scope=Scope.BOTH,
        cadence=Cadence.EVENTS,
    ),
    DcgmField(
        name=XID_ERRORS_COUNT,
        field_id=0,
        source=Computed("the XID event thread, counted per XID over --xid-count-window-size"),
        native_unit="count",
        unit="count",
        kind="gauge",
        help="Number of XID errors within the last window, by XID code.",
        scope=Scope.BOTH,
        cadence=Cadence.EVENTS,
        default=False,
    ),
    DcgmField(
        name=CLOCK_EVENTS_COUNT,
        field_id=0,
        source=Computed(
            "the clock event reasons of each sweep, counted per reason over "
            "--clock-events-count-window-size"
        ),
        native_unit="count",
        unit="count",
        kind="gauge",
        help="Number of sweeps within the last window in which a clock event reason was active, "
        "by clock event.",
        scope=Scope.BOTH,
        cadence=Cadence.EVENTS,
        default=False,
    ),
    DcgmField(
        name=DRIVER_VERSION,
        field_id=1,
        source=Computed("`nvmlSystemGetDriverVersion`, as a label on every DCGM series"),
        native_unit="",
        unit="",
        kind="label",
        help="Driver Version",
        scope=Scope.BOTH,
        cadence=Cadence.IDENTITY,
        spelling_4_9=Spelling("DCGM_FI_SYSTEM_DRIVER_VERSION", "", "Driver Version", DCGM_ALIAS),
    ),
    FABRIC_CLUSTER_UUID_ROW,
)

FIELDS: tuple[DcgmField, ...] = (*GPU_FIELDS, *PROFILING_FIELDS, *EVENT_FIELDS)

BY_NAME: Mapping[str, DcgmField] = MappingProxyType({f.name: f for f in FIELDS})


def _by_any_name() -> dict[str, DcgmField]:
    names: dict[str, DcgmField] = {}
    for row in FIELDS:
        for name in row.names():
            if name in names:
                raise ValueError(f"{name} names two rows of the field table")
            names[name] = row
    return names


# Every name a --collectors file may use for a row: its classic name and its 4.9 spelling.
BY_ANY_NAME: Mapping[str, DcgmField] = MappingProxyType(_by_any_name())

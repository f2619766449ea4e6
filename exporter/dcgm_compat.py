"""Which dcgm-exporter release the output imitates (`--compat.dcgm-exporter`), and the one table of
metric renames and unit conversions that the exporter and the bundle both read.

Three releases change what a scrape looks like (docs/dcgm-exporter-compatibility.md, "Version
profiles", has the sources):

- 4.8.2: host label `Hostname`; NVLink bandwidth typed counter; classic names and units.
- 4.8.3: host label `hostname` (dcgm-exporter #655); NVLink bandwidth typed gauge.
- 4.9: DCGM 4.7's field names; eleven fields change to base units (Hz, J, ratio, bytes, B/s); the
  driver label becomes `DCGM_FI_SYSTEM_DRIVER_VERSION`; the framebuffer capacity is exported.

All three carry the driver version as a label on every DCGM series, as upstream's default CSV
does, and all three use the same XID text table (unchanged since 4.7.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

Number = int | float


class DcgmVersion(StrEnum):
    V4_8_2 = "4.8.2"
    V4_8_3 = "4.8.3"
    V4_9 = "4.9"


# What the current GPU Operator ships.
DEFAULT_VERSION = DcgmVersion.V4_8_3


@dataclass(frozen=True, slots=True)
class Profile:
    version: DcgmVersion
    host_label: str
    driver_label: str
    # True: DCGM 4.7 names and base units (the RENAMES_4_9 table); False: classic spellings.
    base_units: bool
    # DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is a rate either way; only its TYPE line differs.
    nvlink_bandwidth_kind: str

    def spelling(self, classic_name: str) -> Spelling | None:
        """The 4.9 spelling of a classic family, or None where this profile keeps the classic."""
        return RENAMES_4_9.get(classic_name) if self.base_units else None

    def name(self, classic_name: str) -> str:
        spelling = self.spelling(classic_name)
        return classic_name if spelling is None else spelling.name


PROFILES: Mapping[DcgmVersion, Profile] = MappingProxyType(
    {
        DcgmVersion.V4_8_2: Profile(
            DcgmVersion.V4_8_2, "Hostname", "DCGM_FI_DRIVER_VERSION", False, "counter"
        ),
        DcgmVersion.V4_8_3: Profile(
            DcgmVersion.V4_8_3, "hostname", "DCGM_FI_DRIVER_VERSION", False, "gauge"
        ),
        DcgmVersion.V4_9: Profile(
            DcgmVersion.V4_9, "hostname", "DCGM_FI_SYSTEM_DRIVER_VERSION", True, "gauge"
        ),
    }
)
DEFAULT_PROFILE = PROFILES[DEFAULT_VERSION]


def profile(version: str) -> Profile:
    return PROFILES[DcgmVersion(version)]


# ---- units ----
MIB = 1 << 20


def _same(value: Number) -> Number:
    return value


# (unit NVML reports, unit a family is published in) -> conversion. The only place a unit changes.
CONVERSIONS: Mapping[tuple[str, str], Callable[[Number], Number]] = MappingProxyType(
    {
        ("MHz", "MHz"): _same,
        ("MHz", "Hz"): lambda v: v * 1_000_000,
        ("mJ", "mJ"): _same,
        # DCGM 4.7's joule field is an INT64, so whole joules.
        ("mJ", "J"): lambda v: int(v) // 1000,
        ("mW", "W"): lambda v: v / 1000,
        ("%", "%"): _same,
        ("%", "ratio"): lambda v: v / 100,
        ("B", "MiB"): lambda v: int(v) // MIB,
        ("B", "B"): _same,
        ("KiB", "B"): lambda v: int(v) * 1024,
        # DCGM turns NVML's KiB counters into a rate and divides by 1000 ("MB/s") for field 449,
        # but multiplies by 1024 for its byte-per-second fields.
        ("KiB/s", "MB/s"): lambda v: v / 1000,
        ("KiB/s", "B/s"): lambda v: v * 1024,
        ("KB/s", "KB/s"): _same,
        ("C", "C"): _same,
        ("ratio", "ratio"): _same,
        ("B/s", "B/s"): _same,
        ("count", "count"): _same,
    }
)


def converter(native_unit: str, unit: str) -> Callable[[Number], Number]:
    try:
        return CONVERSIONS[(native_unit, unit)]
    except KeyError:
        raise KeyError(f"no conversion from {native_unit} to {unit}") from None


@dataclass(frozen=True, slots=True)
class Spelling:
    """A family's name, unit and HELP in one profile."""

    name: str
    unit: str
    help: str
    # Where the name is established (docs/dcgm-exporter-compatibility.md lists the sources).
    source: str = ""


# Sources, in order of strength.
DCGM_ALIAS = "DCGM 4.6 dcgm_fields.h deprecated alias (same field id)"
GO_DCGM_FIELD = "go-dcgm 4.6.1 dcgm_fields.h base-unit field"
DCGM_4_7_DOCS = "DCGM 4.7 field-identifier documentation, as quoted by third parties (unconfirmed)"

# Classic dcgm-exporter name -> its name, unit and HELP under the 4.9 profile. Families missing
# here keep their classic spelling in 4.9 (e.g. the ECC totals, VGPU_LICENSE_STATUS, PROF_PCIE_*).
RENAMES_4_9: Mapping[str, Spelling] = MappingProxyType(
    {
        # The eleven that change unit.
        "DCGM_FI_DEV_SM_CLOCK": Spelling(
            "DCGM_FI_DEV_SM_CLOCK_HERTZ", "Hz", "SM clock frequency (in Hz).", GO_DCGM_FIELD
        ),
        "DCGM_FI_DEV_MEM_CLOCK": Spelling(
            "DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", "Hz", "Memory clock frequency (in Hz).", GO_DCGM_FIELD
        ),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Spelling(
            "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL",
            "J",
            "Total energy consumption since the driver was loaded (in J).",
            GO_DCGM_FIELD,
        ),
        "DCGM_FI_DEV_GPU_UTIL": Spelling(
            "DCGM_FI_DEV_GPU_UTIL_RATIO", "ratio", "GPU utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
        "DCGM_FI_DEV_MEM_COPY_UTIL": Spelling(
            "DCGM_FI_DEV_MEMORY_UTIL_RATIO",
            "ratio",
            "Memory interface utilization (ratio 0-1).",
            DCGM_4_7_DOCS,
        ),
        "DCGM_FI_DEV_ENC_UTIL": Spelling(
            "DCGM_FI_DEV_ENC_UTIL_RATIO", "ratio", "Encoder utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
        "DCGM_FI_DEV_DEC_UTIL": Spelling(
            "DCGM_FI_DEV_DEC_UTIL_RATIO", "ratio", "Decoder utilization (ratio 0-1).", DCGM_4_7_DOCS
        ),
        "DCGM_FI_DEV_FB_FREE": Spelling(
            "DCGM_FI_DEV_FB_FREE_BYTES", "B", "Framebuffer memory free (in bytes).", DCGM_4_7_DOCS
        ),
        "DCGM_FI_DEV_FB_USED": Spelling(
            "DCGM_FI_DEV_FB_USED_BYTES", "B", "Framebuffer memory used (in bytes).", DCGM_4_7_DOCS
        ),
        "DCGM_FI_DEV_FB_RESERVED": Spelling(
            "DCGM_FI_DEV_FB_RESERVED_BYTES",
            "B",
            "Framebuffer memory reserved (in bytes).",
            DCGM_4_7_DOCS,
        ),
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": Spelling(
            "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND",
            "B/s",
            "NVLink throughput over all links, received and transmitted (in B/s).",
            DCGM_4_7_DOCS,
        ),
        # Renamed, same unit.
        "DCGM_FI_DEV_GPU_TEMP": Spelling(
            "DCGM_FI_DEV_GPU_TEMP_CELSIUS", "C", "GPU temperature (in C).", DCGM_ALIAS
        ),
        "DCGM_FI_DEV_MEMORY_TEMP": Spelling(
            "DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", "C", "Memory temperature (in C).", DCGM_ALIAS
        ),
        "DCGM_FI_DEV_POWER_USAGE": Spelling(
            "DCGM_FI_DEV_BOARD_POWER_WATTS", "W", "Power draw (in W).", DCGM_ALIAS
        ),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Spelling(
            "DCGM_FI_DEV_PCIE_REPLAY_TOTAL", "count", "Total number of PCIe retries.", DCGM_ALIAS
        ),
        "DCGM_FI_DEV_XID_ERRORS": Spelling(
            "DCGM_FI_DEV_XID_ERROR", "count", "Value of the last XID error encountered.", DCGM_ALIAS
        ),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Spelling(
            "DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL",
            "count",
            "Number of remapped rows for uncorrectable errors.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Spelling(
            "DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL",
            "count",
            "Number of remapped rows for correctable errors.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": Spelling(
            "DCGM_FI_DEV_ROW_REMAP_FAILED",
            "count",
            "Whether remapping of rows has failed (1 = yes).",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Spelling(
            "DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO",
            "ratio",
            "Ratio of time the graphics engine is active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Spelling(
            "DCGM_FI_PROF_TENSOR_UTIL_RATIO",
            "ratio",
            "Ratio of cycles any tensor pipe is active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_DRAM_ACTIVE": Spelling(
            "DCGM_FI_PROF_DRAM_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
            DCGM_ALIAS,
        ),
        # Beyond upstream's default set: the same DCGM naming standard, for the families we add.
        "DCGM_FI_DEV_FB_TOTAL": Spelling(
            "DCGM_FI_DEV_FB_CAPACITY_BYTES",
            "B",
            "Framebuffer memory capacity (in bytes).",
            DCGM_4_7_DOCS,
        ),
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": Spelling(
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_REQUESTED_WATTS",
            "W",
            "Power management limit (in W).",
            DCGM_ALIAS,
        ),
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": Spelling(
            "DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS",
            "W",
            "Enforced power limit (in W).",
            DCGM_ALIAS,
        ),
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": Spelling(
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
            "count",
            "Current clock event reasons as an NVML bitmask.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_SM_ACTIVE": Spelling(
            "DCGM_FI_PROF_SM_UTIL_RATIO",
            "ratio",
            "The ratio of cycles an SM has at least 1 warp assigned.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_SM_OCCUPANCY": Spelling(
            "DCGM_FI_PROF_SM_OCCUPANCY_RATIO",
            "ratio",
            "The ratio of number of warps resident on an SM.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE": Spelling(
            "DCGM_FI_PROF_FP64_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the fp64 pipes are active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE": Spelling(
            "DCGM_FI_PROF_FP32_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the fp32 pipes are active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE": Spelling(
            "DCGM_FI_PROF_FP16_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the fp16 pipes are active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": Spelling(
            "DCGM_FI_PROF_HMMA_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the half-precision tensor (HMMA) pipe is active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": Spelling(
            "DCGM_FI_PROF_IMMA_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the integer tensor (IMMA) pipe is active.",
            DCGM_ALIAS,
        ),
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": Spelling(
            "DCGM_FI_PROF_DFMA_UTIL_RATIO",
            "ratio",
            "Ratio of cycles the double-precision tensor (DFMA) pipe is active.",
            DCGM_ALIAS,
        ),
    }
)

# The eleven default families whose unit changes in 4.9, as upstream's release notes count them.
UNIT_CHANGES: tuple[str, ...] = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
)

"""Which dcgm-exporter release the output imitates (`--compat.dcgm-exporter`), and the one table of
metric renames and unit conversions that the exporter and the bundle both read.

Three releases change what a scrape looks like; a fourth, 4.8.4, is named so that its users can
say so (docs/dcgm-exporter-compatibility.md, "Version profiles", has the sources):

- 4.8.2: host label `Hostname`; NVLink bandwidth typed counter; classic names and units.
- 4.8.3: host label `hostname` (dcgm-exporter #655); NVLink bandwidth typed gauge.
- 4.8.4: as 4.8.3 for every field its default CSV lists; what it added (fabric health, the power
  limits, exporter metrics) is opt-in, so the same default scrape.
- 4.9, a preview (no upstream release confirms it yet): DCGM 4.7's field names; eleven fields
  change to base units (Hz, J, ratio, bytes, B/s); the driver label becomes
  `DCGM_FI_SYSTEM_DRIVER_VERSION`; the framebuffer capacity is exported.

All of them carry the driver version as a label on every DCGM series, as upstream's default CSV
does, and all use the same XID text table (unchanged since 4.7.1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kube_gpu_exporter.exporter.fields.model import Spelling
from kube_gpu_exporter.exporter.fields.table import FIELDS

Number = int | float


class DcgmVersion(StrEnum):
    V4_8_2 = "4.8.2"
    V4_8_3 = "4.8.3"
    V4_8_4 = "4.8.4"
    V4_9 = "4.9"


# What the current GPU Operator ships. 4.8.4 serves the same default scrape, so choosing it would
# change nothing but the name (docs/dcgm-exporter-compatibility.md, 'Release generations').
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
        DcgmVersion.V4_8_4: Profile(
            DcgmVersion.V4_8_4, "hostname", "DCGM_FI_DRIVER_VERSION", False, "gauge"
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
        # The violation counters: NVML's nanoseconds, as dcgm-exporter publishes them.
        ("ns", "ns"): _same,
    }
)


def converter(native_unit: str, unit: str) -> Callable[[Number], Number]:
    try:
        return CONVERSIONS[(native_unit, unit)]
    except KeyError:
        raise KeyError(f"no conversion from {native_unit} to {unit}") from None


# Classic dcgm-exporter name -> its name, unit and HELP under the 4.9 profile, for the families
# it writes by default, from the field table's `spelling_4_9` (one place to correct a name).
# Families missing here keep their classic spelling in 4.9 (e.g. the ECC totals,
# VGPU_LICENSE_STATUS, PROF_PCIE_*); the driver label's is the profile's `driver_label`.
RENAMES_4_9: Mapping[str, Spelling] = MappingProxyType(
    {
        row.name: row.spelling_4_9
        for row in FIELDS
        if row.spelling_4_9 is not None and row.default and row.kind != "label"
    }
)

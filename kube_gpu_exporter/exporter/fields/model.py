"""What one row of the DCGM field table says: where NVML gives the value, in which unit, how the
exposition spells it in each dcgm-exporter release, and how often it is read.

The rows themselves are in `kube_gpu_exporter/exporter/fields/table.py`; this module only holds
their shape, so that the reader, the simulator, the exposition, the compatibility profiles and the
docs generator can all import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

# Where a 4.9 name is established, in order of strength (docs/dcgm-exporter-compatibility.md).
DCGM_ALIAS = "DCGM 4.6 dcgm_fields.h deprecated alias (same field id)"
GO_DCGM_FIELD = "go-dcgm 4.6.1 dcgm_fields.h base-unit field"
DCGM_4_7_DOCS = "DCGM 4.7 field-identifier documentation, as quoted by third parties (unconfirmed)"


class Scope(StrEnum):
    """Which entities carry the field."""

    GPU = "GPU"
    MIG = "MIG instance"
    BOTH = "GPU and MIG instance"


class Cadence(StrEnum):
    """How often a field is read, by default (`--collector.field-interval` overrides the first
    three per field)."""

    # Every sweep (--collector.interval).
    SWEEP = "every sweep"
    # At most every --collector.slow-fields-interval, just before a learnt scrape.
    SLOW = "slow fields"
    # NVML's energy counter: every --collector.energy-read-interval, carried forward by board
    # power in between (nvml/energy_estimate.py).
    ENERGY = "energy counter"
    # With the device's identity: when the exporter starts and when a GPU (re)appears.
    IDENTITY = "with the identity"
    # By a sampler thread on its own interval (PCIe throughput, GPM).
    SAMPLER = "own sampler"
    # Events as they arrive, or counted from other fields (XID, clock events).
    EVENTS = "events"


@dataclass(frozen=True, slots=True)
class Getter:
    """One plain NVML getter per device, tried in order of `functions` (newest API first).
    Rows naming the same `key` share one call per sweep."""

    key: str
    functions: tuple[str, ...]
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    # From the getter's answer to the field's value in its native unit; None: the answer itself.
    pick: Callable[[Any], int | float | None] | None = None
    # NOT_SUPPORTED on a MIG-enabled parent by NVML's documentation: not asked there.
    whole_gpu_only: bool = False
    # For the docs, where one function is tried in two versions (nvmlMemory_v2, then v1).
    note: str = ""

    def describe(self) -> str:
        names = " else ".join(f"`{f}`" for f in dict.fromkeys(self.functions))
        return f"{names} ({self.note})" if self.note else names


@dataclass(frozen=True, slots=True)
class FieldValue:
    """An entry of the device's `nvmlDeviceGetFieldValues` batch."""

    nvml_field_id: int
    nvml_field_name: str
    # Asked once per NVLink link (scopeId = the link's index) and summed over the links, as the
    # Blackwell NVML_FI_DEV_NVLINK_COUNT_* fields are kept per link.
    per_link: bool = False

    def describe(self) -> str:
        text = f"field value `{self.nvml_field_name}` ({self.nvml_field_id})"
        return f"{text}, summed over the links" if self.per_link else text


@dataclass(frozen=True, slots=True)
class Gpm:
    """An NVML GPM metric, averaged between two samples, times `factor` into DCGM's unit."""

    metric_id: int
    metric_name: str
    factor: float

    def describe(self) -> str:
        return f"GPM `{self.metric_name}`"


@dataclass(frozen=True, slots=True)
class Computed:
    """Built by dedicated code from other reads or events; `how` says from what (for the docs)."""

    how: str

    def describe(self) -> str:
        return self.how


Source = Getter | FieldValue | Gpm | Computed


@dataclass(frozen=True, slots=True)
class Spelling:
    """A family's name, unit and HELP in one profile."""

    name: str
    unit: str
    help: str
    # Where the name is established (docs/dcgm-exporter-compatibility.md lists the sources).
    source: str = ""


@dataclass(frozen=True, slots=True)
class DcgmField:
    """One DCGM field as we read and export it."""

    # The classic DCGM name: what the readers file the row's value under in the snapshot
    # (GpuReadings.values, ProfilingReadings.values for GPM rows), and the exposition reads.
    name: str
    # DCGM's field id (dcgm_fields.h); 0 for dcgm-exporter's own DCGM_EXP_* families.
    field_id: int
    source: Source
    # The unit NVML gives (snapshots keep it) and the one the classic family is published in.
    native_unit: str
    unit: str
    # Prometheus type ("gauge", "counter"), or "label" for a field that becomes a label.
    kind: str
    help: str
    scope: Scope
    cadence: Cadence
    # Exported without a --collectors file.
    default: bool = True
    # The 4.9 profile's spelling, where it differs from the classic one.
    spelling_4_9: Spelling | None = None

    @property
    def profiling(self) -> bool:
        return isinstance(self.source, Gpm)

    @property
    def reader_reads(self) -> bool:
        """Read by the device reader on the sweep (so its cadence can be overridden)."""
        return self.cadence in (Cadence.SWEEP, Cadence.SLOW, Cadence.ENERGY)

    def names(self) -> tuple[str, ...]:
        """Every name a --collectors file may list it by."""
        if self.spelling_4_9 is None or self.spelling_4_9.name == self.name:
            return (self.name,)
        return (self.name, self.spelling_4_9.name)

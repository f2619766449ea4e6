"""Which names are DCGM fields at all, whether or not this exporter can export them.

A --collectors file may list any field DCGM knows: the ones we cannot read are reported and
skipped (as dcgm-exporter skips the profiling fields a GPU lacks), while a name DCGM does not
know is a typo that must stop the exporter. Telling the two apart needs DCGM's whole field list,
which lives in dcgm-field-ids.txt beside this module (its header says where it comes from).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path
from types import MappingProxyType

from kube_gpu_exporter.exporter.fields.table import (
    BY_ANY_NAME,
    CLOCK_EVENTS_COUNT,
    XID_ERRORS_COUNT,
)

DATA_FILE = Path(__file__).with_name("dcgm-field-ids.txt")

GPU_HEALTH_STATUS = "DCGM_EXP_GPU_HEALTH_STATUS"
P2P_STATUS = "DCGM_EXP_P2P_STATUS"
# Families dcgm-exporter computes itself rather than asks DCGM for (its counters package), and the
# running totals this exporter adds beside its windowed counts. None has a DCGM field id.
EXPORTER_FAMILIES = frozenset(
    {
        XID_ERRORS_COUNT,
        CLOCK_EVENTS_COUNT,
        GPU_HEALTH_STATUS,
        P2P_STATUS,
        "DCGM_EXP_XID_ERRORS_TOTAL",
        "DCGM_EXP_CLOCK_EVENTS_TOTAL",
    }
)
# dcgm-exporter 1.x's lower-case metric names, which go-dcgm still resolves to fields.
LEGACY_PREFIX = "dcgm_"


@cache
def _ids() -> Mapping[str, int]:
    ids: dict[str, int] = {}
    for number, line in enumerate(DATA_FILE.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition(" ")
        if not value.strip().isdigit() or name in ids:
            # Shipped with the package, so a bad line is our bug, not the user's input.
            raise ValueError(f"{DATA_FILE.name}:{number}: bad line {line!r}")
        ids[name] = int(value)
    return MappingProxyType(ids)


def is_dcgm_field(name: str) -> bool:
    """A name a dcgm-exporter CSV may list: DCGM's, the field table's, or a DCGM_EXP_* family."""
    return name in _ids() or name in BY_ANY_NAME or name in EXPORTER_FAMILIES


def field_id(name: str) -> int | None:
    """DCGM's id for the field; None for the DCGM_EXP_* families and for unknown names."""
    found = _ids().get(name)
    if found is not None:
        return found
    # The table's 4.9 spellings from DCGM 4.7's documentation are not in the 4.6.1 header.
    row = BY_ANY_NAME.get(name)
    return row.field_id if row is not None and row.field_id else None


def is_legacy_name(name: str) -> bool:
    """One of dcgm-exporter 1.x's lower-case names (e.g. dcgm_gpu_temp)."""
    return name.startswith(LEGACY_PREFIX) and name in _ids()


def names_of(field: int) -> tuple[str, ...]:
    """DCGM's upper-case names for the field id, in the data file's order."""
    return tuple(
        name for name, number in _ids().items() if number == field and not is_legacy_name(name)
    )

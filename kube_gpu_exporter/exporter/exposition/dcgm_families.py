"""dcgm-exporter's metric families as the field table (kube_gpu_exporter/exporter/fields/table.py)
spells them in each release.

`families_for(profile)` resolves the table's default rows for a `--compat.dcgm-exporter` profile:
the classic spelling, or under 4.9 the row's 4.9 one, with the value converted through
`dcgm_compat.converter` (the only place units change; docs/dcgm-exporter-compatibility.md,
'Classic units' and 'Version profiles'). With a --collectors file, exactly the rows it lists, as
it spells them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache

from kube_gpu_exporter.exporter.dcgm_compat import Number, Profile, converter
from kube_gpu_exporter.exporter.exposition.metric_family import Declared, MetricFamily
from kube_gpu_exporter.exporter.fields.model import DcgmField
from kube_gpu_exporter.exporter.fields.selection import FieldSelection, ListedField
from kube_gpu_exporter.exporter.fields.table import (
    BY_NAME,
    CLOCK_EVENTS_COUNT,
    CLOCK_EVENTS_TOTAL,
    GPU_FIELDS,
    NVLINK_BANDWIDTH_KIND,
    PROFILING_FIELDS,
    XID_ERRORS,
    XID_ERRORS_COUNT,
    XID_ERRORS_TOTAL,
)

# DCGM stores these as doubles, which dcgm-exporter prints with six decimals. Every other unit
# here is an INT64 field upstream (Hz, J, bytes, B/s, %, MiB, MB/s...), printed as an integer.
DOUBLE_UNITS = frozenset({"W", "ratio"})


@dataclass(frozen=True, slots=True)
class DcgmFamily:
    """A row resolved for one profile: what the exposition writes."""

    name: str
    kind: str
    help: str
    unit: str
    # The classic name of the row, the same in every profile: what the family means, and where
    # its value is in the readings' map.
    classic: str
    # From the readings' unit to this family's (applied in Renderer._dcgm_samples).
    convert: Callable[[Number], Number]
    double: bool


@dataclass(frozen=True, slots=True)
class DcgmFamilies:
    """Every DCGM_* family one profile (and --collectors file) writes, resolved once per
    Renderer. An event family is None where a --collectors file leaves it out."""

    profile: Profile
    gpu: tuple[DcgmFamily, ...]
    profiling: tuple[DcgmFamily, ...]
    # Entity labels, then err_code and err_msg; the value is the last XID.
    xid: MetricFamily | None
    # Entity labels, then xid: events since the exporter started.
    xid_total: MetricFamily | None
    # Entity labels, then clock_event: sweeps in which that reason was active.
    clock_events_total: MetricFamily | None
    # Entity labels, window_size_in_ms, then xid / clock_event: within the last window. Only
    # a --collectors file turns these on, as in dcgm-exporter.
    xid_count: MetricFamily | None = None
    clock_events_count: MetricFamily | None = None

    @property
    def events(self) -> tuple[MetricFamily, ...]:
        return tuple(
            family
            for family in (
                self.xid,
                self.xid_total,
                self.clock_events_total,
                self.xid_count,
                self.clock_events_count,
            )
            if family is not None
        )

    @property
    def declared(self) -> tuple[Declared, ...]:
        return (*self.gpu, *self.profiling, *self.events)

    def meanings(self) -> Iterator[tuple[str, str]]:
        """(name written, classic name of what it means) for every family."""
        for family in (*self.gpu, *self.profiling):
            yield family.name, family.classic
        if self.xid is not None:
            yield self.xid.name, XID_ERRORS
        for counter in self.events:
            if counter is not self.xid:
                yield counter.name, counter.name


@dataclass(frozen=True, slots=True)
class _Spelt:
    name: str
    kind: str
    unit: str
    help: str


def _spelt(row: DcgmField, profile: Profile, listed: ListedField | None) -> _Spelt:
    """A row's name, type, unit and HELP: the --collectors file's line where it lists the row
    (a 4.9 name bringing the 4.9 unit), else the profile's spelling."""
    if listed is not None:
        return _Spelt(listed.name, listed.kind, listed.unit, listed.help)
    kind = profile.nvlink_bandwidth_kind if row.kind == NVLINK_BANDWIDTH_KIND else row.kind
    spelling = profile.spelling(row.name)
    if spelling is None:
        return _Spelt(row.name, kind, row.unit, row.help)
    return _Spelt(spelling.name, kind, spelling.unit, spelling.help)


def _selected(
    rows: tuple[DcgmField, ...], selection: FieldSelection | None
) -> Iterator[tuple[DcgmField, ListedField | None]]:
    """The rows written, in the table's order, each with its line of the --collectors file:
    the default rows without a file, exactly the listed ones with one."""
    for row in rows:
        if selection is None:
            if row.default:
                yield row, None
        elif (listed := selection.get(row.name)) is not None:
            yield row, listed


def resolve(row: DcgmField, profile: Profile, listed: ListedField | None = None) -> DcgmFamily:
    """The family a row becomes, spelt by the profile or by the --collectors file's line."""
    spelt = _spelt(row, profile, listed)
    return DcgmFamily(
        name=spelt.name,
        kind=spelt.kind,
        help=spelt.help,
        unit=spelt.unit,
        classic=row.name,
        convert=converter(row.native_unit, spelt.unit),
        double=spelt.unit in DOUBLE_UNITS,
    )


def _resolve_rows(
    rows: tuple[DcgmField, ...], profile: Profile, selection: FieldSelection | None
) -> tuple[DcgmFamily, ...]:
    return tuple(resolve(row, profile, listed) for row, listed in _selected(rows, selection))


def _event_family(
    classic: str, profile: Profile, selection: FieldSelection | None
) -> MetricFamily | None:
    for row, listed in _selected((BY_NAME[classic],), selection):
        spelt = _spelt(row, profile, listed)
        return MetricFamily(spelt.name, spelt.kind, spelt.help)
    return None


@cache
def families_for(profile: Profile, selection: FieldSelection | None = None) -> DcgmFamilies:
    """The families `profile` writes; with a --collectors `selection`, exactly the ones it lists,
    in the table's order."""
    return DcgmFamilies(
        profile=profile,
        gpu=_resolve_rows(GPU_FIELDS, profile, selection),
        profiling=_resolve_rows(PROFILING_FIELDS, profile, selection),
        xid=_event_family(XID_ERRORS, profile, selection),
        xid_total=_event_family(XID_ERRORS_TOTAL, profile, selection),
        clock_events_total=_event_family(CLOCK_EVENTS_TOTAL, profile, selection),
        xid_count=_event_family(XID_ERRORS_COUNT, profile, selection),
        clock_events_count=_event_family(CLOCK_EVENTS_COUNT, profile, selection),
    )

"""Panel builders. Every panel of the bundle is made here, so a change of Grafana schema or of
dashboard library touches this module only.

grafanalib (0.7.1) builds TimeSeries, Stat, Table and rows. Its Gauge and BarGauge emit layouts
Grafana no longer reads (grafanalib #575) and it has no state timeline, so those three are plain
dicts in the current `fieldConfig`/`options` shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grafanalib import core as g

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


@dataclass(frozen=True, slots=True)
class Cell:
    """A panel with its size; the layout pass assigns positions."""

    panel: Any
    width: int = 12
    height: int = 8


def ref_id(index: int) -> str:
    """The letter that names a panel's query, from its position among the panel's queries."""
    return chr(ord("A") + index)


@dataclass(frozen=True, slots=True)
class TableQuery:
    """One query of a table, with the header of the value column it adds. A query without a
    header only contributes its labels; its value is hidden."""

    header: str | None
    expr: str


def _value_field(index: int, count: int) -> str:
    # Grafana's name for an instant table query's value: plain "Value" when the panel has one
    # query, "Value #<refId>" when the merge transformation joins several.
    return "Value" if count == 1 else f"Value #{ref_id(index)}"


def target(expr: str, legend: str = "", *, instant: bool = False, table: bool = False) -> g.Target:
    return g.Target(
        expr=expr,
        legendFormat=legend,
        instant=instant or table,
        format="table" if table else "time_series",
        datasource=DATASOURCE,
    )


def _thresholds(steps: tuple[tuple[float | None, str], ...]) -> list[g.Threshold]:
    return [
        g.Threshold(color, index, float(value) if value is not None else 0.0)
        for index, (value, color) in enumerate(steps)
    ]


GOOD = ((None, "green"),)


def timeseries(
    title: str,
    description: str,
    unit: str,
    targets: list[g.Target],
    *,
    stack: bool = False,
    totals: tuple[int, ...] = (),
    max_value: float | None = None,
    width: int = 12,
    height: int = 8,
) -> Cell:
    """`totals`: indexes of targets drawn as dashed lines outside the stack, so a stack of parts
    can be read against the whole it must not exceed."""
    panel = g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets,
        unit=unit,
        fillOpacity=30 if stack else 10,
        stacking={"mode": "normal", "group": "A"} if stack else {"mode": "none", "group": "A"},
        legendDisplayMode="table",
        legendPlacement="right" if width >= 12 else "bottom",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        tooltipSort="desc",
        valueMin=0,
        overrides=[_unstacked(ref_id(index)) for index in totals],
        # TimeSeries validates valueMax as int; a 0-1 ratio's max goes through extraJson.
        extraJson=(
            {"fieldConfig": {"defaults": {"max": max_value}}} if max_value is not None else None
        ),
    )
    return Cell(panel, width, height)


def _unstacked(ref: str) -> dict[str, Any]:
    return {
        "matcher": {"id": "byFrameRefID", "options": ref},
        "properties": [
            {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}},
            {"id": "custom.fillOpacity", "value": 0},
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        ],
    }


def stat(
    title: str,
    description: str,
    unit: str,
    targets: list[g.Target],
    *,
    steps: tuple[tuple[float | None, str], ...] = GOOD,
    width: int = 4,
    height: int = 4,
) -> Cell:
    panel = g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=targets,
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="area",
        colorMode="value",
        thresholds=_thresholds(steps),
    )
    return Cell(panel, width, height)


def table(
    title: str,
    description: str,
    unit: str,
    queries: list[TableQuery],
    *,
    labels: dict[str, str] | None = None,
    hide: tuple[str, ...] = (),
    sort_by: str | None = None,
    descending: bool = False,
    column_units: dict[str, str] | None = None,
    width: int = 12,
    height: int = 8,
) -> Cell:
    """An instant-query table: the queries are merged into one row per label set. Value columns
    take their headers from `queries`, so a header moves with its query when queries are
    reordered; `labels` renames label columns and `hide` drops them. `column_units` gives a
    value column (by header) a unit other than the table's."""
    fields = [_value_field(index, len(queries)) for index in range(len(queries))]
    headers = {field: query.header for field, query in zip(fields, queries, strict=True)}
    rename = {
        **(labels or {}),
        **{field: header for field, header in headers.items() if header is not None},
    }
    if sort_by is not None and sort_by not in rename.values():
        raise ValueError(f"table {title!r}: sort_by {sort_by!r} is not one of its column headers")
    for header in column_units or {}:
        if header not in headers.values():
            raise ValueError(f"table {title!r}: column_units names no value column {header!r}")
    hidden = (*hide, *(field for field, header in headers.items() if header is None))
    transformations: list[dict[str, Any]] = [{"id": "merge", "options": {}}]
    transformations.append(
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "__name__": True, **dict.fromkeys(hidden, True)},
                "renameByName": rename,
            },
        }
    )
    panel = g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[target(query.expr, table=True) for query in queries],
        unit=unit,
        filterable=True,
        transformations=transformations,
        sortBy=[g.TableSortByField(displayName=sort_by, desc=descending)] if sort_by else [],
        overrides=[
            {
                "matcher": {"id": "byName", "options": header},
                "properties": [{"id": "unit", "value": column_unit}],
            }
            for header, column_unit in (column_units or {}).items()
        ],
    )
    return Cell(panel, width, height)


def _base(kind: str, title: str, description: str, targets: list[g.Target]) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": targets,
    }


def gauge(
    title: str,
    description: str,
    unit: str,
    targets: list[g.Target],
    *,
    max_value: float,
    steps: tuple[tuple[float | None, str], ...],
    width: int = 12,
    height: int = 6,
) -> Cell:
    panel = _base("gauge", title, description, targets) | {
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "max": max_value,
                "thresholds": {
                    "mode": "absolute",
                    "steps": [{"color": c, "value": v} for v, c in steps],
                },
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "showThresholdLabels": False,
            "showThresholdMarkers": True,
            "orientation": "auto",
        },
    }
    return Cell(panel, width, height)


def bargauge(
    title: str,
    description: str,
    unit: str,
    targets: list[g.Target],
    *,
    width: int = 8,
    height: int = 6,
) -> Cell:
    panel = _base("bargauge", title, description, targets) | {
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "min": 0,
                "color": {"mode": "continuous-BlPu"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "blue", "value": None}]},
            },
            "overrides": [],
        },
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "orientation": "horizontal",
            "displayMode": "gradient",
            "showUnfilled": True,
        },
    }
    return Cell(panel, width, height)


def state_timeline(
    title: str,
    description: str,
    targets: list[g.Target],
    *,
    states: dict[int, tuple[str, str]],
    width: int = 24,
    height: int = 10,
) -> Cell:
    """Discrete states over time; `states` maps a value to (text, colour)."""
    panel = _base("state-timeline", title, description, targets) | {
        "fieldConfig": {
            "defaults": {
                "unit": "none",
                "mappings": [
                    {
                        "type": "value",
                        "options": {
                            str(value): {"text": text, "color": color, "index": index}
                            for index, (value, (text, color)) in enumerate(sorted(states.items()))
                        },
                    }
                ],
                "color": {"mode": "thresholds"},
                "thresholds": {"mode": "absolute", "steps": [{"color": "green", "value": None}]},
            },
            "overrides": [],
        },
        "options": {
            "showValue": "never",
            "mergeValues": True,
            "rowHeight": 0.8,
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "single", "sort": "none"},
        },
    }
    return Cell(panel, width, height)


def row(title: str) -> Cell:
    return Cell(g.RowPanel(title=title), 24, 1)

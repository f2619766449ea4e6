"""Turns the dashboard definitions into the two JSON flavours users import.

One post-processing pass gives every dashboard the same settings (uid, tags, timezone, refresh,
links to its siblings) and removes what grafanalib 0.7.1 gets wrong: null values, legacy keys
and schemaVersion 12, which would make Grafana migrate the dashboard on every load.

- provisioned/: for file provisioning and the kube-prometheus-stack Grafana sidecar. Uses only
  the `datasource` variable; `__inputs` would break it ("Datasource ... was not found").
- grafana-com/: for the Import UI and grafana.com, with `__inputs` and `__requires`.

Both follow Grafana's own dashboard schema, oldest and newest supported release:
tests/unit/test_dashboard_schema.py checks them with it, and docs/grafana.md says what it allows
beyond it and why.
"""

from __future__ import annotations

import copy
import json
from types import ModuleType
from typing import Any

from grafanalib import core as g

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dashboards import cluster_capacity, gpu_devices
from kube_gpu_exporter.bundle.dashboards.panels import Cell, ref_id

DASHBOARDS: tuple[ModuleType, ...] = (cluster_capacity, gpu_devices)
# The oldest Grafana the dashboards support, written into `__requires`
# (docs/grafana.md, 'Supported releases').
OLDEST_GRAFANA = "10.4.0"
# What Grafana 10.4 writes. Newer releases migrate it forward through 40-42, which change nothing
# these dashboards contain; a newer number would be a version from the future to the releases
# before it (docs/grafana.md, 'Schema version').
SCHEMA_VERSION = 39
# A core panel's name as Grafana's exporter writes it into `__requires`.
PANEL_NAMES = {
    "bargauge": "Bar gauge",
    "gauge": "Gauge",
    "stat": "Stat",
    "state-timeline": "State timeline",
    "table": "Table",
    "timeseries": "Time series",
}
GRID_WIDTH = 24
DROP_DASHBOARD_KEYS = ("rows", "style", "gnetId", "id", "hideControls", "sharedCrosshair")
DROP_PANEL_KEYS = (
    "span",
    "minSpan",
    "height",
    "error",
    "cacheTimeout",
    "editable",
    "hideTimeOverride",
    "transparent",
    "maxDataPoints",
    "repeatDirection",
    "maxPerRow",
    "links",
)
DROP_TARGET_KEYS = (
    "step",
    "intervalFactor",
    "target",
    "metric",
    "rawSql",
    "rawQuery",
    "srcFilePath",
    "sqlParams",
    "query",
    "hide",
    "interval",
)


def _layout(cells: list[Cell]) -> list[Any]:
    """Places cells left to right, wrapping at the grid width; a row starts a new line."""
    x = y = line_height = 0
    panels = []
    for cell in cells:
        if isinstance(cell.panel, g.RowPanel) or x + cell.width > GRID_WIDTH:
            y, x, line_height = y + line_height, 0, 0
        position = {"x": x, "y": y, "w": cell.width, "h": cell.height}
        panel = cell.panel
        if isinstance(panel, dict):
            panel = {**panel, "gridPos": position}
        else:
            panel.gridPos = g.GridPos(h=cell.height, w=cell.width, x=x, y=y)
        panels.append(panel)
        x += cell.width
        line_height = max(line_height, cell.height)
        if isinstance(cell.panel, g.RowPanel):
            y, x, line_height = y + cell.height, 0, 0
    return panels


class _Encoder(json.JSONEncoder):
    """grafanalib objects serialise through their to_json_data()."""

    def default(self, o: Any) -> Any:
        if hasattr(o, "to_json_data"):
            return o.to_json_data()
        return super().default(o)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, cls=_Encoder))


def _strip_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        # A threshold's base step keeps its null value: Grafana reads it as minus infinity.
        keep_null = "color" in value and "value" in value
        return {
            k: _strip_nulls(v)
            for k, v in value.items()
            if v is not None or (keep_null and k == "value")
        }
    if isinstance(value, list):
        return [_strip_nulls(v) for v in value]
    return value


def _fix_panel(panel: dict[str, Any], panel_id: int, config: BundleConfig) -> None:
    panel["id"] = panel_id
    for key in DROP_PANEL_KEYS:
        panel.pop(key, None)
    if panel.get("type") == "row":
        row: dict[str, Any] = {
            k: panel[k] for k in ("id", "type", "title", "gridPos") if k in panel
        }
        panel.clear()
        panel.update(row, collapsed=False, panels=[])
        return
    panel["interval"] = config.dashboards.min_interval
    for index, target in enumerate(panel.get("targets", [])):
        for key in DROP_TARGET_KEYS:
            target.pop(key, None)
        target["refId"] = ref_id(index)
        if not target.get("instant"):
            target["range"] = True
    # A Stat's unit lives in fieldConfig in current Grafana, not in the legacy `format`.
    if panel.get("type") == "stat":
        panel["fieldConfig"]["defaults"].setdefault("unit", panel.pop("format", "none"))
        panel["fieldConfig"]["defaults"].pop("noValue", None)
    for step in (
        panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {}).get("steps", [])
    ):
        for key in ("index", "line", "op", "yaxis"):
            step.pop(key, None)
    if panel.get("type") == "table":
        for key in ("columns", "fontSize", "mappings", "color"):
            panel.pop(key, None)
        custom = panel["fieldConfig"]["defaults"].setdefault("custom", {})
        # Deprecated for cellOptions, in 10.4's schema already; the table panel would rewrite it.
        if custom.pop("displayMode", "auto") != "auto":
            raise ValueError(f"table {panel.get('title')!r}: only the auto cell type is mapped")
        custom["cellOptions"] = {"type": "auto"}
    thresholds = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds")
    if thresholds is not None:
        if not thresholds.get("steps"):
            thresholds["steps"] = [{"color": "green", "value": None}]
        thresholds["steps"][0]["value"] = None
    legend = panel.get("options", {}).get("legend")
    if legend is not None:
        # Grafana's schema requires both (VizLegendOptions); grafanalib writes no showLegend.
        legend.setdefault("showLegend", True)
        legend.setdefault("calcs", [])


def _template_query(template: dict[str, Any]) -> None:
    # Tags went with tag-based variables; the schema's VariableOption has none.
    template.get("current", {}).pop("tags", None)
    if template.get("includeAll"):
        multi = template.get("multi", False)
        template["current"] = {
            "selected": True,
            "text": ["All"] if multi else "All",
            "value": ["$__all"] if multi else "$__all",
        }
    elif "text" not in template.get("current", {}):
        # grafanalib's placeholder ({"selected": false}) is no option: VariableOption needs a
        # text and a value. Without one Grafana selects the first value the query returns.
        template.pop("current", None)
    for key in ("tagValuesQuery", "tagsQuery", "useTags", "auto", "auto_count", "auto_min"):
        template.pop(key, None)
    if template.get("type") != "query":
        return
    expr = template["query"]
    template["definition"] = expr
    template["query"] = {"query": expr, "refId": "PrometheusVariableQueryEditor-VariableQuery"}


def build(module: ModuleType, config: BundleConfig) -> dict[str, Any]:
    """The provisioned flavour of one dashboard."""
    settings = config.dashboards
    dashboard = g.Dashboard(
        title=settings.name_prefix + module.TITLE,
        uid=settings.uids[module.FILE],
        description=" ".join((module.__doc__ or "").split("\n\n")[0].split()),
        tags=list(settings.tags),
        timezone=settings.timezone,
        refresh=settings.refresh,
        time=g.Time(settings.time_from, "now"),
        editable=False,
        panels=_layout(module.cells(config)),
        templating=g.Templating(module.variable_list(config)),
        links=[
            g.DashboardLink(
                title="GPU dashboards",
                type="dashboards",
                tags=[settings.tags[0]],
                asDropdown=True,
                includeVars=True,
                keepTime=True,
            )
        ],
    )
    data = _strip_nulls(_plain(dashboard))
    for key in DROP_DASHBOARD_KEYS:
        data.pop(key, None)
    data.pop("__inputs", None)
    data["schemaVersion"] = SCHEMA_VERSION
    data["graphTooltip"] = 1  # shared crosshair across panels
    # Unused since Grafana 5; schema version 41 deletes it and the schema no longer has it.
    data["timepicker"].pop("time_options", None)
    for panel_id, panel in enumerate(data["panels"], start=1):
        _fix_panel(panel, panel_id, config)
    for template in data["templating"]["list"]:
        _template_query(template)
    return data


def grafana_com(provisioned: dict[str, Any]) -> dict[str, Any]:
    """The Import-UI flavour: the importer asks for a Prometheus data source and substitutes it
    as the `datasource` variable's default."""
    data = copy.deepcopy(provisioned)
    data["editable"] = True
    data["__inputs"] = [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes kube-gpu-exporter.",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    panel_types = {p["type"] for p in data["panels"] if p["type"] != "row"}
    requires = [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": OLDEST_GRAFANA},
        {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
        *({"type": "panel", "id": t, "name": PANEL_NAMES[t], "version": ""} for t in panel_types),
    ]
    # Sorted by id, as Grafana's exporter writes them.
    data["__requires"] = sorted(requires, key=lambda r: r["id"])
    for template in data["templating"]["list"]:
        if template["name"] == "datasource":
            template["current"] = {
                "selected": True,
                "text": "Prometheus",
                "value": "${DS_PROMETHEUS}",
            }
    return data


def _json(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def dashboard_files(config: BundleConfig) -> dict[str, str]:
    files = {}
    for module in DASHBOARDS:
        provisioned = build(module, config)
        files[f"dashboards/provisioned/{module.FILE}.json"] = _json(provisioned)
        files[f"dashboards/grafana-com/{module.FILE}.json"] = _json(grafana_com(provisioned))
    return files

"""What Grafana does to a dashboard's queries before they reach Prometheus: resolve template
variables through their own `label_values` queries, format them for a regex matcher, and replace
the `$__` macros. Enough of it to run every panel of our dashboards (and NVIDIA's) for real: the
end-to-end tests do, and so does the 1,000-node query benchmark."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI

_LABEL_VALUES = re.compile(r"^label_values\((?P<match>.+),\s*(?P<label>[A-Za-z_][A-Za-z0-9_]*)\)$")
_DURATION = re.compile(r"^(\d+)([smhd])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    expr: str
    instant: bool


def seconds(duration: str) -> int:
    match = _DURATION.match(duration)
    if not match:
        raise ValueError(f"unsupported duration {duration!r}")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every non-row panel, including those inside collapsed rows."""
    found = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            found.extend(panel.get("panels", []))
        else:
            found.append(panel)
    return found


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    return [
        PanelQuery(dashboard["title"], panel["title"], target["expr"], bool(target.get("instant")))
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr") and not target.get("hide")
    ]


def _regex_value(values: list[str]) -> str:
    """Grafana's formatting of a variable inside a Prometheus regex matcher."""
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def resolve_variables(
    dashboard: dict[str, Any],
    api: PrometheusAPI,
    start: float | None = None,
    select_all: bool = False,
) -> dict[str, str]:
    """Variable name -> the text Grafana substitutes: every value the variable's own query
    returns (a single-value variable takes the first), or its "All" value when it finds none.
    With `select_all`, a variable that offers "All" takes it, as a freshly opened dashboard
    whose variables default to All does."""
    resolved: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        if select_all and variable.get("includeAll"):
            resolved[variable["name"]] = variable.get("allValue") or ".*"
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = _LABEL_VALUES.match(substitute(text, resolved))
        if not match:
            raise ValueError(f"variable {variable['name']}: not a label_values query: {text}")
        values = api.label_values(match.group("label"), match.group("match"), start)
        if not values:
            if not variable.get("includeAll"):
                raise AssertionError(f"variable {variable['name']} has no values: {text}")
            resolved[variable["name"]] = variable.get("allValue") or ".*"
        else:
            resolved[variable["name"]] = _regex_value(
                values if variable.get("multi") else values[:1]
            )
    return resolved


def _literal(text: str, _match: re.Match[str]) -> str:
    """re.sub's replacement for `text` as it stands: a string would have its backslashes read."""
    return text


def substitute(expr: str, variables: dict[str, str], macros: dict[str, str] | None = None) -> str:
    # Longest names first, so `$__range_s` is not read as `$__range` followed by `_s`.
    for name, value in sorted((macros or {}).items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    for name, value in variables.items():
        expr = re.sub(rf"\$(?:{name}\b|\{{{name}\}})", partial(_literal, value), expr)
    return expr


def macros(
    dashboard: dict[str, Any], scrape_interval_s: int, range_s: int | None = None
) -> dict[str, str]:
    """$__range from the dashboard's default time range (or `range_s`); $__rate_interval as
    Grafana computes it for panels with a min interval: max(interval + scrape interval,
    4 x scrape interval)."""
    if range_s is None:
        range_s = seconds(dashboard["time"]["from"].removeprefix("now-"))
    intervals = [seconds(p["interval"]) for p in panels(dashboard) if p.get("interval")]
    interval_s = max(intervals, default=scrape_interval_s)
    rate = max(interval_s + scrape_interval_s, 4 * scrape_interval_s)
    return {
        "$__rate_interval": f"{rate}s",
        "$__range_s": str(range_s),
        "$__range": f"{range_s}s",
        "$__interval": f"{interval_s}s",
    }

"""Every committed dashboard, both flavours of every dcgm-exporter profile, against Grafana's own
dashboard schema (the newest release checked and the oldest one supported, tests/grafana_schema),
and the grafana.com flavour against what Grafana's importer needs: `__inputs` for exactly the
data sources it references and `__requires` for exactly what it uses."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.bundle.dashboards.render import OLDEST_GRAFANA
from tests.grafana_schema.check import (
    Finding,
    SchemaToolError,
    check,
    committed_dashboards,
    releases,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = committed_dashboards()
IMPORTABLE = {name: d for name, (kind, d) in DASHBOARDS.items() if kind == "grafana-com"}
PROVISIONED = {name: d for name, (kind, d) in DASHBOARDS.items() if kind == "provisioned"}
IMPORT_REFERENCE = re.compile(r"\$\{(DS_[A-Za-z0-9_]+)\}")


def run_check(dashboards: dict[str, tuple[Any, dict[str, Any]]]) -> dict[str, list[Finding]]:
    try:
        return check(dashboards)
    except SchemaToolError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="module")
def schema_findings() -> dict[str, list[Finding]]:
    return run_check(DASHBOARDS)


def test_both_flavours_of_every_profile_are_checked():
    assert len(IMPORTABLE) == len(PROVISIONED) >= 4
    assert any("/dcgm-" in name for name in IMPORTABLE)


def _panel_index(dashboard: dict[str, Any], kind: str) -> int:
    return next(i for i, p in enumerate(dashboard["panels"]) if p["type"] == kind)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for child in value.values():
            yield from _strings(child)
    elif isinstance(value, list):
        for child in value:
            yield from _strings(child)


def _datasource_refs(value: Any) -> Iterator[dict[str, Any]]:
    """Every `datasource` object: a panel's, a query's, a variable's."""
    if isinstance(value, dict):
        for key, child in value.items():
            if key == "datasource" and isinstance(child, dict):
                yield child
            yield from _datasource_refs(child)
    elif isinstance(value, list):
        for child in value:
            yield from _datasource_refs(child)


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def _datasource_plugins(dashboard: dict[str, Any]) -> set[str]:
    """The data source plugins a dashboard uses, wherever it names one."""
    variables = dashboard["templating"]["list"]
    return {ref["type"] for ref in _datasource_refs(dashboard) if "type" in ref} | {
        v["query"] for v in variables if v["type"] == "datasource"
    }


@pytest.mark.parametrize("name", sorted(IMPORTABLE))
def test_import_inputs_are_exactly_the_data_sources_referenced(name):
    """Grafana's importer substitutes each input's `${NAME}` and refuses an import that lacks
    one; a reference without an input would stay a literal `${DS_...}`."""
    dashboard = IMPORTABLE[name]
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert len(inputs) == len(dashboard["__inputs"])
    body = {k: v for k, v in dashboard.items() if k != "__inputs"}
    referenced = {m for text in _strings(body) for m in IMPORT_REFERENCE.findall(text)}
    assert referenced == set(inputs)
    for item in inputs.values():
        assert item["type"] == "datasource"
        assert item["pluginId"] and item["pluginName"] and item["label"], item
    for ref in _datasource_refs(body):
        for used in IMPORT_REFERENCE.findall(ref.get("uid", "")):
            assert ref["type"] == inputs[used]["pluginId"], ref
    for variable in dashboard["templating"]["list"]:
        for used in IMPORT_REFERENCE.findall(str(variable.get("current", {}).get("value", ""))):
            assert variable["type"] == "datasource", variable["name"]
            assert variable["query"] == inputs[used]["pluginId"], variable["name"]


@pytest.mark.parametrize("name", sorted(IMPORTABLE))
def test_import_requires_grafana_its_data_sources_and_exactly_its_panel_types(name):
    dashboard = IMPORTABLE[name]
    requires = dashboard["__requires"]
    assert [r["id"] for r in requires] == sorted({r["id"] for r in requires})
    assert {r["type"] for r in requires} <= {"grafana", "datasource", "panel"}
    assert [r for r in requires if r["type"] == "grafana"] == [
        {"type": "grafana", "id": "grafana", "name": "Grafana", "version": OLDEST_GRAFANA}
    ]
    datasources = {r["id"] for r in requires if r["type"] == "datasource"}
    assert datasources == _datasource_plugins(dashboard)
    assert datasources >= {i["pluginId"] for i in dashboard["__inputs"]}
    panels = [r for r in requires if r["type"] == "panel"]
    assert {r["id"] for r in panels} == {p["type"] for p in _panels(dashboard)} - {"row"}
    for requirement in requires:
        assert requirement["name"].strip() and isinstance(requirement["version"], str)


@pytest.mark.parametrize("name", sorted(PROVISIONED))
def test_provisioned_flavour_has_no_import_keys(name):
    """File provisioning never runs the importer: an input would stay unresolved."""
    dashboard = PROVISIONED[name]
    assert not {"__inputs", "__requires", "__elements"} & set(dashboard)
    assert not [text for text in _strings(dashboard) if "${DS_" in text]


def test_the_oldest_release_checked_is_the_one_required_and_documented():
    newest, oldest = releases()
    assert oldest.version.split(".")[:2] == OLDEST_GRAFANA.split(".")[:2]
    minimum, latest = (".".join(r.version.split(".")[:2]) for r in (oldest, newest))
    readme = (ROOT / "README.md").read_text()
    statement = next(line for line in readme.splitlines() if "Grafana versions" in line)
    assert minimum in statement and latest in statement, statement
    assert f"{oldest.version}" in (ROOT / "docs" / "grafana.md").read_text()
    assert f"{newest.version}" in (ROOT / "docs" / "grafana.md").read_text()

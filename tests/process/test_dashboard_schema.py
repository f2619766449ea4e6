"""Every committed dashboard, both flavours of every dcgm-exporter profile, against Grafana's own:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_dashboard_schema.py."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.grafana_schema.check import (
    releases,
)
from tests.unit import test_dashboard_schema
from tests.unit.test_dashboard_schema import (
    DASHBOARDS,
    IMPORTABLE,
    _panel_index,
    run_check,
)

# The unit half's fixture, which the tests below ask for by name.
schema_findings = test_dashboard_schema.schema_findings


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_follows_grafanas_schema(name, schema_findings):
    findings = schema_findings[name]
    assert not findings, f"{name} breaks Grafana's dashboard schema:\n" + "\n".join(
        map(str, findings)
    )


def test_the_check_catches_unknown_keys_and_wrong_types():
    """Planted faults, all in one compiler run per release: each is reported at its JSON path
    by both releases' schemas, the allowances stay narrow, and the untouched copy passes."""
    name = next(n for n in IMPORTABLE if "gpu-devices" in n and "/dcgm-" not in n)
    base = IMPORTABLE[name]
    table, series = _panel_index(base, "table"), _panel_index(base, "timeseries")
    variable = next(i for i, v in enumerate(base["templating"]["list"]) if v["type"] != "query")

    def planted(change: Any) -> dict[str, Any]:
        dashboard = copy.deepcopy(base)
        change(dashboard)
        return dashboard

    cases: dict[str, tuple[str, str, Any]] = {
        "unknown panel key": (
            f"panels[{table}].bogus",
            "TS2353",
            lambda d: d["panels"][table].update(bogus=1),
        ),
        "wrong type": (
            f"panels[{table}].gridPos.w",
            "TS2322",
            lambda d: d["panels"][table]["gridPos"].update(w="12"),
        ),
        "unknown panel option": (
            f"panels[{series}].options.bogusOption",
            "TS2353",
            lambda d: d["panels"][series]["options"].update(bogusOption=True),
        ),
        "unknown query key": (
            f"panels[{series}].targets[0].exprr",
            "TS2353",
            lambda d: d["panels"][series]["targets"][0].update(exprr="up"),
        ),
        "value outside an enum": (
            f"panels[{series}].fieldConfig.defaults.thresholds.mode",
            "TS2322",
            lambda d: d["panels"][series]["fieldConfig"]["defaults"]["thresholds"].update(
                mode="relative"
            ),
        ),
        "number outside a numeric enum": (
            "graphTooltip",
            "TS2322",
            lambda d: d.update(graphTooltip=5),
        ),
        "definition on a variable that is no query": (
            f"templating.list[{variable}].definition",
            "TS2353",
            lambda d: d["templating"]["list"][variable].update(definition="x"),
        ),
    }
    plants: dict[str, tuple[Any, dict[str, Any]]] = {
        case: ("grafana-com", planted(change)) for case, (_, _, change) in cases.items()
    }
    plants["import keys in the provisioned flavour"] = ("provisioned", base)
    plants["legacy time_options"] = (
        "grafana-com",
        planted(lambda d: d["timepicker"].update(time_options=["5m"])),
    )
    plants["untouched"] = ("grafana-com", base)
    found = run_check(plants)

    newest, oldest = (release.label for release in releases())
    expected = {case: (path, code) for case, (path, code, _) in cases.items()}
    expected["import keys in the provisioned flavour"] = ("__inputs", "TS2353")
    for case, (path, code) in expected.items():
        reported = {(f.release, f.path, f.code) for f in found[case]}
        assert {(newest, path, code), (oldest, path, code)} <= reported, (case, found[case])
    # Grafana 11.6 dropped time_options from the schema (migration 41); 10.4 still had it.
    assert [(f.release, f.path) for f in found["legacy time_options"]] == [
        (newest, "timepicker.time_options")
    ]
    assert found["untouched"] == []

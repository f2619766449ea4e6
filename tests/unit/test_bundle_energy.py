"""Energy per namespace and workload (issue 36): the capacity dashboard's energy panels read what
alerts/tests/energy_test.yaml checks with promtool, and the optional carbon estimate
(`carbon_intensity_g_per_kwh`) adds its records and panel only when set, is checked like every
other override, and gives the grams its intensity says."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.bundle import overrides
from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.alerts.rules_file import recording_groups
from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig, BundleConfigError
from kube_gpu_exporter.bundle.dashboards.render import dashboard_files
from kube_gpu_exporter.bundle.render import main

ROOT = Path(__file__).resolve().parents[2]
CAPACITY = "dashboards/provisioned/gpu-cluster-capacity.json"
ROW = "Energy by namespace"
CARBON_PANEL = "Estimated emissions by namespace"
# The range the promtool tests give the panels' $__range.
TESTED_RANGE = "30m"
CARBON = replace(DEFAULT, carbon_intensity_g_per_kwh=450)


def energy_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels of the energy row: those after its row panel, up to the next row."""
    panels = dashboard["panels"]
    start = [panel["title"] for panel in panels].index(ROW) + 1
    ends = [i for i in range(start, len(panels)) if panels[i]["type"] == "row"]
    return panels[start : ends[0] if ends else len(panels)]


def as_tested(expr: str) -> str:
    """A panel's query as a promtool test writes it: no variable filters (the tests' series are
    one cluster), and the tested range for $__range."""
    return re.sub(r'\{cluster=~"\$cluster"[^{}]*\}', "", expr).replace("$__range", TESTED_RANGE)


def records(config: BundleConfig) -> dict[str, str]:
    return {
        rule.record: rule.expr
        for group in recording_groups(config)
        for rule in group.rules
        if isinstance(rule, r.Record)
    }


def test_energy_panels_read_what_the_promtool_tests_check():
    dashboard = json.loads((ROOT / CAPACITY).read_text())
    tested = {
        case["expr"]
        for test in yaml.safe_load((ROOT / "alerts/tests/energy_test.yaml").read_text())["tests"]
        for case in test["promql_expr_test"]
    }
    panels = energy_panels(dashboard)
    assert [p["title"] for p in panels] == [
        "Energy by namespace",
        "Energy by workload",
        "Energy per hour by namespace",
        "Energy not attributed",
    ]
    for panel in panels:
        assert panel["fieldConfig"]["defaults"]["unit"] == "kwatth", panel["title"]
        for target in panel["targets"]:
            assert as_tested(target["expr"]) in tested, (panel["title"], target["expr"])


def test_the_rates_range_is_the_configs_and_the_steps_are_not():
    """The rates' range follows `dashboards.rate_interval`; the steps that add them up do not, so
    the committed dashboards read the records whatever range the rules were made with."""
    config = replace(DEFAULT, dashboards=replace(DEFAULT.dashboards, rate_interval="2m"))
    made = records(config)
    assert "[2m]))" in made[r.power(r.NS_ENERGY)] and "[5m]" not in made[r.power(r.NS_ENERGY)]
    assert made[r.NS_ENERGY] == f"sum_over_time({r.power(r.NS_ENERGY)}[59m59s999ms:1m]) * 60"
    assert dashboard_files(config)[CAPACITY] == dashboard_files(DEFAULT)[CAPACITY]


def test_the_carbon_estimate_is_off_by_default():
    assert DEFAULT.carbon_intensity_g_per_kwh is None
    assert not any("carbon" in name for name in records(DEFAULT))
    assert CARBON_PANEL not in dashboard_files(DEFAULT)[CAPACITY]


def test_set_it_adds_its_records_and_panel():
    carbon = records(CARBON)
    assert carbon[r.NS_CARBON] == f"{r.NS_ENERGY} * 450 / 3600000"
    assert carbon[r.power(r.NS_CARBON)] == f"{r.power(r.NS_ENERGY)} * 450 / 3600000"
    # Everything else is the defaults' own.
    assert {k: v for k, v in carbon.items() if "carbon" not in k} == records(DEFAULT)
    dashboard = json.loads(dashboard_files(CARBON)[CAPACITY])
    [panel] = [p for p in energy_panels(dashboard) if p["title"] == CARBON_PANEL]
    assert panel["fieldConfig"]["defaults"]["unit"] == "masskg"
    assert "450 g CO2e per kWh" in panel["description"]
    # Non-integral intensities are written as given.
    assert records(replace(DEFAULT, carbon_intensity_g_per_kwh=436.5))[r.NS_CARBON].endswith(
        "* 436.5 / 3600000"
    )


def energy_series(namespace: str, joules_per_minute: int) -> dict[str, str]:
    labels = (
        'job="kube-gpu-exporter", instance="10.0.0.11:9455", hostname="gpu-node-1", gpu="0", '
        f'UUID="GPU-0aa3c0f4-6a1e-4b8e-9d2f-1c2b3a4d5e60", namespace="{namespace}", '
        'pod="p-0", container="main"'
    )
    return {"series": f"{r.POD_ENERGY}{{{labels}}}", "values": f"0+{joules_per_minute}x70"}


# ---- the setting, from an overrides file ----


def test_an_override_sets_it_and_null_leaves_it_off():
    assert overrides.apply(DEFAULT, {"carbon_intensity_g_per_kwh": 450}) == CARBON
    assert overrides.apply(DEFAULT, {"carbon_intensity_g_per_kwh": 0.5}).carbon_intensity_g_per_kwh
    assert overrides.apply(DEFAULT, {"carbon_intensity_g_per_kwh": None}) == DEFAULT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "carbon_intensity_g_per_kwh: 0 is not a positive number such as 400"),
        ("-120", "carbon_intensity_g_per_kwh: -120 is not a positive number such as 400"),
        (".inf", "carbon_intensity_g_per_kwh: expected a finite number, got inf"),
        (".nan", "carbon_intensity_g_per_kwh: expected a finite number, got nan"),
        ("'450'", "carbon_intensity_g_per_kwh: expected a number, got a string"),
        ("true", "carbon_intensity_g_per_kwh: expected a number, got a boolean"),
        ("[450]", "carbon_intensity_g_per_kwh: expected a number, got a list"),
    ],
)
def test_anything_but_a_positive_number_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
):
    config = tmp_path / "my.yaml"
    config.write_text(f"carbon_intensity_g_per_kwh: {text}\n")
    out = tmp_path / "out"
    code = main(["--config", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert f"bundle: {config}: {message}" in err
    assert not out.exists()


@pytest.mark.parametrize("value", [0, -1.5, float("inf"), float("nan"), True])
def test_the_config_refuses_it_too(value: Any):
    with pytest.raises(BundleConfigError, match="carbon_intensity_g_per_kwh: "):
        replace(DEFAULT, carbon_intensity_g_per_kwh=value)

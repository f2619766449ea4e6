"""Energy per namespace and workload (issue 36): the capacity dashboard's energy panels read what:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_bundle_energy.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.alerts.rules_file import recording_groups, rules_document
from kube_gpu_exporter.bundle.dashboards.render import dashboard_files
from kube_gpu_exporter.bundle.render import bundle_files
from tests.unit.test_bundle_energy import (
    CAPACITY,
    CARBON,
    CARBON_PANEL,
    as_tested,
    energy_panels,
    energy_series,
)
from tests.unit.test_rules_promtool import promtool


def test_carbon_records_and_panel_give_the_grams_the_intensity_says(tmp_path: Path):
    """800 W for an hour is 0.8 kWh, so 360 g at 450 g/kWh (0.1 g/s); half of it over the
    panel's 30 minutes, in kg. The panel's queries are the generated ones. The hour is the one to
    70m, where every rate over 5 minutes has a whole range of samples; 800 W, because promtool
    compares floats exactly and these figures come out exact."""
    rules = tmp_path / "prometheus_rules.yaml"
    rules.write_text(yaml.safe_dump(rules_document(recording_groups(CARBON), CARBON)))
    dashboard = json.loads(dashboard_files(CARBON)[CAPACITY])
    [panel] = [p for p in energy_panels(dashboard) if p["title"] == CARBON_PANEL]
    over_range, last_hour = (as_tested(t["expr"]) for t in panel["targets"])
    carbon = r.NS_CARBON
    cases: list[tuple[str, str, dict[str, float]]] = [
        (carbon, "70m", {f'{carbon}{{namespace="inference"}}': 360}),
        (r.power(carbon), "70m", {f'{r.power(carbon)}{{namespace="inference"}}': 0.1}),
        (over_range, "70m30s", {'{namespace="inference"}': 0.18}),
        (last_hour, "70m30s", {'{namespace="inference"}': 0.36}),
    ]
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [energy_series("inference", 48_000)],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": at,
                        "exp_samples": [{"labels": k, "value": v} for k, v in samples.items()],
                    }
                    for expr, at, samples in cases
                ],
            },
            # No energy series, no estimate: nothing, not 0 g.
            {
                "interval": "1m",
                "input_series": [],
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "60m"} for expr in (carbon, over_range)
                ],
            },
        ],
    }
    (tmp_path / "carbon_test.yaml").write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", "carbon_test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bundle_with_the_estimate_keeps_its_promtool_tests(tmp_path: Path):
    """The estimate only adds records, so the hand-written tests still hold, and pass."""
    files = bundle_files(CARBON)
    assert "alerts/tests/energy_test.yaml" in files
    assert r.NS_CARBON in files["alerts/prometheus_rules.yaml"]
    for path, text in files.items():
        if path.startswith("alerts/") and not path.startswith("alerts/dcgm-"):
            (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path).write_text(text)
    tests = sorted(p.name for p in (tmp_path / "alerts/tests").glob("*.yaml"))
    result = subprocess.run(
        [promtool(), "test", "rules", *tests],
        cwd=tmp_path / "alerts/tests",
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr

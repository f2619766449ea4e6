"""The monitoring bundle: generated files match their generators, follow the mixin conventions,:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_bundle.py."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import yaml

from kube_gpu_exporter.bundle import render as bundle_render
from kube_gpu_exporter.bundle.config import (
    DEFAULT,
)
from kube_gpu_exporter.bundle.flavours import FLAVOURS
from tests.conftest import (
    promtool,
)
from tests.unit.test_bundle import (
    ALERTS,
    DASHBOARDS,
    GIB,
    PATHS,
    POD_USE,
    ROOT,
    RULES,
    VERSIONS,
    artifact_digests,
    dashboard_targets,
    load_yaml,
    panel,
    per_pod_series,
    plain_promql,
    promtool_eval,
    rule_files,
    sample,
)


def test_generation_does_not_depend_on_the_hash_seed():
    """Iterating a set or a dict built from one would order output by string hash, which differs
    from process to process, and `make bundle` would then rewrite files nobody changed."""
    first, second = artifact_digests("1"), artifact_digests("2")
    assert first.keys() == second.keys()
    assert sorted(path for path in first if first[path] != second[path]) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_promtool_accepts_every_rules_file(version, tmp_path):
    for path in (*rule_files(version), ROOT / PATHS[version].prometheusrule):
        if path.name == "prometheusrule.yaml":
            spec = load_yaml(path)["spec"]
            path = tmp_path / "prometheusrule-spec.yaml"
            path.write_text(yaml.safe_dump(spec))
        result = subprocess.run(
            [promtool(), "check", "rules", str(path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_dashboard_query_parses(tmp_path):
    exprs = sorted(
        {plain_promql(e) for d in DASHBOARDS for e in dashboard_targets(json.loads(d.read_text()))}
    )
    exprs += sorted(
        {
            plain_promql(t["definition"].removeprefix("label_values(").rsplit(",", 1)[0])
            for d in DASHBOARDS
            for t in json.loads(d.read_text())["templating"]["list"]
            if t["type"] == "query"
        }
    )
    rules = {
        "groups": [
            {
                "name": "parse",
                "rules": [{"record": f"q:parse:{i}", "expr": e} for i, e in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(exprs) > 100


@pytest.mark.parametrize("version", VERSIONS)
def test_per_pod_panels_stack_every_container_and_the_unattributed_under_the_device(
    version, tmp_path
):
    """Each container's use, and the unattributed rest under its own name, stack up to at most
    the devices' own figures, which are drawn outside the stack and counted once however many
    pods share the GPU. MIG instances show memory only."""
    memory_panel = panel(version, "gpu-devices", "GPU memory per pod")
    sm_panel = panel(version, "gpu-devices", "SM utilization per pod")
    cases = []
    for found, reading in (
        (memory_panel, lambda use: use.memory_gib * GIB),
        (sm_panel, lambda use: use.sm_ratio),
    ):
        assert found["fieldConfig"]["defaults"]["custom"]["stacking"]["mode"] == "normal"
        [override] = found["fieldConfig"]["overrides"]
        assert override["matcher"] == {"id": "byFrameRefID", "options": "B"}
        unstacked = {"id": "custom.stacking", "value": {"mode": "none", "group": "A"}}
        assert unstacked in override["properties"]
        users = plain_promql(found["targets"][0]["expr"])
        expected = [
            sample(
                {k: v for k, v in use.labels.items() if v and k != "UUID"} | {"user": use.user},
                reading(use),
            )
            for use in POD_USE
            if reading(use) is not None
        ]
        cases.append((users, expected))
    device_memory = plain_promql(memory_panel["targets"][1]["expr"])
    device_util = plain_promql(sm_panel["targets"][1]["expr"])
    cases += [(device_memory, [sample({}, 10 * GIB)]), (device_util, [sample({}, 0.75)])]
    # The fixture itself leaves room: parts below the whole.
    assert sum(use.memory_gib for use in POD_USE) < 10
    assert sum(use.sm_ratio or 0 for use in POD_USE) < 0.75
    # The table names the unattributed row in its pod column.
    memory_column = plain_promql(
        panel(version, "gpu-devices", "Per-pod use now")["targets"][1]["expr"]
    )
    rows = [
        sample({"gpu": use.device["gpu"], "pod": use.pod or "unattributed"}, use.memory_gib * GIB)
        for use in POD_USE
    ]
    cases.append((f"max by (gpu, pod) ({memory_column})", rows))
    promtool_eval(tmp_path, per_pod_series(FLAVOURS[version]), cases)


def test_static_scrape_config_passes_promtool(tmp_path):
    path = tmp_path / "prometheus.yml"
    config = load_yaml(ROOT / "scrape-configs" / "static.yaml")
    config["rule_files"] = [str(ALERTS), str(RULES)]
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool(), "check", "config", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_scrape_config_is_valid_with_static_discovery(tmp_path):
    """promtool 2.42 from Debian rejects kubernetes_sd_configs; the rest is checked with static
    discovery put in its place."""
    job = load_yaml(ROOT / "scrape-configs" / "additional-scrape-configs.yaml")[0]
    job.pop("kubernetes_sd_configs")
    job["static_configs"] = [{"targets": ["127.0.0.1:9455"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    result = subprocess.run(
        [promtool(), "check", "config", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_make_bundle_check_reports_drift(tmp_path):
    ok = subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter.bundle.render", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    stale = bundle_render.drifted(root=tmp_path)  # an empty checkout lacks every file
    assert {
        "scrape-configs/static.yaml",
        "alerts/prometheus_rules.yaml",
        "alerts/dcgm-4.9/prometheus_rules.yaml",
        "alerts/dcgm-4.9/runbook.md",
        "alerts/dcgm-4.9/tests/devices_test.yaml",
        "dashboards/dcgm-4.9/provisioned/gpu-devices.json",
    } <= set(stale)
    # A flavour file nothing generates any more (its source test was deleted) is drift too.
    stray = tmp_path / "alerts" / "dcgm-4.9" / "tests" / "removed_test.yaml"
    stray.parent.mkdir(parents=True)
    stray.write_text("tests: []\n")
    assert "alerts/dcgm-4.9/tests/removed_test.yaml" in bundle_render.drifted(root=tmp_path)


def test_multi_cluster_flavour_names_the_cluster(tmp_path):
    config = replace(DEFAULT, show_multi_cluster=True)
    files = bundle_render.artifacts(config)
    alerts = yaml.safe_load(files["alerts/prometheus_alerts.yaml"])
    descriptions = [r["annotations"]["description"] for g in alerts["groups"] for r in g["rules"]]
    assert all("{{ $labels.cluster }}" in d for d in descriptions[1:])  # all but absent()
    capacity = json.loads(files["dashboards/provisioned/gpu-cluster-capacity.json"])
    cluster = next(t for t in capacity["templating"]["list"] if t["name"] == "cluster")
    assert cluster["hide"] == 0
    path = tmp_path / "alerts.yaml"
    path.write_text(files["alerts/prometheus_alerts.yaml"])
    result = subprocess.run(
        [promtool(), "check", "rules", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout

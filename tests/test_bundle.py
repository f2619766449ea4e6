"""The monitoring bundle: generated files match their generators, follow the mixin conventions,
parse as PromQL, and reference only metrics that exist."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from alerts import recording
from alerts.rules_file import alert_groups, recording_groups
from bundle import render as bundle_render
from bundle.config import DEFAULT, BundleConfig, BundleConfigError, LabelNames, Selectors
from bundle.scrape_configs import OPERATOR_TARGET_LABELS
from exporter.exposition.context import AttributionContext
from exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from exporter.simulator.fake_kubelet import FakeKubelet
from tests.conftest import FAST, promtool, render, start_xid_watch, wait_for

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "alerts" / "prometheus_alerts.yaml"
RULES = ROOT / "alerts" / "prometheus_rules.yaml"
DASHBOARDS = sorted((ROOT / "dashboards" / "provisioned").glob("*.json"))
IMPORTABLE = sorted((ROOT / "dashboards" / "grafana-com").glob("*.json"))
SEVERITIES = {"critical", "warning", "info"}
ANGULAR_PANELS = {"graph", "singlestat", "grafana-piechart-panel", "grafana-worldmap-panel"}

# kube-state-metrics series the bundle may use (kube-state-metrics docs/metrics).
KUBE_STATE_METRICS = {
    "kube_node_spec_unschedulable",
    "kube_pod_container_resource_requests",
    "kube_pod_status_phase",
    "up",
}

# Values a dashboard's variables take, to turn panel queries into plain PromQL.
GRAFANA_VARIABLES = {
    "$__rate_interval": "5m",
    "$__range_s": "3600",
    "$__range": "1h",
    '"$cluster"': '".*"',
    '"$node"': '".+"',
    '"$gpu"': '".+"',
    '"$namespace"': '".+"',
}


def load_yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def dashboard_targets(dashboard: dict) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def plain_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def all_rules() -> list[dict]:
    return [r for path in (ALERTS, RULES) for g in load_yaml(path)["groups"] for r in g["rules"]]


# ---- generation ----


def test_committed_artifacts_match_their_generators():
    assert bundle_render.drifted() == [], "run `make bundle` and commit the result"


def artifact_digests(hash_seed: str) -> dict[str, str]:
    """Each generated file's SHA-256, as a fresh interpreter with this string-hash seed makes it."""
    script = (
        "import hashlib, json\n"
        "from bundle.render import artifacts\n"
        "print(json.dumps({path: hashlib.sha256(text.encode()).hexdigest()"
        " for path, text in artifacts().items()}))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_generation_does_not_depend_on_the_hash_seed():
    """Iterating a set or a dict built from one would order output by string hash, which differs
    from process to process, and `make bundle` would then rewrite files nobody changed."""
    first, second = artifact_digests("1"), artifact_digests("2")
    assert first.keys() == second.keys()
    assert sorted(path for path in first if first[path] != second[path]) == []


def test_config_drives_every_selector_and_label():
    custom = replace(
        DEFAULT,
        selectors=Selectors(exporter='job="gpu-metrics"', kube_state_metrics='job="ksm"'),
        labels=replace(LabelNames(), hostname="hostname", pod="exported_pod"),
    )
    files = bundle_render.artifacts(custom)
    text = "\n".join(files.values())
    assert 'job=\\"gpu-metrics\\"' in text or 'job="gpu-metrics"' in text
    assert "kube-gpu-exporter\\" not in text and 'job="kube-gpu-exporter"' not in text
    assert '"Hostname"' not in text and "Hostname=" not in text
    assert "exported_pod" in files["alerts/prometheus_alerts.yaml"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"selectors": Selectors(exporter="")}, "selectors.exporter is empty"),
        ({"selectors": Selectors(exporter='{job="x"}')}, "without braces"),
        ({"runbook_url_pattern": "https://example.invalid/runbook"}, "%s"),
    ],
)
def test_bad_config_is_refused_with_a_clear_error(change, message):
    with pytest.raises(BundleConfigError, match=re.escape(message)):
        BundleConfig(**change)


# ---- rules ----


def test_promtool_accepts_every_rules_file():
    for path in (ALERTS, RULES, ROOT / "alerts" / "prometheusrule.yaml"):
        if path.name == "prometheusrule.yaml":
            spec = load_yaml(path)["spec"]
            path = ROOT / ".pytest_cache" / "prometheusrule-spec.yaml"
            path.parent.mkdir(exist_ok=True)
            path.write_text(yaml.safe_dump(spec))
        result = subprocess.run(
            [promtool(), "check", "rules", str(path)], capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_prometheusrule_holds_exactly_the_plain_rule_files():
    resource = load_yaml(ROOT / "alerts" / "prometheusrule.yaml")
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["labels"]["release"] == DEFAULT.scrape.release_label
    plain = load_yaml(RULES)["groups"] + load_yaml(ALERTS)["groups"]
    assert resource["spec"]["groups"] == plain


def test_alerts_follow_the_mixin_conventions():
    alerts = [r for r in all_rules() if "alert" in r]
    assert len(alerts) >= 15
    for alert in alerts:
        name = alert["alert"]
        assert re.fullmatch(r"([A-Z]+[a-z0-9]+)+", name) and len(name) <= 40, name
        assert name.startswith("GPU"), name
        assert set(alert["labels"]) == {"severity"}, name
        assert alert["labels"]["severity"] in SEVERITIES, name
        notes = alert["annotations"]
        assert re.fullmatch(r"[A-Z].+\.", notes["summary"]) and "{{" not in notes["summary"], name
        assert "{{" in notes["description"], f"{name}: description must be templated"
        assert notes["runbook_url"] == DEFAULT.runbook_url_pattern % name.lower()
        assert re.fullmatch(r"\d+[smh]", alert["for"]), f"{name}: `for` must be deliberate"
    names = {a["alert"] for a in alerts}
    runbook = (ROOT / "alerts" / "runbook.md").read_text()
    for name in names:
        assert f"## {name}\n" in runbook, f"runbook has no section for {name}"


def test_rule_groups_respect_size_limits():
    for path in (ALERTS, RULES):
        for group in load_yaml(path)["groups"]:
            assert len(group["name"]) <= 40 and len(group["rules"]) <= 20, group["name"]


def test_recording_rules_are_named_level_metric_operations():
    records = [r["record"] for r in all_rules() if "record" in r]
    for name in records:
        assert re.fullmatch(r"[a-z_]+:[A-Za-z0-9_]+:[a-z0-9_]+", name), name
        assert "_total:" not in name, name
    groups = load_yaml(RULES)["groups"]
    assert all(g["name"].endswith(".rules") for g in groups)


def test_every_aggregation_keeps_the_cluster_label():
    for rule in all_rules():
        for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]):
            assert clause.split(", ")[0] == DEFAULT.labels.cluster, (rule, clause)


# ---- dashboards ----


@pytest.fixture(params=DASHBOARDS, ids=lambda p: p.stem)
def dashboard(request) -> dict:
    return json.loads(request.param.read_text())


def non_row_panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_identity_and_defaults(dashboard):
    uids = DEFAULT.dashboards.uids
    assert dashboard["uid"] in uids.values() and len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith(DEFAULT.dashboards.name_prefix)
    assert dashboard["tags"] == list(DEFAULT.dashboards.tags)
    assert dashboard["timezone"] == DEFAULT.dashboards.timezone
    assert dashboard["editable"] is False
    assert "__inputs" not in dashboard and "__requires" not in dashboard
    links = dashboard["links"]
    assert links[0]["type"] == "dashboards" and links[0]["tags"] == [DEFAULT.dashboards.tags[0]]
    assert links[0]["includeVars"] and links[0]["keepTime"] and links[0]["asDropdown"]


def test_dashboards_have_distinct_uids():
    uids = [json.loads(p.read_text())["uid"] for p in DASHBOARDS]
    assert len(DASHBOARDS) == 2 and len(set(uids)) == 2


def test_one_datasource_variable_feeds_every_panel(dashboard):
    templates = dashboard["templating"]["list"]
    sources = [t for t in templates if t["type"] == "datasource"]
    assert [t["name"] for t in sources] == ["datasource"]
    assert sources[0]["query"] == "prometheus" and sources[0]["label"] == "Data source"
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in non_row_panels(dashboard):
        assert panel["datasource"] == wanted, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == wanted, panel["title"]


def test_variables_refresh_on_time_range_change(dashboard):
    names = set()
    for template in dashboard["templating"]["list"]:
        names.add(template["name"])
        assert template["refresh"] == 2, template["name"]
        if template["type"] == "query":
            assert template["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert template["query"]["query"] == template["definition"]
            if template.get("includeAll"):
                assert template["allValue"] in (".+", ".*")
    assert {"datasource", "cluster", "node"} <= names
    cluster = next(t for t in dashboard["templating"]["list"] if t["name"] == "cluster")
    assert cluster["hide"] == (0 if DEFAULT.show_multi_cluster else 2)


def test_every_panel_has_a_unit_and_a_description(dashboard):
    for panel in non_row_panels(dashboard):
        assert panel.get("description"), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert panel["interval"] == DEFAULT.dashboards.min_interval


def test_queries_use_rate_interval_and_carry_a_selector(dashboard):
    exporter, ksm = DEFAULT.selectors.exporter, DEFAULT.selectors.kube_state_metrics
    for expr in dashboard_targets(dashboard):
        for window in re.findall(r"\b(?:rate|irate|increase)\((.*?)\)", expr):
            assert window.endswith("[$__rate_interval]"), expr
        for metric, matchers in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}", expr):
            assert 'cluster=~"$cluster"' in matchers, expr
            if ":" not in metric:  # raw series: the configured selector; recorded: aggregated
                assert exporter in matchers or ksm in matchers, expr


def test_panels_avoid_angular_types_and_grafanalib_defects(dashboard):
    text = json.dumps(dashboard)
    assert dashboard["schemaVersion"] == 39
    for legacy in ('"rows"', '"style"', '"gnetId"', '"span"', '"intervalFactor"', '"step"'):
        assert legacy not in text, legacy
    for panel in dashboard["panels"]:
        assert panel["type"] not in ANGULAR_PANELS
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert re.fullmatch(r"[A-Z]", target["refId"])
        if panel["type"] in ("gauge", "bargauge", "stat"):
            assert panel["options"]["reduceOptions"]["calcs"] == ["lastNotNull"], panel["title"]
            assert "fieldOptions" not in panel["options"]
        steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
        if steps:
            assert isinstance(steps["steps"], list) and steps["steps"][0]["value"] is None
    nulls = re.findall(r'"(\w+)": null', text)
    assert set(nulls) <= {"value"}, "only a threshold's base step may be null"


def test_panel_ids_are_unique_and_panels_do_not_overlap(dashboard):
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        area = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not cells & area, panel["title"]
        cells |= area


def test_table_columns_name_only_values_their_queries_return(dashboard):
    """A table's value columns are named by query letter ("Value #B"); a name that matches no
    query, or a value left unnamed, is a column mislabelled or shown as a raw letter."""
    for panel in dashboard["panels"]:
        if panel["type"] != "table":
            continue
        refs = [t["refId"] for t in panel["targets"]]
        values = {"Value"} if len(refs) == 1 else {f"Value #{ref}" for ref in refs}
        organize = next(t["options"] for t in panel["transformations"] if t["id"] == "organize")
        named, hidden = set(organize["renameByName"]), set(organize["excludeByName"])
        assert {f for f in named | hidden if f.startswith("Value")} <= values, panel["title"]
        assert values <= named | hidden, panel["title"]
        assert not named & hidden, panel["title"]


def test_import_flavour_declares_its_inputs():
    for path in IMPORTABLE:
        data = json.loads(path.read_text())
        assert [i["name"] for i in data["__inputs"]] == ["DS_PROMETHEUS"]
        assert {r["id"] for r in data["__requires"]} >= {"grafana", "prometheus", "timeseries"}
        source = next(t for t in data["templating"]["list"] if t["name"] == "datasource")
        assert source["current"]["value"] == "${DS_PROMETHEUS}"
        provisioned = json.loads((ROOT / "dashboards" / "provisioned" / path.name).read_text())
        assert data["panels"] == provisioned["panels"]
    assert "${DS_PROMETHEUS}" not in "".join(p.read_text() for p in DASHBOARDS)


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
    assert len(exprs) > 50


# ---- metrics exist ----


@pytest.fixture
def simulated_metric_names(sim, make_poller, tmp_path) -> set[str]:
    """Every family the simulated default node exposes, with an XID raised so the XID counter
    exists, PCIe sampled once and GPM's first two samples taken."""
    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock").start()
    try:
        watcher = PodResourcesWatcher(PodResourcesClient(str(kubelet.socket_path), 5), 0.05)
        assert watcher.refresh()
        poller = make_poller(replace(FAST, pcie_enabled=True, pcie_interval_seconds=0.05))
        start_xid_watch(sim, poller)
        sim.inject_xid(0, 79)
        context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)

        def text() -> str:
            return render(poller.sweep(), context=context)

        assert wait_for(
            lambda: (
                "DCGM_EXP_XID_ERRORS_TOTAL{" in text()
                and "DCGM_FI_DEV_PCIE_TX_THROUGHPUT{" in text()
                and "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in text()
            )
        )
        return {
            line.split("{")[0].split(" ")[0]
            for line in text().splitlines()
            if line and not line.startswith("#")
        }
    finally:
        kubelet.stop()


def referenced_metrics() -> set[str]:
    exprs = [r["expr"] for r in all_rules()]
    exprs += [e for d in DASHBOARDS for e in dashboard_targets(json.loads(d.read_text()))]
    for d in DASHBOARDS:
        exprs += [
            t["definition"]
            for t in json.loads(d.read_text())["templating"]["list"]
            if t["type"] == "query"
        ]
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr))
        names |= {n for n in re.findall(r"[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_:]+", expr)}
    return names


def test_every_referenced_metric_exists(simulated_metric_names):
    recorded = {r["record"] for r in all_rules() if "record" in r}
    unknown = referenced_metrics() - simulated_metric_names - KUBE_STATE_METRICS - recorded
    assert not unknown, f"not in the simulated exporter's output nor kube-state-metrics: {unknown}"
    assert recorded <= referenced_metrics() | {recording.SCHEDULABLE_PODS}
    # And the exporter metrics the bundle relies on most are really there.
    assert {
        "DCGM_FI_DEV_GPU_UTIL",
        "kube_gpu_exporter_pod_device_allocation",
    } <= simulated_metric_names


def test_alert_template_queries_name_real_metrics():
    for group in alert_groups(DEFAULT):
        for rule in group.rules:
            for metric in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{(?!\{)", rule.description):
                assert metric == "kube_gpu_exporter_pod_device_allocation", rule.name


def test_every_recorded_series_is_used():
    used = "\n".join(
        [e for d in DASHBOARDS for e in dashboard_targets(json.loads(d.read_text()))]
        + [r["expr"] for r in all_rules()]
    )
    for group in recording_groups(DEFAULT):
        for rule in group.rules:
            assert rule.record in used, f"{rule.record} is recorded but nothing reads it"


# ---- scrape configs ----


def test_scrape_configs_keep_pod_labels_and_name_the_job():
    sd = load_yaml(ROOT / "scrape-configs" / "additional-scrape-configs.yaml")[0]
    assert sd["job_name"] == "kube-gpu-exporter" and sd["honor_labels"] is True
    assert (sd["scrape_interval"], sd["scrape_timeout"]) == ("15s", "10s")
    keeps = {
        tuple(r["source_labels"]): r["regex"]
        for r in sd["relabel_configs"]
        if r.get("action") == "keep"
    }
    assert keeps == {
        ("__meta_kubernetes_pod_label_app_kubernetes_io_name",): "kube-gpu-exporter",
        ("__meta_kubernetes_pod_container_port_name",): "metrics",
    }
    assert any(r.get("target_label") == "node" for r in sd["relabel_configs"])
    values = load_yaml(ROOT / "scrape-configs" / "kube-prometheus-stack-values.yaml")
    assert values["prometheus"]["prometheusSpec"]["additionalScrapeConfigs"] == [sd]
    for name, key in (("servicemonitor", "endpoints"), ("podmonitor", "podMetricsEndpoints")):
        monitor = load_yaml(ROOT / "scrape-configs" / f"{name}.yaml")
        assert monitor["metadata"]["labels"]["release"] == DEFAULT.scrape.release_label
        endpoint = monitor["spec"][key][0]
        assert endpoint["honorLabels"] is True and endpoint["port"] == "metrics"
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
        drops = [r for r in endpoint["relabelings"] if r.get("action") == "labeldrop"]
        assert drops and drops[0]["regex"] == OPERATOR_TARGET_LABELS
        assert {"targetLabel": "job", "replacement": "kube-gpu-exporter"} in endpoint["relabelings"]


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
        [sys.executable, "-m", "bundle.render", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert bundle_render.drifted(root=tmp_path)  # an empty checkout lacks every file
    assert "scrape-configs/static.yaml" in bundle_render.drifted(root=tmp_path)


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

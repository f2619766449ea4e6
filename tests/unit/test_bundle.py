"""The monitoring bundle: generated files match their generators, follow the mixin conventions,
parse as PromQL, reference only metrics that exist, and follow their flavour's dcgm-exporter
profile (names, units, host label), for every committed flavour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import pytest
import yaml

from kube_gpu_exporter.bundle import render as bundle_render
from kube_gpu_exporter.bundle.alerts import gpu_health, recording
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Record
from kube_gpu_exporter.bundle.alerts.rules_file import alert_groups, recording_groups
from kube_gpu_exporter.bundle.config import (
    DEFAULT,
    BundleConfig,
    BundleConfigError,
    LabelNames,
    Resources,
    Selectors,
)
from kube_gpu_exporter.bundle.dashboards.panels import TableQuery, table
from kube_gpu_exporter.bundle.dcgm_units import classic_to_profile, spelled, unit_factor
from kube_gpu_exporter.bundle.flavour_translate import Translator
from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from kube_gpu_exporter.bundle.scrape_configs import OPERATOR_TARGET_LABELS
from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.attribution.pod_energy import PodEnergyLedger
from kube_gpu_exporter.exporter.config import CollectionConfig, HostLabel
from kube_gpu_exporter.exporter.dcgm_compat import RENAMES_4_9, profile
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import build_exposition
from kube_gpu_exporter.exporter.fields.collectors_file import read_collectors_file
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import builtin_collectors, default_fleet
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable
from tests.conftest import (
    FAST,
    LABELS,
    joined_with,
    promtool,
    quiet,
    start_xid_watch,
    wait_for,
)
from tests.support.generated_bundle import generated, generated_flavour

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts" / "prometheus_alerts.yaml"
RULES = ROOT / "alerts" / "prometheus_rules.yaml"
VERSIONS = tuple(FLAVOURS)
NEW_NAMES = tuple(VERSIONS[1:])
PATHS = {version: flavour_paths(version) for version in VERSIONS}
DASHBOARDS = [ROOT / p for version in VERSIONS for p in PATHS[version].provisioned]
IMPORTABLE = [ROOT / p for version in VERSIONS for p in PATHS[version].grafana_com]
# Which flavour a committed dashboard belongs to.
FLAVOUR_OF = {
    ROOT / p: version
    for version in VERSIONS
    for p in (*PATHS[version].provisioned, *PATHS[version].grafana_com)
}
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


def rule_files(version: str) -> tuple[Path, Path]:
    return ROOT / PATHS[version].alerts, ROOT / PATHS[version].rules


def all_rules(version: str = DEFAULT.dcgm_version) -> list[dict]:
    groups = [g for path in rule_files(version) for g in load_yaml(path)["groups"]]
    return [r for g in groups for r in g["rules"]]


def identifiers(text: str) -> set[str]:
    """Every metric-like name in a text, recorded names split into their parts."""
    words = re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text)
    return {part for word in words for part in word.split(":")}


# ---- generation ----


def test_committed_artifacts_match_their_generators():
    assert bundle_render.drifted(files=generated()) == [], "run `make bundle` and commit the result"


def artifact_digests(hash_seed: str) -> dict[str, str]:
    """Each generated file's SHA-256, as a fresh interpreter with this string-hash seed makes it."""
    script = (
        "import hashlib, json\n"
        "from kube_gpu_exporter.bundle.render import all_artifacts\n"
        "print(json.dumps({path: hashlib.sha256(text.encode()).hexdigest()"
        " for path, text in all_artifacts().items()}))"
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


def test_config_drives_every_selector_and_label():
    custom = replace(
        DEFAULT,
        selectors=Selectors(exporter='job="gpu-metrics"', kube_state_metrics='job="ksm"'),
        labels=replace(LabelNames(), hostname="kubernetes_node", pod="exported_pod"),
    )
    files = bundle_render.artifacts(custom)
    text = "\n".join(files.values())
    assert 'job=\\"gpu-metrics\\"' in text or 'job="gpu-metrics"' in text
    assert "kube-gpu-exporter\\" not in text and 'job="kube-gpu-exporter"' not in text
    assert '"hostname"' not in text and "hostname=" not in text
    assert '"kubernetes_node", "(.+)"' in files["alerts/prometheus_rules.yaml"]
    assert "exported_pod" in files["alerts/prometheus_alerts.yaml"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"selectors": Selectors(exporter="")}, "selectors.exporter is empty"),
        ({"selectors": Selectors(exporter='{job="x"}')}, "without braces"),
        ({"runbook_url_pattern": "https://example.invalid/runbook"}, "%s"),
        ({"dcgm_version": "4.7"}, "dcgm_version '4.7' is not one of 4.8.2, 4.8.3, 4.8.4, 4.9"),
        ({"labels": LabelNames(hostname=" ")}, "labels.hostname is empty"),
        ({"resources": Resources(whole_gpus=())}, "resources.whole_gpus"),
        ({"resources": Resources(mig_prefixes=('nvidia.com/mig-"',))}, "resources.mig_prefixes"),
        ({"resources": Resources(whole_gpus=("nvidia.com/gpu|x",))}, "plain resource names"),
    ],
)
def test_bad_config_is_refused_with_a_clear_error(change, message):
    with pytest.raises(BundleConfigError, match=re.escape(message)):
        BundleConfig(**change)


# ---- rules ----


@pytest.mark.parametrize("version", VERSIONS)
def test_prometheusrule_holds_exactly_the_plain_rule_files(version):
    resource = load_yaml(ROOT / PATHS[version].prometheusrule)
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"]["labels"]["release"] == DEFAULT.scrape.release_label
    alerts, rules = rule_files(version)
    plain = load_yaml(rules)["groups"] + load_yaml(alerts)["groups"]
    assert resource["spec"]["groups"] == plain


@pytest.mark.parametrize("version", VERSIONS)
def test_alerts_follow_the_mixin_conventions(version):
    config = FLAVOURS[version]
    alerts = [r for r in all_rules(version) if "alert" in r]
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
        assert notes["runbook_url"] == config.runbook_url_pattern % name.lower()
        assert re.fullmatch(r"\d+[smh]", alert["for"]), f"{name}: `for` must be deliberate"
    names = {a["alert"] for a in alerts}
    runbook = (ROOT / PATHS[version].runbook).read_text()
    # Each flavour's links point at its own runbook, which has a section per alert.
    assert config.runbook_url_pattern.endswith(PATHS[version].runbook.as_posix() + "#%s")
    for name in names:
        assert f"## {name}\n" in runbook, f"runbook has no section for {name}"


@pytest.mark.parametrize("version", VERSIONS)
def test_rule_groups_respect_size_limits(version):
    for path in rule_files(version):
        for group in load_yaml(path)["groups"]:
            assert len(group["name"]) <= 40 and len(group["rules"]) <= 20, group["name"]


@pytest.mark.parametrize("version", VERSIONS)
def test_recording_rules_are_named_level_metric_operations(version):
    records = [r["record"] for r in all_rules(version) if "record" in r]
    for name in records:
        assert re.fullmatch(r"[a-z_]+:[A-Za-z0-9_]+:[a-z0-9_]+", name), name
        assert "_total:" not in name, name
    groups = load_yaml(rule_files(version)[1])["groups"]
    assert all(g["name"].endswith(".rules") for g in groups)


@pytest.mark.parametrize("version", VERSIONS)
def test_every_aggregation_keeps_the_cluster_label(version):
    for rule in all_rules(version):
        for clause in re.findall(r"\b(?:by|on) \(([^)]*)\)", rule["expr"]):
            assert clause.split(", ")[0] == DEFAULT.labels.cluster, (rule, clause)


# ---- dashboards ----


@pytest.fixture(params=DASHBOARDS, ids=lambda p: f"{FLAVOUR_OF[p]}-{p.stem}")
def flavoured(request) -> tuple[BundleConfig, dict]:
    """A committed provisioned dashboard, with the config of the flavour it belongs to."""
    return FLAVOURS[FLAVOUR_OF[request.param]], json.loads(request.param.read_text())


@pytest.fixture
def dashboard(flavoured) -> dict:
    return flavoured[1]


def non_row_panels(dashboard: dict) -> list[dict]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def test_dashboard_identity_and_defaults(flavoured):
    config, dashboard = flavoured
    uids = config.dashboards.uids
    assert dashboard["uid"] in uids.values() and len(dashboard["uid"]) <= 40
    assert dashboard["title"].startswith(config.dashboards.name_prefix)
    assert dashboard["tags"] == list(config.dashboards.tags)
    assert dashboard["timezone"] == config.dashboards.timezone
    assert dashboard["editable"] is False
    assert "__inputs" not in dashboard and "__requires" not in dashboard
    links = dashboard["links"]
    assert links[0]["type"] == "dashboards" and links[0]["tags"] == [config.dashboards.tags[0]]
    assert links[0]["includeVars"] and links[0]["keepTime"] and links[0]["asDropdown"]


def test_dashboards_have_distinct_uids_and_titles():
    """Every flavour's dashboards can be imported into one Grafana side by side, and each
    flavour's dashboard links list its own dashboards only."""
    dashboards = [json.loads(p.read_text()) for p in DASHBOARDS]
    assert len(DASHBOARDS) == 2 * len(VERSIONS)
    assert len({d["uid"] for d in dashboards}) == len(dashboards)
    assert len({d["title"] for d in dashboards}) == len(dashboards)
    link_tags = {version: FLAVOURS[version].dashboards.tags[0] for version in VERSIONS}
    assert len(set(link_tags.values())) == len(VERSIONS)
    for path, data in zip(DASHBOARDS, dashboards, strict=True):
        others = set(link_tags.values()) - {link_tags[FLAVOUR_OF[path]]}
        assert not others & set(data["tags"]), path


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


def range_arguments(expr: str) -> list[str]:
    """The argument of every rate(), irate() and increase() in `expr`, to its matching
    parenthesis: an argument may hold parentheses of its own (a label_replace in a subquery)."""
    found = []
    for match in re.finditer(r"\b(?:rate|irate|increase)\(", expr):
        depth, start = 1, match.end()
        for end in range(start, len(expr)):
            if expr[end] in "()" and not _in_string(expr, end):
                depth += 1 if expr[end] == "(" else -1
                if depth == 0:
                    found.append(expr[start:end])
                    break
    return found


def _in_string(expr: str, index: int) -> bool:
    return expr[:index].count('"') % 2 == 1


def test_queries_use_rate_interval_and_carry_a_selector(dashboard):
    exporter, ksm = DEFAULT.selectors.exporter, DEFAULT.selectors.kube_state_metrics
    scrape = DEFAULT.scrape.interval
    for expr in dashboard_targets(dashboard):
        for window in range_arguments(expr):
            # Over a series or over a subquery at the scrape interval (families told apart by
            # a label cut out of their name, which rate() would drop).
            assert window.endswith(("[$__rate_interval]", f"[$__rate_interval:{scrape}]")), expr
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
    cells: set[tuple[int, int]] = set()
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
        provisioned = json.loads((path.parent.parent / "provisioned" / path.name).read_text())
        assert data["panels"] == provisioned["panels"]
    assert "${DS_PROMETHEUS}" not in "".join(p.read_text() for p in DASHBOARDS)


# ---- the flavour follows its profile ----


def flavour_texts(version: str) -> Mapping[str, str]:
    return generated_flavour(version)


def test_each_flavour_names_only_its_own_profiles_metrics():
    """No classic name that 4.9 renames is left in a 4.9 file (runbook and promtool tests
    included), and no 4.9 name leaks into the default flavour."""
    renamed = set(RENAMES_4_9)
    spelled = {s.name for s in RENAMES_4_9.values()} - renamed
    default_words = set().union(*map(identifiers, flavour_texts(DEFAULT.dcgm_version).values()))
    assert not default_words & spelled
    assert "DCGM_FI_DEV_GPU_UTIL" in default_words
    for version in NEW_NAMES:
        for path, text in flavour_texts(version).items():
            assert not identifiers(text) & renamed, path
        words = set().union(*map(identifiers, flavour_texts(version).values()))
        assert {"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED_BYTES"} <= words


def test_the_host_label_follows_the_profile_unless_set():
    assert DEFAULT.host_label == "hostname" and FLAVOURS["4.9"].host_label == "hostname"
    # `replace` keeps following the profile: labels.hostname stays unset.
    classic = replace(DEFAULT, dcgm_version="4.8.2")
    assert classic.host_label == "Hostname"
    explicit = replace(classic, labels=replace(LabelNames(), hostname="node_name"))
    assert explicit.host_label == "node_name"
    rules = bundle_render.artifacts(classic)["alerts/prometheus_rules.yaml"]
    assert '"Hostname", "(.+)"' in rules and "hostname" not in rules


def rule(version: str, name: str) -> dict:
    return next(r for r in all_rules(version) if name in (r.get("alert"), r.get("record")))


def test_idle_threshold_is_in_the_utilization_unit():
    """1 % is `< 1` against classic GPU_UTIL (percent), `< 0.01` against 4.9's ratio, and the
    MIG side (GPM, a ratio in both) is scaled to percent only in the classic flavour."""
    assert rule("4.8.3", "GPUAllocatedIdle")["expr"].endswith(") < 1")
    assert rule("4.9", "GPUAllocatedIdle")["expr"].endswith(") < 0.01")
    idle = recording.NS_IDLE
    assert rule("4.8.3", idle)["expr"].endswith("< bool 1)")
    assert rule("4.9", idle)["expr"].endswith("< bool 0.01)")
    busy = "pod_device:{}:avg_over_window"
    assert (
        "or 100 * avg_over_time(DCGM_FI_PROF_GR_ENGINE_ACTIVE{"
        in (rule("4.8.3", busy.format("DCGM_FI_DEV_GPU_UTIL"))["expr"])
    )
    assert (
        "or avg_over_time(DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO{"
        in (rule("4.9", busy.format("DCGM_FI_DEV_GPU_UTIL_RATIO"))["expr"])
    )


def panel(version: str, file: str, title: str) -> dict:
    path = next(p for p in PATHS[version].provisioned if p.stem == file)
    data = json.loads((ROOT / path).read_text())
    return next(p for p in non_row_panels(data) if p["title"] == title)


def unit_and_exprs(version: str, file: str, title: str) -> tuple[str, float | None, list[str]]:
    found = panel(version, file, title)
    defaults = found["fieldConfig"]["defaults"]
    return defaults["unit"], defaults.get("max"), [t["expr"] for t in found["targets"]]


@pytest.mark.parametrize(
    ("file", "title", "classic", "base_units"),
    [
        # Percent against a ratio: Grafana's unit and the full scale follow; no scaling.
        ("gpu-devices", "GPU utilization", ("percent", 100, r"\}$"), ("percentunit", 1, r"\}$")),
        ("gpu-devices", "Utilization now", ("percent", 100, r"\}$"), ("percentunit", 1, r"\}$")),
        (
            "gpu-cluster-capacity",
            "Utilization per namespace",
            ("percent", 100, r"^namespace:DCGM_FI_DEV_GPU_UTIL:avg\{.*\}$"),
            ("percentunit", 1, r"^namespace:DCGM_FI_DEV_GPU_UTIL_RATIO:avg\{.*\}$"),
        ),
        # MiB, MHz and DCGM's MB/s are scaled to bytes, hertz and B/s; 4.9 publishes those.
        (
            "gpu-devices",
            "Framebuffer memory",
            ("bytes", None, r" \* 1048576$"),
            ("bytes", None, r"[})]$"),
        ),
        ("gpu-devices", "Clocks", ("hertz", None, r"\) \* 1000000$"), ("hertz", None, r"\}\)$")),
        (
            "gpu-devices",
            "NVLink throughput",
            ("Bps", None, r"\) \* 1024000$"),
            ("Bps", None, r"\}\)$"),
        ),
        # An energy counter's rate is power: mJ/s / 1000, J/s as it is.
        (
            "gpu-devices",
            "Energy-based average power",
            ("watt", None, r"\]\)\) / 1000$"),
            ("watt", None, r"\]\)\)$"),
        ),
    ],
)
def test_panel_units_follow_the_profile(file, title, classic, base_units):
    for version, (unit, max_value, pattern) in (("4.8.3", classic), ("4.9", base_units)):
        found_unit, found_max, exprs = unit_and_exprs(version, file, title)
        assert (found_unit, found_max) == (unit, max_value), (version, title)
        assert exprs and all(re.search(pattern, e) for e in exprs), (version, exprs)


def test_nvlink_bandwidth_is_read_as_the_rate_it_is():
    """DCGM's field 449 is already a rate (a gauge from 4.8.3): no rate() over it."""
    for version in VERSIONS:
        (expr,) = unit_and_exprs(version, "gpu-devices", "NVLink throughput")[2]
        assert "rate(" not in expr and "increase(" not in expr, expr


def test_recorded_utilization_carries_the_profiles_name():
    for version in VERSIONS:
        util = FLAVOURS[version].profile.name("DCGM_FI_DEV_GPU_UTIL")
        records = {r["record"] for r in all_rules(version) if "record" in r}
        assert {
            f"node:{util}:avg",
            f"namespace:{util}:avg",
            f"namespace_workload:{util}:avg",
            f"pod_device:{util}:avg_over_window",
            f"pod_device:{util}:max_over_window",
        } <= records


def test_flavour_paths_name_every_generated_flavour_file():
    """What end-to-end code reads through flavour_paths() is generated and committed."""
    made = set(generated())
    for version in VERSIONS:
        paths = PATHS[version]
        singles = (paths.alerts, paths.rules, paths.prometheusrule)
        for path in (*singles, *paths.provisioned, *paths.grafana_com):
            assert path.as_posix() in made and (ROOT / path).is_file(), path
        assert paths.rule_files == (paths.rules, paths.alerts)
        assert sorted((ROOT / paths.tests).glob("*.yaml")), paths.tests
    assert PATHS["4.9"].alerts.as_posix() == "alerts/dcgm-4.9/prometheus_alerts.yaml"
    # Deploy manifests and scrape configs exist for the default flavour only; the Helm chart
    # carries every flavour's rules and dashboards (it picks one by its compat value).
    assert not [
        p for p in made if "dcgm-4.9" in p and not p.startswith(("alerts", "dash", "deploy/helm/"))
    ]


# ---- per-pod use (process accounting) ----

GIB = 2**30
SCRAPE = {"job": "kube-gpu-exporter", "instance": "10.0.0.11:9455"}
SHARED_GPU = {"gpu": "3", "UUID": "GPU-3dd6f3c7-9d4b-4ebc-8a5c-4f5e6d7a8b93"}
MIG_INSTANCE = {
    "gpu": "6",
    "UUID": "GPU-6a09c6fa-c07e-4bef-9d8f-7c8b9a0bdec6",
    "GPU_I_PROFILE": "2g.20gb",
    "GPU_I_ID": "2",
}


@dataclass(frozen=True)
class PodUse:
    """One container's processes on one device; empty names are the device's unattributed ones.
    Powers of two, so sums are exact in any order."""

    device: dict[str, str]
    namespace: str
    pod: str
    container: str
    memory_gib: float
    sm_ratio: float | None  # None on MIG: NVML has no per-process utilization there

    @property
    def labels(self) -> dict[str, str]:
        owner = {"namespace": self.namespace, "pod": self.pod, "container": self.container}
        return {**self.device, **owner}

    @property
    def user(self) -> str:
        """The name the panels give it."""
        return f"{self.namespace}/{self.pod}/{self.container}" if self.pod else "unattributed"


POD_USE = (
    PodUse(SHARED_GPU, "inference", "chat-a", "server", 2, 0.25),
    PodUse(SHARED_GPU, "inference", "chat-b", "server", 1, 0.125),
    PodUse(SHARED_GPU, "serving", "api-0", "api", 4, 0.25),
    PodUse(SHARED_GPU, "", "", "", 0.5, 0.0625),
    PodUse(MIG_INSTANCE, "research", "nb-0", "jupyter", 1, None),
)
# The devices' own figures, in classic units: 8 GiB used and 75 % busy on the shared GPU, 2 GiB
# used on the MIG instance (which has no utilization).
DEVICE_READINGS = (
    (SHARED_GPU, {"DCGM_FI_DEV_FB_USED": 8192, "DCGM_FI_DEV_GPU_UTIL": 75}),
    (MIG_INSTANCE, {"DCGM_FI_DEV_FB_USED": 2048}),
)


def matchers(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{name}="{value}"' for name, value in labels.items()) + "}"


def per_pod_series(config: BundleConfig) -> list[dict[str, str]]:
    """The per-pod families, and the devices' DCGM series as the exporter publishes them with
    --attribution.shared-devices=per-pod: one copy per pod holding the device."""
    host = SCRAPE | {config.host_label: "gpu-node-1"}
    series = []
    for use in POD_USE:
        values = {"kube_gpu_exporter_pod_gpu_memory_used_bytes": use.memory_gib * GIB}
        if use.sm_ratio is not None:
            values["kube_gpu_exporter_pod_gpu_sm_utilization_ratio"] = use.sm_ratio
        for family, value in values.items():
            series.append({"series": family + matchers(host | use.labels), "values": f"{value}x5"})
    for device, readings in DEVICE_READINGS:
        holders = {use.pod for use in POD_USE if use.device == device and use.pod}
        for pod in sorted(holders):
            for classic, value in readings.items():
                converted = float(value * classic_to_profile(config.profile, classic))
                labels = matchers(host | device | {"pod": pod})
                series.append(
                    {"series": config.profile.name(classic) + labels, "values": f"{converted}x5"}
                )
    return series


def promtool_eval(tmp_path: Path, series: list[dict], cases: list[tuple[str, list]]) -> None:
    """Runs promtool's unit test of `cases` (expression, expected samples) over `series`."""
    test = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": expr, "eval_time": "3m", "exp_samples": samples}
                    for expr, samples in cases
                ],
            }
        ],
    }
    path = tmp_path / "panels_test.yaml"
    path.write_text(yaml.safe_dump(test))
    result = subprocess.run(
        [promtool(), "test", "rules", path.name], cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def sample(labels: dict[str, str], value: float) -> dict:
    return {"labels": matchers(labels), "value": value}


def test_chargeback_unit_tests_check_the_panels_queries():
    """The usage-weighted chargeback expressions in alerts/tests/pod_usage_test.yaml are the
    capacity panel's queries over a 12 minute range, so the tests check what ships."""
    found = panel(
        DEFAULT.dcgm_version, "gpu-cluster-capacity", "Usage-weighted GPU-hours by namespace"
    )
    tested = {
        case["expr"]
        for test in load_yaml(ROOT / "alerts" / "tests" / "pod_usage_test.yaml")["tests"]
        for case in test["promql_expr_test"]
    }
    for target in found["targets"]:
        expr = target["expr"].replace('{cluster=~"$cluster", namespace=~"$namespace"}', "")
        expr = expr.replace("$__range_s", "720").replace("$__range", "12m")
        assert expr in tested, expr


def test_a_column_unit_must_name_a_value_column():
    with pytest.raises(ValueError, match="column_units names no value column 'Memory'"):
        table("t", "d", "none", [TableQuery("Processes", "up")], column_units={"Memory": "bytes"})


# ---- metrics exist ----


@pytest.fixture(scope="module")
def simulated_metric_names(tmp_path_factory) -> Iterator[dict[str, set[str]]]:
    """Every family the simulated default node exposes under each flavour's profile, with an XID
    raised so the XID counter exists, PCIe sampled once, GPM's first two samples taken, and the
    per-pod energy counters credited once (one ledger per profile, as one per store). Made once
    for every flavour's case: it takes a simulated node and its kubelet."""
    tmp_path = tmp_path_factory.mktemp("names")
    sim = FakeNvml(quiet(default_fleet()))
    pollers: list[Poller] = []

    def make_poller(sim: FakeNvml, config: CollectionConfig) -> Poller:
        pollers.append(Poller(config, lambda s: None, sim.source(), workers=8))
        return pollers[-1]

    kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock").start()
    try:
        watcher = PodResourcesWatcher(PodResourcesClient(str(kubelet.socket_path), 5), 0.05)
        assert watcher.refresh()
        sim.processes = ProcessTable(sim, kubelet)
        host = HostTree(sim.processes, tmp_path / "host").refresh()
        poller = make_poller(
            sim,
            replace(
                FAST,
                pcie_enabled=True,
                pcie_interval_seconds=0.05,
                processes_enabled=True,
                proc_root=str(host.proc_root),
                log_root=str(host.log_root),
            ),
        )
        start_xid_watch(sim, poller)
        sim.inject_xid(0, 79)
        context = AttributionContext(pods=watcher.latest, pods_status=watcher.status)
        ledgers = {version: PodEnergyLedger() for version in VERSIONS}

        def text(version: str = DEFAULT.dcgm_version) -> str:
            labels = replace(LABELS, host_label=HostLabel.LOWER, dcgm=profile(version))
            join = joined_with(context, labels)
            exposition = build_exposition(
                poller.sweep(), Renderer(labels), lambda node: ledgers[version].attach(join(node))
            )
            return exposition.plain(exposition.tail(15.0)).decode()

        assert wait_for(
            lambda: (
                "DCGM_EXP_XID_ERRORS_TOTAL{" in text()
                and "DCGM_FI_DEV_PCIE_TX_THROUGHPUT{" in text()
                and "DCGM_FI_PROF_GR_ENGINE_ACTIVE{" in text()
                and "kube_gpu_exporter_pod_gpu_sm_utilization_ratio{" in text()
            )
        )
        # A ledger credits from its second snapshot on: one sweep first for each profile.
        texts = {version: (text(version), text(version))[1] for version in VERSIONS}
        yield {
            version: {
                line.split("{")[0].split(" ")[0]
                for line in texts[version].splitlines()
                if line and not line.startswith("#")
            }
            for version in VERSIONS
        }
    finally:
        for poller in pollers:
            poller.stop(timeout=2.0)
        kubelet.stop()
        sim.close()


def referenced_metrics(version: str) -> set[str]:
    dashboards = [ROOT / p for p in PATHS[version].provisioned]
    exprs = [r["expr"] for r in all_rules(version)]
    exprs += [e for d in dashboards for e in dashboard_targets(json.loads(d.read_text()))]
    for d in dashboards:
        exprs += [
            t["definition"]
            for t in json.loads(d.read_text())["templating"]["list"]
            if t["type"] == "query"
        ]
    names = set()
    for expr in exprs:
        names |= set(re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{", expr))
        # Not inside a subquery's range (`[$__range:5m]`, `[59m59s999ms:5m]`).
        names |= set(re.findall(r"(?<![\w$:])[A-Za-z_][A-Za-z0-9_]*:[A-Za-z0-9_:]+", expr))
    return names


# The exporter's own family of GPUs registered with an NVLink fabric (on wherever the fabric
# answers), which the default simulated node has none of.
NVLINK_DOMAIN_INFO = "kube_gpu_exporter_nvlink_domain_info"


def fabric_node_families(version: str) -> set[str]:
    """The off-by-default NVLink, fabric, C2C and recovery-action families the bundle reads: what
    the built-in gb200 fleet's collectors file turns on, as the flavour's profile spells them.
    tests/e2e/test_nvlink_fabric.py scrapes them from `--simulate gb200` in a real Prometheus."""
    path = builtin_collectors("gb200")
    assert path is not None, "the gb200 fleet ships no collectors file"
    dcgm = FLAVOURS[version].profile
    listed = {dcgm.name(field.row.name) for field in read_collectors_file(path).listed}
    return listed | {NVLINK_DOMAIN_INFO}


@pytest.mark.parametrize("version", VERSIONS)
def test_every_referenced_metric_exists(simulated_metric_names, version):
    exposed = simulated_metric_names[version] | fabric_node_families(version)
    recorded = {r["record"] for r in all_rules(version) if "record" in r}
    unknown = referenced_metrics(version) - exposed - KUBE_STATE_METRICS - recorded
    assert not unknown, f"not in the simulated exporter's output nor kube-state-metrics: {unknown}"
    assert recorded <= referenced_metrics(version) | {recording.SCHEDULABLE_PODS}
    # And the exporter metrics the bundle relies on most are really there.
    util = FLAVOURS[version].profile.name("DCGM_FI_DEV_GPU_UTIL")
    assert {util, "kube_gpu_exporter_pod_device_allocation"} <= exposed


def test_alert_template_queries_name_real_metrics():
    for group in alert_groups(DEFAULT):
        for rule in group.rules:
            assert isinstance(rule, Alert), rule
            for metric in re.findall(r"([A-Za-z_:][A-Za-z0-9_:]*)\{(?!\{)", rule.description):
                # The pods holding a GPU, and (gpu_health) the reasons of its health verdict.
                assert metric in {
                    "kube_gpu_exporter_pod_device_allocation",
                    gpu_health.HEALTH_REASON,
                }, rule.name


@pytest.mark.parametrize("version", VERSIONS)
def test_every_recorded_series_is_used(version):
    dashboards = [ROOT / p for p in PATHS[version].provisioned]
    used = "\n".join(
        [e for d in dashboards for e in dashboard_targets(json.loads(d.read_text()))]
        + [r["expr"] for r in all_rules(version)]
    )
    for group in recording_groups(FLAVOURS[version]):
        for rule in group.rules:
            assert isinstance(rule, Record), rule
            assert rule.record in used, f"{rule.record} is recorded but nothing reads it"


RESOURCE_MATCHER = re.compile(r'\bresource(=~|!~|!=|=)"([^"]*)"')


def resource_matchers(config: BundleConfig) -> dict[str, set[tuple[str, str]]]:
    """Every `resource` matcher of the rules and of each dashboard generated from `config`."""
    files = bundle_render.artifacts(config)
    exprs: dict[str, list[str]] = {
        "rules": [
            rule["expr"]
            for path in ("alerts/prometheus_rules.yaml", "alerts/prometheus_alerts.yaml")
            for group in yaml.safe_load(files[path])["groups"]
            for rule in group["rules"]
        ]
    }
    for path, text in files.items():
        if path.startswith("dashboards/provisioned/"):
            exprs[Path(path).stem] = dashboard_targets(json.loads(text))
    return {
        source: {(m[1], m[2]) for expr in texts for m in RESOURCE_MATCHER.finditer(expr)}
        for source, texts in exprs.items()
    }


@pytest.mark.parametrize(
    "resources",
    [
        Resources(),
        Resources(whole_gpus=("nvidia.com/gpu",), mig_prefixes=("nvidia.com/mig-",)),
        Resources(whole_gpus=("nvidia.com/gpu", "gpu.nvidia.com", "gpu.example.com")),
    ],
    ids=["default", "device-plugin-only", "another-driver"],
)
def test_whole_gpu_and_mig_matchers_come_from_the_config(resources):
    """Wherever the bundle means "whole GPUs" or "MIG devices" it matches every resource the
    config lists, device plugin and DRA alike, so a mixed cluster adds up; no query names one
    GPU resource on its own."""
    config = replace(DEFAULT, resources=resources)
    found = resource_matchers(config)
    whole = ("=~", resources.whole_gpu_regex)
    mig = ("=~", resources.mig_regex)
    ksm = ("=~", resources.gpu_ksm_regex)
    assert found.pop("rules") == {whole, ksm}
    assert found.pop("gpu-cluster-capacity") == {whole, mig}
    assert found == {"gpu-devices": set()}


def test_default_matchers_cover_both_allocation_paths():
    resources = DEFAULT.resources
    pattern = re.compile(f"^(?:{resources.whole_gpu_regex})$")
    for name in ("nvidia.com/gpu", "gpu.nvidia.com"):
        assert pattern.match(name), name
    for name in ("nvidia.com/gpu.shared", "gpu.nvidia.com/mig-1g.10gb", "nvidia.com/mig-1g.10gb"):
        assert not pattern.match(name), name
    mig = re.compile(f"^(?:{resources.mig_regex})$")
    for name in ("nvidia.com/mig-1g.10gb", "gpu.nvidia.com/mig-3g.40gb"):
        assert mig.match(name), name
    for name in ("nvidia.com/gpu", "gpu.nvidia.com"):
        assert not mig.match(name), name


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


# ---- units and the flavour translator ----


def test_unit_factors_come_exactly_from_the_conversion_table():
    assert unit_factor("B", "MiB", "B") == 1048576
    assert unit_factor("MHz", "MHz", "Hz") == 1_000_000
    assert unit_factor("mJ", "mJ", "J") == Fraction(1, 1000)
    assert unit_factor("%", "%", "ratio") == Fraction(1, 100)
    assert unit_factor("%", "ratio", "%") == 100
    # DCGM's "MB/s" is 1000 KiB/s.
    assert unit_factor("KiB/s", "MB/s", "B/s") == 1_024_000
    nine = profile("4.9")
    assert classic_to_profile(nine, "DCGM_FI_DEV_GPU_UTIL") == Fraction(1, 100)
    assert classic_to_profile(nine, "DCGM_FI_DEV_GPU_TEMP") == 1
    assert classic_to_profile(profile("4.8.3"), "DCGM_FI_DEV_FB_USED") == 1
    assert spelled(nine, "DCGM_FI_DEV_FB_USED").display == (1, "bytes")
    assert spelled(profile("4.8.3"), "DCGM_FI_DEV_FB_USED").display == (1048576, "bytes")


def test_translator_converts_values_of_families_whose_unit_changes():
    translate = Translator(DEFAULT, FLAVOURS["4.9"])
    # promtool's expanding notation; a step is spelled out so no float sum creeps in.
    assert translate.values("90x3 _x2 stale 0+10x3", Fraction(1, 100)) == (
        "0.9x3 _x2 stale 0 0.1 0.2 0.3"
    )
    assert translate.values("7 4-1x2", Fraction(1048576)) == "7340032 4194304 3145728 2097152"
    assert translate.factor('DCGM_FI_DEV_GPU_UTIL{hostname="n"}') == Fraction(1, 100)
    assert translate.factor("namespace:DCGM_FI_DEV_GPU_UTIL:avg") == Fraction(1, 100)
    assert translate.factor("DCGM_FI_DEV_GPU_TEMP{}") == 1
    assert translate.factor("kube_gpu_exporter_device_up") == 1
    case = translate.tests(
        {
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        {"series": 'DCGM_FI_DEV_FB_USED{hostname="n"}', "values": "2x2"},
                        {"series": 'DCGM_FI_DEV_GPU_TEMP{hostname="n"}', "values": "80x2"},
                    ],
                    "promql_expr_test": [
                        {
                            "expr": "node:DCGM_FI_DEV_GPU_UTIL:avg",
                            "eval_time": "1m",
                            "exp_samples": [{"labels": '{node="n"}', "value": 37.5}],
                        }
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": "1m",
                            "alertname": "GPULost",
                            "exp_alerts": [
                                {
                                    "exp_labels": {"hostname": "n"},
                                    "exp_annotations": {
                                        "runbook_url": DEFAULT.runbook_url_pattern % "gpulost"
                                    },
                                }
                            ],
                        }
                    ],
                }
            ]
        }
    )["tests"][0]
    assert case["input_series"] == [
        {"series": 'DCGM_FI_DEV_FB_USED_BYTES{hostname="n"}', "values": "2097152x2"},
        {"series": 'DCGM_FI_DEV_GPU_TEMP_CELSIUS{hostname="n"}', "values": "80x2"},
    ]
    (expr,) = case["promql_expr_test"]
    assert expr["expr"] == "node:DCGM_FI_DEV_GPU_UTIL_RATIO:avg"
    assert expr["exp_samples"] == [{"labels": '{node="n"}', "value": 0.375}]
    (alert,) = case["alert_rule_test"][0]["exp_alerts"]
    assert alert["exp_annotations"]["runbook_url"] == (
        FLAVOURS["4.9"].runbook_url_pattern % "gpulost"
    )
    assert "alerts/dcgm-4.9/runbook.md#gpulost" in alert["exp_annotations"]["runbook_url"]


def test_translated_tests_cover_the_same_cases_as_the_default_ones():
    """The 4.9 promtool tests are the default's, case for case: firing and quiet ones."""
    for source in sorted((ROOT / "alerts" / "tests").glob("*.yaml")):
        original = load_yaml(source)
        translated = load_yaml(ROOT / PATHS["4.9"].tests / source.name)
        assert translated["rule_files"] == original["rule_files"]
        assert [t["name"] for t in translated["tests"]] == [t["name"] for t in original["tests"]]
        for before, after in zip(original["tests"], translated["tests"], strict=True):
            for key in ("alert_rule_test", "promql_expr_test", "input_series"):
                assert len(after.get(key, [])) == len(before.get(key, [])), (source, key)

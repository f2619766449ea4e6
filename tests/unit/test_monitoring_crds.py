"""Every prometheus-operator object the bundle ships, validated against prometheus-operator's own
CRD schemas: the models of cloudcoil-models-prometheus-operator, generated from the operator's
CRDs (types, enums, patterns, required fields). The ServiceMonitors, PodMonitors and
PrometheusRules the Helm chart renders with Helm's own engine (the defaults, every ci/ values file,
every monitor option on, each flavour's rules), those of deploy/'s kustomize builds, and every
committed file that holds one. Strictly: no type is coerced, an unknown key (a snake_case one too)
is refused, and the object dumps back unchanged; a misspelt key or a wrong type fails."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from functools import cache
from typing import Any

import pydantic
import pytest
import yaml
from cloudcoil.models.prometheus_operator import v1

from kube_gpu_exporter.bundle.flavours import FLAVOURS
from tests.support.monitoring_crds import MODELS, strictly, validate
from tests.unit.test_deploy import BUILDS
from tests.unit.test_helm_chart import CHART, CI, ROOT, ci_values, objects, render


def validated_kinds(docs: list[dict[str, Any]]) -> set[str]:
    """The kinds of `docs` that are prometheus-operator's, each of those validated."""
    kinds = set()
    for doc in docs:
        if doc.get("kind") in MODELS:
            validate(doc)
            kinds.add(doc["kind"])
    return kinds


# ---- the Helm chart ----


def endpoint(doc: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = (doc["spec"].get("endpoints") or doc["spec"]["podMetricsEndpoints"])[0]
    return found


# `kube-gpu-exporter hash-password`, for the password "change-me".
HASH = "$2b$10$iyUbGRygMg6wNvatSw6dP.R3WnwEbJBSJnNAiLXNhytOUk98EGdpy"
BASIC_AUTH = {
    "username": {"name": "kube-gpu-exporter-scrape", "key": "username"},
    "password": {"name": "kube-gpu-exporter-scrape", "key": "password"},
}
RELABELINGS = [
    {"sourceLabels": ["__meta_kubernetes_pod_label_team"], "targetLabel": "team"},
    {
        "action": "hashmod",
        "sourceLabels": ["__address__"],
        "modulus": 4,
        "targetLabel": "__tmp_shard",
    },
    {"action": "keep", "sourceLabels": ["__tmp_shard"], "regex": "0"},
    {"action": "labelmap", "regex": "__meta_kubernetes_node_label_(.+)"},
    {"targetLabel": "cluster", "replacement": "gpu-east"},
]
METRIC_RELABELINGS = [
    {"action": "drop", "sourceLabels": ["__name__"], "regex": "DCGM_FI_DEV_PCIE_.*"},
    {"action": "labeldrop", "regex": "pci_bus_id"},
    {
        "sourceLabels": ["gpu", "UUID"],
        "separator": "/",
        "targetLabel": "gpu_id",
        "replacement": "$1",
    },
]
LABELS = {"release": "monitoring", "example.invalid/team": "gpu-platform"}


def monitor(**more: Any) -> dict[str, Any]:
    """A monitor's values with every option the chart passes through set."""
    return {
        "enabled": True,
        "interval": "30s",
        "scrapeTimeout": "20s",
        "honorLabels": False,
        "additionalLabels": LABELS,
        "relabelings": RELABELINGS,
        "metricRelabelings": METRIC_RELABELINGS,
        "basicAuth": BASIC_AUTH,
        **more,
    }


# Values -> the prometheus-operator kinds they render.
VALUE_SETS: dict[str, tuple[dict[str, Any], set[str]]] = {
    "defaults": ({}, set()),
    # HTTPS with the certificate the chart generates (the monitor's tlsConfig made by the chart),
    # basic auth, and the rules.
    "service-monitor-self-signed-basic-auth": (
        {
            "webConfig": {
                "enabled": True,
                "selfSignedCert": {"enabled": True, "validityDays": 30},
                "basicAuth": True,
                "probeAuthorization": "Basic cHJvbWV0aGV1czpjaGFuZ2UtbWU=",
                "config": {"basic_auth_users": {"prometheus": HASH}},
            },
            "serviceMonitor": monitor(),
            "prometheusRule": {"enabled": True, "additionalLabels": LABELS},
        },
        {"ServiceMonitor", "PrometheusRule"},
    ),
    # The PodMonitor without a Service: HTTPS from a TLS Secret of the admin's, a tlsConfig of
    # the user's with client certificates, basic auth, and the other flavour's rules.
    "pod-monitor-tls-secret-client-certificates": (
        {
            "service": {"enabled": False},
            "compat": {"dcgmExporter": "4.9"},
            "webConfig": {
                "enabled": True,
                "tlsSecret": "kube-gpu-exporter-tls",
                "basicAuth": True,
                "clientCertificates": True,
                "config": {"basic_auth_users": {"prometheus": HASH}},
            },
            "podMonitor": monitor(
                tlsConfig={
                    "ca": {"configMap": {"name": "gpu-exporter-ca", "key": "ca.crt"}},
                    "cert": {"secret": {"name": "prometheus-client-tls", "key": "tls.crt"}},
                    "keySecret": {"name": "prometheus-client-tls", "key": "tls.key"},
                    "serverName": "kube-gpu-exporter.gpu-monitoring.svc",
                    "insecureSkipVerify": False,
                    "minVersion": "TLS13",
                }
            ),
            "prometheusRule": {"enabled": True},
        },
        {"PodMonitor", "PrometheusRule"},
    ),
    # Plain HTTP with basic auth.
    "service-monitor-http-basic-auth": (
        {
            "webConfig": {
                "enabled": True,
                "tls": False,
                "basicAuth": True,
                "config": {"basic_auth_users": {"prometheus": HASH}},
            },
            "serviceMonitor": monitor(tlsConfig={}),
        },
        {"ServiceMonitor"},
    ),
}


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_the_charts_objects_with_every_monitor_option_validate(name):
    values, kinds = VALUE_SETS[name]
    docs = objects(render(values))
    assert validated_kinds(docs) == kinds
    # The options did reach the monitor: the chart's tlsConfig or the user's with HTTPS.
    for doc in docs:
        if doc["kind"] in ("ServiceMonitor", "PodMonitor"):
            options = {"honorLabels", "relabelings", "metricRelabelings", "basicAuth"}
            if values["webConfig"].get("tls", True):
                options |= {"scheme", "tlsConfig"}
            assert options <= set(endpoint(doc)), name


def enabled(values: dict[str, Any], key: str) -> bool:
    return bool(values.get(key, {}).get("enabled", False))


@pytest.mark.parametrize("values_file", CI, ids=lambda p: p.name)
def test_every_ci_files_objects_validate(values_file):
    values = ci_values(values_file)
    expected = {
        kind
        for kind, key in [
            ("ServiceMonitor", "serviceMonitor"),
            ("PodMonitor", "podMonitor"),
            ("PrometheusRule", "prometheusRule"),
        ]
        if enabled(values, key)
    }
    assert validated_kinds(objects(render(values))) == expected


@pytest.mark.parametrize("version", sorted(FLAVOURS))
def test_each_flavours_prometheus_rule_validates(version):
    values = {"compat": {"dcgmExporter": version}, "prometheusRule": {"enabled": True}}
    assert validated_kinds(objects(render(values))) == {"PrometheusRule"}


RULE_FILES = sorted((CHART / "files" / "prometheus-rules").glob("*.yaml"))


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_the_charts_rule_files_are_prometheus_rule_specs(path):
    """What the chart's PrometheusRule holds as its spec, file by file."""
    spec = yaml.safe_load(path.read_text())
    strictly(v1.PrometheusRuleSpec, spec)
    assert spec["groups"]


# ---- deploy/'s kustomize builds ----


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_every_kustomize_builds_objects_validate(name):
    """As tests/unit/test_deploy.py builds them (its model of kustomize, which
    tests/process holds to `kubectl kustomize`: a unit test starts no process)."""
    kinds = validated_kinds(BUILDS[name]())
    assert {"ServiceMonitor", "PrometheusRule"} <= kinds


# ---- every committed file that holds one ----

# Where the bundle's committed manifests are; the chart's templates are Go templates, not YAML.
SHIPPED = ("alerts", "deploy", "scrape-configs", "dashboards")
TEMPLATES = CHART / "templates"
# A file that names one of the kinds at the top of a document; only those are parsed.
KIND = re.compile(rf"^kind: *[\"']?(?:{'|'.join(MODELS)})[\"']? *$", re.MULTILINE)


@cache
def committed() -> dict[str, list[dict[str, Any]]]:
    """Repository-relative path -> the prometheus-operator objects in it."""
    found: dict[str, list[dict[str, Any]]] = {}
    for top in SHIPPED:
        for path in sorted((ROOT / top).rglob("*.y*ml")):
            text = path.read_text()
            if path.is_relative_to(TEMPLATES) or not KIND.search(text):
                continue
            docs = [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]
            found[path.relative_to(ROOT).as_posix()] = [d for d in docs if d.get("kind") in MODELS]
    return found


def test_the_committed_files_are_found():
    assert {
        "alerts/prometheusrule.yaml",
        "alerts/dcgm-4.9/prometheusrule.yaml",
        "deploy/base/prometheusrule.yaml",
        "deploy/base/servicemonitor.yaml",
        "scrape-configs/servicemonitor.yaml",
        "scrape-configs/podmonitor.yaml",
    } <= set(committed())


@pytest.mark.parametrize("path", sorted(committed()))
def test_every_committed_object_validates(path):
    assert validated_kinds(committed()[path])


# ---- the validation fails where it should ----


@cache
def shipped(kind: str) -> dict[str, Any]:
    """The chart's object of `kind`, every option on."""
    name = "service-monitor-self-signed-basic-auth"
    if kind == "PodMonitor":
        name = "pod-monitor-tls-secret-client-certificates"
    [doc] = [d for d in objects(render(VALUE_SETS[name][0])) if d["kind"] == kind]
    return doc


def rename(node: dict[str, Any], old: str, new: str) -> None:
    node[new] = node.pop(old)


Mutation = Callable[[dict[str, Any]], None]
BREAKS: list[tuple[str, Mutation, tuple[str | int, ...], str]] = [
    (
        "ServiceMonitor",
        lambda d: rename(endpoint(d), "honorLabels", "honourLabels"),
        ("spec", "endpoints", 0, "honourLabels"),
        "extra_forbidden",
    ),
    (
        "ServiceMonitor",
        lambda d: rename(endpoint(d), "scrapeTimeout", "scrape_timeout"),
        ("spec", "endpoints", 0, "scrape_timeout"),
        "extra_forbidden",
    ),
    (
        "ServiceMonitor",
        lambda d: endpoint(d).update(honorLabels="true"),
        ("spec", "endpoints", 0, "honorLabels"),
        "bool_type",
    ),
    (
        "PodMonitor",
        lambda d: rename(endpoint(d)["relabelings"][1], "targetLabel", "targetLable"),
        ("spec", "podMetricsEndpoints", 0, "relabelings", 1, "targetLable"),
        "extra_forbidden",
    ),
    (
        "PodMonitor",
        lambda d: endpoint(d).update(interval="30 seconds"),
        ("spec", "podMetricsEndpoints", 0, "interval"),
        "string_pattern_mismatch",
    ),
    (
        "PodMonitor",
        lambda d: endpoint(d)["tlsConfig"].update(minVersion="TLSv1.3"),
        ("spec", "podMetricsEndpoints", 0, "tlsConfig", "minVersion"),
        "literal_error",
    ),
    (
        "PrometheusRule",
        lambda d: rename(d["spec"]["groups"][0], "rules", "rule"),
        ("spec", "groups", 0, "rule"),
        "extra_forbidden",
    ),
    (
        "PrometheusRule",
        lambda d: d["spec"]["groups"][0]["rules"][0].update({"for": 600}),
        ("spec", "groups", 0, "rules", 0, "for"),
        "string_type",
    ),
    (
        "PrometheusRule",
        lambda d: d["metadata"]["labels"].update(tier=1),
        ("metadata", "labels", "tier"),
        "string_type",
    ),
]


@pytest.mark.parametrize(
    ("kind", "mutation", "loc", "error"),
    BREAKS,
    ids=[f"{kind}-{error}-{loc[-1]}" for kind, _, loc, error in BREAKS],
)
def test_a_misspelt_key_or_a_wrong_type_is_refused(kind, mutation, loc, error):
    doc = copy.deepcopy(shipped(kind))
    validate(doc)
    mutation(doc)
    with pytest.raises(pydantic.ValidationError) as refused:
        validate(doc)
    [found] = refused.value.errors()
    assert (found["loc"], found["type"]) == (loc, error)


def test_the_models_alone_would_take_what_strictly_refuses():
    """Why validate() passes strict, extra and by_name: without them these pass."""
    doc = copy.deepcopy(shipped("ServiceMonitor"))
    rename(endpoint(doc), "honorLabels", "honourLabels")
    rename(endpoint(doc), "scrapeTimeout", "scrape_timeout")
    endpoint(doc)["followRedirects"] = "true"
    parsed = v1.ServiceMonitor.model_validate(doc)
    [found] = parsed.spec.endpoints or []
    assert found.honor_labels is None and found.follow_redirects is True
    assert found.scrape_timeout == "20s"
    with pytest.raises(pydantic.ValidationError) as refused:
        validate(doc)
    assert {e["type"] for e in refused.value.errors()} == {"extra_forbidden", "bool_type"}

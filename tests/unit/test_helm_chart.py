"""The Helm chart in deploy/helm/kube-gpu-exporter, proven with Helm's own engine (Helm's Go SDK,
through the helm-python-sdk test dependency; no helm binary): every ci/ values file renders and
every object validates against the Kubernetes schemas; `helm lint --strict` is clean; the schema
refuses wrong types with Helm's own message; the default render is the kustomize base where the
two overlap, and each option is the overlay or component it mirrors; the rules and dashboards are
the bundle's; the values tables are made from values.yaml; `make chart` packages it."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import helm_python
import kubernetes_validate
import pydantic
import pytest
import yaml

from kube_gpu_exporter.bundle import helm_chart
from kube_gpu_exporter.bundle import render as bundle_render
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from kube_gpu_exporter.exporter.flags.model import env_name
from kube_gpu_exporter.exporter.flags.parser import build_parser
from kube_gpu_exporter.exporter.flags.settings import parse_config
from tests.support import kubernetes_schemas
from tests.support.generated_bundle import generated
from tests.support.monitoring_crds import validate
from tests.support.tls_certs import make_certificates
from tests.unit.test_deploy import (
    BASE,
    identity,
    kustomize,
    with_components,
)

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / helm_chart.CHART_DIR
CI = sorted((CHART / "ci").glob("*-values.yaml"))
# As the README installs it, so that the objects' names are deploy/'s.
RELEASE, NAMESPACE = "kube-gpu-exporter", DEFAULT.scrape.namespace
VERSIONS = (kubernetes_validate.latest_version(), "1.32.0")
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@cache
def chart() -> helm_python.Chart:
    return helm_python.Chart.load(CHART)


def ci_values(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text()) or {}


def render(values: dict[str, Any] | None = None, **where: str) -> dict[str, str]:
    """Template path -> rendered text, as `helm install` renders them."""
    return chart().render(
        values or {},
        name=where.get("name", RELEASE),
        namespace=where.get("namespace", NAMESPACE),
        is_install=True,
    )


def objects(rendered: dict[str, str]) -> list[dict[str, Any]]:
    return [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = of_kind(docs, kind)
    return found


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def notes(values: dict[str, Any] | None = None) -> str:
    [text] = [t for path, t in render(values).items() if path.endswith("NOTES.txt")]
    return text


# ---- prometheus-operator's objects ----


def check_monitoring_object(doc: dict[str, Any]) -> None:
    """The object against its kind's CRD schema (tests/support/monitoring_crds.py)."""
    validate(doc)


# ---- every ci/ file, with the real engine and the Kubernetes schemas ----


def test_the_ci_files_are_there():
    assert len(CI) >= 8, CI


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("values_file", CI, ids=lambda p: p.name)
def test_every_ci_file_renders_objects_the_kubernetes_schemas_accept(values_file, version):
    docs = objects(render(ci_values(values_file)))
    validated = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            check_monitoring_object(doc)
            continue
        kubernetes_schemas.validate(doc, version, strict=True)
        validated += 1
    assert validated >= 2 and one(docs, "DaemonSet")
    # Every namespaced object lands in the release's namespace, or the dashboards' own.
    for doc in docs:
        if doc["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert doc["metadata"]["namespace"] in (NAMESPACE, "grafana"), identity(doc)


def test_the_schema_check_above_catches_a_bad_object():
    bad = one(objects(render()), "DaemonSet")
    bad["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = ["IfNotPresent"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_schemas.validate(bad, VERSIONS[0], strict=True)
    monitor = one(objects(render({"serviceMonitor": {"enabled": True}})), "ServiceMonitor")
    # prometheus-operator takes "Replace" beside "replace", but no action it does not know.
    monitor["spec"]["endpoints"][0]["relabelings"].append({"action": "explode"})
    with pytest.raises(pydantic.ValidationError):
        check_monitoring_object(monitor)


def described_paths() -> list[str]:
    return [row.path for row in helm_chart.value_rows((CHART / "values.yaml").read_text())]


def set_paths(values: Any, prefix: str = "") -> Iterator[str]:
    if isinstance(values, dict):
        for key, value in values.items():
            path = f"{prefix}{key}"
            yield path
            yield from set_paths(value, path + ".")


# Values no ci/ file needs to set: their default is what every render already exercises, or they
# only rename objects.
LEFT_AT_DEFAULT = {
    "image.tag",
    "image.pullPolicy",
    "nameOverride",
    "fullnameOverride",
    # It moves every object out of the release's namespace, which each ci/ render is checked for;
    # tests/unit/test_helm_chart_upstream_values.py renders it.
    "namespaceOverride",
    "serviceAccount.create",
    "serviceAccount.name",
    "port",
    "updateStrategy",
    "terminationGracePeriodSeconds",
    "podSecurityContext",
    "securityContext",
    "livenessProbe",
    "readinessProbe",
    # Headless, the default; an address of the cluster's range is the cluster's own.
    "service.clusterIP",
    "serviceMonitor.apiVersion",
    "serviceMonitor.honorLabels",
    "dashboards.label",
    "dashboards.labelValue",
    "dashboards.annotations",
    "podMonitor.apiVersion",
    "podMonitor.honorLabels",
    "podMonitor.additionalLabels",
    "podMonitor.interval",
    "podMonitor.scrapeTimeout",
    "podMonitor.relabelings",
    "podMonitor.metricRelabelings",
    "podMonitor.basicAuth",
}


def test_the_ci_files_together_set_every_value():
    """chart-testing installs each ci/ file: together they must reach every option, and every
    switch turned on, so that no template branch goes unrendered."""
    documents = {path.name: ci_values(path) for path in CI}
    reached = {p for values in documents.values() for p in set_paths(values)}
    missing = [
        path
        for path in described_paths()
        if path not in reached
        and path not in LEFT_AT_DEFAULT
        and not any(p.startswith(path + ".") for p in reached)
    ]
    assert not missing, f"no ci/ file sets {missing}"
    assert not LEFT_AT_DEFAULT - set(described_paths()), "LEFT_AT_DEFAULT names no value"

    def turned_on(path: str) -> bool:
        for values in documents.values():
            node: Any = values
            for part in path.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node is True:
                return True
        return False

    switches = [p for p in described_paths() if p.endswith(".enabled") or p.endswith("Auth")]
    switches = [p for p in switches if p not in ("service.enabled",) and "Monitor.basic" not in p]
    assert [p for p in switches if not turned_on(p)] == []
    profiles = {v.get("compat", {}).get("dcgmExporter") for v in documents.values()}
    assert {"4.8.2", "4.9"} <= profiles


# ---- helm lint ----


def test_helm_lint_strict_is_clean():
    assert helm_chart.lint_problems(CHART) == []
    for path in CI:
        assert helm_chart.lint_problems(CHART, ci_values(path)) == [], path.name


def test_helm_lint_would_catch_a_broken_template(tmp_path):
    copy = tmp_path / helm_chart.CHART
    shutil.copytree(CHART, copy)
    service = copy / "templates" / "service.yaml"
    service.write_text(service.read_text().replace("  clusterIP: None", "    clusterIP: None"))
    assert helm_chart.lint_problems(copy)


# ---- values.schema.json ----


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"serviceMonitor": {"enabled": "yes"}},
            "at '/serviceMonitor/enabled': got string, want boolean",
        ),
        ({"port": "9455"}, "at '/port': got string, want integer"),
        # What `--set nodeSelector.gpu=true` gives: a boolean, where Kubernetes wants a string.
        ({"nodeSelector": {"gpu": True}}, "at '/nodeSelector/gpu': got boolean, want string"),
        ({"tolerations": {"key": "nvidia.com/gpu"}}, "at '/tolerations': got object, want array"),
        ({"nodeselector": {"gpu": "yes"}}, "additional properties 'nodeselector' not allowed"),
        ({"compat": {"dcgmExporter": "4.7"}}, "at '/compat/dcgmExporter': value must be one of"),
        ({"extraArgs": ["collector.interval=10s"]}, "at '/extraArgs/0'"),
        (
            {"webConfig": {"config": {"basic_auth_users": {"prometheus": "change-me"}}}},
            "at '/webConfig/config/basic_auth_users/prometheus'",
        ),
    ],
    ids=["bool", "int", "selector", "list", "typo", "profile", "flag", "plain-password"],
)
def test_the_schema_refuses_wrong_values_with_helms_message(values, message):
    with pytest.raises(helm_python.HelmValuesError) as refused:
        render(values)
    assert "values don't meet the specifications of the schema(s)" in str(refused.value)
    assert message in str(refused.value)


def test_the_schema_accepts_every_default_and_types_every_value():
    chart().validate_schema(chart().values)
    schema = chart().schema
    assert schema is not None

    def typed(node: dict[str, Any], path: str) -> Iterator[str]:
        for key, sub in node.get("properties", {}).items():
            if not ({"type", "enum", "anyOf"} & set(sub)):
                yield f"{path}{key}"
            yield from typed(sub, f"{path}{key}.")

    assert list(typed(schema, "")) == []
    assert schema["additionalProperties"] is False


# ---- the default render is deploy/base, and each option the overlay or component it mirrors ----


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [shutil.which("kubectl") or "kubectl", "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def built(tmp_path: Path, resource: Path, *components: Path) -> list[dict[str, Any]]:
    """deploy/ as kustomize builds it: `kubectl kustomize` where kubectl is installed, else
    tests/unit/test_deploy.py's model of it (which that file holds to kubectl where it can)."""
    if shutil.which("kubectl") is None:
        return with_components(*components, base=resource)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(resource, tmp_path)],
                "components": [os.path.relpath(c, tmp_path) for c in components],
            }
        )
    )
    return kubectl_kustomize(tmp_path)


def test_enrichment_without_resource_slices_drops_the_grant_and_the_watch():
    docs = objects(render({"kubernetesEnrichment": {"enabled": True, "resourceSlices": False}}))
    role = one(docs, "ClusterRole")
    assert not [r for r in role["rules"] if "resource.k8s.io" in r["apiGroups"]]
    args = pod_spec(docs)["containers"][0]["args"]
    assert "--no-kubernetes.resource-slices" in args
    config = parse_config(args, environ={"NODE_NAME": "gpu-node-1"})
    assert config.attribution.watch_resource_slices is False


def container(values: dict[str, Any] | None = None) -> dict[str, Any]:
    found: dict[str, Any] = pod_spec(objects(render(values)))["containers"][0]
    return found


@pytest.mark.parametrize("values_file", CI, ids=lambda p: p.name)
def test_every_argument_and_variable_is_one_the_exporter_takes(values_file):
    flags = {o for a in build_parser()._actions for o in a.option_strings if o.startswith("--")}
    known_env = {env_name(flag) for flag in flags}
    found = container(ci_values(values_file))
    for arg in found["args"]:
        assert arg.split("=", 1)[0] in flags, arg
    for env in found["env"]:
        if env["name"].startswith("KUBE_GPU_EXPORTER_"):
            assert env["name"] in known_env, env["name"]
    # The files the chart mounts are not here: tests/unit/test_helm_chart.py and
    # tests/unit/test_helm_chart_upstream_values.py lay them out and load them.
    if not any(a.startswith(("--web.config.file", "--collectors")) for a in found["args"]):
        env = {e["name"]: e["value"] for e in found["env"] if "value" in e}
        parse_config(found["args"], environ={"NODE_NAME": "gpu-node-1", **env})


def test_the_profile_values_reach_the_exporter():
    values = {"compat": {"dcgmExporter": "4.8.2", "driverVersionLabel": "none"}}
    config = parse_config(container(values)["args"], environ={"NODE_NAME": "gpu-node-1"})
    assert config.labels.dcgm.version.value == "4.8.2"
    assert config.labels.host_label.value == "Hostname"
    assert config.labels.driver_version_label == ""
    assert not [a for a in container()["args"] if a.startswith("--compat")]


def test_image_pull_settings():
    values = {
        "image": {
            "repository": "registry.example/kube-gpu-exporter",
            "tag": "v9",
            "pullPolicy": "Always",
        },
        "imagePullSecrets": [{"name": "pull"}],
    }
    spec = pod_spec(objects(render(values)))
    assert spec["containers"][0]["image"] == "registry.example/kube-gpu-exporter:v9"
    assert spec["containers"][0]["imagePullPolicy"] == "Always"
    assert spec["imagePullSecrets"] == [{"name": "pull"}]
    assert container()["image"] == f"{DEFAULT.deployment.image}:{chart().metadata['appVersion']}"


# ---- TLS and basic auth ----


def test_the_web_config_the_chart_makes_is_one_the_exporter_loads(tmp_path):
    """The Secret and the TLS Secret, laid out as the projected volume lays them out, start the
    exporter with TLS and the password: the relative certificate paths hold."""
    values = ci_values(CHART / "ci" / "tls-basic-auth-values.yaml")
    docs = objects(render(values))
    secret = one(docs, "Secret")
    spec = pod_spec(docs)
    [volume] = [v for v in spec["volumes"] if v["name"] == "web-config"]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "web-config"]
    assert mount["readOnly"] is True
    mounted = tmp_path / "web"
    mounted.mkdir()
    for source in volume["projected"]["sources"]:
        if source["secret"]["name"] == secret["metadata"]["name"]:
            [item] = source["secret"]["items"]
            text = base64.b64decode(secret["data"][item["key"]])
            (mounted / item["path"]).write_bytes(text)
        else:
            assert source["secret"]["name"] == values["webConfig"]["tlsSecret"]
            made = make_certificates(tmp_path)
            shutil.copy(made.server.cert, mounted / "tls.crt")
            shutil.copy(made.server.key, mounted / "tls.key")
    args = [a.replace(mount["mountPath"], str(mounted)) for a in spec["containers"][0]["args"]]
    config = parse_config(args, environ={"NODE_NAME": "gpu-node-1"})
    security = config.web.security
    assert security is not None and security.ssl_context is not None
    assert set(security.basic_auth_users) == {"prometheus"}
    # The probes speak HTTPS and send the password; the monitor scrapes over HTTPS with it.
    probe = spec["containers"][0]["readinessProbe"]["httpGet"]
    assert probe["scheme"] == "HTTPS"
    assert probe["httpHeaders"] == [
        {"name": "Authorization", "value": values["webConfig"]["probeAuthorization"]}
    ]
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert (
        endpoint["scheme"] == "https"
        and endpoint["basicAuth"] == values["serviceMonitor"]["basicAuth"]
    )


def test_probes_check_the_port_where_the_kubelet_cannot_pass():
    for web in (
        {"enabled": True, "existingSecret": "s", "clientCertificates": True},
        {"enabled": True, "existingSecret": "s", "basicAuth": True},
    ):
        probe = container({"webConfig": web})["livenessProbe"]
        assert "httpGet" not in probe and probe["tcpSocket"] == {"port": "metrics"}
    # A plain HTTP config with basic auth and a header keeps the HTTP probe.
    web = {"enabled": True, "existingSecret": "s", "tls": False, "basicAuth": True}
    probe = container({"webConfig": {**web, "probeAuthorization": "Basic eDp5"}})["livenessProbe"]
    assert "scheme" not in probe["httpGet"] and probe["httpGet"]["path"] == "/healthz"


def test_a_web_config_needs_a_secret_or_a_config():
    with pytest.raises(helm_python.HelmRenderError, match=re.escape("webConfig.existingSecret")):
        render({"webConfig": {"enabled": True}})


def test_an_existing_secret_is_used_and_none_is_made():
    docs = objects(render({"webConfig": {"enabled": True, "existingSecret": "mine"}}))
    assert of_kind(docs, "Secret") == []
    [volume] = [v for v in pod_spec(docs)["volumes"] if v["name"] == "web-config"]
    assert volume["projected"]["sources"][0]["secret"]["name"] == "mine"


# ---- monitoring: the bundle's scrape configs, rules and dashboards ----


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_the_monitors_scrape_as_the_bundles_scrape_configs(kind):
    key = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    monitor = one(objects(render({key: {"enabled": True}})), kind)
    committed = yaml.safe_load((ROOT / "scrape-configs" / f"{kind.lower()}.yaml").read_text())
    field = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    assert monitor["spec"][field] == committed["spec"][field]
    assert monitor["spec"]["namespaceSelector"] == committed["spec"]["namespaceSelector"]
    assert committed["metadata"]["labels"].items() <= monitor["metadata"]["labels"].items()
    # It selects the chart's own pods, or its Service.
    target = "DaemonSet" if kind == "PodMonitor" else "Service"
    docs = objects(render({key: {"enabled": True}}))
    labels = (
        one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
        if target == "DaemonSet"
        else one(docs, "Service")["metadata"]["labels"]
    )
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_user_relabelings_come_after_the_bundles():
    values = ci_values(CHART / "ci" / "monitoring-values.yaml")
    docs = objects(render(values))
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    mine = values["serviceMonitor"]["relabelings"]
    assert endpoint["relabelings"][-len(mine) :] == mine
    assert endpoint["relabelings"][-len(mine) - 1] == {
        "targetLabel": "job",
        "replacement": DEFAULT.scrape.job_name,
    }
    assert endpoint["metricRelabelings"] == values["serviceMonitor"]["metricRelabelings"]
    assert endpoint["interval"] == "30s"
    assert one(docs, "ServiceMonitor")["metadata"]["labels"]["release"] == "monitoring"


def test_both_monitors_at_once_are_refused():
    with pytest.raises(helm_python.HelmRenderError, match="turn on one of them"):
        render({"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}})


# The `compat.dcgmExporter` value each committed flavour is picked by; the default flavour also
# by the empty default, and by 4.8.4, which serves the default flavour's scrape.
PICKS = [(version, version) for version in FLAVOURS] + [
    ("", DEFAULT.dcgm_version),
    ("4.8.4", DEFAULT.dcgm_version),
]


@pytest.mark.parametrize(("value", "version"), PICKS, ids=lambda v: v or "default")
def test_the_prometheus_rule_holds_the_flavours_rules_from_alerts(value, version):
    values = {"compat": {"dcgmExporter": value}, "prometheusRule": {"enabled": True}}
    rule = one(objects(render(values)), "PrometheusRule")
    committed = yaml.safe_load((ROOT / flavour_paths(version).prometheusrule).read_text())
    assert rule["spec"] == committed["spec"]
    assert rule["metadata"]["labels"]["release"] == DEFAULT.scrape.release_label


@pytest.mark.parametrize(("value", "version"), PICKS, ids=lambda v: v or "default")
def test_the_dashboards_are_the_flavours_provisioned_ones(value, version):
    values = {"compat": {"dcgmExporter": value}, "dashboards": {"enabled": True}}
    maps = of_kind(objects(render(values)), "ConfigMap")
    committed = {p.name: (ROOT / p).read_text() for p in flavour_paths(version).provisioned}
    assert {name: text for m in maps for name, text in m["data"].items()} == committed
    for config_map in maps:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert config_map["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    if version == DEFAULT.dcgm_version:
        base = of_kind(kustomize(BASE), "ConfigMap")
        assert sorted(m["metadata"]["name"] for m in maps) == sorted(
            m["metadata"]["name"] for m in base
        )


def test_the_dashboard_label_and_folder_are_values():
    values = {
        "dashboards": {
            "enabled": True,
            "label": "my_dashboards",
            "labelValue": "yes",
            "folderAnnotation": "",
            "namespace": "grafana",
        }
    }
    for config_map in of_kind(objects(render(values)), "ConfigMap"):
        assert config_map["metadata"]["labels"]["my_dashboards"] == "yes"
        assert "grafana_dashboard" not in config_map["metadata"]["labels"]
        assert "annotations" not in config_map["metadata"]
        assert config_map["metadata"]["namespace"] == "grafana"


@pytest.mark.parametrize("switch", ["prometheusRule", "dashboards"])
def test_a_profile_without_a_flavour_is_refused_with_the_way_out(switch):
    values = {"compat": {"dcgmExporter": "4.8.2"}, switch: {"enabled": True}}
    with pytest.raises(helm_python.HelmRenderError) as refused:
        render(values)
    message = str(refused.value)
    assert f"{switch}.enabled" in message and ", ".join(FLAVOURS) in message
    assert "compat.dcgmExporter=4.8.2" in message


def test_a_bundle_generated_for_another_profile_carries_a_chart_for_it(tmp_path, capsys):
    """The way out the refusal names: `make bundle CONFIG=my.yaml OUT=DIR` with that profile."""
    config = tmp_path / "my.yaml"
    config.write_text('dcgm_version: "4.8.2"\n')
    assert bundle_render.main(["--config", str(config), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    mine = helm_python.Chart.load(tmp_path / "out" / helm_chart.CHART_DIR)
    assert mine.values["compat"]["dcgmExporter"] == "4.8.2"
    rendered = mine.render(
        {"prometheusRule": {"enabled": True}, "dashboards": {"enabled": True}},
        name=RELEASE,
        namespace=NAMESPACE,
    )
    docs = objects(rendered)
    assert "--compat.dcgm-exporter=4.8.2" in pod_spec(docs)["containers"][0]["args"]
    assert '"Hostname"' in yaml.safe_dump(one(docs, "PrometheusRule")["spec"])
    assert len(of_kind(docs, "ConfigMap")) == len(flavour_paths(DEFAULT.dcgm_version).provisioned)


# ---- NOTES.txt ----


def test_the_notes_say_how_to_see_the_metrics_and_what_readyz_means():
    text = notes()
    assert f"port-forward daemonset/{RELEASE} 9455:9455" in text
    assert "curl -s http://127.0.0.1:9455/metrics" in text
    assert "curl -s http://127.0.0.1:9455/readyz" in text
    assert "503" in text and "nvml_up" in text and "docs/health.md" in text
    assert "pod-security.kubernetes.io/enforce=privileged" in text
    assert "names no registry" in text
    assert "Kubernetes API has listed" not in text
    assert "Kubernetes API has listed" in notes({"kubernetesEnrichment": {"enabled": True}})
    web = notes(ci_values(CHART / "ci" / "tls-basic-auth-values.yaml"))
    assert "curl -sk -u <user>:<password> https://127.0.0.1:9455/readyz" in web


# ---- generated parts, the values tables, and make chart ----


def test_the_charts_generated_parts_are_checked_for_drift(tmp_path):
    made = set(generated())
    for part in helm_chart.GENERATED_TOP:
        assert f"{helm_chart.CHART_DIR}/{part}" in made
    stale = set(bundle_render.drifted(root=tmp_path, files=generated()))
    assert {helm_chart.VALUES, "README.md", "docs/helm.md"} <= stale
    # A dashboard file nothing generates any more is drift too.
    stray = tmp_path / helm_chart.CHART_DIR / "files" / "dashboards" / "dcgm-4.9" / "gone.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("{}\n")
    assert stray.relative_to(tmp_path).as_posix() in bundle_render.drifted(
        root=tmp_path, files=generated()
    )


def test_the_values_tables_are_made_from_values_yaml(tmp_path):
    values = (CHART / "values.yaml").read_text()
    assert helm_chart.stale_tables(ROOT, values) == []
    readme = (ROOT / "README.md").read_text()
    table = helm_chart.values_table(values, top_level=True)
    assert table in readme
    rows = [line for line in table.splitlines()[2:]]
    top = [r.path for r in helm_chart.value_rows(values) if "." not in r.path]
    # The pass-through settings share the last row; every other top-level value has its own.
    shared = helm_chart.README_IN_ONE_ROW
    assert set(shared) <= set(top)
    assert len(rows) == len(top) - len(shared) + 1
    assert all(f"`{path}`" in rows[-1] for path in shared)
    full = helm_chart.values_table(values, top_level=False)
    assert full in (ROOT / "docs" / "helm.md").read_text()
    assert "| `webConfig.probeAuthorization` |" in full
    # A description changed in values.yaml alone leaves both tables stale.
    edited = values.replace("# -- Nodes to run on:", "# -- Where it runs:")
    assert edited != values
    assert helm_chart.stale_tables(ROOT, edited) == list(helm_chart.TABLES)


def test_every_value_has_a_description():
    text = (CHART / "values.yaml").read_text()
    described = set(described_paths())

    def leaves(node: Any, prefix: str = "") -> Iterator[str]:
        for key, value in node.items():
            path = prefix + key
            if (
                path in described
                and isinstance(value, dict)
                and any(p.startswith(path + ".") for p in described)
            ):
                yield from leaves(value, path + ".")
            else:
                yield path

    assert [p for p in leaves(yaml.safe_load(text)) if p not in described] == []


def test_make_chart_packages_what_helm_package_writes(tmp_path, capsys):
    assert "\nchart:" in (ROOT / "Makefile").read_text()
    assert helm_chart.main(["package", "--out", str(tmp_path)]) == 0
    said = capsys.readouterr().out
    [archive] = tmp_path.glob("*.tgz")
    assert archive.name == f"{helm_chart.CHART}-{chart().version}.tgz" and str(archive) in said
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert all(n.startswith(f"{helm_chart.CHART}/") for n in names)
    assert f"{helm_chart.CHART}/values.schema.json" in names
    assert f"{helm_chart.CHART}/templates/NOTES.txt" in names
    assert any(n.startswith(f"{helm_chart.CHART}/files/dashboards/") for n in names)
    assert not [n for n in names if "/ci/" in n], "ci/ is for the tests (.helmignore)"
    packaged = helm_python.Chart.load(archive)
    values = ci_values(CHART / "ci" / "monitoring-values.yaml")
    assert packaged.render(values, name=RELEASE, namespace=NAMESPACE) == render(values)
    assert (ROOT / ".gitignore").read_text().count("dist/") == 1

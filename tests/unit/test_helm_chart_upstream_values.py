"""The Helm chart's values from dcgm-exporter's own chart (4.8.4) that fit a DaemonSet exporter,
and its NetworkPolicy, proven with Helm's own engine as tests/unit/test_helm_chart.py does: each
value set renders objects that carry it (and the Kubernetes schemas accept), a wrong one is
refused by values.schema.json with Helm's message naming it, and the ones that add objects or
mounts pass `helm lint --strict`. The exporter loads what the chart mounts for it: the collectors
CSV, and the certificate the chart generates, which a client checking it as Prometheus does
accepts."""

from __future__ import annotations

import base64
import datetime
import hashlib
import os
import socket
import ssl
import threading
from typing import Any

import helm_python
import pytest
import yaml
from cryptography import x509
from kubernetes.config import incluster_config

from kube_gpu_exporter.bundle import helm_chart
from kube_gpu_exporter.exporter.flags.settings import parse_config
from tests.support import kubernetes_schemas
from tests.unit.test_helm_chart import (
    CHART,
    CRD_KINDS,
    NAMESPACE,
    RELEASE,
    ROOT,
    VERSIONS,
    chart,
    check_monitoring_object,
    container,
    notes,
    objects,
    of_kind,
    one,
    pod_spec,
    render,
)

NODE = {"NODE_NAME": "gpu-node-1"}
# dcgm-exporter's own default counters, as its chart ships them: the chart takes them as they are.
UPSTREAM_CSV = (ROOT / "tests" / "fixtures" / "dcgm-exporter" / "default-counters.csv").read_text()
SMALL_CSV = "# name, type, HELP\nDCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
COLLECTORS_FILE = f"{helm_chart.COLLECTORS_DIR}/{helm_chart.COLLECTORS_FILE}"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def refusal(values: dict[str, Any]) -> str:
    """Helm's message refusing `values`; fails the test where the schema takes them."""
    with pytest.raises(helm_python.HelmValuesError) as refused:
        render(values)
    message = str(refused.value)
    assert "values don't meet the specifications of the schema(s)" in message
    return message


def refused_at(values: dict[str, Any], pointer: str) -> None:
    assert f"at '{pointer}'" in refusal(values)


def failure(values: dict[str, Any]) -> str:
    """The chart's own `fail` message for `values`, which the schema takes."""
    chart().validate_schema(values)
    with pytest.raises(helm_python.HelmRenderError) as failed:
        render(values)
    return str(failed.value)


def validated(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`docs`, each checked against the Kubernetes schemas (the monitors against the fields
    prometheus-operator's CRDs take)."""
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            check_monitoring_object(doc)
        else:
            for version in VERSIONS:
                kubernetes_schemas.validate(doc, version, strict=True)
    return docs


def lint_clean(values: dict[str, Any]) -> None:
    assert helm_chart.lint_problems(CHART, values) == []


def volume(spec: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [v for v in spec["volumes"] if v["name"] == name]
    return found


def mount(found: dict[str, Any], name: str) -> dict[str, Any]:
    [mounted] = [m for m in found["volumeMounts"] if m["name"] == name]
    return mounted


# ---- collectors: the CSV in a ConfigMap, or a ConfigMap of yours ----


def test_a_collectors_csv_is_a_config_map_mounted_and_passed_as_collectors(tmp_path):
    values = {"collectors": {"csv": UPSTREAM_CSV}}
    docs = validated(objects(render(values)))
    config_map = one(docs, "ConfigMap")
    assert config_map["metadata"]["name"] == f"{RELEASE}-collectors"
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["data"] == {helm_chart.COLLECTORS_FILE: UPSTREAM_CSV}
    spec = pod_spec(docs)
    [exporter] = spec["containers"]
    assert f"--collectors={COLLECTORS_FILE}" in exporter["args"]
    mounted = mount(exporter, "collectors")
    assert mounted == {
        "name": "collectors",
        "mountPath": helm_chart.COLLECTORS_DIR,
        "readOnly": True,
    }
    assert volume(spec, "collectors")["configMap"] == {
        "name": config_map["metadata"]["name"],
        "items": [{"key": helm_chart.COLLECTORS_FILE, "path": helm_chart.COLLECTORS_FILE}],
    }
    # The exporter reads the file where the volume lays it.
    laid = tmp_path / "collectors"
    laid.mkdir()
    (laid / helm_chart.COLLECTORS_FILE).write_text(config_map["data"][helm_chart.COLLECTORS_FILE])
    args = [a.replace(helm_chart.COLLECTORS_DIR, str(laid)) for a in exporter["args"]]
    config = parse_config(args, environ=NODE)
    assert config.fields is not None and config.fields.lists("DCGM_FI_DEV_GPU_TEMP")
    assert config.fields.lists("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")
    lint_clean(values)


def test_a_changed_csv_rolls_the_pods_and_no_csv_changes_nothing():
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        template = one(objects(render(values)), "DaemonSet")["spec"]["template"]
        found: dict[str, str] = template["metadata"].get("annotations", {})
        return found

    first = annotations({"collectors": {"csv": SMALL_CSV}})["checksum/collectors"]
    assert first == hashlib.sha256(SMALL_CSV.encode()).hexdigest()
    assert annotations({"collectors": {"csv": UPSTREAM_CSV}})["checksum/collectors"] != first
    assert "checksum/collectors" not in annotations({})
    docs = objects(render())
    assert of_kind(docs, "ConfigMap") == []
    assert not [a for a in pod_spec(docs)["containers"][0]["args"] if "--collectors" in a]


def test_an_existing_config_map_is_mounted_under_its_key_and_none_is_made():
    values = {"collectors": {"existingConfigMap": "custom-dcgm-metrics", "key": "dcgm-metrics.csv"}}
    docs = validated(objects(render(values)))
    assert of_kind(docs, "ConfigMap") == []
    spec = pod_spec(docs)
    assert volume(spec, "collectors")["configMap"] == {
        "name": "custom-dcgm-metrics",
        "items": [{"key": "dcgm-metrics.csv", "path": helm_chart.COLLECTORS_FILE}],
    }
    assert f"--collectors={COLLECTORS_FILE}" in spec["containers"][0]["args"]
    # Edits to a ConfigMap of yours take a restart: the chart has no checksum of it.
    annotations = one(docs, "DaemonSet")["spec"]["template"]["metadata"].get("annotations", {})
    assert "checksum/collectors" not in annotations
    lint_clean(values)


def test_a_csv_and_an_existing_config_map_at_once_are_refused():
    message = failure({"collectors": {"csv": SMALL_CSV, "existingConfigMap": "mine"}})
    assert "collectors.csv and collectors.existingConfigMap" in message


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"collectors": {"csv": "DCGM_FI_DEV_GPU_TEMP, gauge, \x00"}}, "/collectors/csv"),
        ({"collectors": {"csv": ["DCGM_FI_DEV_GPU_TEMP"]}}, "/collectors/csv"),
        ({"collectors": {"existingConfigMap": "Custom_Metrics"}}, "/collectors/existingConfigMap"),
        ({"collectors": {"key": "dcgm metrics.csv"}}, "/collectors/key"),
        ({"collectors": {"key": ""}}, "/collectors/key"),
        ({"collectors": {"file": "x.csv"}}, "/collectors"),
    ],
    ids=["control-character", "list", "config-map-name", "key-space", "key-empty", "unknown"],
)
def test_the_schema_refuses_wrong_collectors(values, pointer):
    refused_at(values, pointer)


def test_collectors_is_no_longer_left_out_for_want_of_a_config_map():
    reason = helm_chart.NOT_IN_EXTRA_ARGS["--collectors"]
    assert "collectors.csv" in reason and "comes later" not in reason
    assert "comes later" not in (CHART / "values.yaml").read_text()


# ---- kubeletPath: the host's kubelet root, for k3s, microk8s and the like ----


@pytest.mark.parametrize(
    ("kubelet", "host_path"),
    [
        ("/var/snap/microk8s/common/var/lib/kubelet", "/var/snap/microk8s/common/var/lib/kubelet"),
        ("/data/kubelet/", "/data/kubelet"),
    ],
    ids=["microk8s", "trailing-slash"],
)
def test_the_pod_resources_mount_follows_kubelet_path(kubelet, host_path):
    values = {"kubeletPath": kubelet}
    docs = validated(objects(render(values)))
    spec = pod_spec(docs)
    assert volume(spec, "pod-resources")["hostPath"] == {
        "path": f"{host_path}/pod-resources",
        "type": "Directory",
    }
    # Inside the container it stays where --podresources.socket's default looks.
    [exporter] = spec["containers"]
    assert mount(exporter, "pod-resources")["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert not [a for a in exporter["args"] if a.startswith("--podresources")]
    assert parse_config(exporter["args"], environ=NODE)
    lint_clean(values)


def test_the_default_kubelet_path_is_deploy_bases():
    assert chart().values["kubeletPath"] == "/var/lib/kubelet"
    spec = pod_spec(objects(render()))
    assert volume(spec, "pod-resources")["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"


@pytest.mark.parametrize(
    "kubelet",
    [
        "var/lib/kubelet",
        "",
        "/var/lib/kubelet\n",
        # dcgm-exporter's chart means the pod-resources directory itself: the pod would wait for
        # /var/lib/kubelet/pod-resources/pod-resources.
        "/var/lib/kubelet/pod-resources",
        "/var/lib/kubelet/pod-resources/",
    ],
    ids=["relative", "empty", "newline", "upstream-meaning", "upstream-meaning-slash"],
)
def test_the_schema_refuses_a_kubelet_path_that_mounts_nothing(kubelet):
    refused_at({"kubeletPath": kubelet}, "/kubeletPath")


# ---- service: type, clusterIP, internalTrafficPolicy ----


def service(values: dict[str, Any]) -> dict[str, Any]:
    return one(validated(objects(render(values))), "Service")


@pytest.mark.parametrize("kind", ["NodePort", "LoadBalancer"])
def test_a_node_port_or_load_balancer_service_gets_an_address(kind):
    spec = service({"service": {"type": kind}})["spec"]
    assert spec["type"] == kind and "clusterIP" not in spec
    assert spec["ports"][0]["port"] == chart().values["port"]


def test_the_service_is_headless_by_default_with_the_api_defaults_unsaid():
    spec = service({})["spec"]
    assert spec["clusterIP"] == "None"
    assert "type" not in spec and "internalTrafficPolicy" not in spec
    assert chart().values["service"]["type"] == "ClusterIP"
    assert chart().values["service"]["internalTrafficPolicy"] == "Cluster"


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ({"clusterIP": "10.96.0.42"}, {"clusterIP": "10.96.0.42"}),
        ({"clusterIP": "fd00:10:96::42"}, {"clusterIP": "fd00:10:96::42"}),
        ({"type": "NodePort", "clusterIP": "10.96.0.42"}, {"type": "NodePort"}),
        ({"internalTrafficPolicy": "Local"}, {"internalTrafficPolicy": "Local"}),
        ({"internalTrafficPolicy": "Cluster"}, {"clusterIP": "None"}),
    ],
    ids=["ipv4", "ipv6", "node-port-address", "local", "cluster"],
)
def test_the_service_carries_the_values(values, expected):
    spec = service({"service": values})["spec"]
    assert expected.items() <= spec.items()


def test_a_headless_node_port_is_refused():
    message = failure({"service": {"type": "NodePort", "clusterIP": "None"}})
    assert "service.clusterIP=None" in message and "NodePort" in message


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"service": {"type": "ExternalName"}}, "/service/type"),
        ({"service": {"type": "nodeport"}}, "/service/type"),
        ({"service": {"internalTrafficPolicy": "local"}}, "/service/internalTrafficPolicy"),
        ({"service": {"clusterIP": "none"}}, "/service/clusterIP"),
        ({"service": {"clusterIP": "10.96.0.300"}}, "/service/clusterIP"),
        ({"service": {"clusterIP": "10.96.0.1\n"}}, "/service/clusterIP"),
    ],
    ids=["external-name", "lowercase-type", "lowercase-policy", "lowercase-none", "octet", "nl"],
)
def test_the_schema_refuses_a_wrong_service(values, pointer):
    refused_at(values, pointer)


# ---- the monitors: honorLabels, relabelings, apiVersion ----


def endpoint(kind: str, values: dict[str, Any]) -> dict[str, Any]:
    key = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    monitor = one(objects(render({key: {"enabled": True, **values}})), kind)
    check_monitoring_object(monitor)
    field = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    [found] = monitor["spec"][field]
    return dict(found)


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_honor_labels_is_a_value_true_by_default(kind):
    assert endpoint(kind, {})["honorLabels"] is True
    assert endpoint(kind, {"honorLabels": False})["honorLabels"] is False


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_relabelings_follow_the_bundles(kind):
    mine = [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "nodename"},
        {"targetLabel": "cluster", "replacement": "gpu-east", "action": "replace"},
    ]
    found = endpoint(kind, {"relabelings": mine})["relabelings"]
    assert found[-2:] == mine
    assert {"targetLabel": "job", "replacement": "kube-gpu-exporter"} in found[:-2]


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_the_monitors_api_version_is_a_value(kind):
    key = "serviceMonitor" if kind == "ServiceMonitor" else "podMonitor"
    assert one(objects(render({key: {"enabled": True}})), kind)["apiVersion"] == (
        "monitoring.coreos.com/v1"
    )
    values = {key: {"enabled": True, "apiVersion": "monitoring.coreos.com/v1alpha1"}}
    assert one(objects(render(values)), kind)["apiVersion"] == "monitoring.coreos.com/v1alpha1"


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"serviceMonitor": {"honorLabels": "false"}}, "/serviceMonitor/honorLabels"),
        ({"podMonitor": {"honorLabels": 0}}, "/podMonitor/honorLabels"),
        ({"serviceMonitor": {"relabelings": {"targetLabel": "x"}}}, "/serviceMonitor/relabelings"),
        ({"serviceMonitor": {"relabelings": ["x"]}}, "/serviceMonitor/relabelings/0"),
        ({"serviceMonitor": {"apiVersion": "v1"}}, "/serviceMonitor/apiVersion"),
        (
            {"serviceMonitor": {"apiVersion": "monitoring.coreos.com/V1"}},
            "/serviceMonitor/apiVersion",
        ),
        ({"podMonitor": {"apiVersion": "monitoring.coreos.com/v1 x"}}, "/podMonitor/apiVersion"),
    ],
    ids=["string", "number", "object", "item", "no-group", "uppercase", "space"],
)
def test_the_schema_refuses_wrong_monitor_values(values, pointer):
    refused_at(values, pointer)


# ---- extraVolumes, extraVolumeMounts, initContainers ----

INIT = {
    "name": "wait-for-driver",
    "image": "registry.example/library/busybox:1.36",
    "command": ["sh", "-c", "until [ -f /run/nvidia/validations/driver-ready ]; do sleep 5; done"],
    "volumeMounts": [{"name": "validations", "mountPath": "/run/nvidia/validations"}],
}
EXTRA_VOLUME = {"name": "validations", "hostPath": {"path": "/run/nvidia/validations"}}
EXTRA_MOUNT = {"name": "validations", "mountPath": "/run/nvidia/validations", "readOnly": True}


def test_extra_volumes_mounts_and_init_containers_are_in_the_pod():
    values = {
        "extraVolumes": [EXTRA_VOLUME],
        "extraVolumeMounts": [EXTRA_MOUNT],
        "initContainers": [INIT],
    }
    spec = pod_spec(validated(objects(render(values))))
    assert spec["initContainers"] == [INIT]
    # After the chart's own: the pod-resources mount and volume come first.
    assert spec["volumes"][-1] == EXTRA_VOLUME
    assert spec["volumes"][0]["name"] == "pod-resources"
    [exporter] = spec["containers"]
    assert exporter["volumeMounts"][-1] == EXTRA_MOUNT
    assert exporter["volumeMounts"][0]["name"] == "pod-resources"
    default = pod_spec(objects(render()))
    assert "initContainers" not in default
    assert [v["name"] for v in default["volumes"]] == ["pod-resources", "tmp"]


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"extraVolumes": {"name": "x"}}, "/extraVolumes"),
        ({"extraVolumes": [{"emptyDir": {}}]}, "/extraVolumes/0"),
        ({"extraVolumeMounts": [{"name": "x"}]}, "/extraVolumeMounts/0"),
        ({"extraVolumeMounts": ["x:/x"]}, "/extraVolumeMounts/0"),
        ({"initContainers": [{"image": "busybox"}]}, "/initContainers/0"),
        ({"initContainers": "busybox"}, "/initContainers"),
    ],
    ids=["volumes-object", "volume-no-name", "mount-no-path", "mount-string", "init-no-name", "s"],
)
def test_the_schema_refuses_what_is_no_volume_mount_or_container(values, pointer):
    refused_at(values, pointer)


# ---- hostNetwork, daemonSetAnnotations, automountServiceAccountToken ----


def test_host_network_uses_the_clusters_dns_still():
    spec = pod_spec(validated(objects(render({"hostNetwork": True}))))
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    default = pod_spec(objects(render()))
    assert "hostNetwork" not in default and "dnsPolicy" not in default
    lint_clean({"hostNetwork": True})


def test_host_network_and_a_network_policy_are_refused_together():
    message = failure({"hostNetwork": True, "networkPolicy": {"enabled": True}})
    assert "networkPolicy.enabled does not protect hostNetwork pods" in message


def test_daemon_set_annotations_are_on_the_daemon_set_alone():
    annotations = {"example.com/owner": "gpu-platform", "configmap.reloader.stakater.com/auto": ""}
    docs = validated(objects(render({"daemonSetAnnotations": annotations})))
    daemon_set = one(docs, "DaemonSet")
    assert daemon_set["metadata"]["annotations"] == annotations
    assert "annotations" not in daemon_set["spec"]["template"]["metadata"]
    assert "annotations" not in one(objects(render()), "DaemonSet")["metadata"]


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        ({"hostNetwork": "true"}, "/hostNetwork"),
        ({"daemonSetAnnotations": {"note": "two\nlines"}}, "/daemonSetAnnotations/note"),
        ({"daemonSetAnnotations": {"bad key!": "x"}}, "/daemonSetAnnotations"),
        ({"daemonSetAnnotations": {"replicas": 3}}, "/daemonSetAnnotations/replicas"),
        ({"automountServiceAccountToken": "no"}, "/automountServiceAccountToken"),
    ],
    ids=["host-network", "newline", "key", "number", "automount"],
)
def test_the_schema_refuses_wrong_pod_settings(values, pointer):
    refused_at(values, pointer)


TOKEN_DIR = os.path.dirname(incluster_config.SERVICE_TOKEN_FILENAME)


def test_without_automounting_enrichment_projects_the_token_into_the_exporter_alone():
    values = {
        "kubernetesEnrichment": {"enabled": True},
        "automountServiceAccountToken": False,
        "initContainers": [{"name": "init", "image": "registry.example/busybox:1"}],
    }
    spec = pod_spec(validated(objects(render(values))))
    assert spec["automountServiceAccountToken"] is False
    [exporter] = spec["containers"]
    # Where the Kubernetes client's in-cluster loader reads the token, the CA and the namespace.
    token = mount(exporter, "kube-api-access")
    assert token == {"name": "kube-api-access", "mountPath": TOKEN_DIR, "readOnly": True}
    assert os.path.dirname(incluster_config.SERVICE_CERT_FILENAME) == TOKEN_DIR
    sources = volume(spec, "kube-api-access")["projected"]["sources"]
    paths = {
        item["path"]
        for source in sources
        for item in source.get("configMap", source.get("downwardAPI", {})).get("items", [])
    }
    paths |= {s["serviceAccountToken"]["path"] for s in sources if "serviceAccountToken" in s}
    assert paths == {
        os.path.basename(incluster_config.SERVICE_TOKEN_FILENAME),
        os.path.basename(incluster_config.SERVICE_CERT_FILENAME),
        "namespace",
    }
    [projected] = [s["serviceAccountToken"] for s in sources if "serviceAccountToken" in s]
    assert projected["expirationSeconds"] >= 600
    # The init container sees no token.
    assert "volumeMounts" not in spec["initContainers"][0]
    # The ClusterRole is there still: the token is the ServiceAccount's.
    assert one(objects(render(values)), "ClusterRoleBinding")


@pytest.mark.parametrize(
    ("enrichment", "automount", "token", "projected"),
    [
        (True, True, True, False),
        (False, True, False, False),
        (False, False, False, False),
    ],
    ids=["enrichment", "default", "neither"],
)
def test_the_token_is_mounted_for_enrichment_only(enrichment, automount, token, projected):
    values = {
        "kubernetesEnrichment": {"enabled": enrichment},
        "automountServiceAccountToken": automount,
    }
    spec = pod_spec(objects(render(values)))
    assert spec["automountServiceAccountToken"] is token
    assert any(v["name"] == "kube-api-access" for v in spec["volumes"]) is projected


# ---- image.digest ----


def test_a_digest_pins_the_image_over_the_tag():
    values = {
        "image": {"repository": "registry.example/gpu/kube-gpu-exporter", "tag": "v9"},
    }
    assert container(values)["image"] == "registry.example/gpu/kube-gpu-exporter:v9"
    values["image"]["digest"] = DIGEST
    found = container(values)
    assert found["image"] == f"registry.example/gpu/kube-gpu-exporter@{DIGEST}"
    validated(objects(render(values)))
    assert f"registry.example/gpu/kube-gpu-exporter@{DIGEST} runs as" in notes(values)


@pytest.mark.parametrize(
    "digest",
    [
        "sha256:abc",
        "0123" * 16,
        "sha256:" + "A" * 64,
        "md5:" + "0" * 32,
        "sha256:" + "0" * 64 + "\n",
    ],
    ids=["short", "no-algorithm", "uppercase", "md5", "newline"],
)
def test_the_schema_refuses_what_is_no_sha256_digest(digest):
    refused_at({"image": {"digest": digest}}, "/image/digest")


# ---- namespaceOverride ----


def test_every_namespaced_object_lands_in_the_override():
    values: dict[str, Any] = {
        "namespaceOverride": "gpu-system",
        "kubernetesEnrichment": {"enabled": True},
        "collectors": {"csv": SMALL_CSV},
        "webConfig": {"enabled": True, "selfSignedCert": {"enabled": True}},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "dashboards": {"enabled": True},
        "networkPolicy": {"enabled": True},
    }
    docs = validated(objects(render(values)))
    kinds = {d["kind"] for d in docs}
    assert {"DaemonSet", "Service", "ServiceAccount", "ConfigMap", "Secret", "NetworkPolicy"} <= (
        kinds
    )
    assert {"ServiceMonitor", "PrometheusRule", "ClusterRole"} <= kinds
    for doc in docs:
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in doc["metadata"]
        else:
            assert doc["metadata"]["namespace"] == "gpu-system", doc["kind"]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["subjects"][0]["namespace"] == "gpu-system"
    monitor = one(docs, "ServiceMonitor")
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-system"]}
    assert monitor["spec"]["endpoints"][0]["tlsConfig"]["serverName"] == (
        f"{RELEASE}.gpu-system.svc"
    )
    # Unset, the release's namespace, as before.
    assert {d["metadata"].get("namespace") for d in objects(render())} == {NAMESPACE}


def test_the_pod_monitor_selects_pods_in_the_override():
    values = {"namespaceOverride": "gpu-system", "podMonitor": {"enabled": True}}
    monitor = one(objects(render(values)), "PodMonitor")
    assert monitor["metadata"]["namespace"] == "gpu-system"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["gpu-system"]}


@pytest.mark.parametrize("namespace", ["GPU", "gpu.system", "-gpu", "g" * 64, "gpu\nx"])
def test_the_schema_refuses_what_is_no_namespace(namespace):
    refused_at({"namespaceOverride": namespace}, "/namespaceOverride")


# ---- webConfig.selfSignedCert ----

SELF_SIGNED: dict[str, Any] = {
    "webConfig": {
        "enabled": True,
        "selfSignedCert": {"enabled": True, "validityDays": 90},
        "config": {"tls_server_config": {"min_version": "TLS13"}},
    },
    "serviceMonitor": {"enabled": True},
}


def decoded(secret: dict[str, Any]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


def secret_named(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    [found] = [d for d in of_kind(docs, "Secret") if d["metadata"]["name"] == name]
    return found


def test_the_self_signed_certificate_is_for_the_service_and_served_by_the_web_config():
    docs = validated(objects(render(SELF_SIGNED)))
    tls = secret_named(docs, f"{RELEASE}-tls")
    assert tls["type"] == "kubernetes.io/tls"
    files = decoded(tls)
    assert set(files) == {"tls.crt", "tls.key", "ca.crt"} and files["ca.crt"] == files["tls.crt"]
    cert = x509.load_pem_x509_certificate(files["tls.crt"])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert f"{RELEASE}.{NAMESPACE}.svc" in names.get_values_for_type(x509.DNSName)
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert abs(lifetime - datetime.timedelta(days=90)) <= datetime.timedelta(hours=1)
    # The web config names the certificate beside it, the admin's own settings kept.
    web = yaml.safe_load(decoded(secret_named(docs, f"{RELEASE}-web-config"))["web-config.yml"])
    assert web == {
        "tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key", "min_version": "TLS13"}
    }
    spec = pod_spec(docs)
    sources = volume(spec, "web-config")["projected"]["sources"]
    assert {"secret": {"name": f"{RELEASE}-tls"}} in sources
    # HTTPS probes, and a ServiceMonitor that checks the certificate for the Service's name.
    assert spec["containers"][0]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    monitor_endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert monitor_endpoint["scheme"] == "https"
    assert monitor_endpoint["tlsConfig"] == {
        "ca": {"secret": {"name": f"{RELEASE}-tls", "key": "ca.crt"}},
        "serverName": f"{RELEASE}.{NAMESPACE}.svc",
    }
    lint_clean(SELF_SIGNED)


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, name: str) -> str:
    """A TLS handshake over a socket pair: the server's context, and a client that checks the
    certificate for `name` as Prometheus does with `serverName`; the version agreed."""
    left, right = socket.socketpair()
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            with server.wrap_socket(left, server_side=True) as tls:
                tls.recv(1)
        except (OSError, ssl.SSLError) as exc:
            failures.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with client.wrap_socket(right, server_hostname=name) as tls:
            version = tls.version() or ""
            tls.sendall(b"x")
    finally:
        thread.join(timeout=10)
    assert not failures, failures
    return version


def test_the_exporter_serves_the_generated_certificate_and_a_checking_client_accepts_it(tmp_path):
    docs = objects(render(SELF_SIGNED))
    spec = pod_spec(docs)
    [exporter] = spec["containers"]
    [web_mount] = [m for m in exporter["volumeMounts"] if m["name"] == "web-config"]
    laid = tmp_path / "web"
    laid.mkdir()
    (laid / "web-config.yml").write_bytes(
        decoded(secret_named(docs, f"{RELEASE}-web-config"))["web-config.yml"]
    )
    tls_files = decoded(secret_named(docs, f"{RELEASE}-tls"))
    for name, content in tls_files.items():
        (laid / name).write_bytes(content)
    args = [a.replace(web_mount["mountPath"], str(laid)) for a in exporter["args"]]
    security = parse_config(args, environ=NODE).web.security
    assert security is not None and security.ssl_context is not None
    client = ssl.create_default_context(cafile=str(laid / "ca.crt"))
    assert _handshake(security.ssl_context, client, f"{RELEASE}.{NAMESPACE}.svc") == "TLSv1.3"
    # Another name is refused: the check means something.
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(security.ssl_context, client, "someone-else.example")


def test_without_a_cluster_each_render_makes_a_new_certificate():
    """What `helm template` does: lookup reaches no cluster, so the Secret of an earlier install
    is not found. The exporter reloads a changed certificate, and the monitors read it from the
    Secret, so a new one costs no restart (docs/helm.md says so)."""
    first, second = (
        decoded(secret_named(objects(render(SELF_SIGNED)), f"{RELEASE}-tls"))["tls.crt"]
        for _ in range(2)
    )
    assert first != second
    template = (CHART / "templates" / "self-signed-cert-secret.yaml").read_text()
    assert 'lookup "v1" "Secret"' in template


def test_a_tls_config_of_yours_wins_over_the_generated_one():
    values = {
        **SELF_SIGNED,
        "serviceMonitor": {"enabled": True, "tlsConfig": {"insecureSkipVerify": True}},
    }
    found = one(objects(render(values)), "ServiceMonitor")["spec"]["endpoints"][0]
    assert found["tlsConfig"] == {"insecureSkipVerify": True}


def test_a_self_signed_certificate_alone_makes_the_web_config():
    values = {"webConfig": {"enabled": True, "selfSignedCert": {"enabled": True}}}
    docs = validated(objects(render(values)))
    web = yaml.safe_load(decoded(secret_named(docs, f"{RELEASE}-web-config"))["web-config.yml"])
    assert web == {"tls_server_config": {"cert_file": "tls.crt", "key_file": "tls.key"}}
    assert (
        "checksum/web-config"
        in one(docs, "DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    )


@pytest.mark.parametrize(
    ("web", "said"),
    [
        ({"selfSignedCert": {"enabled": True}}, "set webConfig.enabled too"),
        (
            {"enabled": True, "tlsSecret": "mine", "selfSignedCert": {"enabled": True}},
            "webConfig.selfSignedCert.enabled and webConfig.tlsSecret",
        ),
        (
            {"enabled": True, "tls": False, "selfSignedCert": {"enabled": True}},
            "leave webConfig.tls true",
        ),
    ],
    ids=["no-web-config", "tls-secret", "no-tls"],
)
def test_a_self_signed_certificate_that_would_not_be_served_is_refused(web, said):
    assert said in failure({"webConfig": web})


@pytest.mark.parametrize(
    "validity",
    [0, "365", 365.5, 36501],
    ids=["zero", "string", "fraction", "a-century"],
)
def test_the_schema_refuses_a_wrong_validity(validity):
    values = {"webConfig": {"selfSignedCert": {"validityDays": validity}}}
    refused_at(values, "/webConfig/selfSignedCert/validityDays")


# ---- the NetworkPolicy ----


def network_policy(values: dict[str, Any]) -> dict[str, Any]:
    return one(
        validated(objects(render({"networkPolicy": {"enabled": True, **values}}))), "NetworkPolicy"
    )


def test_the_network_policy_admits_kube_prometheus_stacks_prometheus_to_the_port_only():
    policy = network_policy({})
    docs = objects(render({"networkPolicy": {"enabled": True}}))
    pod_labels = one(docs, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    spec = policy["spec"]
    # It selects the exporter's pods, and limits what reaches them, not what they reach.
    assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == [
        {
            "from": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    },
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                }
            ],
            "ports": [{"port": chart().values["port"], "protocol": "TCP"}],
        }
    ]
    assert of_kind(objects(render()), "NetworkPolicy") == []
    lint_clean({"networkPolicy": {"enabled": True}})


def test_the_scrapers_selectors_are_values():
    namespaces = {"matchLabels": {"kubernetes.io/metadata.name": "observability"}}
    pods = {
        "matchLabels": {"app.kubernetes.io/name": "prometheus"},
        "matchExpressions": [{"key": "operator.prometheus.io/name", "operator": "Exists"}],
    }
    values = {"scraperNamespaceSelector": namespaces, "scraperPodSelector": pods, "enabled": True}
    [peer] = network_policy(values)["spec"]["ingress"][0]["from"]
    assert peer == {"namespaceSelector": namespaces, "podSelector": pods}
    lint_clean({"networkPolicy": values})
    # Helm merges a map of yours into the default's: null drops a default label, or them all.
    replaced = {"matchLabels": {"kubernetes.io/metadata.name": None, "team": "observability"}}
    [peer] = network_policy({"scraperNamespaceSelector": replaced})["spec"]["ingress"][0]["from"]
    assert peer["namespaceSelector"] == {"matchLabels": {"team": "observability"}}
    every = {"scraperNamespaceSelector": {"matchLabels": None}, "scraperPodSelector": None}
    [peer] = network_policy(every)["spec"]["ingress"][0]["from"]
    assert peer == {"namespaceSelector": {}, "podSelector": {}}


def test_the_network_policy_follows_the_port():
    docs = objects(render({"networkPolicy": {"enabled": True}, "port": 9500}))
    assert one(docs, "NetworkPolicy")["spec"]["ingress"][0]["ports"] == [
        {"port": 9500, "protocol": "TCP"}
    ]


@pytest.mark.parametrize(
    ("values", "pointer"),
    [
        (
            {"scraperPodSelector": {"matchLabels": {"app": "kube prometheus"}}},
            "/networkPolicy/scraperPodSelector/matchLabels/app",
        ),
        (
            {"scraperNamespaceSelector": {"matchNames": ["monitoring"]}},
            "/networkPolicy/scraperNamespaceSelector",
        ),
        (
            {"scraperPodSelector": {"matchExpressions": [{"key": "app", "operator": "in"}]}},
            "/networkPolicy/scraperPodSelector/matchExpressions/0/operator",
        ),
        (
            {"scraperPodSelector": {"matchExpressions": [{"operator": "Exists"}]}},
            "/networkPolicy/scraperPodSelector/matchExpressions/0",
        ),
        ({"scraperNamespaceSelector": "monitoring"}, "/networkPolicy/scraperNamespaceSelector"),
        ({"enabled": "yes"}, "/networkPolicy/enabled"),
    ],
    ids=["label-value", "unknown-key", "operator", "no-key", "string", "enabled"],
)
def test_the_schema_refuses_a_wrong_network_policy(values, pointer):
    refused_at({"networkPolicy": values}, pointer)


# ---- together: the ci/ files that turn them on ----


@pytest.mark.parametrize(
    "name",
    [
        "network-policy-values.yaml",
        "self-signed-tls-values.yaml",
        "microk8s-values.yaml",
        "host-network-values.yaml",
    ],
)
def test_the_ci_files_for_these_values_lint_strict_and_validate(name):
    values = yaml.safe_load((CHART / "ci" / name).read_text())
    lint_clean(values)
    validated(objects(render(values)))


def test_the_microk8s_ci_file_starts_an_exporter_with_its_collectors(tmp_path):
    values = yaml.safe_load((CHART / "ci" / "microk8s-values.yaml").read_text())
    docs = objects(render(values))
    config_map = one(docs, "ConfigMap")
    (tmp_path / helm_chart.COLLECTORS_FILE).write_text(
        config_map["data"][values["collectors"].get("key", helm_chart.COLLECTORS_FILE)]
    )
    args = [a.replace(helm_chart.COLLECTORS_DIR, str(tmp_path)) for a in container(values)["args"]]
    config = parse_config(args, environ=NODE)
    assert config.fields is not None
    assert config.fields.lists("DCGM_FI_DEV_GPU_TEMP") and config.fields.lists(
        "DCGM_FI_DEV_FB_USED"
    )
    assert not config.fields.lists("DCGM_FI_DEV_PCIE_REPLAY_COUNTER")
    assert volume(pod_spec(docs), "pod-resources")["hostPath"]["path"] == (
        f"{values['kubeletPath']}/pod-resources"
    )

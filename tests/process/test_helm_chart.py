"""The Helm chart in deploy/helm/kube-gpu-exporter, proven with Helm's own engine (Helm's Go SDK,:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_helm_chart.py."""

from __future__ import annotations

import shutil

import pytest

from tests.unit.test_deploy import (
    BASE,
    COMPONENT,
    OVERLAY,
    PROCESS_ACCOUNTING,
    identity,
    kustomize,
)
from tests.unit.test_helm_chart import built, objects, one, pod_spec, render


def test_the_default_render_is_the_kustomize_base(tmp_path):
    base, ours = built(tmp_path, BASE), objects(render())
    assert pod_spec(ours) == pod_spec(base)
    ds, base_ds = one(ours, "DaemonSet"), one(base, "DaemonSet")
    assert ds["metadata"]["name"] == base_ds["metadata"]["name"]
    assert ds["spec"]["updateStrategy"] == base_ds["spec"]["updateStrategy"]
    # The chart's selectors add the release (app.kubernetes.io/instance) to deploy/'s.
    assert (
        base_ds["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["selector"]["matchLabels"].items()
    )
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service, base_service = one(ours, "Service"), one(base, "Service")
    selector = service["spec"].pop("selector")
    assert base_service["spec"].pop("selector").items() <= selector.items() <= labels.items()
    assert service["spec"] == base_service["spec"]
    account, base_account = one(ours, "ServiceAccount"), one(base, "ServiceAccount")
    assert account["automountServiceAccountToken"] is base_account["automountServiceAccountToken"]
    assert account["metadata"]["name"] == pod_spec(ours)["serviceAccountName"]
    # No RBAC, no host PIDs, no monitoring objects unless asked for.
    assert {d["kind"] for d in ours} == {"DaemonSet", "Service", "ServiceAccount"}


def test_enrichment_is_the_kubernetes_enrichment_overlay(tmp_path):
    overlay = built(tmp_path, OVERLAY)
    ours = objects(render({"kubernetesEnrichment": {"enabled": True}}))
    assert pod_spec(ours) == pod_spec(overlay)
    role, base_role = one(ours, "ClusterRole"), one(overlay, "ClusterRole")
    # The DRA driver's ResourceSlices included, as the overlay grants them.
    assert role["rules"] == base_role["rules"]
    assert any("resourceslices" in rule["resources"] for rule in role["rules"])
    binding, base_binding = one(ours, "ClusterRoleBinding"), one(overlay, "ClusterRoleBinding")
    assert binding["roleRef"] == base_binding["roleRef"] | {"name": role["metadata"]["name"]}
    assert binding["subjects"] == base_binding["subjects"]
    assert role["metadata"]["name"] == base_role["metadata"]["name"]


def test_process_accounting_is_the_process_accounting_component(tmp_path):
    component = built(tmp_path, BASE, PROCESS_ACCOUNTING)
    ours = objects(render({"processAccounting": {"enabled": True}}))
    assert pod_spec(ours) == pod_spec(component)
    assert pod_spec(ours)["hostPID"] is True
    assert "hostPID" not in pod_spec(objects(render()))


def test_runtime_class_is_the_nvidia_runtime_class_component(tmp_path):
    component = built(tmp_path, BASE, COMPONENT)
    assert pod_spec(objects(render({"runtimeClassName": "nvidia"}))) == pod_spec(component)


def test_the_kustomize_model_and_kubectl_agree_where_kubectl_is_installed(tmp_path):
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed: the comparisons above used the model")
    assert sorted(built(tmp_path, BASE), key=identity) == sorted(kustomize(BASE), key=identity)

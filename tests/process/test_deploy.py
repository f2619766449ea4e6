"""deploy/ and the Dockerfile: the manifests validate against the Kubernetes schemas, carry the:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_deploy.py."""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from tests.unit.test_deploy import (
    BASE,
    COMPONENT,
    OVERLAY,
    PROCESS_ACCOUNTING,
    ROOT,
    hadolint,
    identity,
    kubectl_kustomize,
    kustomize,
    with_components,
)


@pytest.mark.parametrize("directory", [BASE, OVERLAY], ids=["base", "kubernetes-enrichment"])
def test_kubectl_kustomize_builds_what_the_model_builds(directory):
    """The real kustomize (inside kubectl) agrees with this module's model of it."""
    assert kubectl_kustomize(directory) == sorted(kustomize(directory), key=identity)


@pytest.mark.parametrize(
    "components",
    [(COMPONENT,), (PROCESS_ACCOUNTING,), (COMPONENT, PROCESS_ACCOUNTING)],
    ids=["runtime-class", "process-accounting", "both"],
)
def test_kubectl_kustomize_applies_the_components(tmp_path, components):
    # kustomize takes only relative paths to bases and components.
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(BASE, tmp_path)],
                "components": [os.path.relpath(c, tmp_path) for c in components],
            }
        )
    )
    expected = sorted(with_components(*components), key=identity)
    assert kubectl_kustomize(tmp_path) == expected


def test_dockerfile_passes_hadolint():
    result = subprocess.run(
        [hadolint(), "--failure-threshold", "info", str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install aiohttp\n")
    result = subprocess.run([hadolint(), str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout

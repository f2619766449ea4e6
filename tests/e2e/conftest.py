"""One local stack for the whole end-to-end session: the exporter on its simulated node, a real
Prometheus with the bundle's static scrape config and rules, a real Alertmanager posting to a
webhook inside the test, and synthetic kube-state-metrics. Beside them, for dcgm-exporter's own
consumers: a companion exporter for each other classic profile and the GPU Operator's recording
rules (upstream_profiles.py). Another flavour of the bundle gets a stack of its own
(`started_stack`, used by test_panels.py).

Test-only overrides (never written to the committed files): scrape, evaluation and collection
every second, every alert `for` 5s and look-back window 15s, Alertmanager grouping within 1s.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.bundle.localstack.configs import FAST, quick_alerts
from kube_gpu_exporter.bundle.localstack.grafana_queries import seconds
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI
from kube_gpu_exporter.bundle.localstack.stack import CompanionExporter, LocalStack
from tests.e2e.ksm_fake import FakeKubeStateMetrics
from tests.e2e.upstream_profiles import (
    GPU_OPERATOR_RULES_FILE,
    companions,
    gpu_operator_rules_yaml,
)

KSM_JOB = "kube-state-metrics"


@contextmanager
def started_stack(
    workdir: Path,
    config: BundleConfig,
    ksm: FakeKubeStateMetrics,
    companion_exporters: list[CompanionExporter] | None = None,
    extra_rules: dict[str, str] | None = None,
    exporter_args: tuple[str, ...] = (),
) -> Iterator[LocalStack]:
    """A stack on `config` (with the test-only overrides), its exporter on the same profile,
    scraping `ksm` as kube-state-metrics; yielded once every target has been scraped."""
    job = {
        "job_name": KSM_JOB,
        "honor_labels": True,
        "static_configs": [{"targets": [ksm.address]}],
    }
    local = LocalStack(
        workdir,
        quick_alerts(config),
        FAST,
        extra_jobs=[job],
        companions=companion_exporters or (),
        extra_rules=extra_rules,
        exporter_args=exporter_args,
    )
    with local:
        local.wait_for_scrapes()
        yield local


@pytest.fixture(scope="session")
def ksm() -> Iterator[FakeKubeStateMetrics]:
    server = FakeKubeStateMetrics("127.0.0.1")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory, ksm: FakeKubeStateMetrics) -> Iterator[LocalStack]:
    with started_stack(
        tmp_path_factory.mktemp("stack"),
        DEFAULT,
        ksm,
        companions(),
        {GPU_OPERATOR_RULES_FILE: gpu_operator_rules_yaml()},
    ) as local:
        yield local


def wait_until(check, timeout: float, what: str, interval: float = 0.5):
    """Poll `check` until it returns something truthy; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def evaluated_at(group: dict) -> float:
    """A rule group's lastEvaluation (RFC 3339, nanoseconds) as Unix time; 0 before the first."""
    stamp = re.fullmatch(r"(.{19})(\.\d+)?(Z|[+-]\d\d:\d\d)", group.get("lastEvaluation", ""))
    if stamp is None or stamp[1].startswith("0001-"):
        return 0.0
    whole = datetime.fromisoformat(stamp[1] + stamp[3])
    return whole.timestamp() + float(stamp[2] or 0)


def wait_for_rule_evaluations(
    api: PrometheusAPI, which: Callable[[dict], bool], timeout: float = 30.0
) -> None:
    """Until every rule group `which` selects has evaluated since this call: what those groups
    report from then on reflects the data stored before it."""
    since = time.time()
    wait_until(
        lambda: all(evaluated_at(group) > since for group in api.rule_groups() if which(group)),
        timeout,
        "an evaluation of every rule group",
    )


def at_evaluation_interval(group: dict) -> bool:
    """Every group but those with a slower interval of their own (the history windows)."""
    return group["interval"] <= seconds(FAST.evaluation_interval)

"""One local stack for the whole end-to-end session: the exporter on its simulated node, a real
Prometheus with the bundle's static scrape config and rules, a real Alertmanager posting to a
webhook inside the test, and synthetic kube-state-metrics.

Test-only overrides (never written to the committed files): scrape, evaluation and collection
every second, every alert `for` 5s and look-back window 15s, Alertmanager grouping within 1s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bundle.config import DEFAULT
from bundle.localstack.configs import FAST, quick_alerts
from bundle.localstack.stack import LocalStack
from tests.e2e.ksm_fake import FakeKubeStateMetrics

KSM_JOB = "kube-state-metrics"


@pytest.fixture(scope="session")
def ksm() -> Iterator[FakeKubeStateMetrics]:
    server = FakeKubeStateMetrics("127.0.0.1")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory, ksm: FakeKubeStateMetrics) -> Iterator[LocalStack]:
    job = {
        "job_name": KSM_JOB,
        "honor_labels": True,
        "static_configs": [{"targets": [ksm.address]}],
    }
    local = LocalStack(
        tmp_path_factory.mktemp("stack"), quick_alerts(DEFAULT), FAST, extra_jobs=[job]
    )
    with local:
        local.wait_for_scrapes()
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

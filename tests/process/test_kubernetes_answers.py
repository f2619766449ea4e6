"""How the watches read the API server's answers, over real HTTP from the fake API: the cases that
start an exporter process (SIGTERM while its watches are stuck, its memory against a gibibyte
error body, an endless event line and an oversized ResourceSlice LIST); the others are in
tests/unit/test_kubernetes_answers.py."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.conftest import wait_for
from tests.support.exporter_process import scrape_until, start_exporter
from tests.support.fake_kube_api import SLICES, ErrorAnswer, FakeKubeApi
from tests.support.kubernetes import (
    EVENT_LIMIT,
    GIB,
    MIB,
    RSS_BOUND_MB,
    SIM_NODE,
    SOCKET_BUFFERS,
    cluster,
    exporter_flags,
    kube_success,
    peak_rss_mb,
)

# Alone, after the parallel part of `make test`: it bounds the exporter's exit after SIGTERM to 5
# s and its memory to 50 MB over normal.
pytestmark = pytest.mark.serial


def _trickled_watch_errors(api: FakeKubeApi) -> None:
    api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, trickle_seconds=2.0)


def _trickled_headers(api: FakeKubeApi) -> None:
    api.header_trickle = {"pods", "nodes"}


def _trickled_list(api: FakeKubeApi) -> None:
    api.list_bodies["pods"] = b'{"kind":"PodList","items":[]}'
    api.list_trickle_seconds = 2.0


def _quiet_watch(api: FakeKubeApi) -> None:
    """Nothing hostile: a watch held open with nothing to say."""


@pytest.mark.parametrize(
    "stuck",
    [_quiet_watch, _trickled_watch_errors, _trickled_headers, _trickled_list],
    ids=["quiet-watch", "trickled-watch-error", "trickled-headers", "trickled-list"],
)
def test_sigterm_ends_the_exporter_within_5s_whatever_its_watches_are_stuck_in(
    tmp_path, stuck
) -> None:
    api = cluster()
    stuck(api)
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        scrape_until(base, lambda t: "DCGM_FI_DEV_GPU_TEMP{" in t, proc=proc)
        if stuck is not _quiet_watch:
            assert wait_for(lambda: sum(api.in_progress.values()) > 0, timeout=20)
        else:
            assert wait_for(lambda: api.requests_of("pods", watch=True), timeout=20)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        api.stop()
    assert proc.returncode == 0, stderr[-2000:]
    assert took < 5.0, (took, stderr[-2000:])


def test_a_gibibyte_error_body_keeps_the_exporter_within_50_mb_of_normal(tmp_path) -> None:
    api = cluster()
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        scrape_until(base, lambda t: kube_success(t) == 1, proc=proc, what="a synced view")
        normal = peak_rss_mb(proc.pid)
        # Every LIST and every watch of the pods answered 500 with a 1 GiB body from now on;
        # the open watch is made to fail by a 410, so that the pods are listed again.
        api.error_answers[("pods", False)] = ErrorAnswer(500, declared=GIB, sent=GIB)
        api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, sent=GIB)
        api.expire_history()
        assert wait_for(lambda: len(api.error_sent.get("pods", [])) >= 4, timeout=30)
        text = scrape_until(base, lambda t: kube_success(t) == 0, proc=proc, what="unsynced")
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
        peak = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        api.stop()
    assert peak - normal < 50, (normal, peak)
    assert peak < RSS_BOUND_MB
    failures = [line for line in stderr.splitlines() if "HTTP 500" in line]
    assert failures and all("etcd is on fire" in line for line in failures), stderr[-2000:]


def test_an_endless_watch_line_is_dropped_at_its_limit(tmp_path):
    api = cluster()
    api.endless_watches = {"pods"}
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        # The client hung up on the first endless line near the limit, and listed again.
        assert wait_for(lambda: len(api.endless_sent.get("pods", [])) >= 2, timeout=20), (
            api.endless_sent,
            peak_rss_mb(proc.pid),
        )
        first = api.endless_sent["pods"][0]
        assert EVENT_LIMIT <= first <= EVENT_LIMIT + SOCKET_BUFFERS, first
        # The pods listed stay on the series while the view says it cannot be trusted.
        text = scrape_until(
            base,
            lambda t: kube_success(t) == 0 and 'label_team="vision"' in t,
            timeout=20,
            what="collector_success 0 for kubernetes, with the listed pod's labels",
            proc=proc,
        )
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
        assert peak_rss_mb(proc.pid) < RSS_BOUND_MB
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        api.stop()
    refused = [line for line in stderr.splitlines() if "line over its 4 MiB limit" in line]
    assert len(refused) == 1, stderr[-3000:]  # repeats of the same failure are not logged
    assert "the pods watch" in refused[0]


def test_a_resource_slice_list_over_its_limit_is_refused_with_memory_bounded(tmp_path):
    api = cluster()
    device = {
        "name": "gpu-0",
        "attributes": {f"attribute{i}": {"string": "x" * 40} for i in range(12)},
    }
    piece = {
        "metadata": {"name": "slice"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": SIM_NODE,
            "pool": {"name": SIM_NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": [device] * 128,
        },
    }
    body = json.dumps({"metadata": {"resourceVersion": "1"}, "items": [piece] * 360}).encode()
    assert len(body) > 38 * MIB
    api.list_bodies[SLICES] = body
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        # Refused, and refused again on the relist, never parsed.
        assert wait_for(lambda: len(api.requests_of(SLICES, watch=False)) >= 2, timeout=20), (
            peak_rss_mb(proc.pid)
        )
        text = scrape_until(
            base,
            lambda t: kube_success(t) == 0 and 'label_team="vision"' in t,
            timeout=20,
            what="collector_success 0 for kubernetes, with the pod's labels",
            proc=proc,
        )
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
        assert peak_rss_mb(proc.pid) < RSS_BOUND_MB
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        api.stop()
    refused = [line for line in stderr.splitlines() if "ResourceSlice LIST" in line]
    assert len(refused) == 1 and "over its 4 MiB limit" in refused[0], stderr[-3000:]

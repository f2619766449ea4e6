"""A hostile or broken API server against the Kubernetes watches, over real HTTP from the fake API
and through the real `kubernetes` client: an event line that never ends, 410 Gone to every watch,
a LIST too large to parse, and JSON nested past Python's recursion limit. Each is one failed round,
logged on one line, with memory bounded and collector_success{collector="kubernetes"} 0 while
the view cannot be trusted; everything else keeps being served."""

from __future__ import annotations

import itertools
import json
import logging
import re
import time
from collections.abc import Iterator

import pytest

from exporter.attribution.context import AttributionContext
from exporter.kubernetes.watcher import KubernetesWatcher
from tests.conftest import wait_for
from tests.fake_kube_api import SLICES, FakeKubeApi, write_kubeconfig
from tests.test_kubernetes_enrichment import make_watcher
from tests.test_process import scrape_until, start_exporter

MIB = 1 << 20
# The limits docs/faults.md, 'API server', states (exporter/kubernetes/api_answers.py).
EVENT_LIMIT = 4 * MIB
SLICE_LIST_LIMIT = 4 * MIB
# What loopback sockets may hold beyond what the client read: both kernel buffers, at most.
SOCKET_BUFFERS = 12 * MIB
SIM_NODE = "sim-gpu-node-0"  # the default simulated node's name
# The simulated exporter with the kubernetes client loaded holds about 125 MB; before these
# bounds, the cases here took it to 414 MB (an endless line, after 40 s) and 396 MB (a 40 MB
# ResourceSlice LIST). An event line's 4 MiB and the pieces read around it fit in the margin.
RSS_BOUND_MB = 160
DEEP = 100_000


def kube_success(text: str) -> float | None:
    match = re.search(r'collector_success\{[^}]*collector="kubernetes"[^}]*\} (\S+)', text)
    return None if match is None else float(match.group(1))


def peak_rss_mb(pid: int) -> float:
    """The process's high-water resident memory (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1000
    raise AssertionError("no VmHWM")


def kube_status(watcher: KubernetesWatcher) -> bool:
    """collector_success{collector="kubernetes"} as the renderer reads it."""
    [status] = [
        s
        for s in AttributionContext(kube=watcher.view()).collector_statuses()
        if s.name == "kubernetes"
    ]
    return bool(status.success)


def cluster() -> FakeKubeApi:
    """A fake API with one of the simulated kubelet's pods, labelled."""
    api = FakeKubeApi(SIM_NODE)
    api.put_pod(api.pod("ml-training", "llm-pretrain-worker-0", labels={"team": "vision"}))
    return api


def exporter_flags(api: FakeKubeApi, tmp_path) -> list[str]:
    """The flags of an exporter enriching from the started `api`."""
    return [
        "--kubernetes",
        f"--kubernetes.kubeconfig={write_kubeconfig(tmp_path / 'kubeconfig', api.host)}",
        "--kubernetes.pod-label-allowlist=team",
    ]


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi("gpu-node-7").start()
    yield fake
    fake.stop()


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


def test_a_watch_trickling_an_endless_line_is_abandoned_at_its_deadline(api):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.endless_watches = {"pods"}
    api.endless_trickle = True  # one byte each 0.1 s: every socket read succeeds
    watcher = make_watcher(api.host, watch_timeout_seconds=1, stall_grace_seconds=0.5)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 1, timeout=6)
        assert ("ml", "trainer-0") in watcher.view().pods
        assert len(api.endless_sent["pods"]) >= 1
    finally:
        watcher.stop(timeout=3)


def test_410_to_every_watch_backs_off_with_jitter_and_reads_unsynced(api):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.gone_always = {"pods"}
    # The production backoff: 0.5 s doubling to 30 s, each wait within 20% either way.
    watcher = make_watcher(api.host, max_backoff_seconds=30)
    watcher.start()
    statuses = []
    try:
        started = time.monotonic()
        while time.monotonic() - started < 6:
            statuses.append(kube_status(watcher))
            time.sleep(0.05)
        assert ("ml", "trainer-0") in watcher.view().pods
        relists = watcher.view().relists
    finally:
        watcher.stop(timeout=3)
    lists = api.requests_of("pods", watch=False)
    # Lists at about 0, 0.5, 1.5, 3.5 s: before, about 114 requests a second.
    assert 3 <= len(lists) <= 5, len(lists)
    assert relists >= 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(lists)]
    for n, gap in enumerate(gaps[:3]):
        nominal = 0.5 * 2**n
        assert 0.8 * nominal - 0.02 <= gap <= 1.2 * nominal + 0.2, gaps
    # Every 410 leaves the view unsynced until the next list, which the backoff delays.
    assert statuses.count(False) >= 0.8 * len(statuses), statuses


def test_the_backoff_starts_over_after_a_healthy_round(api):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.gone_always = {"pods"}
    watcher = make_watcher(api.host, max_backoff_seconds=30, healthy_round_seconds=1)
    watcher.start()
    try:
        time.sleep(3)  # lists at about 0, 0.5 and 1.5 s; the next wait is about 4 s
        assert len(api.requests_of("pods", watch=False)) <= 4
        api.gone_always = set()
        assert wait_for(lambda: watcher.view().pods_synced, timeout=6)
        time.sleep(1.5)  # a watch held open past the healthy round's length
        lists = len(api.requests_of("pods", watch=False))
        expired = time.monotonic()
        api.expire_history()
        assert wait_for(lambda: len(api.requests_of("pods", watch=False)) > lists, timeout=3)
        # The first step of the backoff again (0.4 to 0.6 s), not the fifth (6.4 to 9.6 s).
        assert api.requests_of("pods", watch=False)[-1] - expired < 1.2
    finally:
        watcher.stop(timeout=3)


def test_watches_ended_at_once_are_opened_again_with_backoff(api):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.watch_lines["pods"] = []  # every watch answered, and ended, with nothing in it
    watcher = make_watcher(api.host, max_backoff_seconds=30)
    watcher.start()
    try:
        time.sleep(4)
        # Nothing failed: the view is what the list gave, and nothing was missed since.
        assert watcher.view().pods_synced and watcher.view().watch_errors == 0
    finally:
        watcher.stop(timeout=3)
    # Watches at about 0, 0.5, 1.5 and 3.5 s: before, several hundred.
    assert 3 <= len(api.requests_of("pods", watch=True)) <= 5
    assert len(api.requests_of("pods", watch=False)) == 1


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


def test_a_list_declaring_too_many_bytes_is_refused_unread(api, caplog):
    api.list_chunked = False
    # A good answer, but padded past the limit: read whole, it would have been taken.
    listing = {"metadata": {"resourceVersion": "1"}, "items": [api.node_object()]}
    api.list_bodies["nodes"] = json.dumps(listing).encode().ljust(5 * MIB)
    api.put_pod(api.pod("ml", "trainer-0"))
    watcher = make_watcher(api.host)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 1 and watcher.view().pods_synced)
        assert not watcher.view().node_synced and not kube_status(watcher)
    finally:
        watcher.stop(timeout=3)
    said = [r.getMessage() for r in caplog.records if "node LIST" in r.getMessage()]
    assert said and f"is {5 * MIB} bytes, over its 4 MiB limit" in said[0], said


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_a_list_nested_past_the_recursion_limit_is_a_bad_answer(api, caplog):
    caplog.set_level(logging.WARNING)
    api.list_bodies["pods"] = (
        b'{"metadata":{"resourceVersion":"5"},"items":[' + deep_json(DEEP) + b"]}"
    )
    watcher = make_watcher(api.host)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 2)
        assert watcher.consecutive_crashes == 0 and watcher.problem() is None
        assert not watcher.view().pods_synced and not kube_status(watcher)
        # The node's watch is untouched.
        assert watcher.view().node_synced
    finally:
        watcher.stop(timeout=3)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, failures  # one line, no traceback of a crashed thread
    assert "nested deeper than Python parses" in failures[0] and "\n" not in failures[0]


def test_a_watch_event_nested_past_the_recursion_limit_is_a_bad_answer(api, caplog):
    caplog.set_level(logging.WARNING)
    event = b'{"type":"ADDED","object":{"metadata":{"name":"x"},"spec":' + deep_json(DEEP) + b"}}"
    api.watch_lines[SLICES] = [event + b"\n"]
    watcher = make_watcher(api.host, watch_resource_slices=True)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 2)
        slices = watcher._slice_watch
        assert slices is not None and slices.consecutive_crashes == 0
        assert watcher.problem() is None
        # Unsynced from the failure until the next list: sampled just after one, it says so.
        assert wait_for(lambda: not kube_status(watcher), timeout=2)
        assert watcher.view().pods_synced and watcher.view().node_synced
    finally:
        watcher.stop(timeout=3)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, failures
    assert "an event of the ResourceSlice watch is JSON nested deeper" in failures[0]

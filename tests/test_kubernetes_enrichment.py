"""The enrichment watches, through the real `kubernetes` client, against an HTTP fake API server."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from functools import partial

import kubernetes
import pytest

from exporter.kubernetes.label_names import sanitize_label_name
from exporter.kubernetes.pod_metadata import KubernetesView
from exporter.kubernetes.watcher import KubernetesWatcher
from tests.conftest import open_fds, threads, wait_for
from tests.fake_kube_api import FakeKubeApi

NODE = "gpu-node-7"


def client_for(host: str):
    def factory() -> kubernetes.client.ApiClient:
        config = kubernetes.client.Configuration()
        config.host = host
        return kubernetes.client.ApiClient(config)

    return factory


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi(NODE).start()
    yield fake
    fake.stop()


def make_watcher(host: str, **kwargs) -> KubernetesWatcher:
    kwargs.setdefault("watch_timeout_seconds", 1)
    kwargs.setdefault("max_backoff_seconds", 0.2)
    return KubernetesWatcher(client_for(host), NODE, **kwargs)


@pytest.fixture
def running(api) -> Iterator[tuple[FakeKubeApi, KubernetesWatcher]]:
    api.put_pod(
        api.pod(
            "ml",
            "trainer-0",
            labels={"team": "vision", "pod-template-hash": "x"},
            owner=("Job", "pretrain"),
        )
    )
    api.put_pod(
        api.pod(
            "web",
            "api-7d9f8c6b5-abcde",
            labels={"pod-template-hash": "7d9f8c6b5"},
            owner=("ReplicaSet", "api-7d9f8c6b5"),
        )
    )
    api.put_pod(api.pod("other", "elsewhere", node="gpu-node-8"))
    api.set_node_labels(
        {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/gfd.timestamp": "1732262400",
            "kubernetes.io/hostname": NODE,
        }
    )
    watcher = make_watcher(api.host, label_allowlist=re.compile(r"team|app\.kubernetes\.io/.*"))
    watcher.start()
    assert wait_for(lambda: watcher.view().pods_synced and watcher.view().node_synced)
    yield api, watcher
    watcher.stop(timeout=3)


def test_initial_list_gives_uid_owner_and_labels(running):
    _api, watcher = running
    pods = watcher.view().pods
    assert set(pods) == {("ml", "trainer-0"), ("web", "api-7d9f8c6b5-abcde")}
    trainer = pods[("ml", "trainer-0")]
    assert (trainer.uid, trainer.owner_kind, trainer.owner_name) == (
        "uid-trainer-0",
        "Job",
        "pretrain",
    )
    assert trainer.labels == (("label_team", "vision"),)
    api_pod = pods[("web", "api-7d9f8c6b5-abcde")]
    assert (api_pod.owner_kind, api_pod.owner_name) == ("Deployment", "api")


def test_every_request_is_scoped_to_this_node(running):
    api, watcher = running
    api.put_pod(api.pod("ml", "trainer-1"))
    assert wait_for(lambda: ("ml", "trainer-1") in watcher.view().pods)
    for path, query in api.requests:
        selector = query.get("fieldSelector", [""])[0]
        if path == "/api/v1/pods":
            assert selector == f"spec.nodeName={NODE}"
        else:
            assert selector == f"metadata.name={NODE}"
    lists = [q for p, q in api.requests if "watch" not in q]
    assert all(q.get("resourceVersion") == ["0"] for q in lists)  # served from the watch cache
    watches = [q for p, q in api.requests if "watch" in q]
    assert all(q.get("allowWatchBookmarks", [""])[0].lower() == "true" for q in watches)


def test_watch_events_are_applied(running):
    api, watcher = running
    api.put_pod(api.pod("ml", "trainer-1", labels={"team": "nlp"}))
    assert wait_for(lambda: ("ml", "trainer-1") in watcher.view().pods)
    api.put_pod(api.pod("ml", "trainer-1", labels={"team": "speech"}))
    assert wait_for(
        lambda: watcher.view().pods[("ml", "trainer-1")].labels == (("label_team", "speech"),)
    )
    api.delete_pod("ml", "trainer-0")
    assert wait_for(lambda: ("ml", "trainer-0") not in watcher.view().pods)
    api.put_pod(api.pod("other", "not-mine", node="gpu-node-8"))
    # Events arrive in version order: once a later one is applied, the earlier one would be too.
    api.put_pod(api.pod("ml", "marker"))
    assert wait_for(lambda: ("ml", "marker") in watcher.view().pods)
    assert ("other", "not-mine") not in watcher.view().pods


def test_bookmarks_advance_the_resume_version(running):
    api, _watcher = running
    version = api.bookmark("pods")

    def resumed() -> bool:
        return any(
            p == "/api/v1/pods" and q.get("resourceVersion") == [str(version)]
            for p, q in api.requests
            if "watch" in q
        )

    assert wait_for(resumed, timeout=5)


def test_410_gone_relists(running):
    api, watcher = running
    api.expire_history()
    api.put_pod(api.pod("ml", "after-expiry"))
    assert wait_for(lambda: watcher.view().relists >= 1, timeout=5)
    assert wait_for(lambda: ("ml", "after-expiry") in watcher.view().pods, timeout=5)
    assert watcher.view().pods_synced


def test_node_labels_are_filtered(running):
    api, watcher = running
    labels = dict(watcher.view().node_labels)
    assert labels == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/mig.config": "all-balanced",
        "nvidia.com/mig.config.state": "success",
    }
    api.set_node_labels(
        {"nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "pending"}
    )
    assert wait_for(
        lambda: dict(watcher.view().node_labels).get("nvidia.com/mig.config.state") == "pending"
    )


def test_unreachable_api_server_then_recovery():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    watcher = make_watcher(f"http://127.0.0.1:{port}")
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 2)
        view = watcher.view()
        assert not view.pods_synced and view.pods == {}
        api = FakeKubeApi(NODE)
        api.put_pod(api.pod("ml", "late"))
        api.start(port)
        try:
            assert wait_for(lambda: ("ml", "late") in watcher.view().pods, timeout=5)
            assert watcher.view().pods_synced
        finally:
            api.stop()
    finally:
        started = time.monotonic()
        watcher.stop(timeout=3)
        assert time.monotonic() - started < 5


def test_slow_list_times_out_and_is_retried(api, caplog):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.list_delay_seconds = 1.5
    watcher = make_watcher(api.host, list_timeout_seconds=0.3)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors >= 3)
        assert not watcher.view().pods_synced
        api.list_delay_seconds = 0
        assert wait_for(lambda: ("ml", "trainer-0") in watcher.view().pods)
        assert watcher.view().pods_synced
    finally:
        started = time.monotonic()
        watcher.stop(timeout=3)
        assert time.monotonic() - started < 5
    timeouts = [r for r in caplog.records if "Kubernetes API watch failed" in r.getMessage()]
    # Repeats of the same failure are logged once, each on one line.
    assert 1 <= len(timeouts) <= 2 and "\n" not in timeouts[0].getMessage(), timeouts


def test_stalled_watch_is_abandoned_and_changes_arrive_by_relisting(api):
    watcher = make_watcher(api.host, stall_grace_seconds=0.5)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().pods_synced)
        errors = watcher.view().watch_errors
        api.stall_watches = True  # the next watch gets headers, then silence
        # The node's watch stalls too; only a stalled pod watch makes the relist below needed.
        assert wait_for(lambda: api.stalled["pods"] >= 1)
        api.put_pod(api.pod("ml", "during-stall"))
        # Without a read timeout this watch would wait for as long as the stall lasts.
        assert wait_for(lambda: ("ml", "during-stall") in watcher.view().pods, timeout=8)
        assert watcher.view().watch_errors > errors
        api.unstall()
        api.put_pod(api.pod("ml", "after-stall"))
        assert wait_for(lambda: ("ml", "after-stall") in watcher.view().pods)
    finally:
        api.unstall()
        watcher.stop(timeout=3)


def test_api_restarts_and_410s_leak_no_threads_or_fds(api):
    def threads_and_fds() -> tuple[int, int]:
        return threads(), open_fds()

    # Conditions on this round's values, bound with partial: a lambda in the loop would read
    # the loop's latest values, and one with a default argument has no type a checker can infer.
    def more_watch_errors_than(view: KubernetesView) -> bool:
        return watcher.view().watch_errors > view.watch_errors

    def more_relists_than(view: KubernetesView) -> bool:
        return watcher.view().relists > view.relists

    def has_pod(key: tuple[str, str]) -> bool:
        return key in watcher.view().pods

    api.put_pod(api.pod("ml", "trainer-0"))
    watcher = make_watcher(api.host, max_backoff_seconds=0.1)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().pods_synced)
        before = threads_and_fds()
        for round_ in range(15):
            view = watcher.view()
            api.stop()
            assert wait_for(partial(more_watch_errors_than, view)), round_
            api.start(api.port)
            key = ("ml", f"pod-{round_}")
            api.put_pod(api.pod(*key))
            assert wait_for(partial(has_pod, key)), round_
            api.expire_history()
            assert wait_for(partial(more_relists_than, view)), round_
        # The fake's handler threads end with their connections; the watcher's must not pile up.
        now = threads_and_fds
        assert wait_for(lambda: now()[0] <= before[0] + 3 and now()[1] <= before[1] + 3), (
            before,
            now(),
        )
    finally:
        watcher.stop(timeout=3)


def test_stop_returns_promptly_during_a_quiet_watch(api):
    watcher = make_watcher(api.host, watch_timeout_seconds=30)
    watcher.start()
    assert wait_for(lambda: watcher.view().pods_synced)
    started = time.monotonic()
    watcher.stop(timeout=2)
    assert time.monotonic() - started < 5


def test_label_allowlist_sanitising_collisions_and_cap(api):
    labels = {f"k{i:02d}": str(i) for i in range(15)}
    labels.update(
        {"app.kubernetes.io/name": "trainer", "app.kubernetes.io_name": "other", "ignored": "x"}
    )
    api.put_pod(api.pod("ml", "many", labels=labels))
    watcher = make_watcher(
        api.host, label_allowlist=re.compile(r"k\d+|app\.kubernetes\.io.*"), max_labels_per_pod=12
    )
    watcher.start()
    try:
        assert wait_for(lambda: ("ml", "many") in watcher.view().pods)
        meta = watcher.view().pods[("ml", "many")]
        names = dict(meta.labels)
        assert len(names) == 12 and "label_ignored" not in names
        # Both keys sanitise to one name; the first key in order wins.
        assert names["label_app_kubernetes_io_name"] == "trainer"
        assert watcher.view().labels_dropped == 16 - 12
    finally:
        watcher.stop(timeout=3)


@pytest.mark.parametrize("value", ['say "hi"', "back\\slash", "two\nlines", "ünïcødé ✓ 日本語"])
def test_label_values_survive_verbatim(api, value):
    api.put_pod(api.pod("ml", "odd", labels={"team": value}))
    watcher = make_watcher(api.host, label_allowlist=re.compile("team"))
    watcher.start()
    try:
        assert wait_for(lambda: ("ml", "odd") in watcher.view().pods)
        assert watcher.view().pods[("ml", "odd")].labels == (("label_team", value),)
    finally:
        watcher.stop(timeout=3)


def test_sanitize_label_name():
    assert sanitize_label_name("app.kubernetes.io/name") == "label_app_kubernetes_io_name"
    assert sanitize_label_name("nvidia.com/gpu.product") == "label_nvidia_com_gpu_product"
    assert sanitize_label_name("ok_Name1") == "label_ok_Name1"

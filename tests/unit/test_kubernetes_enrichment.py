"""The enrichment watches, through the real `kubernetes` client, against an HTTP fake API server.

The watchers run on a ManualClock: a backoff lasts until the test moves the clock past it, and
their watches are held open as in production (`watch_timeout_seconds=300`) unless a test is
about the server ending them."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from functools import partial

import pytest

from kube_gpu_exporter.exporter.kubernetes.label_names import sanitize_label_name
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import KubernetesView
from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from tests.conftest import open_fds, threads, wait_for
from tests.support.clock_steps import at_least_parked, run_until
from tests.support.exporter_process import free_port
from tests.support.fake_kube_api import FakeKubeApi
from tests.support.kubernetes import NODE, make_watcher

HELD_OPEN = 300  # watch_timeout_seconds: longer than any test here


@pytest.fixture
def running(
    api: FakeKubeApi, clock: ManualClock
) -> Iterator[tuple[FakeKubeApi, KubernetesWatcher, ManualClock]]:
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
    watcher = make_watcher(
        api.host,
        clock=clock,
        watch_timeout_seconds=HELD_OPEN,
        label_allowlist=re.compile(r"team|app\.kubernetes\.io/.*"),
    )
    watcher.start()
    assert wait_for(lambda: watcher.view().pods_synced and watcher.view().node_synced)
    yield api, watcher, clock
    watcher.stop(timeout=3)


def pod_watch_versions(api: FakeKubeApi) -> list[str]:
    """The resourceVersion each pods watch asked for, in order."""
    return [
        q.get("resourceVersion", [""])[0]
        for p, q in list(api.requests)
        if p == "/api/v1/pods" and "watch" in q
    ]


def test_initial_list_gives_uid_owner_and_labels(running):
    _api, watcher, _clock = running
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
    api, watcher, _clock = running
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
    api, watcher, _clock = running
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
    api, watcher, clock = running
    [listed] = pod_watch_versions(api)
    # A bookmark carries no object, only a version: seen once its event stamped the view.
    clock.advance(1)
    version = api.bookmark("pods")
    assert wait_for(lambda: watcher.view().pods_updated_at == clock.time())
    # The server ends the open watch (compacting its history is the fake's way to end one at
    # once): the next watch resumes from the bookmark's version, not from the list's.
    api.expire_history()
    assert wait_for(lambda: len(pod_watch_versions(api)) >= 2)
    assert pod_watch_versions(api)[:2] == [listed, str(version)]


def test_410_gone_relists(running):
    api, watcher, clock = running
    api.expire_history()
    # The open watch ends; the next one is answered 410 Gone, and the pods are listed again
    # after a backoff. Until then the view may miss events, and says so.
    assert run_until(clock, lambda: not watcher.view().pods_synced)
    assert watcher.view().relists >= 1
    # Made while nothing watches the pods: only the relist can bring it.
    api.put_pod(api.pod("ml", "after-expiry"))
    assert run_until(clock, lambda: ("ml", "after-expiry") in watcher.view().pods)
    # Synced again once the watch from the new list is answered.
    assert wait_for(lambda: watcher.view().pods_synced)


def test_node_labels_are_filtered(running):
    api, watcher, _clock = running
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


def test_unreachable_api_server_then_recovery(clock):
    port = free_port()
    watcher = make_watcher(f"http://127.0.0.1:{port}", clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        # Both watches (the pods' and the node's) are refused, and back off.
        at_least_parked(clock, 2)
        view = watcher.view()
        assert view.watch_errors == 2
        assert not view.pods_synced and view.pods == {}
        api = FakeKubeApi(NODE)
        api.put_pod(api.pod("ml", "late"))
        api.start(port)
        try:
            assert run_until(clock, lambda: ("ml", "late") in watcher.view().pods)
            assert wait_for(lambda: watcher.view().pods_synced)
        finally:
            api.stop()
    finally:
        started = time.monotonic()
        watcher.stop(timeout=3)
        assert time.monotonic() - started < 5


def test_slow_list_times_out_and_is_retried(api, clock, caplog):
    api.put_pod(api.pod("ml", "trainer-0"))
    api.list_delay_seconds = 1.0
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, list_timeout_seconds=0.25
    )
    watcher.start()
    try:
        # The pods' and the node's LISTs time out, back off, and time out again.
        waits = at_least_parked(clock, 2)
        assert watcher.view().watch_errors == 2
        clock.advance(max(waits))
        waits = at_least_parked(clock, 2)
        assert watcher.view().watch_errors == 4
        assert not watcher.view().pods_synced
        api.list_delay_seconds = 0
        assert run_until(clock, lambda: ("ml", "trainer-0") in watcher.view().pods)
        assert wait_for(lambda: watcher.view().pods_synced)
    finally:
        started = time.monotonic()
        watcher.stop(timeout=3)
        assert time.monotonic() - started < 5
    timeouts = [r for r in caplog.records if "Kubernetes API watch failed" in r.getMessage()]
    # Repeats of the same failure are logged once, each on one line: one line per watch.
    assert len(timeouts) == 2 and "\n" not in timeouts[0].getMessage(), timeouts


def test_stalled_watch_is_abandoned_and_changes_arrive_by_relisting(api, clock):
    api.stall_watches = True  # every watch gets its headers, then silence
    # The server ends a watch after a second; silence for 0.2 s past that abandons it. The
    # watch's timeout is whole seconds, so this one test waits 1.2 s on a real socket.
    watcher = make_watcher(api.host, clock=clock, stall_grace_seconds=0.2)
    watcher.start()
    try:
        assert wait_for(lambda: api.stalled["pods"] >= 1 and watcher.view().pods_synced)
        api.put_pod(api.pod("ml", "during-stall"))
        # Without a deadline over the whole watch, it would wait for as long as the stall
        # lasts. Both watches (the node's stalls too) are abandoned, and back off.
        waits = at_least_parked(clock, 2)
        view = watcher.view()
        assert view.watch_errors == 2 and not view.pods_synced
        assert ("ml", "during-stall") not in view.pods
        clock.advance(max(waits))
        # The LIST after the backoff brings what the stalled watch never sent.
        assert wait_for(lambda: ("ml", "during-stall") in watcher.view().pods)
        api.unstall()
        api.put_pod(api.pod("ml", "after-stall"))
        assert run_until(clock, lambda: ("ml", "after-stall") in watcher.view().pods)
    finally:
        api.unstall()
        watcher.stop(timeout=3)


def test_api_restarts_and_410s_leak_no_threads_or_fds(api, clock):
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
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().pods_synced)
        before = threads_and_fds()
        for round_ in range(15):
            view = watcher.view()
            api.stop()
            assert run_until(clock, partial(more_watch_errors_than, view)), round_
            api.start(api.port)
            key = ("ml", f"pod-{round_}")
            api.put_pod(api.pod(*key))
            assert run_until(clock, partial(has_pod, key)), round_
            api.expire_history()
            assert run_until(clock, partial(more_relists_than, view)), round_
        # The fake's handler threads end with their connections; the watcher's must not pile up.
        now = threads_and_fds
        assert wait_for(lambda: now()[0] <= before[0] + 3 and now()[1] <= before[1] + 3), (
            before,
            now(),
        )
    finally:
        watcher.stop(timeout=3)


def test_stop_returns_promptly_during_a_quiet_watch(api, clock):
    def watch_answered(watcher: KubernetesWatcher) -> bool:
        return watcher.view().pods_synced

    def pods_listed(watcher: KubernetesWatcher) -> bool:
        return watcher.view().pods_updated_at is not None

    # Stopped while its watch is open and quiet, and (a race stop() used to lose, waiting for
    # the server's timeout) just after the LIST, while the watch is being asked for.
    for moment in (watch_answered, pods_listed):
        watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=30)
        watcher.start()
        assert wait_for(partial(moment, watcher), step=0.001)
        started = time.monotonic()
        watcher.stop(timeout=5)
        # Every read is woken, the node's too: none waits for the server's 30 s.
        assert time.monotonic() - started < 1, moment.__name__
        assert not any(thread.alive for thread in [watcher, *watcher._side_watches()])


def test_label_allowlist_sanitising_collisions_and_cap(api, clock):
    labels = {f"k{i:02d}": str(i) for i in range(15)}
    labels.update(
        {"app.kubernetes.io/name": "trainer", "app.kubernetes.io_name": "other", "ignored": "x"}
    )
    api.put_pod(api.pod("ml", "many", labels=labels))
    watcher = make_watcher(
        api.host,
        clock=clock,
        watch_timeout_seconds=HELD_OPEN,
        label_allowlist=re.compile(r"k\d+|app\.kubernetes\.io.*"),
        max_labels_per_pod=12,
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
def test_label_values_survive_verbatim(api, clock, value):
    api.put_pod(api.pod("ml", "odd", labels={"team": value}))
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, label_allowlist=re.compile("team")
    )
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

"""The ResourceSlice watch, through the real `kubernetes` client against the fake API server, and
the reading of ResourceSlice objects, hostile ones included.

The watchers run on a ManualClock, their watches held open as in production: the no-DRA
recheck, a backoff or a restart lasts until the test moves the clock past it. A forged slice
against the simulated DRA node is in tests/process/test_resource_slice_watch.py."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from kube_gpu_exporter.exporter.dra.slices import (
    MAX_DEVICES_PER_SLICE,
    MAX_SLICES_PER_NODE,
    ParsedSlice,
    SliceDevice,
    attribute_value,
    offered_devices,
    parse_resource_slice,
)
from kube_gpu_exporter.exporter.kubernetes import slice_watch
from kube_gpu_exporter.exporter.kubernetes.slice_watch import NO_DRA_RECHECK_SECONDS, SliceStore
from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock
from tests.conftest import wait_for
from tests.support.clock_steps import at_least_parked, run_until, within_jitter
from tests.support.fake_kube_api import SLICES, FakeKubeApi, as_v1beta1, slice_device
from tests.support.kubernetes import NODE, make_watcher

V1 = "/apis/resource.k8s.io/v1/resourceslices"
V1BETA1 = "/apis/resource.k8s.io/v1beta1/resourceslices"
V1BETA2 = "/apis/resource.k8s.io/v1beta2/resourceslices"
GPU_A, GPU_B = (
    "GPU-aaaaaaaa-0000-0000-0000-000000000000",
    "GPU-bbbbbbbb-0000-0000-0000-000000000000",
)
MIG_A = "MIG-aaaaaaaa-1111-1111-1111-111111111111"
MIG_NAME = "gpu-1-mig-1g10gb-19-0"
HELD_OPEN = 300  # watch_timeout_seconds: longer than any test here


def gpu(name: str, uuid: str) -> dict:
    return slice_device(name, type="gpu", uuid=uuid)


def mig(name: str, uuid: str, parent: str, profile: str) -> dict:
    return slice_device(name, type="mig", uuid=uuid, parentUUID=parent, profile=profile)


@contextmanager
def watching(api: FakeKubeApi, clock: ManualClock, **kwargs: Any) -> Iterator[KubernetesWatcher]:
    kwargs.setdefault("watch_resource_slices", True)
    kwargs.setdefault("watch_timeout_seconds", HELD_OPEN)
    watcher = make_watcher(api.host, clock=clock, **kwargs)
    watcher.start()
    try:
        yield watcher
    finally:
        started = time.monotonic()
        watcher.stop(timeout=3)
        assert time.monotonic() - started < 5


def offered(watcher: KubernetesWatcher) -> dict[str, SliceDevice]:
    return {name: device for (_pool, name), device in watcher.view().resource_slices.items()}


def synced_with(watcher: KubernetesWatcher, names: set[str]) -> bool:
    return watcher.view().slices_synced is True and set(offered(watcher)) == names


def lists(requests: list[tuple[str, dict[str, list[str]]]]) -> list[dict[str, list[str]]]:
    return [q for _p, q in requests if "watch" not in q]


def watches(requests: list[tuple[str, dict[str, list[str]]]]) -> list[dict[str, list[str]]]:
    return [q for _p, q in requests if "watch" in q]


# ---- the watch ----


def test_the_watch_is_off_unless_asked_for(api, clock):
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    with watching(api, clock, watch_resource_slices=False) as watcher:
        assert wait_for(lambda: watcher.view().pods_synced and watcher.view().node_synced)
        view = watcher.view()
        assert view.slices_synced is None and view.resource_slices == {}
    assert api.slice_requests() == []


def test_v1_list_then_watch_events_reach_the_view(api, clock):
    api.put_slice(
        api.resource_slice(
            "node-gpus", [gpu("gpu-0", GPU_A), mig(MIG_NAME, MIG_A, GPU_B, "1g.10gb")]
        )
    )
    with watching(api, clock) as watcher:
        assert watcher.view().slices_synced is False  # on, not listed yet
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", MIG_NAME}))
        assert offered(watcher)[MIG_NAME] == SliceDevice(
            NODE, MIG_NAME, "mig", MIG_A, parent_uuid=GPU_B, profile="1g.10gb"
        )
        assert offered(watcher)["gpu-0"] == SliceDevice(NODE, "gpu-0", "gpu", GPU_A)
        assert watcher.view().slices_updated_at is not None
        # ADDED: a second pool.
        api.put_slice(api.resource_slice("extra", [gpu("gpu-5", GPU_B)], pool="extra-pool"))
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", MIG_NAME, "gpu-5"}))
        assert ("extra-pool", "gpu-5") in watcher.view().resource_slices
        # MODIFIED: the MIG device is gone from the first slice.
        api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)], generation=2))
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-5"}))
        # DELETED.
        api.delete_slice("extra")
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
        assert watcher.view().watch_errors == 0
    assert all(path == V1 for path, _q in api.slice_requests())


def test_v1beta2_is_used_on_a_cluster_serving_it_and_v1beta1(api, clock):
    # Kubernetes 1.33 serves v1beta2 and v1beta1 (the devices' shape of v1beta2 is v1's).
    api.slice_versions = {"v1beta2", "v1beta1"}
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
    paths = [path for path, _q in api.slice_requests()]
    assert paths[0] == V1 and set(paths[1:]) == {V1BETA2}, paths


def test_v1beta1_is_used_when_v1_is_not_served(api, clock):
    api.slice_versions = {"v1beta1"}
    api.put_slice(api.resource_slice("node-gpus", [mig(MIG_NAME, MIG_A, GPU_B, "1g.10gb")]))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {MIG_NAME}))
        assert offered(watcher)[MIG_NAME].parent_uuid == GPU_B  # read from `basic`
        api.put_slice(
            api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)], generation=2)
        )  # through the v1beta1 watch
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
        # A relist (after the 410 Gone and its backoff) asks the version that answered first.
        before = len(api.slice_requests())
        api.expire_history()
        assert run_until(clock, lambda: len(lists(api.slice_requests()[before:])) >= 1)
    paths = [path for path, _q in api.slice_requests()]
    assert paths[:2] == [V1, V1BETA2] and set(paths[2:]) == {V1BETA1}, paths
    assert watches([(p, q) for p, q in api.slice_requests() if p == V1BETA1])
    assert watcher.view().watch_errors == 0  # a 404 for v1 is no error


def test_no_dra_api_means_unsynced_and_no_request_storm(api, clock, caplog):
    api.slice_versions = set()
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.kubernetes.slice_watch")
    with watching(api, clock) as watcher:
        # v1, v1beta2 and v1beta1 answer 404: the watch waits ten minutes before asking again.
        [wait] = at_least_parked(clock)
        assert wait == NO_DRA_RECHECK_SECONDS
        assert wait_for(lambda: watcher.view().pods_synced)
        # However long the other watches run meanwhile, nothing more is asked before then.
        clock.advance(NO_DRA_RECHECK_SECONDS - 1)
        assert at_least_parked(clock) == [1]
        assert [p for p, _q in api.slice_requests()] == [V1, V1BETA2, V1BETA1]
        view = watcher.view()
        assert view.slices_synced is None and view.resource_slices == {}
        assert view.watch_errors == 0
        assert watcher.problem() is None
    said = [r for r in caplog.records if "serves no ResourceSlices" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO


def test_no_dra_api_is_asked_again_and_found_later(api, clock, caplog):
    api.slice_versions = set()
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.kubernetes.slice_watch")
    with watching(api, clock) as watcher:
        # Three rounds of v1, v1beta2 and v1beta1, the recheck apart.
        for round_ in range(1, 4):
            if round_ > 1:
                clock.advance(NO_DRA_RECHECK_SECONDS)
            assert at_least_parked(clock) == [NO_DRA_RECHECK_SECONDS]
            assert len(api.slice_requests()) == 3 * round_
        assert watcher.view().slices_synced is None
        said = [r for r in caplog.records if "serves no ResourceSlices" in r.getMessage()]
        assert len(said) == 1
        api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
        api.slice_versions = {"v1"}
        clock.advance(NO_DRA_RECHECK_SECONDS)
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))


def test_410_gone_relists_and_the_view_is_right_afterwards(api, clock):
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    api.put_slice(api.resource_slice("old", [gpu("gpu-9", GPU_B)], pool="other-pool"))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-9"}))
        relists = watcher.view().relists
        slice_lists = len(lists(api.slice_requests()))
        api.expire_history()
        # The watch ends, the next one is answered 410 Gone, and the slices are listed again
        # after a backoff; until then the view may miss events, and says so.
        assert run_until(clock, lambda: watcher.view().slices_synced is False)
        # Made while nothing watches the slices: only the relist can bring them.
        api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A), gpu("gpu-1", GPU_B)]))
        api.delete_slice("old")
        assert run_until(clock, lambda: len(lists(api.slice_requests())) > slice_lists)
        assert watcher.view().relists > relists
        assert run_until(clock, lambda: synced_with(watcher, {"gpu-0", "gpu-1"}))
        # And the watch after the relist goes on delivering.
        api.put_slice(api.resource_slice("late", [gpu("gpu-2", GPU_B)], pool="late-pool"))
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-1", "gpu-2"}))
        assert watcher.view().watch_errors == 0


def test_bookmarks_advance_the_slice_watch(api, clock):
    with watching(api, clock) as watcher:
        assert wait_for(lambda: watcher.view().slices_synced)
        [listed] = [q.get("resourceVersion") for q in watches(api.slice_requests())]
        # A bookmark carries no object, only a version: seen once its event stamped the view.
        clock.advance(1)
        version = api.bookmark(SLICES)
        assert wait_for(lambda: watcher.view().slices_updated_at == clock.time())
        # The server ends the open watch (compacting its history is the fake's way to end one
        # at once): the next watch resumes from the bookmark's version, not from the list's.
        api.expire_history()
        assert wait_for(lambda: len(watches(api.slice_requests())) >= 2)
        resumed = [q.get("resourceVersion") for q in watches(api.slice_requests())]
        assert resumed[:2] == [listed, [str(version)]]


def test_only_the_newest_generation_of_a_pool_counts(api, clock):
    api.put_slice(api.resource_slice("gen-1", [gpu("gpu-0", GPU_A)], generation=1))
    api.put_slice(
        api.resource_slice("gen-2", [gpu("gpu-0", GPU_B), gpu("gpu-1", GPU_A)], generation=2)
    )
    api.put_slice(api.resource_slice("elsewhere", [gpu("gpu-7", GPU_A)], pool="p2"))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-1", "gpu-7"}))
        assert offered(watcher)["gpu-0"].uuid == GPU_B
        # The driver deletes the newer generation: the older one is all the pool has left.
        api.delete_slice("gen-2")
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-7"}))
        assert offered(watcher)["gpu-0"].uuid == GPU_A


def test_other_drivers_slices_are_ignored(api, clock):
    api.put_slice(
        api.resource_slice(
            "imex", [slice_device("channel-0", type="channel")], driver="compute-domain.nvidia.com"
        )
    )
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
        api.put_slice(
            api.resource_slice(
                "imex-2", [slice_device("channel-1")], driver="compute-domain.nvidia.com"
            )
        )
        api.put_slice(api.resource_slice("marker", [gpu("gpu-1", GPU_B)], pool="marker"))
        # Events arrive in version order: with the marker applied, the foreign one was seen.
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-1"}))


def test_every_slice_request_is_scoped_to_this_node(api, clock):
    api.put_slice(
        api.resource_slice("theirs", [gpu("gpu-5", GPU_B)], node="gpu-node-8", pool="gpu-node-8")
    )
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
        api.put_slice(
            api.resource_slice("theirs-2", [gpu("gpu-6", GPU_B)], node="gpu-node-8", pool="x")
        )
        api.put_slice(api.resource_slice("marker", [gpu("gpu-1", GPU_B)], pool="marker"))
        assert wait_for(lambda: synced_with(watcher, {"gpu-0", "gpu-1"}))
        api.expire_history()  # a relist too, after a 410 Gone and its backoff
        assert run_until(clock, lambda: len(lists(api.slice_requests())) >= 2)
    requests = api.slice_requests()
    assert len(watches(requests)) >= 1
    # Both are field selectors the API server supports for ResourceSlices.
    selector = [f"spec.nodeName={NODE},spec.driver=gpu.nvidia.com"]
    for _path, query in requests:
        assert query.get("fieldSelector") == selector, query
    assert all(q.get("resourceVersion") == ["0"] for q in lists(requests))
    assert all(q.get("allowWatchBookmarks", [""])[0].lower() == "true" for q in watches(requests))


def test_forbidden_is_a_counted_error_and_recovers(api, clock, caplog):
    api.forbidden = {SLICES}
    with watching(api, clock) as watcher:
        # Refused three times, a backoff apart.
        [wait] = at_least_parked(clock)
        for _ in range(2):
            clock.advance(wait)
            [wait] = at_least_parked(clock)
        assert wait_for(lambda: watcher.view().pods_synced)
        view = watcher.view()
        assert view.watch_errors == 3
        assert view.slices_synced is False and view.resource_slices == {}
        # Not taken for a cluster without DRA: no fallback to v1beta1 on a 403.
        assert [p for p, _q in api.slice_requests()] == [V1] * 3
        api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
        api.forbidden = set()
        clock.advance(wait)
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
    failures = [r for r in caplog.records if "Kubernetes API watch failed" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert "403" in failures[0].getMessage()
    assert "kubernetes-resourceslices" in failures[0].getMessage()


def test_the_slice_watch_is_supervised(api, clock, monkeypatch):
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    original = slice_watch.SliceStore.apply
    faults = {"left": 1}

    def apply(self: SliceStore, kind: str, obj: object) -> None:
        if faults["left"]:
            faults["left"] -= 1
            raise RuntimeError("injected fault in SliceStore.apply")
        original(self, kind, obj)

    monkeypatch.setattr(slice_watch.SliceStore, "apply", apply)
    with watching(api, clock) as watcher:
        thread = next(
            t for t in watcher._side_watches() if t.thread_name == "kubernetes-resourceslices"
        )
        # Crashed: unsynced, and restarted after the supervisor's first backoff, 1 s give or
        # take its jitter.
        [wait] = at_least_parked(clock)
        assert within_jitter(wait, 1.0), wait
        assert thread.restarts == 0 and not thread.thread_healthy
        assert watcher.view().slices_synced is False
        clock.advance(wait)
        assert wait_for(lambda: thread.restarts == 1 and synced_with(watcher, {"gpu-0"}))
        assert thread.thread_healthy and watcher.problem() is None


def test_a_malformed_slice_in_the_list_is_skipped(api, clock):
    bad = api.resource_slice("bad", [gpu("gpu-3", GPU_B)])
    bad["spec"]["pool"]["generation"] = "one"
    api.put_slice(bad)
    api.put_slice(api.resource_slice("node-gpus", [gpu("gpu-0", GPU_A)]))
    with watching(api, clock) as watcher:
        assert wait_for(lambda: synced_with(watcher, {"gpu-0"}))
        assert watcher.thread_healthy and watcher.problem() is None


# ---- reading one object ----


def test_v1_v1beta2_and_v1beta1_read_alike():
    v1 = FakeKubeApi(NODE).resource_slice(
        "s", [gpu("gpu-0", GPU_A), mig(MIG_NAME, MIG_A, GPU_B, "1g.10gb")], generation=4
    )
    v1["metadata"]["name"] = "s"
    v1beta2 = dict(v1, apiVersion="resource.k8s.io/v1beta2")
    expected = ParsedSlice(
        "s",
        "gpu.nvidia.com",
        NODE,
        4,
        (
            SliceDevice(NODE, "gpu-0", "gpu", GPU_A),
            SliceDevice(NODE, MIG_NAME, "mig", MIG_A, GPU_B, "1g.10gb"),
        ),
    )
    for obj in (v1, v1beta2, as_v1beta1(v1)):
        assert parse_resource_slice(obj) == expected


def test_attribute_names_may_be_qualified_with_the_driver_domain():
    obj = FakeKubeApi(NODE).resource_slice("s", [])
    obj["spec"]["devices"] = [
        {
            "name": "gpu-0",
            "attributes": {
                "gpu.nvidia.com/type": {"string": "gpu"},
                "gpu.nvidia.com/uuid": {"string": GPU_A},
                "other.example/uuid": {"string": "not ours"},
            },
        }
    ]
    parsed = parse_resource_slice(obj)
    assert parsed is not None and parsed.devices == (SliceDevice(NODE, "gpu-0", "gpu", GPU_A),)


def test_attribute_values_of_every_kind():
    attributes: dict[str, object] = {
        "s": {"string": "x"},
        "v": {"version": "1.2.3"},
        "i": {"int": 3},
        "b": {"bool": True},
        "odd": {"int": True},
        "bare": "x",
        "long": {"string": "x" * 1000},
    }
    read = [attribute_value(attributes, "d", k) for k in ("s", "v", "i", "b", "odd", "bare")]
    assert read == ["x", "1.2.3", 3, True, None, None]
    assert attribute_value(attributes, "d", "long") is None
    assert attribute_value(attributes, "d", "absent") is None


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        "slice",
        {},
        {"metadata": {"name": "s"}},
        {"metadata": {"name": "s"}, "spec": None},
        {"metadata": {"name": "s"}, "spec": []},
        {"metadata": None, "spec": {"driver": "gpu.nvidia.com"}},
        {"metadata": {"name": 7}, "spec": {}},
        {"metadata": {"name": "s"}, "spec": {"driver": 1, "pool": {"name": "p", "generation": 1}}},
        {"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com"}},
        {"metadata": {"name": "s"}, "spec": {"driver": "gpu.nvidia.com", "pool": "p"}},
        {"metadata": {"name": "s"}, "spec": {"driver": "d", "pool": {"name": "", "generation": 1}}},
        {"metadata": {"name": "s"}, "spec": {"driver": "d", "pool": {"name": "p"}}},
        {
            "metadata": {"name": "s"},
            "spec": {"driver": "d", "pool": {"name": "p", "generation": "1"}},
        },
        {
            "metadata": {"name": "s"},
            "spec": {"driver": "d", "pool": {"name": "p", "generation": True}},
        },
        {
            "metadata": {"name": "s"},
            "spec": {"driver": "d", "pool": {"name": "p", "generation": 1.5}},
        },
        {
            "metadata": {"name": "s" * 300},
            "spec": {"driver": "d", "pool": {"name": "p", "generation": 1}},
        },
    ],
)
def test_objects_without_the_essentials_are_none(obj):
    assert parse_resource_slice(obj) is None


def test_malformed_devices_are_skipped():
    obj: dict[str, Any] = {
        "metadata": {"name": "s"},
        "spec": {"driver": "gpu.nvidia.com", "pool": {"name": "p", "generation": 1}},
    }
    for devices in ("gpu-0", {"name": "gpu-0"}, None, 3):
        obj["spec"]["devices"] = devices
        parsed = parse_resource_slice(obj)
        assert parsed is not None and parsed.devices == ()
    obj["spec"]["devices"] = [
        None,
        1,
        [],
        {"name": 5},
        {"name": ""},
        {"attributes": {}},
        {"name": "plain"},
        {"name": "attrs-list", "attributes": [1, 2]},
        {"name": "bare-values", "attributes": {"type": "gpu", "uuid": ["GPU-x"]}},
        {"name": "int-uuid", "attributes": {"uuid": {"int": 3}}},
        {"name": "basic-odd", "basic": "x", "attributes": {"type": {"string": "gpu"}}},
        {"name": "basic-no-attrs", "basic": {"attributes": None}},
    ]
    parsed = parse_resource_slice(obj)
    assert parsed is not None
    assert [(d.name, d.type, d.uuid) for d in parsed.devices] == [
        ("plain", "", ""),
        ("attrs-list", "", ""),
        ("bare-values", "", ""),
        ("int-uuid", "", ""),
        ("basic-odd", "gpu", ""),
        ("basic-no-attrs", "", ""),
    ]


def test_a_huge_device_list_is_cut_short():
    obj = FakeKubeApi(NODE).resource_slice(
        "s", [gpu(f"gpu-{i}", GPU_A) for i in range(MAX_DEVICES_PER_SLICE * 5)]
    )
    started = time.monotonic()
    parsed = parse_resource_slice(obj)
    assert parsed is not None and len(parsed.devices) == MAX_DEVICES_PER_SLICE
    assert parsed.devices[-1].name == f"gpu-{MAX_DEVICES_PER_SLICE - 1}"
    assert time.monotonic() - started < 2


# ---- folding a node's slices ----


def piece(name: str, pool: str, generation: int, *devices: str, driver: str = "gpu.nvidia.com"):
    return ParsedSlice(
        name, driver, pool, generation, tuple(SliceDevice(pool, d, "gpu") for d in devices)
    )


def test_offered_devices_newest_generation_per_pool_and_nvidia_only():
    slices = [
        piece("a-old", "p1", 1, "gpu-0", "gpu-9"),
        piece("a-new", "p1", 2, "gpu-0"),
        piece("a-new-2", "p1", 2, "gpu-1", "gpu-0"),  # announced twice: the first stays
        piece("b", "p2", 1, "gpu-2"),
        piece("imex", "p1", 7, "channel-0", driver="compute-domain.nvidia.com"),
    ]
    devices = offered_devices(slices)
    assert set(devices) == {("p1", "gpu-0"), ("p1", "gpu-1"), ("p2", "gpu-2")}


def test_offered_devices_reads_a_bounded_number_of_slices():
    slices = [piece(f"s{i:04d}", f"p{i}", 1, "gpu-0") for i in range(MAX_SLICES_PER_NODE * 3)]
    devices = offered_devices(reversed(slices))
    assert len(devices) == MAX_SLICES_PER_NODE
    assert ("p0", "gpu-0") in devices and (f"p{MAX_SLICES_PER_NODE}", "gpu-0") not in devices


def test_the_store_drops_slices_that_turn_foreign_or_malformed_and_is_bounded():
    api = FakeKubeApi(NODE)
    store = SliceStore()
    store.apply("ADDED", api.resource_slice("s", [gpu("gpu-0", GPU_A)]))
    assert set(store.offered()) == {(NODE, "gpu-0")}
    store.apply("MODIFIED", api.resource_slice("s", [gpu("gpu-0", GPU_A)], driver="x.example"))
    assert store.offered() == {} and store.slices == {}  # foreign slices take no room either
    store.apply("ADDED", api.resource_slice("s", [gpu("gpu-0", GPU_A)]))
    broken = api.resource_slice("s", [])
    broken["spec"] = None
    store.apply("MODIFIED", broken)
    assert store.offered() == {}
    store.apply("ADDED", {"metadata": {}})  # no name: nothing to key it by
    for i in range(MAX_SLICES_PER_NODE + 5):
        store.apply("ADDED", api.resource_slice(f"s{i}", [gpu("gpu-0", GPU_A)], pool=f"p{i}"))
    assert len(store.slices) == MAX_SLICES_PER_NODE and store.refused == 5
    store.apply("DELETED", api.resource_slice("s0", []))
    assert "s0" not in store.slices


@pytest.mark.parametrize(
    ("taints", "tainted"),
    [
        ([{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}], True),
        ([{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoExecute"}], True),
        ([{"key": "maintenance", "effect": "None"}], False),
        ([None, "x", {"effect": 3}], False),
        ("NoSchedule", False),
        (None, False),
    ],
)
def test_device_taints_that_block_allocation_are_read_in_every_version(taints, tainted):
    device = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}, "taints": taints}
    v1 = {
        "metadata": {"name": "s"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "pool": {"name": "p", "generation": 1},
            "devices": [device],
        },
    }
    for obj in (v1, as_v1beta1(v1)):
        parsed = parse_resource_slice(obj)
        assert parsed is not None and parsed.devices[0].tainted is tainted

"""dcgm-exporter's Kubernetes opt-ins on the DCGM series: `pod_uid` (--kubernetes.enable-pod-uid),
the pod's own labels (--kubernetes.enable-pod-labels) and the per-pod copies' `vgpu`
(--attribution.shared-devices=per-pod), through the renderer, the watcher and the process."""

from __future__ import annotations

import re
from dataclasses import replace
from types import MappingProxyType

import pytest

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import (
    EMPTY_VIEW,
    KubernetesView,
    LabelSelection,
    PodMetadata,
    pod_metadata,
    series_labels,
)
from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher
from kube_gpu_exporter.exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import LABELS, render, wait_for
from tests.support.kubernetes import client_for

GPU_RESOURCE, SHARED_RESOURCE = "nvidia.com/gpu", "nvidia.com/gpu.shared"
UID_ON = replace(LABELS, pod_uid_on_series=True)
LABELS_ON = replace(LABELS, pod_labels_on_series=True)
PER_POD = replace(LABELS, shared_device_series="per-pod")
ALL_ON = replace(LABELS, pod_uid_on_series=True, pod_labels_on_series=True)

# ---- building the inputs ----


def held(*rows: tuple[str, str, str, str, list[str]]) -> PodResourcesSnapshot:
    """Allocations as the kubelet lists them: (namespace, pod, container, resource, device IDs)."""
    allocations = tuple(
        Allocation(namespace, pod, container, resource, parse_device_id(device_id))
        for namespace, pod, container, resource, ids in rows
        for device_id in ids
    )
    return PodResourcesSnapshot(allocations, None, (), 0.0)


def api_pod(namespace: str, name: str, labels: dict[str, str]) -> dict:
    return {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "labels": labels}
    }


def known(*pods: dict) -> KubernetesView:
    """The watcher's view of `pods` (API objects), through the watcher's own conversion."""
    metas: dict[tuple[str, str], PodMetadata] = {}
    for obj in pods:
        meta = pod_metadata(obj, LabelSelection(on_series=True))[0]
        metas[(meta.namespace, meta.name)] = meta
    return replace(EMPTY_VIEW, pods=MappingProxyType(metas), pods_synced=True)


# ---- reading the output ----

_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def label_pairs(body: str) -> list[tuple[str, str]]:
    pairs = []
    position = 0
    while position < len(body):
        match = _PAIR.match(body, position)
        assert match, f"unparsable label body at {position}: {body!r}"
        pairs.append((match.group(1), match.group(2)))
        position = match.end()
    return pairs


def dcgm_series(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(family, label pairs in order) of every DCGM_* sample; duplicate names stay visible."""
    found = []
    for line in text.splitlines():
        if not line.startswith("DCGM_"):
            continue
        head, _, _value = line.rpartition(" ")
        name, _, body = head.partition("{")
        found.append((name, label_pairs(body.removesuffix("}"))))
    assert found
    return found


def scrape(
    snapshot: NodeSnapshot,
    labels: LabelConfig,
    pods: PodResourcesSnapshot,
    view: KubernetesView | None,
) -> list[tuple[str, dict[str, str]]]:
    text = render(snapshot, labels, AttributionContext(pods=pods, kube=view))
    samples = []
    for name, pairs in dcgm_series(text):
        names = [n for n, _ in pairs]
        assert len(names) == len(set(names)), f"{name} repeats a label: {names}"
        samples.append((name, dict(pairs)))
    return samples


def of_gpu(samples: list[tuple[str, dict[str, str]]], gpu: int) -> list[dict[str, str]]:
    return [labels for _, labels in samples if labels["gpu"] == str(gpu)]


def temperatures(samples: list[tuple[str, dict[str, str]]], gpu: int) -> list[dict[str, str]]:
    """One family's series of a GPU: one per per-pod copy."""
    return [
        labels
        for name, labels in samples
        if name == "DCGM_FI_DEV_GPU_TEMP" and labels["gpu"] == str(gpu)
    ]


@pytest.fixture
def node(sim, make_poller) -> NodeSnapshot:
    return make_poller(sim).sweep()


TRAINER = api_pod(
    "ml", "trainer-0", {"app.kubernetes.io/name": "llm", "team": "vision", "pod-template-hash": "x"}
)


def trainer_on(node: NodeSnapshot, gpu: int = 0) -> PodResourcesSnapshot:
    return held(("ml", "trainer-0", "main", GPU_RESOURCE, [node.gpus[gpu].identity.uuid]))


# ---- pod_uid and pod labels on an exclusively held device ----


def test_options_off_leave_only_pod_namespace_container(node):
    samples = scrape(node, LABELS, trainer_on(node), known(TRAINER))
    for labels in of_gpu(samples, 0):
        assert (labels["pod"], labels["namespace"], labels["container"]) == (
            "trainer-0",
            "ml",
            "main",
        )
        assert not {"pod_uid", "vgpu", "team", "app_kubernetes_io_name"} & set(labels)


def test_pod_uid_on_every_series_of_the_held_gpu_only(node):
    samples = scrape(node, UID_ON, trainer_on(node), known(TRAINER))
    held_series = of_gpu(samples, 0)
    # Every family of the device, not one: temperature, clocks, XID, energy, ...
    assert len({name for name, labels in samples if labels["gpu"] == "0"}) > 10
    assert all(labels["pod_uid"] == "uid-trainer-0" for labels in held_series)
    assert [n for n, _ in label_pairs_of_first(node)][-4:] == [
        "container",
        "namespace",
        "pod",
        "pod_uid",
    ]
    # Unallocated GPUs carry neither the pod nor its UID; pod labels stay off.
    for labels in of_gpu(samples, 5):
        assert "pod" not in labels and "pod_uid" not in labels
    assert not any("team" in labels for _, labels in samples)


def label_pairs_of_first(node: NodeSnapshot) -> list[tuple[str, str]]:
    text = render(node, UID_ON, AttributionContext(pods=trainer_on(node), kube=known(TRAINER)))
    return next(pairs for name, pairs in dcgm_series(text) if name == "DCGM_FI_DEV_GPU_TEMP")


def test_pod_uid_left_out_until_the_api_knows_the_pod(node):
    samples = scrape(node, UID_ON, trainer_on(node), known())
    assert all(
        "pod_uid" not in labels and labels["pod"] == "trainer-0" for labels in of_gpu(samples, 0)
    )
    # No Kubernetes view at all (enrichment off): the same.
    samples = scrape(node, UID_ON, trainer_on(node), None)
    assert all("pod_uid" not in labels for labels in of_gpu(samples, 0))


def test_pod_labels_in_dcgm_spelling_on_every_series_of_the_held_device(node):
    samples = scrape(node, LABELS_ON, trainer_on(node), known(TRAINER))
    for labels in of_gpu(samples, 0):
        assert labels["app_kubernetes_io_name"] == "llm"  # no label_ prefix, unlike ours
        assert labels["team"] == "vision"
        assert labels["pod_template_hash"] == "x"
        assert "label_team" not in labels and "pod_uid" not in labels
    assert not any("team" in labels for labels in of_gpu(samples, 1))


def test_mig_instance_holder_gets_uid_and_labels(node):
    gpu = node.gpus[6]
    instance = gpu.mig_instances[0]
    pods = held(("ml", "trainer-0", "main", "nvidia.com/mig-1g.10gb", [instance.uuid]))
    samples = scrape(node, ALL_ON, pods, known(TRAINER))
    gi = str(instance.gpu_instance_id)
    on_instance = [labels for labels in of_gpu(samples, 6) if labels.get("GPU_I_ID") == gi]
    assert on_instance
    assert all(
        labels["pod_uid"] == "uid-trainer-0" and labels["team"] == "vision"
        for labels in on_instance
    )
    others = [labels for labels in of_gpu(samples, 6) if labels.get("GPU_I_ID") != gi]
    assert others and not any({"pod_uid", "team"} & set(labels) for labels in others)


# ---- collisions, allow-list and cap ----

HOSTILE_KEYS = {
    "pod": "p",  # our own attribute
    "gpu": "g",
    "UUID": "u",
    "Hostname": "h1",
    "hostname": "h2",
    "modelName": "m",
    "GPU_I_ID": "i",
    "pod_uid": "x",
    "vgpu": "v",
    "err_msg": "e",
    "clock_event": "c",
    "DCGM_FI_DRIVER_VERSION": "d",
    "__meta": "reserved by Prometheus",  # sanitised and reserved alike
    "1password.com/vault": "digit first",  # no valid label name without a prefix
    "a.b": "first",  # and a_b: both sanitise to a_b; the first key in order stays
    "a_b": "second",
    "team": "vision",
}


def test_colliding_and_invalid_keys_are_dropped_and_counted():
    chosen, dropped = series_labels(HOSTILE_KEYS, None, 50)
    assert chosen == (("a_b", "first"), ("team", "vision"))
    assert dropped == {"reserved": 12, "invalid": 2, "duplicate": 1}


def test_no_duplicate_label_reaches_the_exposition(node):
    pod = api_pod("ml", "trainer-0", HOSTILE_KEYS)
    samples = scrape(node, ALL_ON, trainer_on(node), known(pod))
    for labels in of_gpu(samples, 0):
        assert (labels["pod"], labels["gpu"], labels["pod_uid"]) == (
            "trainer-0",
            "0",
            "uid-trainer-0",
        )
        assert (labels["a_b"], labels["team"]) == ("first", "vision")
        assert labels["hostname"] == "node-a"
        assert "1password_com_vault" not in labels and "__meta" not in labels


def test_allowlist_filters_and_cap_keeps_the_first_names():
    labels = {
        "team": "a",
        "app.kubernetes.io/name": "b",
        "app.kubernetes.io/part-of": "c",
        "x": "d",
    }
    allowlist = re.compile(r"team|app\.kubernetes\.io/.*")
    chosen, dropped = series_labels(labels, allowlist, 2)
    assert chosen == (("app_kubernetes_io_name", "b"), ("app_kubernetes_io_part_of", "c"))
    assert dropped == {"cap": 1}  # `x` is filtered, not dropped
    chosen, dropped = series_labels(labels, None, 10)
    assert [n for n, _ in chosen] == [
        "app_kubernetes_io_name",
        "app_kubernetes_io_part_of",
        "team",
        "x",
    ]
    assert not dropped


def test_series_labels_cost_nothing_when_the_option_is_off():
    meta, _, dropped = pod_metadata(api_pod("ml", "p", HOSTILE_KEYS), LabelSelection())
    assert meta.series_labels == () and not dropped


# ---- per-pod copies (dcgm-exporter's virtual-GPU mode) ----


def test_shared_gpu_without_per_pod_has_no_pod_uid_or_vgpu(node):
    uuid = node.gpus[3].identity.uuid
    pods = held(
        ("chat", "a", "server", SHARED_RESOURCE, [f"{uuid}::0"]),
        ("chat", "b", "server", SHARED_RESOURCE, [f"{uuid}::1"]),
    )
    view = known(api_pod("chat", "a", {"team": "x"}), api_pod("chat", "b", {"team": "y"}))
    samples = scrape(node, ALL_ON, pods, view)
    series = of_gpu(samples, 3)
    assert series and not any({"pod", "pod_uid", "vgpu", "team"} & set(labels) for labels in series)


def test_per_pod_copies_carry_vgpu_and_uid_once_per_container(node):
    uuid = node.gpus[3].identity.uuid
    pods = held(
        ("chat", "a", "server", SHARED_RESOURCE, [f"{uuid}::0"]),
        # One container, three shares: one copy, shares in numeric order.
        ("chat", "b", "server", SHARED_RESOURCE, [f"{uuid}::10", f"{uuid}::2", f"{uuid}::1"]),
        # A pod the API does not know (yet): no pod_uid, the rest as usual.
        ("chat", "c", "server", SHARED_RESOURCE, [f"{uuid}::3"]),
    )
    view = known(api_pod("chat", "a", {}), api_pod("chat", "b", {}))
    samples = scrape(node, PER_POD, pods, view)  # pod_uid without --kubernetes.enable-pod-uid
    temps = temperatures(samples, 3)
    by_pod = {labels["pod"]: labels for labels in temps}
    assert len(temps) == len(by_pod) == 3
    assert (by_pod["a"]["vgpu"], by_pod["a"]["pod_uid"]) == ("0", "uid-a")
    assert (by_pod["b"]["vgpu"], by_pod["b"]["pod_uid"]) == ("1,2,10", "uid-b")
    assert by_pod["c"]["vgpu"] == "3" and "pod_uid" not in by_pod["c"]
    assert list(by_pod["a"])[-5:] == ["container", "namespace", "pod", "pod_uid", "vgpu"]
    # Pod labels stay opt-in on the copies too.
    assert not any("team" in labels for labels in temps)


def test_per_pod_single_holder_and_whole_gpus(node):
    uuid = node.gpus[3].identity.uuid
    pods = held(
        ("chat", "a", "server", SHARED_RESOURCE, [f"{uuid}::5"]),
        ("ml", "trainer-0", "main", GPU_RESOURCE, [node.gpus[0].identity.uuid]),
    )
    view = known(api_pod("chat", "a", {"team": "x"}), TRAINER)
    samples = scrape(node, replace(PER_POD, pod_labels_on_series=True), pods, view)
    [shared] = temperatures(samples, 3)
    assert (shared["pod"], shared["vgpu"], shared["pod_uid"], shared["team"]) == (
        "a",
        "5",
        "uid-a",
        "x",
    )
    # A whole GPU is no share: pod_uid as on every per-pod copy, but no vgpu.
    for labels in of_gpu(samples, 0):
        assert labels["pod_uid"] == "uid-trainer-0" and "vgpu" not in labels
    for labels in of_gpu(samples, 5):
        assert "pod" not in labels and "vgpu" not in labels


def test_gke_shares_use_the_vgpu_number(node):
    pods = held(
        ("chat", "a", "server", SHARED_RESOURCE, ["nvidia2/vgpu1", "nvidia2/vgpu2"]),
        ("chat", "b", "server", SHARED_RESOURCE, ["nvidia2/vgpu3"]),
    )
    samples = scrape(node, PER_POD, pods, known(api_pod("chat", "a", {})))
    by_pod = {labels["pod"]: labels["vgpu"] for labels in temperatures(samples, 2)}
    assert by_pod == {"a": "1,2", "b": "3"}


# ---- through the real watcher ----


def test_watcher_keeps_series_labels_and_counts_drops(api, node):
    api.put_pod(api.pod("ml", "trainer-0", labels={"team": "vision", "pod": "clash", "1x": "bad"}))
    watcher = KubernetesWatcher(
        client_for(api.host),
        "gpu-node-7",
        series_labels=True,
        watch_timeout_seconds=1,
        max_backoff_seconds=0.2,
    )
    assert dict(watcher.view().series_labels_dropped) == {
        "cap": 0,
        "duplicate": 0,
        "invalid": 0,
        "not_text": 0,
        "reserved": 0,
    }
    watcher.start()
    try:
        assert wait_for(lambda: ("ml", "trainer-0") in watcher.view().pods)
        api.put_pod(api.pod("ml", "later", labels={"hostname": "clash", "team": "x"}))
        assert wait_for(lambda: ("ml", "later") in watcher.view().pods)
        view = watcher.view()
        assert view.pods[("ml", "trainer-0")].series_labels == (("team", "vision"),)
        assert dict(view.series_labels_dropped)["reserved"] == 2
        assert dict(view.series_labels_dropped)["invalid"] == 1
        samples = scrape(node, ALL_ON, trainer_on(node), view)
        for labels in of_gpu(samples, 0):
            assert (labels["team"], labels["pod"], labels["pod_uid"]) == (
                "vision",
                "trainer-0",
                "uid-trainer-0",
            )
    finally:
        watcher.stop(timeout=3)

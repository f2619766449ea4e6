"""The simulated DRA node: built-in fleets, the fake kubelet's claims over real gRPC, and the
ResourceSlices NVIDIA's GPU DRA driver would publish for it."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pynvml
import pytest
from kubernetes.client import V1beta1ResourceSlice, V1beta2ResourceSlice, V1ResourceSlice

from kube_gpu_exporter.exporter.dra.names import (
    NVIDIA_GPU_DRIVER,
    parse_dra_device_name,
    profile_slug,
)
from kube_gpu_exporter.exporter.dra.slices import offered_devices, parse_resource_slice
from kube_gpu_exporter.exporter.podresources.allocations import PodResourcesSnapshot, from_responses
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2
from kube_gpu_exporter.exporter.simulator.fake_kubelet import COMPUTE_DOMAIN_DRIVER, FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import (
    FleetError,
    builtin_fleets,
    default_fleet,
    resolve_fleet,
)
from kube_gpu_exporter.exporter.simulator.resource_slices import (
    MAX_DEVICES_PER_SLICE,
    resource_slices,
)
from tests.conftest import fleet_from_yaml

DRA_NODE = "sim-dra-node-0"
# What the dra fleet's pods hold, by the driver's names: GPUs 0-4 whole, GPU 7's first 1g.10gb
# (placement start 0, GI profile 19 on H100) and its 3g.40gb (start 4, profile 9).
DRA_HELD = {
    "gpu-0",
    "gpu-1",
    "gpu-2",
    "gpu-3",
    "gpu-4",
    "gpu-7-mig-1g10gb-19-0",
    "gpu-7-mig-3g40gb-9-4",
}
DRA_FREE = {"gpu-5", "gpu-6", "gpu-7-mig-1g10gb-19-1"}
# The three versions' generated models, read alike below: Any, where a union of the three would
# make every attribute read a union of three versions' types.
SLICE_MODELS: dict[str, Any] = {
    "v1": V1ResourceSlice,
    "v1beta2": V1beta2ResourceSlice,
    "v1beta1": V1beta1ResourceSlice,
}


@pytest.fixture
def dra_sim(make_sim) -> FakeNvml:
    return make_sim(resolve_fleet("dra"))


@pytest.fixture
def serve(tmp_path) -> Iterator:
    started: list[FakeKubelet] = []

    def start(sim: FakeNvml, **kwargs) -> FakeKubelet:
        kubelet = FakeKubelet(sim, tmp_path / f"k{len(started)}.sock", **kwargs).start()
        started.append(kubelet)
        return kubelet

    yield start
    for kubelet in started:
        kubelet.stop()


def ask(kubelet: FakeKubelet) -> tuple[api_pb2.ListPodResourcesResponse, PodResourcesSnapshot]:
    """List and GetAllocatableResources as the exporter makes them, and what it parses."""
    client = PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5)
    try:
        listing, allocatable = client.list(), client.allocatable()
    finally:
        client.reset()
    return listing, from_responses(listing, allocatable, frozenset(), 0.0)


def nvml_view(
    sim: FakeNvml,
) -> dict[int, tuple[int, str, list[tuple[str, str, int | None, int | None]]]]:
    """Per GPU index, from the simulator's api object: the minor number, the UUID, and of each
    MIG device its UUID, profile, and, where NVML tells (a privileged caller), its GI profile ID
    and placement start."""
    nvml = sim.api
    nvml.nvmlInit()
    try:
        view = {}
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            migs = []
            if nvml.nvmlDeviceGetMigMode(handle)[0]:
                for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                    try:
                        mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                    except pynvml.NVMLError_NotFound:
                        continue
                    profile = nvml.nvmlDeviceGetName(mig).rsplit(" MIG ", 1)[1]
                    gi = nvml.nvmlDeviceGetGpuInstanceId(mig)
                    try:
                        info = nvml.nvmlGpuInstanceGetInfo(
                            nvml.nvmlDeviceGetGpuInstanceById(handle, gi)
                        )
                        placed = (info.profileId, info.placement.start)
                    except pynvml.NVMLError_NoPermission:
                        placed = (None, None)
                    migs.append((nvml.nvmlDeviceGetUUID(mig), profile, *placed))
            view[index] = (
                nvml.nvmlDeviceGetMinorNumber(handle),
                nvml.nvmlDeviceGetUUID(handle),
                migs,
            )
        return view
    finally:
        nvml.nvmlShutdown()


# ---- built-in fleets and --simulate NAME ----


def test_builtin_fleets_are_shipped_and_parse():
    assert builtin_fleets() == ("default", "dra", "gb200", "mixed")
    assert resolve_fleet(None) == resolve_fleet("") == resolve_fleet("default") == default_fleet()
    dra = resolve_fleet("dra")
    assert dra.node_name == DRA_NODE and dra.driver_major >= 550 and dra.nvml_privileged
    assert {g.allocation for g in dra.gpus} == {"dra"}
    mig = [g.mig for g in dra.gpus if g.mig is not None]
    assert [[p.profile.name for p in placed] for placed in mig] == [
        ["1g.10gb", "1g.10gb", "3g.40gb"]
    ]
    mixed = resolve_fleet("mixed")
    assert [g.allocation for g in mixed.gpus] == ["device-plugin"] * 4 + ["dra"] * 4
    assert {g.workload for g in mixed.gpus[:4]} == {"training", "inference"}
    assert default_fleet().node_name == "sim-gpu-node-0"
    assert {g.allocation for g in default_fleet().gpus} == {"device-plugin"}


def test_resolve_fleet_reads_a_path_with_a_slash_or_a_yaml_suffix(tmp_path, monkeypatch):
    text = "node_name: from-file\ngpus: [{model: T4, allocation: dra}]\n"
    (tmp_path / "node.yaml").write_text(text)
    (tmp_path / "plain").write_text(text)
    assert resolve_fleet(str(tmp_path / "node.yaml")).node_name == "from-file"
    assert resolve_fleet(str(tmp_path / "plain")).gpus[0].allocation == "dra"
    monkeypatch.chdir(tmp_path)
    assert resolve_fleet("node.yaml").node_name == "from-file"
    assert resolve_fleet("./plain").node_name == "from-file"
    # A bare word is a built-in name even when a file of that name is in the working directory.
    with pytest.raises(FleetError, match="unknown built-in fleet 'plain'"):
        resolve_fleet("plain")
    with pytest.raises(FleetError, match="cannot read"):
        resolve_fleet("dra.yml")


@pytest.mark.parametrize("name", ["dra-node", "DRA", "x" * 5000, "two\nlines"])
def test_an_unknown_builtin_name_is_one_line_naming_the_builtins(name):
    with pytest.raises(FleetError) as info:
        resolve_fleet(name)
    error = str(info.value)
    assert "\n" not in error and len(error) < 250, error
    assert "(built-in: default, dra, gb200, mixed)" in error
    assert 'a fleet file path needs a "/" or a .yaml suffix' in error


# ---- the fake kubelet on a DRA node ----


def test_dra_claims_are_listed_with_the_drivers_names(dra_sim, serve):
    kubelet = serve(dra_sim)
    listing, snapshot = ask(kubelet)
    assert snapshot.dra_allocations == kubelet.dra_holders()
    gpu_holders = [h for h in snapshot.dra_allocations if h.driver == NVIDIA_GPU_DRIVER]
    assert {h.device for h in gpu_holders} == DRA_HELD
    assert set(kubelet.dra_devices()) == DRA_HELD | DRA_FREE
    assert {h.pool for h in snapshot.dra_allocations} == {DRA_NODE}
    # Names follow NVML: the minor number, and the MIG device's profile and placement.
    view = nvml_view(dra_sim)
    for name, (gpu, instance) in kubelet.dra_devices().items():
        parsed = parse_dra_device_name(name)
        assert parsed is not None and parsed.minor == view[gpu.index][0], name
        if instance is None:
            assert not parsed.mig
            continue
        [(profile, profile_id, start)] = [
            m[1:] for m in view[gpu.index][2] if m[0] == instance.uuid
        ]
        assert profile_slug(profile) == parsed.profile_slug
        assert (profile_id, start) == (parsed.gpu_instance_profile_id, parsed.placement_start)
    # Nothing of a DRA GPU goes through the device plugin's fields.
    assert snapshot.allocations == () and snapshot.allocated == ()
    assert all(not c.devices for p in listing.pod_resources for c in p.containers)
    assert snapshot.allocatable_devices == ()
    # Every claim resource names its device in the driver's per-claim CDI spec.
    for pod in listing.pod_resources:
        for container in pod.containers:
            for claim in container.dynamic_resources:
                assert claim.claim_namespace == pod.namespace
                assert re.fullmatch(
                    rf"{pod.name}-(gpu|gpus|imex-channel)-[a-z0-9]{{5}}", claim.claim_name
                )
                for resource in claim.claim_resources:
                    [cdi] = resource.cdi_devices
                    assert cdi.name.startswith(f"k8s.{resource.driver_name}/claim=")
                    assert cdi.name.endswith(f"-{resource.device_name}")


def test_dra_layout_shared_two_containers_two_gpu_claim_and_foreign_driver(dra_sim, serve):
    _, snapshot = ask(serve(dra_sim))
    by_device = defaultdict(list)
    for holder in snapshot.dra_allocations:
        by_device[holder.device].append(holder)
    # GPU 2: two pods, two claims, a share ID each, as Kubernetes 1.35 reports a shared device.
    shared = by_device["gpu-2"]
    assert len({h.pod for h in shared}) == 2 and len({h.claim_name for h in shared}) == 2
    share_ids = [h.share_id for h in shared]
    assert None not in share_ids and len(set(share_ids)) == 2
    assert all(uuid.UUID(s) for s in share_ids if s)
    assert [h for h in snapshot.dra_allocations if h.share_id] == shared
    # GPU 3: one claim that two containers of one pod use.
    both = by_device["gpu-3"]
    assert len({(h.pod, h.claim_name) for h in both}) == 1
    assert {h.container for h in both} == {"retriever", "generator"}
    # GPUs 0 and 1: one claim with both.
    assert (
        len({(h.pod, h.container, h.claim_name) for h in by_device["gpu-0"] + by_device["gpu-1"]})
        == 1
    )
    # One device of another driver, in the same pod's other claim.
    [foreign] = [h for h in snapshot.dra_allocations if h.driver != NVIDIA_GPU_DRIVER]
    assert (foreign.driver, foreign.pool, foreign.device) == (
        COMPUTE_DOMAIN_DRIVER,
        DRA_NODE,
        "channel-0",
    )
    assert foreign.pod == by_device["gpu-0"][0].pod
    assert foreign.claim_name != by_device["gpu-0"][0].claim_name
    # Single holders elsewhere; nothing on the free devices.
    assert [
        len(by_device[d]) for d in ("gpu-4", "gpu-7-mig-1g10gb-19-0", "gpu-7-mig-3g40gb-9-4")
    ] == [1, 1, 1]
    assert not DRA_FREE & set(by_device)


def test_pods_using_follows_the_claims(dra_sim):
    kubelet = FakeKubelet(dra_sim, "/nonexistent/k.sock")
    expected: dict[int, set[str]] = defaultdict(set)
    devices = kubelet.dra_devices()
    for holder in kubelet.dra_holders():
        if holder.device in devices:
            expected[devices[holder.device][0].index].add(f"{holder.namespace}/{holder.pod}")
    for gpu in dra_sim.gpus:
        assert kubelet.pods_using(gpu) == sorted(expected[gpu.index]), gpu.index
    assert [len(kubelet.pods_using(g)) for g in dra_sim.gpus] == [1, 1, 2, 1, 1, 0, 0, 2]


def test_legacy_names_carry_placement_size(dra_sim, serve):
    kubelet = serve(dra_sim, dra_name_format="legacy")
    _, snapshot = ask(kubelet)
    held = {h.device for h in snapshot.dra_allocations if h.driver == NVIDIA_GPU_DRIVER}
    assert held == {
        "gpu-0",
        "gpu-1",
        "gpu-2",
        "gpu-3",
        "gpu-4",
        "gpu-7-mig-19-0-1",
        "gpu-7-mig-9-4-4",
    }
    parsed = parse_dra_device_name("gpu-7-mig-9-4-4")
    assert parsed is not None and parsed.profile_slug is None
    assert (parsed.gpu_instance_profile_id, parsed.placement_start, parsed.placement_size) == (
        9,
        4,
        4,
    )
    with pytest.raises(ValueError, match="name format"):
        FakeKubelet(dra_sim, "/nonexistent/k.sock", dra_name_format="v2")


def test_a_kubelet_restart_serves_the_same_claims(dra_sim, serve):
    kubelet = serve(dra_sim)
    kubelet.faults.get_enabled = True
    before = ask(kubelet)[1].dra_allocations
    kubelet.restart()
    assert kubelet.socket_path.exists()
    assert ask(kubelet)[1].dra_allocations == before == kubelet.dra_holders()
    two_containers = next(h for h in before if h.device == "gpu-3")
    client = PodResourcesClient(str(kubelet.socket_path), timeout_seconds=5)
    try:
        pod = client.get(two_containers.namespace, two_containers.pod).pod_resources
    finally:
        client.reset()
    assert [
        (c.name, [r.device_name for d in c.dynamic_resources for r in d.claim_resources])
        for c in pod.containers
    ] == [("retriever", ["gpu-3"]), ("generator", ["gpu-3"])]


def test_a_mixed_node_serves_both_paths(make_sim, serve):
    sim = make_sim(resolve_fleet("mixed"))
    kubelet = serve(sim)
    listing, snapshot = ask(kubelet)
    dra_gpus = [g for g in sim.gpus if g.spec.allocation == "dra"]
    plugin_gpus = [g for g in sim.gpus if g.spec.allocation == "device-plugin"]
    plugin_ids = {g.uuid for g in plugin_gpus} | {
        m.uuid for g in plugin_gpus for m in g.live_instances()
    }
    dra_ids = {g.uuid for g in dra_gpus} | {m.uuid for g in dra_gpus for m in g.live_instances()}
    held = {a.device.uuid for a in snapshot.allocations}
    assert held and held <= plugin_ids
    offered_ids = {d for c in kubelet.allocatable_response().devices for d in c.device_ids}
    assert {i.split("::")[0] for i in offered_ids} <= plugin_ids and not offered_ids & dra_ids
    assert {resource for resource, _ in snapshot.allocated} >= {
        "nvidia.com/gpu",
        "nvidia.com/gpu.shared",
        "nvidia.com/mig-1g.10gb",
    }
    devices = kubelet.dra_devices()
    gpu_holders = [h for h in snapshot.dra_allocations if h.driver == NVIDIA_GPU_DRIVER]
    assert {h.device for h in gpu_holders} == {
        "gpu-4",
        "gpu-5",
        "gpu-7-mig-2g20gb-14-0",
        "gpu-7-mig-3g40gb-9-4",
    }
    assert {devices[h.device][0].index for h in gpu_holders} == {4, 5, 7}
    assert {name for name, (gpu, _) in devices.items()} == {
        "gpu-4",
        "gpu-5",
        "gpu-6",
        "gpu-7-mig-2g20gb-14-0",
        "gpu-7-mig-1g20gb-15-2",
        "gpu-7-mig-3g40gb-9-4",
    }
    assert [bool(kubelet.pods_using(g)) for g in sim.gpus] == [True] * 6 + [False, True]
    # Pod names do not collide between the two paths.
    names = [(p.namespace, p.name) for p in listing.pod_resources]
    assert len(names) == len(set(names))


def test_the_default_node_has_no_claims(sim, serve):
    kubelet = serve(sim)
    listing, snapshot = ask(kubelet)
    assert snapshot.dra_allocations == () == kubelet.dra_holders()
    assert all(not c.dynamic_resources for p in listing.pod_resources for c in p.containers)
    assert resource_slices(sim) == []


# ---- ResourceSlices ----


@pytest.mark.parametrize("api_version", ["v1", "v1beta2", "v1beta1"])
def test_resource_slices_match_nvml(dra_sim, api_version):
    slices = resource_slices(dra_sim, api_version)
    assert len(slices) == 1
    [raw] = slices
    assert raw["apiVersion"] == f"resource.k8s.io/{api_version}" and raw["kind"] == "ResourceSlice"
    model = SLICE_MODELS[api_version].from_dict(raw)
    assert model.spec.driver == NVIDIA_GPU_DRIVER and model.spec.node_name == DRA_NODE
    assert (
        model.spec.pool.name,
        model.spec.pool.generation,
        model.spec.pool.resource_slice_count,
    ) == (
        DRA_NODE,
        1,
        1,
    )
    assert model.metadata.name and model.metadata.uid and model.metadata.resource_version
    view = nvml_view(dra_sim)
    uuids = {uuid: index for index, (_, uuid, _) in view.items()}
    migs = {mig[0]: (index, mig[1]) for index, (_, _, m) in view.items() for mig in m}
    seen = {}
    for raw_device, device in zip(raw["spec"]["devices"], model.spec.devices, strict=True):
        # v1beta1 nests a device's attributes under `basic`; v1 and v1beta2 do not.
        assert ("basic" in raw_device) is (api_version == "v1beta1")
        body = device.basic if api_version == "v1beta1" else device
        attributes = {k: v.string for k, v in body.attributes.items() if v.string is not None}
        seen[device.name] = attributes
        assert body.capacity["memory"].value.endswith("Mi")
        if attributes["type"] == "gpu":
            assert device.name == f"gpu-{view[uuids[attributes['uuid']]][0]}"
            assert "parentUUID" not in attributes
        else:
            assert attributes["type"] == "mig"
            index, profile = migs[attributes["uuid"]]
            assert attributes["parentUUID"] == view[index][1]
            assert attributes["profile"] == profile
            assert device.name.startswith(f"gpu-{view[index][0]}-mig-")
        # Only the device two claims share allows several allocations.
        assert bool(body.allow_multiple_allocations) is (device.name == "gpu-2")
    assert set(seen) == DRA_HELD | DRA_FREE
    assert len({a["uuid"] for a in seen.values()}) == len(seen)
    # The exporter's own reader sees the same devices.
    parsed = parse_resource_slice(raw)
    assert parsed is not None
    read = offered_devices([parsed])
    assert {name: (d.type, d.uuid, d.parent_uuid, d.profile) for (_, name), d in read.items()} == {
        name: (a["type"], a["uuid"], a.get("parentUUID", ""), a.get("profile", ""))
        for name, a in seen.items()
    }
    assert {pool for pool, _ in read} == {DRA_NODE}


def test_legacy_slices_carry_integer_attributes(dra_sim):
    [raw] = resource_slices(dra_sim, "v1", name_format="legacy")
    devices = {d["name"]: d["attributes"] for d in raw["spec"]["devices"]}
    assert devices["gpu-3"]["minor"] == {"int": 3} and devices["gpu-3"]["index"] == {"int": 3}
    assert devices["gpu-7-mig-19-1-1"]["parentIndex"] == {"int": 7}
    assert devices["gpu-7-mig-19-1-1"]["profile"] == {"string": "1g.10gb"}
    model = V1ResourceSlice.from_dict(raw)
    assert model is not None and model.spec.devices is not None
    assert {d.name for d in model.spec.devices} == set(devices)


def test_a_pool_over_128_devices_is_split_over_slices(make_sim):
    sim = make_sim(
        fleet_from_yaml("""
        allocation: dra
        gpus:
          - model: A100-SXM4-40GB
            count: 20
            mig: [1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb]
    """)
    )
    slices = resource_slices(sim, "v1beta1")
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 12]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    assert len({s["metadata"]["name"] for s in slices}) == 2
    names = [d["name"] for s in slices for d in s["spec"]["devices"]]
    assert len(names) == len(set(names)) == 140 and MAX_DEVICES_PER_SLICE == 128


def test_unknown_api_versions_and_formats_are_refused(dra_sim):
    with pytest.raises(ValueError, match="v1alpha3"):
        resource_slices(dra_sim, "v1alpha3")
    with pytest.raises(ValueError, match="name format"):
        resource_slices(dra_sim, "v1", name_format="newest")

"""DRA devices joined with the NVML snapshot: every device-name form, ResourceSlice resolution,
shared claims, what cannot be resolved, and the labels and capacity figures that follow."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.dra.names import DraDeviceName, parse_dra_device_name, profile_slug
from kube_gpu_exporter.exporter.dra.resolve import (
    AMBIGUOUS_MIG_INSTANCE,
    FOREIGN_DRIVER,
    NO_SUCH_GPU,
    NO_SUCH_MIG_INSTANCE,
    SLICE_CONFLICT,
    UNKNOWN_NAME,
    DraIndex,
    DraTarget,
    resolve_dra_device,
)
from kube_gpu_exporter.exporter.dra.slices import SliceDevice
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import EMPTY_VIEW
from kube_gpu_exporter.exporter.podresources.allocations import DraAllocation, PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.attribution import attribute
from kube_gpu_exporter.exporter.podresources.client import PodResourcesStatus
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
)
from tests.conftest import render_body

GPU = "gpu.nvidia.com"
NODE = "node-a"
READINGS = GpuReadings.of(
    DCGM_FI_DEV_GPU_TEMP=40, DCGM_FI_DEV_GPU_UTIL=10, DCGM_FI_DEV_FB_USED=1 << 30
)


def _gpu(index: int, minor: int, uuid: str, instances: tuple[MigInstance, ...] = ()) -> GpuSnapshot:
    return GpuSnapshot(
        GpuIdentity(
            index,
            uuid,
            "NVIDIA H100 80GB HBM3",
            f"00000000:{index + 0x18:02X}:00.0",
            mig_enabled=bool(instances),
            minor_number=minor,
        ),
        up=True,
        readings=READINGS,
        mig_instances=instances,
    )


def _mig(uuid: str, gi: int, profile: str, start: int | None, profile_id: int) -> MigInstance:
    size = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 4}[profile]
    return MigInstance(
        uuid,
        gi,
        0,
        profile,
        fb_used_bytes=0,
        placement_start=start,
        placement_size=None if start is None else size,
        gpu_instance_profile_id=profile_id,
    )


# Minor numbers deliberately differ from indexes: the DRA driver names GPUs by minor.
PLACED = (
    _mig("MIG-a", 9, "1g.10gb", 0, 19),
    _mig("MIG-b", 10, "1g.10gb", 1, 19),
    _mig("MIG-c", 2, "3g.40gb", 4, 9),
)
UNPLACED = (
    _mig("MIG-d", 9, "1g.10gb", None, 19),
    _mig("MIG-e", 10, "1g.10gb", None, 19),
    _mig("MIG-f", 2, "3g.40gb", None, 9),
)
NODE_SNAPSHOT = NodeSnapshot(
    taken_at=1.7e9,
    monotonic_at=1.0,
    sweep_duration_seconds=0.01,
    nvml_up=True,
    driver_version="580.65.06",
    gpus=(
        _gpu(0, 3, "GPU-w0"),
        _gpu(1, 0, "GPU-w1"),
        _gpu(2, 1, "GPU-placed", PLACED),
        _gpu(3, 2, "GPU-unplaced", UNPLACED),
    ),
)


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("gpu-0", DraDeviceName(0)),
        ("gpu-13", DraDeviceName(13)),
        (
            "gpu-1-mig-1g10gb-19-3",
            DraDeviceName(1, True, "1g10gb", 19, 3),
        ),
        (
            "gpu-1-mig-1g10gb-me-20-6",
            DraDeviceName(1, True, "1g10gb-me", 20, 6),
        ),
        (
            "gpu-2-mig-1c3g40gb-9-4",
            DraDeviceName(2, True, "1c3g40gb", 9, 4),
        ),
        ("gpu-1-mig-19-3-1", DraDeviceName(1, True, None, 19, 3, 1)),
        ("gpu-vfio-0", None),
        ("gpu-0-extra", None),
        ("channel-0", None),
        ("GPU-0", None),
        ("gpu-", None),
        ("gpu-99999", None),
    ],
)
def test_device_name_forms(name: str, parsed: DraDeviceName | None) -> None:
    assert parse_dra_device_name(name) == parsed


@pytest.mark.parametrize(
    ("profile", "slug"),
    [("1g.10gb", "1g10gb"), ("1g.10gb+me", "1g10gb-me"), ("1c.3g.40gb", "1c3g40gb")],
)
def test_profile_slugs_follow_the_driver(profile: str, slug: str) -> None:
    assert profile_slug(profile) == slug


INDEX = DraIndex.of(NODE_SNAPSHOT)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("gpu-3", DraTarget("GPU-w0")),  # minor 3 is index 0
        ("gpu-0", DraTarget("GPU-w1")),
        ("gpu-1-mig-1g10gb-19-1", DraTarget("GPU-placed", 10, "1g.10gb", "MIG-b")),
        ("gpu-1-mig-1g10gb-19-0", DraTarget("GPU-placed", 9, "1g.10gb", "MIG-a")),
        ("gpu-1-mig-3g40gb-9-4", DraTarget("GPU-placed", 2, "3g.40gb", "MIG-c")),
        ("gpu-1-mig-19-1-1", DraTarget("GPU-placed", 10, "1g.10gb", "MIG-b")),  # older form
        ("gpu-1-mig-1g10gb-19-5", NO_SUCH_MIG_INSTANCE),  # nothing placed at 5
        ("gpu-1-mig-2g20gb-14-0", NO_SUCH_MIG_INSTANCE),
        # Placements hidden (unprivileged NVML): unique profile resolves, a repeated one does not.
        ("gpu-2-mig-3g40gb-9-4", DraTarget("GPU-unplaced", 2, "3g.40gb", "MIG-f")),
        ("gpu-2-mig-1g10gb-19-0", AMBIGUOUS_MIG_INSTANCE),
        ("gpu-2-mig-2g20gb-14-0", NO_SUCH_MIG_INSTANCE),
        ("gpu-7", NO_SUCH_GPU),
        ("gpu-7-mig-1g10gb-19-0", NO_SUCH_GPU),
        ("gpu-0-mig-1g10gb-19-0", NO_SUCH_MIG_INSTANCE),  # a whole GPU has no instances
        ("my-renamed-gpu", UNKNOWN_NAME),
    ],
)
def test_resolution_by_name(device: str, expected: DraTarget | str) -> None:
    assert resolve_dra_device(GPU, NODE, device, INDEX) == expected


def test_a_foreign_driver_is_never_resolved() -> None:
    assert resolve_dra_device("compute-domain.nvidia.com", NODE, "gpu-0", INDEX) == FOREIGN_DRIVER


SLICES = MappingProxyType(
    {
        (NODE, "big-gpu"): SliceDevice(NODE, "big-gpu", "gpu", uuid="GPU-w1"),
        (NODE, "gpu-3"): SliceDevice(NODE, "gpu-3", "gpu", uuid="GPU-gone"),
        (NODE, "slice-mig"): SliceDevice(
            NODE, "slice-mig", "mig", uuid="MIG-e", parent_uuid="GPU-unplaced", profile="1g.10gb"
        ),
        # Dynamic MIG: announced with no uuid, found on its parent by placement.
        (NODE, "gpu-1-mig-1g10gb-19-1"): SliceDevice(
            NODE, "gpu-1-mig-1g10gb-19-1", "mig", parent_uuid="GPU-placed", profile="1g.10gb"
        ),
        (NODE, "gpu-9-mig-1g10gb-19-0"): SliceDevice(
            NODE, "gpu-9-mig-1g10gb-19-0", "mig", parent_uuid="GPU-unplaced", profile="1g.10gb"
        ),
        # Forged: minor 1 is GPU-placed to NVML, minor 2 GPU-unplaced.
        (NODE, "gpu-1"): SliceDevice(NODE, "gpu-1", "gpu", uuid="GPU-w0"),
        (NODE, "gpu-2-mig-1g10gb-19-0"): SliceDevice(
            NODE, "gpu-2-mig-1g10gb-19-0", "mig", uuid="MIG-a", profile="1g.10gb"
        ),
    }
)
SLICE_INDEX = DraIndex.of(NODE_SNAPSHOT, SLICES)


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("big-gpu", DraTarget("GPU-w1")),  # a name outside the convention, by its uuid
        # A slice naming another GPU than the name's minor does is overruled by NVML.
        ("gpu-3", DraTarget("GPU-w0", slice_conflict=True)),  # its GPU is not even here
        ("gpu-1", DraTarget("GPU-placed", slice_conflict=True)),
        # Overruled, and the name alone cannot tell which 1g.10gb instance it is.
        ("gpu-2-mig-1g10gb-19-0", SLICE_CONFLICT),
        ("slice-mig", DraTarget("GPU-unplaced", 10, "1g.10gb", "MIG-e")),
        ("gpu-1-mig-1g10gb-19-1", DraTarget("GPU-placed", 10, "1g.10gb", "MIG-b")),
        # Its parent has two 1g.10gb instances and no placements: ambiguous, not guessed.
        ("gpu-9-mig-1g10gb-19-0", AMBIGUOUS_MIG_INSTANCE),
        ("gpu-0", DraTarget("GPU-w1")),  # not in any slice: by name
    ],
)
def test_resolution_through_resource_slices(device: str, expected: DraTarget | str) -> None:
    assert resolve_dra_device(GPU, NODE, device, SLICE_INDEX) == expected


def _claim(
    pod: str,
    device: str,
    *,
    container: str = "main",
    claim: str | None = None,
    driver: str = GPU,
    share_id: str | None = None,
) -> DraAllocation:
    return DraAllocation(
        "team-a", pod, container, claim or f"{pod}-gpu", "team-a", driver, NODE, device, share_id
    )


def _pods(
    *claims: DraAllocation, allocatable: tuple[tuple[str, int], ...] = ()
) -> PodResourcesSnapshot:
    return PodResourcesSnapshot(
        allocations=(),
        allocatable=allocatable,
        allocated=(),
        taken_at=1.7e9,
        allocatable_devices=(),
        dra_allocations=claims,
    )


def test_a_single_holder_owns_its_device_and_a_shared_one_has_none() -> None:
    pods = _pods(
        _claim("solo", "gpu-3"),
        _claim("a", "gpu-0"),
        _claim("b", "gpu-0"),
        _claim("mig-user", "gpu-1-mig-3g40gb-9-4"),
    )
    attribution = attribute(NODE_SNAPSHOT, pods)
    assert [h.pod for h in attribution.for_device("GPU-w0", None)] == ["solo"]
    assert [h.pod for h in attribution.for_device("GPU-w1", None)] == ["a", "b"]
    (mig,) = attribution.for_device("GPU-placed", 2)
    assert mig.dra is not None
    assert (mig.dra.mig_profile, mig.dra.mig_uuid) == ("3g.40gb", "MIG-c")
    assert attribution.unresolved == ()
    assert [(d.device, d.resource) for d in attribution.dra_in_use] == [
        ("gpu-0", GPU),
        ("gpu-1-mig-3g40gb-9-4", f"{GPU}/mig-3g.40gb"),
        ("gpu-3", GPU),
    ]


def _scrape(
    pods: PodResourcesSnapshot, kube=None, labels: LabelConfig | None = None
) -> dict[str, list]:
    labels = labels or LabelConfig(node_name=NODE)
    context = AttributionContext(pods, PodResourcesStatus(True, 1.7e9, 0.01, (), None), kube)
    text = render_body(NODE_SNAPSHOT, labels, context)
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def _by_uuid(samples: list, name: str = "DCGM_FI_DEV_GPU_TEMP") -> dict[tuple[str, str], dict]:
    return {
        (s.labels["UUID"], s.labels.get("GPU_I_ID", "")): s.labels
        for s in samples
        if s.name == name
    }


def test_dcgm_series_get_pod_and_dra_labels_only_for_a_single_holder() -> None:
    families = _scrape(
        _pods(
            _claim("solo", "gpu-3"),
            _claim("a", "gpu-0"),
            _claim("b", "gpu-0"),
            _claim("mig-user", "gpu-1-mig-3g40gb-9-4"),
            _claim("sharer", "gpu-2-mig-3g40gb-9-4", share_id="9d3a-1"),
        )
    )
    series = _by_uuid(families["DCGM_FI_DEV_GPU_TEMP"])
    solo = series[("GPU-w0", "")]
    assert {
        k: v for k, v in solo.items() if k.startswith(("dra_", "pod", "namespace", "container"))
    } == {
        "pod": "solo",
        "namespace": "team-a",
        "container": "main",
        "dra_claim_name": "solo-gpu",
        "dra_claim_namespace": "team-a",
        "dra_driver_name": GPU,
        "dra_pool_name": NODE,
        "dra_device_name": "gpu-3",
    }
    mig = series[("GPU-placed", "2")]
    assert (mig["pod"], mig["dra_mig_profile"], mig["dra_mig_device_uuid"]) == (
        "mig-user",
        "3g.40gb",
        "MIG-c",
    )
    # Two claims on one GPU, and one claim holding a share: no pod owns either.
    for key in (("GPU-w1", ""), ("GPU-unplaced", "2")):
        assert not {"pod", "dra_claim_name"} & set(series[key]), key
    # The other instances of the MIG GPUs carry nobody's labels.
    assert "pod" not in series[("GPU-placed", "9")]


def test_the_allocation_metric_lists_every_claim_holder() -> None:
    families = _scrape(
        _pods(
            _claim("a", "gpu-0"),
            _claim("b", "gpu-0", share_id="s-b"),
            _claim("twin", "gpu-3", container="left", claim="pair"),
            _claim("twin", "gpu-3", container="right", claim="pair"),
        )
    )
    rows = [s.labels for s in families["kube_gpu_exporter_pod_device_allocation"]]
    assert sorted((r["pod"], r["container"], r["UUID"], r.get("dra_share_id")) for r in rows) == [
        ("a", "main", "GPU-w1", None),
        ("b", "main", "GPU-w1", "s-b"),
        ("twin", "left", "GPU-w0", None),
        ("twin", "right", "GPU-w0", None),
    ]
    assert all(r["resource"] == GPU and r["dra_driver_name"] == GPU for r in rows)
    assert {r["device_id"] for r in rows} == {"gpu-0", "gpu-3"}
    # Two containers of one pod sharing a claim: the device is shared, so no pod labels.
    series = _by_uuid(families["DCGM_FI_DEV_GPU_TEMP"])
    assert "pod" not in series[("GPU-w0", "")]


def test_unresolvable_and_foreign_devices_are_counted_not_guessed() -> None:
    families = _scrape(
        _pods(
            _claim("lost", "gpu-7"),
            _claim("odd", "renamed"),
            _claim("unsure", "gpu-2-mig-1g10gb-19-0"),
            _claim("imex", "channel-0", driver="compute-domain.nvidia.com"),
            _claim("imex2", "channel-1", driver="compute-domain.nvidia.com"),
        )
    )
    counts = {
        (s.labels["driver"], s.labels["reason"]): s.value
        for s in families["kube_gpu_exporter_dra_devices_unresolved"]
    }
    assert counts == {
        (GPU, NO_SUCH_GPU): 1,
        (GPU, UNKNOWN_NAME): 1,
        (GPU, AMBIGUOUS_MIG_INSTANCE): 1,
        ("compute-domain.nvidia.com", FOREIGN_DRIVER): 2,
    }
    rows = families["kube_gpu_exporter_pod_device_allocation"]
    # Our driver's unresolved devices are listed with an empty UUID; other drivers' are not ours.
    assert sorted((s.labels["pod"], s.labels["UUID"]) for s in rows) == [
        ("lost", ""),
        ("odd", ""),
        ("unsure", ""),
    ]
    series = _by_uuid(families["DCGM_FI_DEV_GPU_TEMP"])
    assert not any("pod" in labels for labels in series.values())


def _capacity(families: dict[str, list], name: str) -> dict[str, float]:
    return {s.labels["resource"]: s.value for s in families.get(f"kube_gpu_exporter_{name}", [])}


def _units(families: dict[str, list]) -> dict[str, float]:
    return {
        s.labels["UUID"]: s.value for s in families["kube_gpu_exporter_device_allocatable_units"]
    }


def test_capacity_counts_held_dra_devices_once_without_the_slice_watch() -> None:
    families = _scrape(
        _pods(
            _claim("a", "gpu-0"),
            _claim("b", "gpu-0", share_id="s-b"),
            _claim("mig-user", "gpu-1-mig-3g40gb-9-4"),
            _claim("mig-user2", "gpu-1-mig-1g10gb-19-0"),
            allocatable=(("nvidia.com/gpu", 1),),
        )
    )
    assert _capacity(families, "node_allocated_devices") == {
        GPU: 1,
        f"{GPU}/mig-1g.10gb": 1,
        f"{GPU}/mig-3g.40gb": 1,
        "nvidia.com/gpu": 0,
    }
    # Without ResourceSlices the DRA driver's offers are unknown: only the device plugin's.
    assert _capacity(families, "node_allocatable_devices") == {"nvidia.com/gpu": 1}
    assert _units(families) == {"GPU-w0": 0, "GPU-w1": 1, "GPU-placed": 2, "GPU-unplaced": 0}


def test_the_slice_watch_makes_offered_dra_devices_allocatable() -> None:
    offered = MappingProxyType(
        {
            (NODE, name): device
            for name, device in {
                "gpu-3": SliceDevice(NODE, "gpu-3", "gpu", uuid="GPU-w0"),
                "gpu-0": SliceDevice(NODE, "gpu-0", "gpu", uuid="GPU-w1"),
                "gpu-2-mig-1g10gb-19-0": SliceDevice(
                    NODE, "gpu-2-mig-1g10gb-19-0", "mig", "MIG-d", "GPU-unplaced", "1g.10gb"
                ),
                "gpu-2-mig-1g10gb-19-1": SliceDevice(
                    NODE, "gpu-2-mig-1g10gb-19-1", "mig", "MIG-e", "GPU-unplaced", "1g.10gb"
                ),
                "gpu-2-mig-3g40gb-9-4": SliceDevice(
                    NODE, "gpu-2-mig-3g40gb-9-4", "mig", "MIG-f", "GPU-unplaced", "3g.40gb"
                ),
            }.items()
        }
    )
    kube = replace(EMPTY_VIEW, resource_slices=offered, slices_synced=True)
    families = _scrape(_pods(_claim("a", "gpu-0"), _claim("m", "gpu-2-mig-1g10gb-19-1")), kube)
    assert _capacity(families, "node_allocatable_devices") == {
        GPU: 2,
        f"{GPU}/mig-1g.10gb": 2,
        f"{GPU}/mig-3g.40gb": 1,
    }
    assert _capacity(families, "node_allocated_devices") == {
        GPU: 1,
        f"{GPU}/mig-1g.10gb": 1,
        f"{GPU}/mig-3g.40gb": 0,
    }
    # Every GPU the driver offers backs units, free or not; GPU-placed is offered by nobody.
    assert _units(families) == {"GPU-w0": 1, "GPU-w1": 1, "GPU-placed": 0, "GPU-unplaced": 3}
    # The slice's uuid resolved the instance although NVML hid the placements.
    series = _by_uuid(families["DCGM_FI_DEV_GPU_TEMP"])
    assert series[("GPU-unplaced", "10")]["pod"] == "m"
    watch = {
        s.labels["resource"]: s.value for s in families["kube_gpu_exporter_kubernetes_watch_up"]
    }
    assert watch["resourceslices"] == 1


def test_an_unsynced_slice_watch_does_not_publish_offers() -> None:
    kube = replace(
        EMPTY_VIEW,
        resource_slices=MappingProxyType(
            {(NODE, "gpu-3"): SliceDevice(NODE, "gpu-3", "gpu", uuid="GPU-w0")}
        ),
        slices_synced=False,
    )
    families = _scrape(_pods(_claim("a", "gpu-0")), kube)
    assert GPU not in _capacity(families, "node_allocatable_devices")
    assert _units(families)["GPU-w0"] == 0
    watch = {
        s.labels["resource"]: s.value for s in families["kube_gpu_exporter_kubernetes_watch_up"]
    }
    assert watch["resourceslices"] == 0


def test_per_pod_copies_carry_each_claims_labels() -> None:
    families = _scrape(
        _pods(_claim("a", "gpu-0", share_id="s-a"), _claim("b", "gpu-0", share_id="s-b")),
        labels=LabelConfig(node_name=NODE, shared_device_series="per-pod"),
    )
    copies = [s.labels for s in families["DCGM_FI_DEV_GPU_TEMP"] if s.labels["UUID"] == "GPU-w1"]
    assert sorted((c["pod"], c["dra_share_id"]) for c in copies) == [("a", "s-a"), ("b", "s-b")]


def test_a_device_the_driver_tainted_is_not_offered() -> None:
    offered = MappingProxyType(
        {
            (NODE, "gpu-3"): SliceDevice(NODE, "gpu-3", "gpu", uuid="GPU-w0", tainted=True),
            (NODE, "gpu-0"): SliceDevice(NODE, "gpu-0", "gpu", uuid="GPU-w1"),
        }
    )
    kube = replace(EMPTY_VIEW, resource_slices=offered, slices_synced=True)
    families = _scrape(_pods(), kube)
    assert _capacity(families, "node_allocatable_devices") == {GPU: 1}
    assert _units(families)["GPU-w0"] == 0  # so GPUUnallocatable can name it
    assert _units(families)["GPU-w1"] == 1

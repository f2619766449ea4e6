"""Where each MIG instance sits and which driver profile ID its GPU instance has: what NVIDIA's DRA
driver writes into MIG device names. The production MigReader runs against the simulated NVML,
privileged (placements from nvmlGpuInstanceGetInfo) and not (profile IDs from the profile table)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetSpec, default_fleet
from kube_gpu_exporter.exporter.snapshot import GpuIdentity, MigInstance

# Driver GI profile IDs on H100 as `nvidia-smi mig -lgip` prints them (docs/nvml.md, 'MIG
# profiles'), written out here rather than read from the simulator's own table.
H100_PROFILE_IDS = {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "3g.40gb": 9, "7g.80gb": 0}
PRIVILEGED_CALLS = ("nvmlDeviceGetGpuInstanceById", "nvmlGpuInstanceGetInfo")
MakeSim = Callable[[FleetSpec | None], FakeNvml]


def privileged_fleet() -> FleetSpec:
    return replace(default_fleet(), nvml_privileged=True)


def mig_parents(sim: FakeNvml) -> list[int]:
    return [gpu.index for gpu in sim.gpus if gpu.mig_enabled and gpu.live_instances()]


class Reader:
    """A MigReader and what it needs, bound to the simulated node."""

    def __init__(self, sim: FakeNvml, refresh_seconds: float = 3600.0) -> None:
        sim.api.nvmlInit()
        self.sim = sim
        self.tally = ErrorTally()
        self.mig = MigReader(GuardedNvml(self.tally, sim.api), refresh_seconds)

    def parent(self, index: int) -> tuple[GpuIdentity, Any]:
        api = self.sim.api
        handle = api.nvmlDeviceGetHandleByIndex(index)
        identity = GpuIdentity(
            index=index,
            uuid=api.nvmlDeviceGetUUID(handle),
            name=api.nvmlDeviceGetName(handle),
            pci_bus_id="",
            mig_enabled=True,
        )
        return identity, handle

    def read(self, index: int) -> tuple[MigInstance, ...]:
        return self.mig.read(*self.parent(index))

    def read_all(self) -> dict[int, tuple[MigInstance, ...]]:
        return {index: self.read(index) for index in mig_parents(self.sim)}


def test_privileged_placements_and_profile_ids_match_the_layout(make_sim: MakeSim) -> None:
    sim = make_sim(privileged_fleet())
    reader = Reader(sim)
    read = reader.read_all()
    assert sorted(read) == [6, 7]
    for index, instances in read.items():
        layout = {p.gpu_instance_id: p for p in sim.fleet.gpus[index].mig or ()}
        assert sorted(m.gpu_instance_id for m in instances) == sorted(layout)
        for m in instances:
            placed = layout[m.gpu_instance_id]
            assert (m.placement_start, m.placement_size) == (
                placed.start,
                placed.profile.placement_size,
            ), (index, m.gpu_instance_id)
            assert m.gpu_instance_profile_id == H100_PROFILE_IDS[m.profile]
    # The default node's MIG GPU: two 1g, a 2g and a 3g, side by side on the eight slices.
    assert [
        (m.profile, m.placement_start, m.placement_size, m.gpu_instance_profile_id) for m in read[6]
    ] == [
        ("1g.10gb", 0, 1, 19),
        ("1g.10gb", 1, 1, 19),
        ("2g.20gb", 2, 2, 14),
        ("3g.40gb", 4, 4, 9),
    ]
    assert reader.tally.snapshot() == ()


def refuse_with_not_supported(sim: FakeNvml) -> None:
    sim.faults.fail("nvmlDeviceGetGpuInstanceById", pynvml.NVML_ERROR_NOT_SUPPORTED)


@pytest.mark.parametrize(
    ("fleet", "arrange"),
    [
        (default_fleet, lambda sim: None),  # NO_PERMISSION, as for an unprivileged exporter
        (privileged_fleet, refuse_with_not_supported),
    ],
    ids=["no-permission", "not-supported"],
)
def test_a_refused_query_leaves_placements_unknown_and_profile_ids_from_the_table(
    make_sim: MakeSim,
    fleet: Callable[[], FleetSpec],
    arrange: Callable[[FakeNvml], None],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = make_sim(fleet())
    arrange(sim)
    reader = Reader(sim)
    with caplog.at_level(logging.INFO, logger="kube_gpu_exporter.exporter.nvml.mig_reader"):
        read = reader.read_all()
        reader.mig.invalidate()
        again = reader.read_all()

    def placed(found: dict) -> dict:
        # Memory moves with the simulated workload between the reads; placements must not.
        return {
            gpu: [
                (m.gpu_instance_id, m.placement_start, m.placement_size, m.gpu_instance_profile_id)
                for m in instances
            ]
            for gpu, instances in found.items()
        }

    assert placed(again) == placed(read)
    for instances in read.values():
        assert instances
        for m in instances:
            assert (m.placement_start, m.placement_size) == (None, None)
            assert m.gpu_instance_profile_id == H100_PROFILE_IDS[m.profile]
    # One refused call per parent and refresh, never one per instance, and none counted as an
    # NVML error: every MIG node of an unprivileged exporter answers this way.
    assert sim.calls["nvmlDeviceGetGpuInstanceById"] == 2 * len(read)
    assert sim.calls["nvmlGpuInstanceGetInfo"] == 0
    assert reader.tally.snapshot() == ()
    refusals = [r for r in caplog.records if "refused the GPU-instance queries" in r.message]
    assert len(refusals) == len(read)


@pytest.mark.parametrize("privileged", [True, False], ids=["privileged", "unprivileged"])
def test_gpu_instance_queries_run_once_per_topology_refresh_not_per_sweep(
    make_sim: MakeSim, privileged: bool
) -> None:
    sim = make_sim(privileged_fleet() if privileged else default_fleet())
    reader = Reader(sim)
    first = reader.read_all()
    per_refresh = {
        name: sim.calls[name] for name in (*PRIVILEGED_CALLS, "nvmlDeviceGetGpuInstanceProfileInfo")
    }
    gpu_instances = sum(len({m.gpu_instance_id for m in ms}) for ms in first.values())
    if privileged:
        assert per_refresh == {
            "nvmlDeviceGetGpuInstanceById": gpu_instances,
            "nvmlGpuInstanceGetInfo": gpu_instances,
            "nvmlDeviceGetGpuInstanceProfileInfo": 0,
        }
    else:
        assert per_refresh["nvmlDeviceGetGpuInstanceById"] == len(first)
        assert per_refresh["nvmlGpuInstanceGetInfo"] == 0
        # The table stops once the instances' profiles are covered: far fewer than one call per
        # enum index (0x12 of them) per parent.
        assert 0 < per_refresh["nvmlDeviceGetGpuInstanceProfileInfo"] <= 7 * len(first)

    for _ in range(5):  # sweeps within the refresh interval read memory only
        assert placements(reader.read_all()) == placements(first)
    assert {name: sim.calls[name] for name in per_refresh} == per_refresh

    reader.mig.invalidate(reader.parent(6)[0].uuid)  # a MigConfigChange on GPU 6
    reader.read_all()
    grown = {name: sim.calls[name] - per_refresh[name] for name in per_refresh}
    assert grown["nvmlDeviceGetGpuInstanceById"] == (
        len({m.gpu_instance_id for m in first[6]}) if privileged else 1
    )


def placements(read: dict[int, tuple[MigInstance, ...]]) -> dict[int, list[tuple[Any, ...]]]:
    return {
        index: [
            (m.uuid, m.placement_start, m.placement_size, m.gpu_instance_profile_id) for m in ms
        ]
        for index, ms in read.items()
    }


def test_a_gpu_instance_that_cannot_be_read_does_not_lose_the_others(
    make_sim: MakeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = make_sim(privileged_fleet())
    faulty_gi = 8
    answer = sim.api.nvmlGpuInstanceGetInfo

    def get_info(handle: Any) -> Any:
        info = answer(handle)
        if info.id == faulty_gi and sim.api.nvmlDeviceGetIndex(info.device) == 6:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return info

    monkeypatch.setattr(sim.api, "nvmlGpuInstanceGetInfo", get_info)
    reader = Reader(sim)
    read = reader.read_all()
    by_gi = {m.gpu_instance_id: m for m in read[6]}
    broken = by_gi.pop(faulty_gi)
    assert (broken.placement_start, broken.placement_size) == (None, None)
    # Its profile ID still comes from the profile table.
    assert broken.gpu_instance_profile_id == H100_PROFILE_IDS[broken.profile] == 19
    assert sorted((m.placement_start, m.gpu_instance_profile_id) for m in by_gi.values()) == [
        (0, 19),
        (2, 14),
        (4, 9),
    ]
    assert all(m.placement_start is not None for m in read[7])
    # A failure that is not a refusal is an NVML error like any other call's.
    assert dict(reader.tally.snapshot()) == {("nvmlGpuInstanceGetInfo", "UNKNOWN"): 1}


def test_the_privileged_simulator_answers_like_the_driver(make_sim: MakeSim) -> None:
    sim = make_sim(privileged_fleet())
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(6)
    handle = sim.api.nvmlDeviceGetGpuInstanceById(parent, 4)
    info = sim.api.nvmlGpuInstanceGetInfo(handle)
    assert isinstance(info, pynvml.c_nvmlGpuInstanceInfo_t)
    assert (info.id, info.profileId, info.placement.start, info.placement.size) == (4, 14, 2, 2)
    assert sim.api.nvmlDeviceGetUUID(info.device) == sim.api.nvmlDeviceGetUUID(parent)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.api.nvmlDeviceGetGpuInstanceById(parent, 9)  # no such GPU instance
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetGpuInstanceById(sim.api.nvmlDeviceGetHandleByIndex(0), 0)  # no MIG
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.api.nvmlGpuInstanceGetInfo(parent)  # a device handle is not a GPU-instance handle
    # A destroyed instance leaves its handle dangling.
    slot = next(m.slot for m in sim.gpus[6].live_instances() if m.gpu_instance_id == 4)
    sim.gpus[6].mig_slots[slot] = None
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.api.nvmlGpuInstanceGetInfo(handle)
    on_lost_gpu = sim.api.nvmlDeviceGetGpuInstanceById(sim.api.nvmlDeviceGetHandleByIndex(7), 2)
    sim.lose_gpu(7)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sim.api.nvmlGpuInstanceGetInfo(on_lost_gpu)

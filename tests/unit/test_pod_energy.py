"""Energy per pod on hand-built snapshots: the split of each GPU's energy among its containers
(kube_gpu_exporter/exporter/attribution/energy_shares.py, computed in the join) and the ledger that
adds each increase to their counters (kube_gpu_exporter/exporter/attribution/pod_energy.py);
docs/pods.md, 'Energy per pod'."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from benchmarks import pod_energy as pod_energy_benchmark
from kube_gpu_exporter.exporter.attribution.context import NO_CONTEXT, AttributionContext
from kube_gpu_exporter.exporter.attribution.devices import POD_JOIN
from kube_gpu_exporter.exporter.attribution.energy_shares import (
    ENERGY_SHARES,
    HOLDERS,
    MIG_GPM,
    MIG_SLICES,
    NO_INSTANCES,
    SM_SHARES,
    UNHELD,
    slice_count,
)
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.attribution.model import (
    AttributedNode,
    EnergyShares,
    Labels,
    ValueRow,
)
from kube_gpu_exporter.exporter.attribution.pod_energy import POD_ENERGY, PodEnergyLedger
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import build_exposition
from kube_gpu_exporter.exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.client import PodResourcesStatus
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.processes.owner import HOST
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuReadings,
    GpuSnapshot,
    MigInstance,
    NodeSnapshot,
    ProcessOwner,
    ProfilingReadings,
)

LABELS = LabelConfig(node_name="node-a")
STATUS = PodResourcesStatus(True, 1.7e9, 0.01, (), None)
SHARED, WHOLE, IDLE, MIG = "GPU-shared", "GPU-whole", "GPU-idle", "GPU-mig"
GIB = 1 << 30
# (namespace, pod, container) of the device's unattributed row.
NOBODY = ("", "", "")


def _owner(pod: str, container: str = "main") -> ProcessOwner:
    return ProcessOwner(f"uid-{pod}", f"{pod:0<64}"[:64], "team", pod, container)


def _gpu(
    index: int,
    uuid: str,
    processes: tuple[GpuProcess, ...] | None = None,
    energy_mj: int | None = 1_000_000,
    power_mw: int | None = 100_000,
    **fields: object,
) -> GpuSnapshot:
    return GpuSnapshot(
        GpuIdentity(index, uuid, "NVIDIA H100 80GB HBM3", f"0000:{index:02X}:00.0", False),
        up=True,
        readings=GpuReadings.of(
            DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=energy_mj, DCGM_FI_DEV_POWER_USAGE=power_mw
        ),
        processes=processes,
        **fields,  # type: ignore[arg-type]
    )


def _mig_gpu(
    profiling: tuple[tuple[int, ProfilingReadings], ...] = (),
    instances: tuple[MigInstance, ...] = (
        MigInstance("MIG-small", 9, 0, "1g.10gb"),
        MigInstance("MIG-large", 2, 0, "3g.40gb"),
    ),
) -> GpuSnapshot:
    return replace(
        _gpu(3, MIG),
        identity=GpuIdentity(3, MIG, "NVIDIA H100 80GB HBM3", "0000:03:00.0", True),
        mig_instances=instances,
        instance_profiling=profiling,
    )


# GPU 0 is time-sliced among chat-a, chat-b and chat-c; GPU 1 is held by one trainer; GPU 2 by
# nobody; the MIG GPU's small instance by two containers of one pod, its large one by nobody.
def _alloc(pod: str, device: str, container: str = "main") -> Allocation:
    return Allocation("team", pod, container, "nvidia.com/gpu", parse_device_id(device))


PODS = PodResourcesSnapshot(
    allocations=(
        _alloc("chat-a", f"{SHARED}::0"),
        _alloc("chat-b", f"{SHARED}::1"),
        _alloc("chat-c", f"{SHARED}::2"),
        _alloc("chat-c", f"{SHARED}::3"),  # a second replica is still one container
        _alloc("trainer", WHOLE),
        _alloc("mig-user", "MIG-small", "main"),
        _alloc("mig-user", "MIG-small", "side"),
    ),
    allocatable=None,
    allocated=(),
    taken_at=1.7e9,
)
CONTEXT = AttributionContext(PODS, STATUS)


def _snapshot(*gpus: GpuSnapshot, at: float = 100.0) -> NodeSnapshot:
    return NodeSnapshot(1.7e9 + at, at, 0.01, True, "580.65.06", gpus)


def _shares(snapshot: NodeSnapshot, context: AttributionContext = CONTEXT) -> list[EnergyShares]:
    node = join(snapshot, context, LABELS)
    assert node.failures == ()
    assert node.energy_shares is not None
    return list(node.energy_shares)


def _by_container(shares: EnergyShares) -> dict[tuple[str, ...], float]:
    """{(GPU_I_ID or "", namespace, pod, container): fraction}"""
    out: dict[tuple[str, ...], float] = {}
    for labels, fraction in shares.rows:
        d = dict(labels)
        out[(d.get("GPU_I_ID", ""), d["namespace"], d["pod"], d["container"])] = fraction
    return out


def _split_of(gpu: GpuSnapshot) -> tuple[str, dict[tuple[str, ...], float]]:
    (shares,) = [s for s in _shares(_snapshot(gpu)) if s.uuid == gpu.identity.uuid]
    assert math.isclose(sum(f for _, f in shares.rows), 1.0)
    return shares.basis, _by_container(shares)


# ---- The split ----


def test_an_idle_gpu_goes_evenly_to_the_containers_holding_it() -> None:
    idle = (GpuProcess(11, None, GIB, 0, _owner("chat-a")),)  # running, but no SM share
    for processes in (None, idle):
        basis, split = _split_of(_gpu(0, SHARED, processes))
        assert basis == HOLDERS
        assert split == {
            ("", *NOBODY): 0.0,
            ("", "team", "chat-a", "main"): pytest.approx(1 / 3),
            ("", "team", "chat-b", "main"): pytest.approx(1 / 3),
            ("", "team", "chat-c", "main"): pytest.approx(1 / 3),
        }


def test_a_busy_gpu_goes_by_sm_share_and_unattributed_processes_to_the_empty_row() -> None:
    busy = (
        GpuProcess(11, None, GIB, 30, _owner("chat-a")),
        GpuProcess(12, None, GIB, 10, _owner("chat-a", "sidecar")),  # its pod holds the GPU
        GpuProcess(21, None, GIB, 20, _owner("chat-b")),
        GpuProcess(99, None, GIB, 5, _owner("intruder")),  # a pod that holds no share
        GpuProcess(98, None, GIB, 5, None, HOST),
    )
    basis, split = _split_of(_gpu(0, SHARED, busy))
    assert basis == SM_SHARES
    assert split == {
        ("", *NOBODY): pytest.approx(10 / 70),
        ("", "team", "chat-a", "main"): pytest.approx(30 / 70),
        ("", "team", "chat-a", "sidecar"): pytest.approx(10 / 70),
        ("", "team", "chat-b", "main"): pytest.approx(20 / 70),
        ("", "team", "chat-c", "main"): 0.0,  # a holder with nothing busy keeps its row
    }


def test_a_busy_host_process_takes_the_energy_of_a_gpu_whose_holders_idle() -> None:
    processes = (
        GpuProcess(11, None, GIB, 0, _owner("trainer")),
        GpuProcess(98, None, GIB, 40, None, HOST),
    )
    basis, split = _split_of(_gpu(1, WHOLE, processes))
    assert (basis, split) == (
        SM_SHARES,
        {("", *NOBODY): 1.0, ("", "team", "trainer", "main"): 0.0},
    )


def test_a_gpu_nobody_holds_goes_to_the_unattributed_row() -> None:
    assert _split_of(_gpu(2, IDLE)) == (UNHELD, {("", *NOBODY): 1.0})
    # Processes of pods that do not hold it change nothing while they idle.
    stray = (GpuProcess(5, None, GIB, 0, _owner("chat-a")),)
    assert _split_of(_gpu(2, IDLE, stray)) == (UNHELD, {("", *NOBODY): 1.0})


def test_mig_instances_share_by_gpm_activity_times_slices_then_evenly_among_holders() -> None:
    profiling = (
        (9, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.5)),
        (2, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.2)),
    )
    basis, split = _split_of(_mig_gpu(profiling))
    # Activity is relative to each instance's own slices: 0.5 x 1 against 0.2 x 3.
    small, large = 0.5 / 1.1, 0.6 / 1.1
    assert basis == MIG_GPM
    assert split == {
        ("", *NOBODY): 0.0,
        ("9", *NOBODY): 0.0,
        ("9", "team", "mig-user", "main"): pytest.approx(small / 2),
        ("9", "team", "mig-user", "side"): pytest.approx(small / 2),
        ("2", *NOBODY): pytest.approx(large),  # nobody holds the large instance
    }


@pytest.mark.parametrize(
    "profiling",
    [
        (),  # no GPM on this GPU
        (
            (9, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.5)),
        ),  # not every instance has a reading
        (
            (9, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.0)),
            (2, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.0)),
        ),  # idle
    ],
    ids=["no-gpm", "partial-gpm", "all-idle"],
)
def test_without_gpm_activity_mig_instances_share_by_slice_count(
    profiling: tuple[tuple[int, ProfilingReadings], ...],
) -> None:
    basis, split = _split_of(_mig_gpu(profiling))
    assert basis == MIG_SLICES
    assert split[("9", "team", "mig-user", "main")] == pytest.approx(1 / 8)
    assert split[("2", *NOBODY)] == pytest.approx(3 / 4)


@pytest.mark.parametrize("bad", [math.inf, math.nan, -math.inf, 7.0])
def test_gpm_activity_outside_zero_to_one_never_makes_a_share_that_is_not_a_fraction(
    bad: float,
) -> None:
    """+Inf SM activity on one instance once made inf/inf = NaN shares, and NaN joules for good
    (issue 42): a reading that is not finite is no reading, and one above 1 counts as 1."""
    profiling = (
        (9, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=bad)),
        (2, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.2)),
    )
    _basis, split = _split_of(_mig_gpu(profiling))
    assert all(0.0 <= share <= 1.0 for share in split.values())
    assert sum(split.values()) == pytest.approx(1.0)


def test_the_ledger_credits_nothing_that_is_not_finite() -> None:
    ledger = PodEnergyLedger()
    labels = (("UUID", WHOLE), ("pod", "trainer"))
    rows: tuple[ValueRow, ...] = ((labels, 1.0),)
    ledger._credit(rows, 1_000.0, 1.0)
    ledger._credit(rows, math.inf, 2.0)
    ledger._credit(((labels, math.nan),), 1_000.0, 3.0)
    ledger._credit(rows, math.nan, 4.0)
    counters = ledger.record(_snapshot(at=5.0), None)
    assert counters == ((labels, 1.0),)


def test_a_mig_gpu_without_instances_gives_its_energy_to_its_own_unattributed_row() -> None:
    basis, split = _split_of(_mig_gpu(instances=()))
    assert (basis, split) == (NO_INSTANCES, {("", *NOBODY): 1.0})


@pytest.mark.parametrize(
    ("profile", "slices"),
    [
        ("1g.10gb", 1),
        ("3g.40gb", 3),
        ("7g.80gb", 7),
        ("1c.3g.40gb", 3),
        ("1g.10gb+me", 1),
        ("?", 1),
    ],
)
def test_slice_counts_come_from_the_profile_name(profile: str, slices: int) -> None:
    assert slice_count(MigInstance("MIG-x", 1, 0, profile)) == slices


def test_the_split_needs_pod_attribution_a_kubelet_answer_and_a_working_pod_join() -> None:
    snapshot = _snapshot(_gpu(0, SHARED))
    assert join(snapshot, NO_CONTEXT, LABELS).energy_shares is None
    assert join(snapshot, AttributionContext(None, STATUS), LABELS).energy_shares is None
    broken = PodResourcesSnapshot(None, None, (), 1.7e9)  # type: ignore[arg-type]
    node = join(snapshot, AttributionContext(broken, STATUS), LABELS)
    assert [part for part, _ in node.failures] == [POD_JOIN]
    assert node.energy_shares is None


def test_a_split_that_fails_is_named_and_credits_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = PodEnergyLedger()
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_000_000), at=1.0))

    def broken(*args: object) -> tuple[EnergyShares, ...]:
        raise KeyError("split bug")

    monkeypatch.setattr("kube_gpu_exporter.exporter.attribution.join.energy_shares", broken)
    node = ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_200_000), at=2.0))
    assert [part for part, _ in node.failures] == [ENERGY_SHARES]
    assert _joules(node.pod_energy)[(WHOLE, "", "trainer", "main")] == 0.0
    body = Renderer(LABELS).render_body(node)
    assert 'kube_gpu_exporter_render_errors_total{part="energy shares"} 1' in body
    monkeypatch.undo()
    after = ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_300_000), at=3.0))
    assert _joules(after.pod_energy)[(WHOLE, "", "trainer", "main")] == 300.0


# ---- The ledger ----


def _node(*gpus: GpuSnapshot, at: float) -> AttributedNode:
    return join(_snapshot(*gpus, at=at), CONTEXT, LABELS)


def _joules(rows: tuple[ValueRow, ...] | None) -> dict[tuple[str, ...], float]:
    assert rows is not None
    return {
        (d["UUID"], d.get("GPU_I_ID", ""), d["pod"], d["container"]): joules
        for d, joules in ((dict(labels), joules) for labels, joules in rows)
    }


def _busy(sm_a: int, sm_b: int) -> tuple[GpuProcess, ...]:
    return (
        GpuProcess(11, None, GIB, sm_a, _owner("chat-a")),
        GpuProcess(21, None, GIB, sm_b, _owner("chat-b")),
    )


def test_the_first_snapshot_opens_every_row_at_zero() -> None:
    ledger = PodEnergyLedger()
    rows = ledger.attach(_node(_gpu(0, SHARED), _gpu(2, IDLE), at=10.0)).pod_energy
    assert _joules(rows) == {
        (SHARED, "", "", ""): 0.0,
        (SHARED, "", "chat-a", "main"): 0.0,
        (SHARED, "", "chat-b", "main"): 0.0,
        (SHARED, "", "chat-c", "main"): 0.0,
        (IDLE, "", "", ""): 0.0,
    }


def test_each_increase_is_split_and_the_rows_add_up_to_the_gpus_energy() -> None:
    ledger = PodEnergyLedger()
    ledger.attach(_node(_gpu(0, SHARED, _busy(30, 10), energy_mj=5_000_000), at=10.0))
    node = _node(_gpu(0, SHARED, _busy(30, 10), energy_mj=5_400_000), at=11.0)
    joules = _joules(ledger.attach(node).pod_energy)
    assert joules[(SHARED, "", "chat-a", "main")] == pytest.approx(300.0)
    assert joules[(SHARED, "", "chat-b", "main")] == pytest.approx(100.0)
    assert sum(joules.values()) == pytest.approx(400.0, rel=1e-12)


def test_over_many_snapshots_the_rows_keep_the_gpus_energy_and_never_decrease() -> None:
    rng = random.Random(36)
    ledger = PodEnergyLedger()
    energy = 10_000_000
    previous: dict[tuple[str, ...], float] = {}
    mig_profiling = (
        (9, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.4)),
        (2, ProfilingReadings.of(DCGM_FI_PROF_SM_ACTIVE=0.1)),
    )
    for step in range(200):
        energy += rng.randrange(0, 700_000) if step else 0  # the first snapshot is the base
        sm = (rng.choice([0, 0, rng.randrange(1, 60)]), rng.randrange(0, 40))
        gpus = (
            _gpu(0, SHARED, _busy(*sm), energy_mj=energy),
            replace(
                _mig_gpu(mig_profiling if step % 2 else ()),
                readings=GpuReadings.of(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION=energy),
            ),
        )
        joules = _joules(ledger.attach(_node(*gpus, at=float(step))).pod_energy)
        assert all(joules[k] >= previous.get(k, 0.0) for k in joules)
        previous = joules
    for uuid in (SHARED, MIG):
        total = sum(j for key, j in previous.items() if key[0] == uuid)
        assert total == pytest.approx((energy - 10_000_000) / 1000, rel=1e-9)


def test_a_counter_that_falls_restarted_and_counts_nothing_for_that_step() -> None:
    ledger = PodEnergyLedger()
    for at, energy in ((1.0, 9_000_000), (2.0, 9_100_000), (3.0, 2_000), (4.0, 52_000)):
        rows = ledger.attach(_node(_gpu(1, WHOLE, energy_mj=energy), at=at)).pod_energy
    # 100 J before the driver reload, nothing for the reload itself, 50 J after it.
    assert _joules(rows)[(WHOLE, "", "trainer", "main")] == pytest.approx(150.0)


def test_without_an_energy_counter_board_power_is_integrated_over_the_snapshots() -> None:
    ledger = PodEnergyLedger()
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=None, power_mw=100_000), at=10.0))
    node = _node(_gpu(1, WHOLE, energy_mj=None, power_mw=200_000), at=12.0)
    # Trapezoid: (100 W + 200 W) / 2 over 2 s.
    assert _joules(ledger.attach(node).pod_energy)[(WHOLE, "", "trainer", "main")] == 300.0


def test_a_gpu_with_no_energy_data_gets_no_rows() -> None:
    ledger = PodEnergyLedger()
    for at in (1.0, 2.0):
        node = ledger.attach(_node(_gpu(1, WHOLE, energy_mj=None, power_mw=None), at=at))
        assert node.pod_energy is None and node.failures == ()


def test_a_stale_gpu_is_not_credited_and_the_next_fresh_snapshot_covers_the_gap() -> None:
    ledger = PodEnergyLedger()
    key = (WHOLE, "", "trainer", "main")
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=None, power_mw=100_000), at=1.0))
    # A hung read: the sweep repeats the earlier power, which says nothing about the second.
    stale = _node(_gpu(1, WHOLE, energy_mj=None, power_mw=100_000, stale=True), at=2.0)
    assert _joules(ledger.attach(stale).pod_energy)[key] == 0.0
    fresh = _node(_gpu(1, WHOLE, energy_mj=None, power_mw=300_000), at=3.0)
    # One trapezoid from the last fresh reading over both seconds: (100 W + 300 W) / 2 x 2 s.
    assert _joules(ledger.attach(fresh).pod_energy)[key] == 400.0


def test_without_a_split_nothing_is_credited_and_the_next_split_takes_the_gap() -> None:
    ledger = PodEnergyLedger()
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_000_000), at=1.0))
    # The kubelet's answer went missing for a snapshot: no shares, the counters stand.
    unsplit = join(_snapshot(_gpu(1, WHOLE, energy_mj=1_100_000), at=2.0), NO_CONTEXT, LABELS)
    assert _joules(ledger.attach(unsplit).pod_energy)[(WHOLE, "", "trainer", "main")] == 0.0
    after = _node(_gpu(1, WHOLE, energy_mj=1_300_000), at=3.0)
    assert _joules(ledger.attach(after).pod_energy)[(WHOLE, "", "trainer", "main")] == 300.0


def test_a_container_that_went_keeps_its_counter_for_the_retention_time_then_is_dropped() -> None:
    ledger = PodEnergyLedger(retention_seconds=300.0)
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_000_000), at=0.0))
    ledger.attach(_node(_gpu(1, WHOLE, energy_mj=1_500_000), at=1.0))
    gone = replace(CONTEXT, pods=replace(PODS, allocations=()))
    key = (WHOLE, "", "trainer", "main")
    for at in (2.0, 150.0, 301.0):
        node = join(_snapshot(_gpu(1, WHOLE, energy_mj=1_500_000 + int(at)), at=at), gone, LABELS)
        joules = _joules(ledger.attach(node).pod_energy)
        assert joules[key] == 500.0, "its last value, for the scrapes to come"
    node = join(_snapshot(_gpu(1, WHOLE, energy_mj=1_600_000), at=301.5), gone, LABELS)
    joules = _joules(ledger.attach(node).pod_energy)
    assert key not in joules
    assert joules == {(WHOLE, "", "", ""): pytest.approx((1_600_000 - 1_500_000) / 1000)}


def test_a_ledger_that_fails_is_named_and_counted_and_the_rest_renders() -> None:
    class Broken(PodEnergyLedger):
        def record(
            self, snapshot: NodeSnapshot, shares: tuple[EnergyShares, ...] | None
        ) -> tuple[ValueRow, ...] | None:
            raise ValueError("ledger bug")

    node = Broken().attach(_node(_gpu(1, WHOLE), at=1.0))
    assert [part for part, _ in node.failures] == [POD_ENERGY]
    body = Renderer(LABELS).render_body(node)
    assert 'kube_gpu_exporter_render_errors_total{part="pod energy"} 1' in body
    assert "kube_gpu_exporter_pod_gpu_energy_joules_total" not in body
    assert "kube_gpu_exporter_pod_device_allocation{" in body


def test_the_counter_family_renders_with_the_pod_usage_labels() -> None:
    ledger = PodEnergyLedger()

    def attributed(snapshot: NodeSnapshot) -> AttributedNode:
        return ledger.attach(join(snapshot, CONTEXT, LABELS))

    renderer = Renderer(LABELS)
    build_exposition(_snapshot(_gpu(1, WHOLE, energy_mj=1_000_000), at=1.0), renderer, attributed)
    second = _snapshot(_gpu(1, WHOLE, energy_mj=1_002_500), at=2.0)
    body = build_exposition(second, renderer, attributed).body.decode()
    name = "kube_gpu_exporter_pod_gpu_energy_joules_total"
    assert f"# TYPE {name} counter" in body
    assert (
        f'{name}{{gpu="1",UUID="{WHOLE}",hostname="node-a",namespace="team",pod="trainer",'
        'container="main"} 2.5'
    ) in body
    assert (
        f'{name}{{gpu="1",UUID="{WHOLE}",hostname="node-a",namespace="",pod="",container=""}} 0\n'
    ) in body
    # Without pod attribution there is nothing to split by, and no family.
    off = build_exposition(second, Renderer(LABELS), lambda s: join(s, NO_CONTEXT, LABELS))
    assert name not in off.body.decode()


def _labels_of(rows: tuple[ValueRow, ...]) -> list[Labels]:
    return [labels for labels, _ in rows]


def test_rows_come_in_label_order_whatever_order_they_appeared_in() -> None:
    ledger = PodEnergyLedger()
    ledger.attach(_node(_gpu(2, IDLE), at=1.0))
    rows = ledger.attach(_node(_gpu(2, IDLE), _gpu(0, SHARED), at=2.0)).pod_energy
    assert rows is not None and _labels_of(rows) == sorted(_labels_of(rows))


def test_the_benchmark_splits_a_busy_node_and_keeps_each_gpus_energy() -> None:
    figures = pod_energy_benchmark.measure(gpus=2, processes=10, sweeps=20)
    # Per GPU: 10 processes of 5 per container, and the unattributed row.
    assert figures["rows"] == 2 * (10 // 5 + 1)
    assert figures["worst_error"] < 1e-9
    assert 0 < figures["shares_us"] < figures["mean_us"] <= figures["p99_us"]

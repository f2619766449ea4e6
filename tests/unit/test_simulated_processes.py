"""The simulated node's GPU processes: the table, the NVML answers built on it, and the host's
/proc and /var/log trees in every cgroup layout (docs/nvml.md, 'Process accounting')."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import NO_INSTANCE, FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import (
    CGROUP_LAYOUTS,
    FleetError,
    FleetSpec,
    builtin_fleet,
    default_fleet,
    parse_fleet,
)
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import (
    CLOCK_TICKS_PER_S,
    FIRST_PID,
    ProcessTable,
    SimProcess,
    apportion,
    ticks_at,
)
from kube_gpu_exporter.exporter.simulator.sim_gpu import MIB
from tests.conftest import fleet_from_yaml, quiet

TIME_SLICED_GPU = 3  # the default node's GPU shared by three chat-api pods
HOST_GPU = 0
START = 1000.0


@dataclass
class Node:
    nvml: FakeNvml
    kubelet: FakeKubelet
    table: ProcessTable
    clock: list[float]

    @property
    def api(self) -> Any:
        return self.nvml.api

    def handle(self, index: int) -> object:
        return self.api.nvmlDeviceGetHandleByIndex(index)

    def mig_handles(self, index: int) -> list[object]:
        parent = self.handle(index)
        handles = []
        for slot in range(self.api.nvmlDeviceGetMaxMigDeviceCount(parent)):
            try:
                handles.append(self.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot))
            except pynvml.NVMLError_NotFound:
                continue
        return handles


@pytest.fixture
def make_node(tmp_path: Path) -> Iterator[Callable[..., Node]]:
    started: list[FakeNvml] = []

    def make(fleet: FleetSpec | None = None, table: bool = True) -> Node:
        clock = [START]
        nvml = FakeNvml(quiet(fleet or default_fleet()), clock=lambda: clock[0])
        started.append(nvml)
        kubelet = FakeKubelet(nvml, tmp_path / f"{len(started)}.sock")  # never served
        processes = ProcessTable(nvml, kubelet)
        if table:
            nvml.processes = processes
        nvml.api.nvmlInit()
        return Node(nvml, kubelet, processes, clock)

    yield make
    for nvml in started:
        nvml.close()


@pytest.fixture
def node(make_node: Callable[..., Node]) -> Node:
    return make_node()


def _whole_gpus(node: Node) -> list[int]:
    return [g.index for g in node.nvml.gpus if not g.mig_enabled]


def _samples_by_pid(node: Node, index: int) -> dict[int, Any]:
    try:
        samples = node.api.nvmlDeviceGetProcessUtilization(node.handle(index), 0)
    except pynvml.NVMLError_NotFound:
        return {}
    return {s.pid: s for s in samples}


# ---- The table ----


@pytest.mark.parametrize("name", ["default", "dra", "mixed"])
def test_pids_are_stable_unique_and_above_1000(make_node: Callable[..., Node], name: str) -> None:
    first = make_node(builtin_fleet(name))
    pids = [p.pid for p in first.table.processes()]
    assert len(pids) == len(set(pids)) and min(pids) > FIRST_PID
    again = make_node(builtin_fleet(name))
    assert [p.pid for p in again.table.processes()] == pids
    other_seed = make_node(replace(builtin_fleet(name), seed=first.nvml.fleet.seed + 1))
    assert [p.pid for p in other_seed.table.processes()] != pids


@pytest.mark.parametrize("name", ["default", "dra", "mixed"])
def test_every_container_holding_a_device_runs_one_or_two_processes_per_device(
    make_node: Callable[..., Node], name: str
) -> None:
    node = make_node(builtin_fleet(name))
    per_container: dict[str, list[SimProcess]] = defaultdict(list)
    for process in node.table.processes():
        if process.container is not None and process.holds_device:
            per_container[process.container.container_id].append(process)
    holders = {
        (pod.namespace, pod.name, name)
        for pod in node.kubelet.pods
        for name, devices in pod.containers.items()
        if devices or pod.claims.get(name)
    }
    running = {
        (p[0].container.namespace, p[0].container.pod, p[0].container.name)
        for p in per_container.values()
        if p[0].container is not None
    }
    assert running == holders
    for processes in per_container.values():
        devices = {(p.gpu_index, p.gpu_instance_id) for p in processes}
        assert len(devices) <= len(processes) <= len(devices) + 1
        containers = [p.container for p in processes]
        assert all(
            c is not None and re.fullmatch(r"[0-9a-f]{64}", c.container_id) for c in containers
        )


def test_one_host_process_and_one_process_on_a_gpu_its_pod_does_not_hold(node: Node) -> None:
    host = [p for p in node.table.processes() if p.on_host]
    assert [(p.gpu_index, p.comm) for p in host] == [(HOST_GPU, "node check (v2)")]
    stray = [p for p in node.table.processes() if not p.holds_device]
    assert len(stray) == 1 and stray[0].container is not None
    gpu = node.nvml.gpus[stray[0].gpu_index]
    holders = node.kubelet.pods_using(gpu)
    assert holders, "the stray process should sit on a GPU another pod holds"
    assert f"{stray[0].container.namespace}/{stray[0].container.pod}" not in holders


def test_apportion_adds_up_exactly_and_keeps_proportions() -> None:
    assert apportion(48, [1.0, 0.7, 0.084, 0.49]) == [21, 15, 2, 10]
    assert sum(apportion(97, [0.3, 0.3, 0.3])) == 97
    assert apportion(0, [1.0, 2.0]) == [0, 0]
    assert apportion(5, []) == []


# ---- Memory and utilization against the device's own figures ----


@pytest.mark.parametrize("name", ["default", "dra", "mixed"])
def test_process_memory_adds_up_to_at_most_the_devices_used_memory(
    make_node: Callable[..., Node], name: str
) -> None:
    node = make_node(replace(builtin_fleet(name), nvml_privileged=True))
    devices_with_processes = 0
    for t in (START, START + 777.0):
        node.clock[0] = t
        for index, gpu in enumerate(node.nvml.gpus):
            handles = node.mig_handles(index) if gpu.mig_enabled else [node.handle(index)]
            for handle in handles:
                processes = node.api.nvmlDeviceGetComputeRunningProcesses(handle)
                memory = node.api.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
                used = memory.used  # v2: what allocations hold, the reservation apart
                total = sum(p.usedGpuMemory for p in processes)
                assert total <= used
                if processes and used:
                    devices_with_processes += 1
                    assert total >= 0.9 * used, "processes should hold most of the used memory"
    assert devices_with_processes >= 4


@pytest.mark.parametrize("name", ["default", "dra", "mixed"])
def test_process_sm_use_adds_up_to_the_devices_utilization(
    make_node: Callable[..., Node], name: str
) -> None:
    node = make_node(builtin_fleet(name))
    compared = 0
    for t in (START, START + 33.3, START + 401.0, START + 1234.5):
        node.clock[0] = t
        for index in _whole_gpus(node):
            device = node.api.nvmlDeviceGetUtilizationRates(node.handle(index))
            samples = _samples_by_pid(node, index).values()
            if not [p for p in node.table.processes() if p.gpu_index == index]:
                continue
            compared += 1
            assert abs(sum(s.smUtil for s in samples) - device.gpu) <= 1
            assert abs(sum(s.memUtil for s in samples) - device.memory) <= 1
    assert compared >= 12


def test_the_time_sliced_gpu_shows_three_distinct_plausible_pod_shares(node: Node) -> None:
    gpu = node.nvml.gpus[TIME_SLICED_GPU]
    pods = {p.split("/", 1)[1] for p in node.kubelet.pods_using(gpu)}
    assert len(pods) == 3 and all(p.startswith("chat-api-") for p in pods)
    memory: dict[str, int] = defaultdict(int)
    for process in node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(TIME_SLICED_GPU)):
        owner = node.table.get(process.pid)
        assert owner is not None and owner.container is not None
        memory[owner.container.pod] += process.usedGpuMemory
    assert set(memory) == pods
    used = sum(memory.values())
    assert len(set(memory.values())) == 3
    assert all(0.1 < m / used < 0.7 for m in memory.values())
    for t in (START, START + 60.0, START + 150.0, START + 290.0):
        node.clock[0] = t
        sm: dict[str, int] = defaultdict(int)
        for pid, sample in _samples_by_pid(node, TIME_SLICED_GPU).items():
            process = node.table.get(pid)
            assert process is not None and process.container is not None
            sm[process.container.pod] += sample.smUtil
        if sum(sm.values()) >= 20:  # too little to tell apart in whole percent otherwise
            assert len(set(sm.values())) == 3, sm
            assert all(0.1 < v / sum(sm.values()) < 0.7 for v in sm.values())


def test_shares_follow_the_workload_wave_while_pids_stay(node: Node) -> None:
    gpu = node.nvml.gpus[TIME_SLICED_GPU]
    early = node.table.sm_shares(gpu, START)
    late = node.table.sm_shares(gpu, START + 75.0)
    assert [p.pid for p, _ in early] == [p.pid for p, _ in late]
    assert sum(share for _, share in early) == pytest.approx(1.0)
    moved = max(abs(a - b) for (_, a), (_, b) in zip(early, late, strict=True))
    assert 0.005 < moved < 0.1


# ---- NVML answers ----


def test_process_lists_have_the_bindings_shape(node: Node) -> None:
    processes = node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(TIME_SLICED_GPU))
    assert processes and all(isinstance(p, pynvml.nvmlFriendlyObject) for p in processes)
    first = processes[0]
    assert set(vars(first)) == {"pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId"}
    assert (first.gpuInstanceId, first.computeInstanceId) == (NO_INSTANCE, NO_INSTANCE)
    assert first.usedGpuMemory % MIB == 0
    for name in (
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    ):
        again = getattr(node.api, name)(node.handle(TIME_SLICED_GPU))
        assert [vars(p) for p in again] == [vars(p) for p in processes]
    for kind in ("Graphics", "MPSCompute"):
        for suffix in ("", "_v2", "_v3"):
            listed = getattr(node.api, f"nvmlDeviceGet{kind}RunningProcesses{suffix}")
            assert listed(node.handle(TIME_SLICED_GPU)) == []


def test_utilization_samples_are_the_bindings_structs(node: Node) -> None:
    handle = node.handle(TIME_SLICED_GPU)
    old = node.api.nvmlDeviceGetProcessUtilization(handle, 0)
    new = node.api.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    assert old and all(isinstance(s, pynvml.c_nvmlProcessUtilizationSample_t) for s in old)
    assert new and all(isinstance(s, pynvml.c_nvmlProcessUtilizationInfo_v1_t) for s in new)
    assert [(s.pid, s.smUtil, s.memUtil, s.decUtil) for s in old] == [
        (s.pid, s.smUtil, s.memUtil, s.decUtil) for s in new
    ]
    listed = {p.pid for p in node.api.nvmlDeviceGetComputeRunningProcesses(handle)}
    assert {s.pid for s in old} <= listed
    # Microseconds since 1970, like the driver's CPU timestamps.
    assert 1.5e15 < old[0].timeStamp < 4e15


def test_samples_are_windowed_by_timestamp(node: Node) -> None:
    handle = node.handle(TIME_SLICED_GPU)
    for call in (
        node.api.nvmlDeviceGetProcessUtilization,
        node.api.nvmlDeviceGetProcessesUtilizationInfo,
    ):
        first = call(handle, 0)
        stamp = max(s.timeStamp for s in first)
        with pytest.raises(pynvml.NVMLError_NotFound):
            call(handle, stamp)  # no simulated time has passed: no newer sample
        with pytest.raises(pynvml.NVMLError_NotFound):
            call(handle, stamp + 10_000_000)
        node.clock[0] += 1.0
        later = call(handle, stamp)
        assert later and all(s.timeStamp > stamp for s in later)
        assert min(s.timeStamp for s in later) - stamp == pytest.approx(1e6, abs=10)


def test_no_busy_process_is_not_found(node: Node) -> None:
    idle = next(g.index for g in node.nvml.gpus if g.spec.workload == "idle")
    assert node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(idle)) == []
    with pytest.raises(pynvml.NVMLError_NotFound):
        node.api.nvmlDeviceGetProcessUtilization(node.handle(idle), 0)
    # A busy GPU turned idle keeps its processes, which hold nothing and use nothing.
    node.nvml.set_workload(TIME_SLICED_GPU, "idle")
    listed = node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(TIME_SLICED_GPU))
    assert listed and all(p.usedGpuMemory == 0 for p in listed)
    with pytest.raises(pynvml.NVMLError_NotFound):
        node.api.nvmlDeviceGetProcessesUtilizationInfo(node.handle(TIME_SLICED_GPU), 0)


def test_without_a_table_nothing_runs(make_node: Callable[..., Node]) -> None:
    node = make_node(table=False)
    assert node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(TIME_SLICED_GPU)) == []
    with pytest.raises(pynvml.NVMLError_NotFound):
        node.api.nvmlDeviceGetProcessUtilization(node.handle(TIME_SLICED_GPU), 0)
    for handle in node.mig_handles(6):
        assert node.api.nvmlDeviceGetComputeRunningProcesses(handle) == []


def test_mig_lists_per_instance_and_the_parent_needs_privileges(
    make_node: Callable[..., Node],
) -> None:
    node = make_node()
    mig_gpu = next(g for g in node.nvml.gpus if g.mig_enabled)
    parent = node.handle(mig_gpu.index)
    for kind in ("Compute", "Graphics", "MPSCompute"):
        with pytest.raises(pynvml.NVMLError_NoPermission):
            getattr(node.api, f"nvmlDeviceGet{kind}RunningProcesses")(parent)
    per_instance = []
    for handle in node.mig_handles(mig_gpu.index):
        gi = node.api.nvmlDeviceGetGpuInstanceId(handle)
        ci = node.api.nvmlDeviceGetComputeInstanceId(handle)
        listed = node.api.nvmlDeviceGetComputeRunningProcesses(handle)
        assert all((p.gpuInstanceId, p.computeInstanceId) == (gi, ci) for p in listed)
        assert {p.pid for p in listed} == {
            p.pid
            for p in node.table.processes()
            if p.gpu_index == mig_gpu.index and p.gpu_instance_id == gi
        }
        per_instance += [vars(p) for p in listed]
        for call in (
            node.api.nvmlDeviceGetProcessUtilization,
            node.api.nvmlDeviceGetProcessesUtilizationInfo,
        ):
            with pytest.raises(pynvml.NVMLError_NotSupported):
                call(handle, 0)
    assert len(per_instance) >= 3
    for call in (
        node.api.nvmlDeviceGetProcessUtilization,
        node.api.nvmlDeviceGetProcessesUtilizationInfo,
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call(parent, 0)
    privileged = make_node(replace(default_fleet(), nvml_privileged=True))
    aggregate = privileged.api.nvmlDeviceGetComputeRunningProcesses(
        privileged.handle(mig_gpu.index)
    )
    key = lambda p: (p["gpuInstanceId"], p["pid"])  # noqa: E731
    assert sorted((vars(p) for p in aggregate), key=key) == sorted(per_instance, key=key)


def _fleet_with_driver(version: str) -> FleetSpec:
    return fleet_from_yaml(
        f"""
        driver_version: "{version}"
        gpus:
          - {{model: A100-SXM4-80GB, workload: training, count: 2}}
          - {{model: A100-SXM4-80GB, workload: inference}}
        """
    )


@pytest.mark.parametrize(
    ("driver", "v3_lists", "utilization_info"),
    [
        ("470.82.01", False, False),
        ("510.47.03", True, False),
        ("535.98", False, False),
        ("535.104.05", True, False),
        ("545.23.06", True, False),
        ("550.40.07", True, True),
    ],
)
def test_process_calls_follow_the_driver(
    make_node: Callable[..., Node], driver: str, v3_lists: bool, utilization_info: bool
) -> None:
    node = make_node(_fleet_with_driver(driver))
    handle = node.handle(0)
    assert node.api.nvmlDeviceGetComputeRunningProcesses_v2(handle)
    assert node.api.nvmlDeviceGetProcessUtilization(handle, 0)
    for kind in ("Compute", "Graphics", "MPSCompute"):
        versioned = getattr(node.api, f"nvmlDeviceGet{kind}RunningProcesses_v3")
        unversioned = getattr(node.api, f"nvmlDeviceGet{kind}RunningProcesses")
        if v3_lists:
            assert [vars(p) for p in versioned(handle)] == [vars(p) for p in unversioned(handle)]
            continue
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            versioned(handle)
        # nvidia-ml-py's unversioned wrappers raise this, which is not an NVMLError.
        with pytest.raises(pynvml.NVMLLibraryMismatchError):
            unversioned(handle)
    if utilization_info:
        assert node.api.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)
    else:
        with pytest.raises(pynvml.NVMLError_FunctionNotFound):
            node.api.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)


# ---- PIDs that exit and come back ----


def test_an_exited_process_leaves_nvml_and_proc(node: Node, tmp_path: Path) -> None:
    tree = HostTree(node.table, tmp_path / "host").refresh()
    handle = node.handle(TIME_SLICED_GPU)
    victim = node.api.nvmlDeviceGetComputeRunningProcesses(handle)[0].pid
    assert (tree.proc_root / str(victim) / "stat").is_file()
    node.table.exit(victim)
    assert victim not in {p.pid for p in node.api.nvmlDeviceGetComputeRunningProcesses(handle)}
    assert victim not in _samples_by_pid(node, TIME_SLICED_GPU)
    # Until the tree catches up, /proc still shows it: the race the collector must survive.
    assert (tree.proc_root / str(victim)).is_dir()
    tree.refresh()
    assert not (tree.proc_root / str(victim)).exists()
    with pytest.raises(KeyError):
        node.table.exit(victim)


def test_a_reused_pid_gets_a_new_start_time_and_another_container(
    node: Node, tmp_path: Path
) -> None:
    tree = HostTree(node.table, tmp_path / "host").refresh()
    old = next(p for p in node.table.processes() if p.gpu_index == TIME_SLICED_GPU)
    like = next(
        p
        for p in node.table.processes()
        if p.container is not None and p.container != old.container and p.gpu_index == HOST_GPU
    )
    old_stat = _stat(tree.proc_root / str(old.pid) / "stat")
    node.clock[0] += 30.0
    new = node.table.reuse_pid(old.pid, like=like.pid)
    assert (new.pid, new.container, new.gpu_index) == (old.pid, like.container, HOST_GPU)
    assert new.start_ticks == ticks_at(node.nvml.now()) > old.start_ticks
    listed = {p.pid for p in node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(HOST_GPU))}
    assert old.pid in listed
    sliced = node.api.nvmlDeviceGetComputeRunningProcesses(node.handle(TIME_SLICED_GPU))
    assert old.pid not in {p.pid for p in sliced}
    tree.refresh()
    new_stat = _stat(tree.proc_root / str(old.pid) / "stat")
    assert int(new_stat[21]) == new.start_ticks != int(old_stat[21])
    cgroup = (tree.proc_root / str(old.pid) / "cgroup").read_text()
    assert like.container is not None and old.container is not None
    assert like.container.container_id in cgroup and old.container.container_id not in cgroup
    assert not list(tree.proc_root.glob(".*")), "no half-written PID directory is left"


# ---- Host trees ----


def _stat(path: Path) -> list[str]:
    """The kernel's fields, the command name whole: it runs to the last ')'."""
    text = path.read_text()
    assert text.endswith("\n")
    head, _, tail = text.rstrip("\n").rpartition(")")
    pid, _, comm = head.partition(" (")
    return [pid, comm, *tail.split()]


_V2_CONTAINER = {
    "systemd-containerd-v2": r"/kubepods\.slice(/kubepods-(burstable|besteffort)\.slice)?"
    r"/kubepods(-(burstable|besteffort))?-pod{uid_}\.slice/cri-containerd-{id}\.scope",
    "systemd-crio-v2": r"/kubepods\.slice(/kubepods-(burstable|besteffort)\.slice)?"
    r"/kubepods(-(burstable|besteffort))?-pod{uid_}\.slice/crio-{id}\.scope/container",
    "cgroupfs-containerd-v2": r"/kubepods(/(burstable|besteffort))?/pod{uid}/{id}",
    "cgroupfs-containerd-v1": r"/kubepods(/(burstable|besteffort))?/pod{uid}/{id}",
}


@pytest.mark.parametrize("layout", CGROUP_LAYOUTS)
def test_the_host_tree_follows_each_cgroup_layout(
    make_node: Callable[..., Node], tmp_path: Path, layout: str
) -> None:
    node = make_node(replace(default_fleet(), cgroup_layout=layout))
    tree = HostTree(node.table, tmp_path / layout).refresh()
    assert tree.layout == layout
    v1 = layout.endswith("-v1")
    init = (tree.proc_root / "1" / "cgroup").read_text().splitlines()
    if v1:
        assert "1:name=systemd:/init.scope" in init and len(init) > 10
    else:
        assert init == ["0::/init.scope"]
    assert _stat(tree.proc_root / "1" / "stat")[:2] == ["1", "systemd"]
    qos_seen = set()
    for process in node.table.processes():
        directory = tree.proc_root / str(process.pid)
        stat = _stat(directory / "stat")
        assert len(stat) == 52
        assert stat[:2] == [str(process.pid), process.comm]
        assert int(stat[21]) == process.start_ticks
        lines = (directory / "cgroup").read_text().splitlines()
        if v1:
            parsed = [line.split(":", 2) for line in lines]
            assert len(lines) > 10 and all(hierarchy.isdigit() for hierarchy, _, _ in parsed)
            assert [int(h) for h, _, _ in parsed] == sorted(
                (int(h) for h, _, _ in parsed), reverse=True
            )
            paths = {controllers: path for _, controllers, path in parsed}
            path = paths["memory"]
            assert paths["name=systemd"] == path and paths["misc"] == "/"
        else:
            assert len(lines) == 1 and lines[0].startswith("0::")
            path = lines[0][3:]
        if process.container is None:
            assert path == "/system.slice/gpu-node-check.service"
            continue
        container = process.container
        pattern = _V2_CONTAINER[layout].format(
            uid=container.pod_uid,
            uid_=container.pod_uid.replace("-", "_"),
            id=container.container_id,
        )
        assert re.fullmatch(pattern, path), path
        guaranteed = "/kubepods.slice/kubepods-pod" in path or re.match(r"/kubepods/pod", path)
        assert bool(guaranteed) == (container.qos == "guaranteed")
        qos_seen.add(container.qos)
    assert qos_seen == {"guaranteed", "burstable", "besteffort"}


def test_the_log_tree_names_every_container_as_the_kubelet_does(node: Node, tmp_path: Path) -> None:
    tree = HostTree(node.table, tmp_path / "host").refresh()
    links = sorted((tree.log_root / "containers").iterdir())
    assert len(links) == len(node.table.containers) >= 10
    for container in node.table.containers:
        link = (
            tree.log_root
            / "containers"
            / f"{container.pod}_{container.namespace}_{container.name}-{container.container_id}.log"
        )
        assert link.is_symlink()
        target = Path(os.readlink(link))
        expected = (
            tree.log_root
            / "pods"
            / f"{container.namespace}_{container.pod}_{container.pod_uid}"
            / container.name
            / "0.log"
        )
        assert target.is_absolute() and target == expected.resolve()
        assert re.fullmatch(r"\S+Z stdout F .+\n", target.read_text())


def test_refresh_is_idempotent(node: Node, tmp_path: Path) -> None:
    tree = HostTree(node.table, tmp_path / "host").refresh()
    before = {p: p.stat().st_mtime_ns for p in tree.root.rglob("*") if p.is_file()}
    tree.refresh()
    after = {p: p.stat().st_mtime_ns for p in tree.root.rglob("*") if p.is_file()}
    assert after == before


def test_start_times_are_clock_ticks_since_boot(node: Node) -> None:
    uptime_ticks = node.table.uptime_s() * CLOCK_TICKS_PER_S
    for process in node.table.processes():
        assert 0 < process.start_ticks < uptime_ticks


# ---- The fleet file ----


def test_the_fleet_file_picks_the_cgroup_layout() -> None:
    assert default_fleet().cgroup_layout == "systemd-containerd-v2"
    for layout in CGROUP_LAYOUTS:
        fleet = parse_fleet(f"cgroup_layout: {layout}\ngpus: [{{model: T4}}]", "test fleet")
        assert fleet.cgroup_layout == layout


@pytest.mark.parametrize("value", ["systemd-docker-v2", "[1]", "true"])
def test_an_unknown_cgroup_layout_is_one_line_naming_the_field(value: str) -> None:
    with pytest.raises(FleetError) as caught:
        parse_fleet(f"cgroup_layout: {value}\ngpus: [{{model: T4}}]", "test fleet")
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith("test fleet: cgroup_layout: ")
    assert "systemd-containerd-v2" in message


def test_an_unknown_layout_is_refused_by_the_tree(node: Node, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cgroup layout"):
        HostTree(node.table, tmp_path, layout="cgroupfs-crio-v1")

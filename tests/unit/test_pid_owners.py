"""PID -> container -> pod from a proc root and the kubelet's log layout, on fake trees in temp
directories: every cgroup layout of docs/process-accounting.md, the log index, the per-PID cache
and the checks behind problem(); the look-alike cgroups a login user can make, container IDs with
two log names, and proc entries that would block a read."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import (
    EMPTY_VIEW,
    KubernetesView,
    PodMetadata,
)
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.nvml.process_sampler import ProcessSampler
from kube_gpu_exporter.exporter.podresources.allocations import (
    Allocation,
    PodResourcesSnapshot,
    from_responses,
)
from kube_gpu_exporter.exporter.podresources.attribution import attribute
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.processes import host_pids
from kube_gpu_exporter.exporter.processes.cgroup_path import PodCgroup, pod_cgroup
from kube_gpu_exporter.exporter.processes.host_pids import HostPidOwners
from kube_gpu_exporter.exporter.processes.kubelet_logs import (
    ContainerNames,
    KubeletLogIndex,
    PodNames,
    parse_container_log_name,
    parse_pod_log_dir_name,
)
from kube_gpu_exporter.exporter.processes.owner import EXITED, HOST, OTHER_PID_NAMESPACE
from kube_gpu_exporter.exporter.processes.pod_usage import NOT_HOLDER, UNATTRIBUTED, pod_usage
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable
from kube_gpu_exporter.exporter.simulator.sim_process import SimContainer
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import (
    GpuIdentity,
    GpuProcess,
    GpuSnapshot,
    NodeSnapshot,
    ProcessOwner,
)
from tests.conftest import FAST, quiet, render

UID = "2edf54f8-6911-449f-9abe-3d468a770d6b"
UID_ = UID.replace("-", "_")
STATIC_UID = "6b3b5c4fa4c7e2bd0a1c7bbf4bd04f3e"
CID = "02de72688d6bb0908d279bbbb05ffa9d7e0b2ae17a8bf23683a33cc1349e55aa"
NODE_ID = "3350ade4226f0adcd9e4e9545d7c2a16a5aa362d12315f2a88e2024cea1246cf"
OTHER_UID = "c9c501eb-9423-4bd6-b96f-7f10f7f4527c"
OTHER_UID_ = OTHER_UID.replace("-", "_")
OTHER_CID = "f3ee04629f75567e95fae8425cb3e9b3e1c9134649f1d38a5a0c2f1e2d3c4b5a"
PF_KTHREAD = 0x00200000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def v1(path: str, systemd_path: str | None = None) -> str:
    """A cgroup v1 file with every controller at `path` (as the kubelet places pods)."""
    controllers = ["cpu,cpuacct", "memory", "pids", "devices", "freezer", "blkio", "cpuset"]
    lines = [f"{12 - n}:{name}:{path}" for n, name in enumerate(controllers)]
    lines.append(f"1:name=systemd:{systemd_path or path}")
    return "\n".join(lines) + "\n"


SYSTEMD_BURSTABLE = f"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID_}.slice"
SYSTEMD_BESTEFFORT = (
    f"/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice"
)

POD_LAYOUTS = {
    "v2 systemd containerd burstable": f"0::{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope\n",
    "v2 systemd CRI-O besteffort": f"0::{SYSTEMD_BESTEFFORT}/crio-{CID}.scope\n",
    "v2 systemd guaranteed (no QoS level)": (
        f"0::/kubepods.slice/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "v2 systemd docker (cri-dockerd)": f"0::{SYSTEMD_BURSTABLE}/docker-{CID}.scope\n",
    "v2 cgroupfs containerd": f"0::/kubepods/burstable/pod{UID}/{CID}\n",
    "v2 cgroupfs CRI-O": f"0::/kubepods/besteffort/pod{UID}/crio-{CID}\n",
    "v1 cgroupfs containerd burstable": v1(f"/kubepods/burstable/pod{UID}/{CID}"),
    "v1 cgroupfs guaranteed": v1(f"/kubepods/pod{UID}/{CID}"),
    "v1 cgroupfs CRI-O besteffort": v1(f"/kubepods/besteffort/pod{UID}/crio-{CID}"),
    "v1 systemd containerd": v1(f"{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope"),
    "v1 only name=systemd names it": v1("/", f"{SYSTEMD_BURSTABLE}/crio-{CID}.scope"),
    "hybrid: unified line and v1 lines": (
        f"0::{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope\n"
        + v1(f"{SYSTEMD_BURSTABLE}/cri-containerd-{CID}.scope")
    ),
    "hybrid: unified line elsewhere, v1 under kubepods": (
        "0::/system.slice/containerd.service\n" + v1(f"/kubepods/burstable/pod{UID}/{CID}")
    ),
    "kind on v2 (kubelet cgroup root)": (
        "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
        f"kubelet-kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "kind node seen from the host": (
        f"0::/system.slice/docker-{NODE_ID}.scope/kubelet.slice/kubelet-kubepods.slice/"
        f"kubelet-kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "minikube docker driver on v1": v1(f"/docker/{NODE_ID}/kubepods/burstable/pod{UID}/{CID}"),
    "cgroup namespace, systemd": (
        f"0::/../../kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "cgroup namespace, cgroupfs": f"0::/../../../burstable/pod{UID}/{CID}\n",
    "cgroup namespace, cgroupfs guaranteed": f"0::/../../../pod{UID}/{CID}\n",
    "crun's sub-cgroup under the scope": f"0::{SYSTEMD_BURSTABLE}/crio-{CID}.scope/container\n",
}


@pytest.mark.parametrize("text", POD_LAYOUTS.values(), ids=POD_LAYOUTS.keys())
def test_every_pod_layout_names_the_pod_and_container(text: str) -> None:
    assert pod_cgroup(text) == PodCgroup(UID, CID)


def test_a_static_pod_uid_is_32_hex_digits() -> None:
    slice_ = f"kubepods-burstable-pod{STATIC_UID}.slice"
    text = f"0::/kubepods.slice/kubepods-burstable.slice/{slice_}/cri-containerd-{CID}.scope\n"
    assert pod_cgroup(text) == PodCgroup(STATIC_UID, CID)
    assert pod_cgroup(f"0::/kubepods/pod{STATIC_UID}/{CID}\n") == PodCgroup(STATIC_UID, CID)


@pytest.mark.parametrize(
    "text",
    [
        f"0::{SYSTEMD_BURSTABLE}/crio-conmon-{CID}.scope\n",
        f"0::/kubepods/burstable/pod{UID}/crio-conmon-{CID}\n",
        f"0::{SYSTEMD_BURSTABLE}\n",
        f"0::/kubepods/burstable/pod{UID}\n",
    ],
    ids=["conmon systemd", "conmon cgroupfs", "pod slice", "pod directory"],
)
def test_a_process_in_the_pod_but_in_no_container_keeps_the_pod(text: str) -> None:
    assert pod_cgroup(text) == PodCgroup(UID, "")


def test_a_container_line_wins_over_a_pod_level_line() -> None:
    text = f"0::/kubepods/burstable/pod{UID}\n4:memory:/kubepods/burstable/pod{UID}/{CID}\n"
    assert pod_cgroup(text) == PodCgroup(UID, CID)


@pytest.mark.parametrize(
    "text",
    [
        "0::/init.scope\n",
        "0::/\n",
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        v1("/"),
        f"0::/docker/{CID}\n",
        f"0::/system.slice/docker-{CID}.scope\n",
        "0::/kubepods.slice/kubepods-burstable.slice\n",
        "0::/kubepods/burstable\n",
        f"0::/kubepods/burstable/podnot-a-uid/{CID}\n",
        f"0::/kubepods/burstable/pod{UID.upper()}/{CID}\n",
        f"0::/system.slice/pod{UID}/{CID}\n",
        f"0::/kubepods/guaranteed/pod{UID}/{CID}\n",
        f"0::/kubepods.slice/kubepods-weird-pod{UID_}.slice/cri-containerd-{CID}.scope\n",
        f"0::/system.slice/system-pod{UID_}.slice\n",
        "",
        "garbage\nno colons here\n",
    ],
)
def test_host_and_unknown_layouts_are_not_pods(text: str) -> None:
    assert pod_cgroup(text) is None


# --- the kubelet's log layout -------------------------------------------------------------------


def test_container_log_names_with_dots_and_dashes() -> None:
    name = f"web.v2-7d9c-xk2p9_team-a_cuda-worker-{CID}.log"
    assert parse_container_log_name(name) == (
        CID,
        ContainerNames(namespace="team-a", pod="web.v2-7d9c-xk2p9", container="cuda-worker"),
    )
    assert parse_pod_log_dir_name(f"team-a_web.v2-7d9c-xk2p9_{UID}") == (
        UID,
        PodNames(namespace="team-a", pod="web.v2-7d9c-xk2p9"),
    )
    assert parse_pod_log_dir_name(f"kube-system_etcd-node.a_{STATIC_UID}") == (
        STATIC_UID,
        PodNames("kube-system", "etcd-node.a"),
    )


@pytest.mark.parametrize(
    "name",
    [
        f"web_team-a_main-{CID}.txt",
        f"web_team-a_main-{CID}",
        f"web_main-{CID}.log",
        f"web_team-a_extra_main-{CID}.log",
        f"Web_team-a_main-{CID}.log",
        f"web_team.a_main-{CID}.log",
        f"web_team-a_main.x-{CID}.log",
        f"web_team-a_-{CID}.log",
        f"web_team-a_main-{CID[:12]}.log",
        f"web_team-a_main-{CID.upper()}.log",
        f"-web_team-a_main-{CID}.log",
        f"{'p' * 254}_team-a_main-{CID}.log",
        # The kubelet cuts a name at 255 characters, which loses the end of the container ID.
        f"{'p' * 180}_team-a_main-{CID}"[:251] + ".log",
    ],
)
def test_malformed_container_log_names_are_ignored(name: str) -> None:
    assert parse_container_log_name(name) is None


@pytest.mark.parametrize(
    "name",
    [UID, f"team-a_web_{UID}_x", f"team-a_web_{UID[:-1]}", f"team.a_web_{UID}", f"team-a__{UID}"],
)
def test_malformed_pod_log_dirs_are_ignored(name: str) -> None:
    assert parse_pod_log_dir_name(name) is None


def add_container_log(log_root: Path, pod: str, namespace: str, container: str, cid: str) -> None:
    links = log_root / "containers"
    links.mkdir(parents=True, exist_ok=True)
    # The real target is /var/log/pods/...; pointing nowhere proves the index never follows it.
    os.symlink(f"/nonexistent/{cid}", links / f"{pod}_{namespace}_{container}-{cid}.log")


def add_pod_log_dir(log_root: Path, namespace: str, pod: str, uid: str) -> None:
    (log_root / "pods" / f"{namespace}_{pod}_{uid}").mkdir(parents=True)


def test_log_index_maps_ids_and_uids_without_following_links(tmp_path: Path) -> None:
    add_container_log(tmp_path, "trainer-0", "ml", "main", CID)
    add_pod_log_dir(tmp_path, "ml", "trainer-0", UID)
    # A symlinked pod directory is not the kubelet's: it is not followed, so not indexed.
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "elsewhere", tmp_path / "pods" / f"ml_linked_{OTHER_UID}")
    (tmp_path / "containers" / "README").write_text("not a log")
    index = KubeletLogIndex(tmp_path, Clock())
    assert index.container(CID) == ContainerNames("ml", "trainer-0", "main")
    assert index.pod(UID) == PodNames("ml", "trainer-0")
    assert index.pod(OTHER_UID) is None
    assert index.missing() is None


def test_log_index_rescans_on_a_miss_at_most_once_per_interval(tmp_path: Path) -> None:
    clock = Clock()
    add_container_log(tmp_path, "trainer-0", "ml", "main", CID)
    index = KubeletLogIndex(tmp_path, clock, rescan_interval_s=10.0)
    assert index.container(CID) is not None
    assert index.scans == 1
    assert index.container(CID) is not None
    assert index.scans == 1, "a hit lists no directory"

    add_container_log(tmp_path, "trainer-1", "ml", "main", OTHER_CID)
    clock.now += 9.9
    assert index.container(OTHER_CID) is None
    assert index.pod(UID) is None
    assert index.scans == 1, "misses inside the interval list no directory"
    clock.now += 0.1
    assert index.container(OTHER_CID) == ContainerNames("ml", "trainer-1", "main")
    assert index.scans == 2


def test_log_index_stops_at_its_entry_cap(tmp_path: Path) -> None:
    for n in range(5):
        add_container_log(tmp_path, f"pod-{n}", "ml", "main", f"{n:064x}")
    index = KubeletLogIndex(tmp_path, Clock(), max_entries=3)
    index.rescan()
    assert index.truncated
    assert sum(index.container(f"{n:064x}") is not None for n in range(5)) == 3


def test_log_index_without_a_log_root_says_so(tmp_path: Path) -> None:
    index = KubeletLogIndex(tmp_path / "absent", Clock())
    assert index.container(CID) is None
    assert index.pod(UID) is None
    message = index.missing()
    assert message is not None and "--processes.log-root" in message


# --- host PID owners ----------------------------------------------------------------------------


def stat_line(pid: int, start_time: int, *, comm: str = "python", flags: int = 0x400100) -> str:
    # Fields 3..52 of proc(5); the command may hold spaces and parentheses.
    fields = ["S", "1", str(pid), str(pid), "0", "-1", str(flags)] + ["0"] * 12
    fields += [str(start_time)] + ["0"] * 30
    return f"{pid} ({comm}) " + " ".join(fields) + "\n"


def add_process(
    proc: Path,
    pid: int,
    start_time: int,
    cgroup: str,
    *,
    comm: str = "python",
    flags: int = 0x400100,
) -> None:
    directory = proc / str(pid)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "stat").write_text(stat_line(pid, start_time, comm=comm, flags=flags))
    (directory / "cgroup").write_text(cgroup)


def host_proc(root: Path) -> Path:
    """A host's proc root: systemd as PID 1 and kthreadd as PID 2."""
    proc = root / "proc"
    add_process(proc, 1, 1, "0::/init.scope\n", comm="systemd")
    add_process(proc, 2, 1, "0::/\n", comm="kthreadd", flags=0x208040)
    return proc


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    return host_proc(tmp_path)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    root = tmp_path / "log"
    add_container_log(root, "trainer-0", "ml", "main", CID)
    add_pod_log_dir(root, "ml", "trainer-0", UID)
    return root


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often each kind of file ("stat", "cgroup") was read."""
    counts: Counter[str] = Counter()
    real = host_pids.read_head

    def counting(path: Path, limit: int) -> str:
        counts[path.name] += 1
        return real(path, limit)

    monkeypatch.setattr(host_pids, "read_head", counting)
    return counts


POD_CGROUP = POD_LAYOUTS["v2 systemd containerd burstable"]
TRAINER = ProcessOwner(UID, CID, namespace="ml", pod="trainer-0", container="main")


def test_a_pod_process_is_named_from_the_logs(proc: Path, logs: Path, clock: Clock) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == TRAINER
    assert owners.problem() is None


def test_a_host_process_is_host(proc: Path, logs: Path, clock: Clock) -> None:
    add_process(proc, 777, 50, "0::/system.slice/xorg.service\n", comm="Xorg")
    assert HostPidOwners(proc, logs, clock).owner(777) == HOST


def test_a_second_lookup_reads_only_stat(
    proc: Path, logs: Path, clock: Clock, reads: Counter[str]
) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == TRAINER
    assert reads == Counter(stat=1, cgroup=1)
    # Were the cgroup read again, this would now make it a host process.
    (proc / "4242" / "cgroup").write_text("0::/init.scope\n")
    for _ in range(3):
        clock.now += 5
        assert owners.owner(4242) == TRAINER
    assert reads == Counter(stat=4, cgroup=1)


def test_a_pid_that_exits_between_calls_is_exited(proc: Path, logs: Path, clock: Clock) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == TRAINER
    for name in ("stat", "cgroup"):
        (proc / "4242" / name).unlink()
    (proc / "4242").rmdir()
    assert owners.owner(4242) == EXITED
    assert owners.cached == 0


def test_a_pid_that_exits_between_stat_and_cgroup_is_exited(
    proc: Path, logs: Path, clock: Clock
) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)
    (proc / "4242" / "cgroup").unlink()
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == EXITED
    assert owners.cached == 0, "an exited process is not cached"


def test_an_unknown_pid_exited_on_the_host_but_was_never_visible_in_a_container(
    tmp_path: Path, logs: Path, clock: Clock
) -> None:
    assert HostPidOwners(host_proc(tmp_path), logs, clock).owner(31337) == EXITED
    container_proc = tmp_path / "container-proc"
    add_process(container_proc, 1, 5, POD_CGROUP, comm="python")
    owners = HostPidOwners(container_proc, logs, clock)
    assert owners.owner(31337) == OTHER_PID_NAMESPACE
    assert owners.owner(0) == OTHER_PID_NAMESPACE


def test_a_reused_pid_is_resolved_again(
    proc: Path, logs: Path, clock: Clock, reads: Counter[str]
) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == TRAINER
    add_container_log(logs, "trainer-1", "ml", "main", OTHER_CID)
    add_process(proc, 4242, 9500, f"0::/kubepods/besteffort/pod{OTHER_UID}/{OTHER_CID}\n")
    clock.now += 30
    assert owners.owner(4242) == ProcessOwner(OTHER_UID, OTHER_CID, "ml", "trainer-1", "main")
    assert reads["cgroup"] == 2
    add_process(proc, 4242, 9900, "0::/user.slice/user-1000.slice/session-3.scope\n")
    assert owners.owner(4242) == HOST


def test_a_pod_the_logs_do_not_name_keeps_its_uid(proc: Path, logs: Path, clock: Clock) -> None:
    add_process(proc, 5000, 100, f"0::/kubepods/pod{OTHER_UID}/{OTHER_CID}\n")
    assert HostPidOwners(proc, logs, clock).owner(5000) == ProcessOwner(OTHER_UID, OTHER_CID)


def test_a_container_without_its_symlink_gets_the_pod_names(
    proc: Path, logs: Path, clock: Clock
) -> None:
    add_process(proc, 5000, 100, f"0::/kubepods/burstable/pod{UID}/{OTHER_CID}\n")
    assert HostPidOwners(proc, logs, clock).owner(5000) == ProcessOwner(
        UID, OTHER_CID, namespace="ml", pod="trainer-0"
    )


def test_names_that_appear_later_are_picked_up_without_rereading_proc(
    proc: Path, logs: Path, clock: Clock, reads: Counter[str]
) -> None:
    add_process(proc, 5000, 100, f"0::/kubepods/besteffort/pod{OTHER_UID}/{OTHER_CID}\n")
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(5000) == ProcessOwner(OTHER_UID, OTHER_CID)
    # The kubelet links the log only after the container has started.
    add_container_log(logs, "late-0", "batch", "worker", OTHER_CID)
    clock.now += 10
    assert owners.owner(5000) == ProcessOwner(OTHER_UID, OTHER_CID, "batch", "late-0", "worker")
    assert reads["cgroup"] == 1


def test_the_cache_evicts_what_a_round_did_not_see_and_stays_under_its_cap(
    proc: Path, logs: Path, clock: Clock
) -> None:
    for pid in range(100, 110):
        add_process(proc, pid, pid, POD_CGROUP)
    owners = HostPidOwners(proc, logs, clock, cache_cap=4, round_s=60.0)
    for pid in range(100, 110):
        assert owners.owner(pid) == TRAINER
        assert owners.cached <= 4
    clock.now += 61
    assert owners.owner(109) == TRAINER
    assert owners.cached == 4, "the entries were looked up during the round that just ended"
    clock.now += 61
    assert owners.owner(109) == TRAINER
    assert owners.cached == 1, "entries not looked up during the last round are gone"


def test_problem_is_none_on_a_host_proc_root(proc: Path, logs: Path, clock: Clock) -> None:
    assert HostPidOwners(proc, logs, clock).problem() is None


def test_problem_when_the_proc_root_is_unreadable(tmp_path: Path, logs: Path, clock: Clock) -> None:
    owners = HostPidOwners(tmp_path / "no-proc", logs, clock)
    message = owners.problem()
    assert message is not None and "cannot read" in message and "hostPID" in message
    assert owners.owner(4242) == OTHER_PID_NAMESPACE


def test_problem_when_pid_1_is_a_pods_init(tmp_path: Path, logs: Path, clock: Clock) -> None:
    container_proc = tmp_path / "container-proc"
    add_process(container_proc, 1, 5, POD_CGROUP, comm="python")
    message = HostPidOwners(container_proc, logs, clock).problem()
    assert message is not None and f"pod {UID}" in message and "hostPID" in message


def test_problem_when_pid_1_is_a_plain_containers_init(
    tmp_path: Path, logs: Path, clock: Clock
) -> None:
    container_proc = tmp_path / "container-proc"
    add_process(container_proc, 1, 5, f"0::/system.slice/docker-{CID}.scope\n", comm="sh")
    message = HostPidOwners(container_proc, logs, clock).problem()
    assert message is not None and "a container" in message


def test_problem_in_a_cgroup_namespace_is_told_by_the_missing_kernel_threads(
    tmp_path: Path, logs: Path, clock: Clock
) -> None:
    """A container's init in its own cgroup namespace reads "/", as a host's non-systemd init
    does; only the host's PID namespace lists kthreadd."""
    container_proc = tmp_path / "container-proc"
    add_process(container_proc, 1, 5, "0::/\n", comm="python")
    add_process(container_proc, 2, 6, "0::/\n", comm="kthreadd")  # a user process, so named
    message = HostPidOwners(container_proc, logs, clock).problem()
    assert message is not None and "kernel threads" in message

    host = tmp_path / "plain-host-proc"
    add_process(host, 1, 1, v1("/"), comm="init")
    add_process(host, 2, 1, v1("/"), comm="kthreadd", flags=0x208040)
    assert HostPidOwners(host, logs, clock).problem() is None


def test_a_missing_log_root_is_logged_once_and_does_not_stop_attribution(
    tmp_path: Path, proc: Path, clock: Clock, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.processes.host_pids")
    owners = HostPidOwners(proc, tmp_path / "no-log", clock)
    assert owners.problem() is None
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "--processes.log-root" in said[0]
    add_process(proc, 4242, 9000, POD_CGROUP)
    assert owners.owner(4242) == ProcessOwner(UID, CID), "the UID still attributes it"


def test_problem_is_cached_and_rechecked_every_few_minutes(
    tmp_path: Path, proc: Path, clock: Clock, reads: Counter[str]
) -> None:
    log_root = tmp_path / "log"
    init = proc / "1" / "cgroup"
    host_init = init.read_text()
    init.write_text(f"0::{POD_CGROUP.split('::', 1)[1]}")  # PID 1 is a container's
    owners = HostPidOwners(proc, log_root, clock, problem_recheck_s=300.0)
    assert owners.problem() is not None
    checks = reads["cgroup"]
    init.write_text(host_init)
    clock.now += 299
    assert owners.problem() is not None
    assert reads["cgroup"] == checks, "no file is read between rechecks"
    clock.now += 1
    assert owners.problem() is None


def test_reads_stop_at_a_few_kilobytes(
    proc: Path, logs: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits: list[int] = []
    real = host_pids.read_head

    def recording(path: Path, limit: int) -> str:
        limits.append(limit)
        return real(path, limit)

    monkeypatch.setattr(host_pids, "read_head", recording)
    add_process(proc, 4242, 9000, POD_CGROUP + "9:junk:/" + "x" * 1_000_000 + "\n")
    owners = HostPidOwners(proc, logs, clock)
    assert owners.owner(4242) == TRAINER
    assert limits and max(limits) <= 8192
    assert len(host_pids.read_head(proc / "4242" / "cgroup", 8192)) == 8192
    # A line the limit cuts is dropped, not read as a shorter path.
    line = f"0::/kubepods/pod{UID}/{CID}\n"
    filler = "9:junk:/" + "x" * (8192 - 80 - 9) + "\n"
    assert line[:80].endswith(CID[:27]), "the limit cuts the container ID"
    add_process(proc, 4343, 9100, filler + line)
    assert owners.owner(4343) == HOST


def test_a_proc_entry_hidden_by_hidepid_is_not_visible(
    proc: Path, logs: Path, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_process(proc, 4242, 9000, POD_CGROUP)

    def denied(path: Path, limit: int) -> str:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(host_pids, "read_head", denied)
    assert HostPidOwners(proc, logs, clock).owner(4242) == OTHER_PID_NAMESPACE


# --- a pod's cgroup only where the kubelet makes it ---------------------------------------------
#
# Any login user on a systemd cgroup-v2 host owns a delegated subtree
# (`/user.slice/user-<uid>.slice/user@<uid>.service/...`) and may create cgroups named like a
# kubelet's there, with a pod UID and a container ID read from /var/log/containers. Every case is
# a real file in a fake proc root, read by `HostPidOwners`, the resolver the process sampler uses;
# the last test runs the whole path (simulated NVML, the sampler, the join with pod-resources).

USER = "/user.slice/user-1000.slice/user@1000.service"


def _systemd_pod(qos: str, uid_: str = UID_) -> str:
    if not qos:
        return f"/kubepods.slice/kubepods-pod{uid_}.slice"
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid_}.slice"


def _cgroupfs_pod(qos: str, uid: str = UID) -> str:
    return f"/kubepods/{qos}/pod{uid}" if qos else f"/kubepods/pod{uid}"


_SCOPES = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
_DIRS = {"containerd": CID, "cri-o": f"crio-{CID}", "docker": CID}


def _real_layouts() -> Iterator[tuple[str, str]]:
    """Every driver, QoS class, runtime and cgroup version the kubelet combines."""
    for driver, qos, runtime, version in itertools.product(
        ("systemd", "cgroupfs"),
        ("", "burstable", "besteffort"),
        ("containerd", "cri-o", "docker"),
        ("v1", "v2"),
    ):
        if driver == "systemd":
            path = f"{_systemd_pod(qos)}/{_SCOPES[runtime]}-{CID}.scope"
        else:
            path = f"{_cgroupfs_pod(qos)}/{_DIRS[runtime]}"
        text = f"0::{path}\n" if version == "v2" else v1(path)
        yield f"{driver} {qos or 'guaranteed'} {runtime} {version}", text


REAL_LAYOUTS = (
    dict(_real_layouts())
    | {
        # The forms docs/process-accounting.md lists beyond the plain ones, each kept working.
        f"documented: {name}": text
        for name, text in POD_LAYOUTS.items()
    }
    | {
        "kind on v1 (cgroupfs under its cgroup root)": v1(
            f"/docker/{NODE_ID}/kubelet/kubepods/burstable/pod{UID}/{CID}"
        ),
        "cgroup namespace, systemd, kubelet cgroup root hidden": (
            f"0::/../../../kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
        ),
        "a pod nested in another pod's container is the outer pod's": (
            f"0::{_systemd_pod('burstable')}/cri-containerd-{CID}.scope"
            f"{_systemd_pod('', OTHER_UID_)}/cri-containerd-{OTHER_CID}.scope\n"
        ),
        "a cgroupfs pod nested in a cgroupfs pod's container": (
            f"0::{_cgroupfs_pod('besteffort')}/{CID}{_cgroupfs_pod('', OTHER_UID)}/{OTHER_CID}\n"
        ),
        "a nested pod seen through a cgroup namespace": (
            f"0::/../../burstable/pod{UID}/{CID}{_cgroupfs_pod('', OTHER_UID)}/{OTHER_CID}\n"
        ),
    }
)

# What any login user (or a delegated service, or a rootless container engine) can create:
# none is a pod of this node's kubelet.
LOOK_ALIKES = {
    "user subtree, the issue's reproduction": (
        f"0::{USER}/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, a whole systemd kubepods tree": (
        f"0::{USER}/app.slice{_systemd_pod('burstable')}/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, guaranteed slice": (
        f"0::{USER}/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, a cgroupfs kubepods tree": f"0::{USER}{_cgroupfs_pod('burstable')}/{CID}\n",
    "login session scope": (
        f"0::/user.slice/user-1000.slice/session-3.scope/kubepods/pod{UID}/{CID}\n"
    ),
    "user subtree on a hybrid host, v1 lines at the root": (
        f"0::{USER}/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope\n" + v1("/")
    ),
    "a delegated system service": (
        f"0::/system.slice/batch.service{_systemd_pod('')}/cri-containerd-{CID}.scope\n"
    ),
    "a delegated system service, cgroupfs names": (
        f"0::/system.slice/batch.service{_cgroupfs_pod('besteffort')}/{CID}\n"
    ),
    "rootless podman's container with a pod tree inside": (
        f"0::{USER}/user.slice/libpod-{NODE_ID}.scope{_cgroupfs_pod('burstable')}/{CID}\n"
    ),
    "rootless k3s (kubelet in a user namespace), cgroupfs": (
        f"0::{USER}/k3s-rootless.service{_cgroupfs_pod('burstable')}/{CID}\n"
    ),
    "rootless kubelet, systemd driver": (
        f"0::{USER}/user.slice/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "rootless kind node seen from the host": (
        f"0::{USER}/user.slice/docker-{NODE_ID}.scope/kubelet.slice/kubelet-kubepods.slice/"
        f"kubelet-kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "a slice whose name does not extend its parent's": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
    ),
    "a slice chain broken by a scope": (
        f"0::/kubepods.slice/x.scope/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "a '..' that is not the namespace's prefix": f"0::/user.slice/x/../burstable/pod{UID}/{CID}\n",
}


def _resolve(proc: Path, tmp_path: Path, cgroup: str) -> ProcessOwner | str:
    add_process(proc, 4242, 9000, cgroup)
    return HostPidOwners(proc, tmp_path / "no-logs", Clock()).owner(4242)


def _under_a_users_subtree(cgroup: str) -> str:
    """The same file with every hierarchy's path moved below a login user's delegated subtree,
    where that user may create exactly these names."""
    lines = []
    for line in cgroup.splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        lines.append(f"{hierarchy}:{controllers}:{USER}{path.rstrip('/')}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("cgroup", REAL_LAYOUTS.values(), ids=REAL_LAYOUTS.keys())
def test_every_real_layout_resolves_and_its_copy_in_a_users_subtree_does_not(
    proc: Path, tmp_path: Path, cgroup: str
) -> None:
    assert _resolve(proc, tmp_path, cgroup) == ProcessOwner(UID, CID)
    assert _resolve(proc, tmp_path, _under_a_users_subtree(cgroup)) == HOST


@pytest.mark.parametrize("cgroup", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_look_alike_outside_the_kubelets_hierarchy_is_a_host_process(
    proc: Path, tmp_path: Path, cgroup: str
) -> None:
    assert _resolve(proc, tmp_path, cgroup) == HOST


# The whole path: NVML's processes, the sampler, the join.


def _usage_of_gpu0(tmp_path: Path, forge: bool) -> tuple[dict[str, int], dict[str, int], int]:
    """Per-pod memory on GPU 0 and its unattributed reasons, after one sampler round over the
    simulated node; with `forge`, its host process was first moved into a cgroup under a login
    user's subtree named after GPU 0's pod. Also returns the host process's memory."""
    fleet = quiet(replace(default_fleet(), cgroup_layout="systemd-containerd-v2"))
    # A frozen clock: both runs see the same workload, so their rows compare exactly.
    sim = FakeNvml(fleet, clock=lambda: 1000.0)
    sim.api.nvmlInit()
    try:
        kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
        sim.processes = table = ProcessTable(sim, kubelet)
        tree = HostTree(table, tmp_path / "host").refresh()
        host = next(p for p in table.processes() if p.on_host)
        victim = next(
            p.container
            for p in table.processes()
            if p.container is not None and p.gpu_index == host.gpu_index and p.holds_device
        )
        if forge:
            (tree.proc_root / str(host.pid) / "cgroup").write_text(
                f"0::{USER}/kubepods-pod{victim.pod_uid.replace('-', '_')}.slice/"
                f"cri-containerd-{victim.container_id}.scope\n"
            )
        nvml = GuardedNvml(ErrorTally(), sim.api)
        owners = HostPidOwners(tree.proc_root, tree.log_root)
        sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), owners, interval_seconds=1.0)
        gpu = sim.gpus[host.gpu_index]
        sampler.track([LiveGpu(gpu.index, gpu.uuid)])
        sampler.sample_once()
        assert sampler.last_success
        identity = GpuIdentity(gpu.index, gpu.uuid, "", "", mig_enabled=False)
        processes = sampler.contribution(gpu.uuid, None).get("processes")
        merged = GpuSnapshot(identity, up=True, readings=None, processes=processes)
        node = NodeSnapshot(
            taken_at=0.0,
            monotonic_at=0.0,
            sweep_duration_seconds=0.0,
            nvml_up=True,
            driver_version="",
            gpus=(merged,),
            collectors=(),
        )
        pods = from_responses(kubelet.list_response(), None, frozenset(), 0.0)
        [(_key, device)] = pod_usage(node, attribute(node, pods)).items()
        host_memory = next(
            p.used_memory_bytes or 0 for p in merged.processes or () if p.pid == host.pid
        )
        memory = {
            key[1]: usage.memory_bytes or 0
            for key, usage in device.by_container.items()
            if key != UNATTRIBUTED
        }
        memory["(unattributed)"] = device.by_container[UNATTRIBUTED].memory_bytes or 0
        return memory, dict(device.unattributed), host_memory
    finally:
        sim.api.nvmlShutdown()
        sim.close()


def test_a_host_process_moved_under_a_users_look_alike_stays_on_the_host_row(
    tmp_path: Path,
) -> None:
    honest, honest_reasons, host_memory = _usage_of_gpu0(tmp_path / "honest", forge=False)
    forged, forged_reasons, _ = _usage_of_gpu0(tmp_path / "forged", forge=True)
    assert host_memory > 256 << 20, "the simulated host tool holds a few hundred MB"
    assert honest_reasons.get(HOST) == 1
    # The simulated workload moves between the two runs only through the host tree written,
    # which is the same: every row must match the honest run's.
    assert forged_reasons == honest_reasons
    assert forged == honest


# --- two /var/log/containers names for one container ID ----------------------------------------
#
# The kubelet writes one symlink per container, so a second name for the same ID is a leftover or
# a forgery (any pod that mounts the host's /var/log writable can add one). The process is named
# from the pods the kubelet says hold the device (and from the Kubernetes view of its pod UID), an
# unresolvable conflict is unattributed as `ambiguous_container`, and every conflict is counted,
# logged once and exported (kube_gpu_exporter_process_log_name_conflicts): that count is read
# through a real Poller over the simulated node's host tree, with one extra symlink.

GPU = "GPU-00000000-0000-0000-0000-000000000001"
GIB = 1 << 30
REAL = ("ml", "trainer-0", "main")
FORGED = ("prod", "billing-0", "main")
AMBIGUOUS = "ambiguous_container"


def _logs(root: Path, *names: tuple[str, str, str]) -> Path:
    for namespace, pod, container in names:
        add_container_log(root, pod, namespace, container, CID)
    return root


def test_every_name_of_a_container_id_is_kept_and_the_conflict_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.processes")
    clock = Clock()
    index = KubeletLogIndex(_logs(tmp_path, FORGED, REAL), clock, rescan_interval_s=0.0)
    assert index.containers(CID) == (ContainerNames(*REAL), ContainerNames(*FORGED))
    assert index.container(CID) is None, "no single name to give"
    assert index.conflicts == 1
    index.rescan()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1, said
    assert CID in said[0] and "trainer-0" in said[0] and "billing-0" in said[0]


def _node(owner: ProcessOwner | str) -> NodeSnapshot:
    found = owner if isinstance(owner, ProcessOwner) else None
    process = GpuProcess(4242, None, 3 * GIB, 40, found, "" if found else str(owner))
    gpu = GpuSnapshot(
        GpuIdentity(0, GPU, "", "", mig_enabled=False), True, None, processes=(process,)
    )
    return NodeSnapshot(1.7e9, 1.0, 0.01, True, "580.65.06", (gpu,))


def _held_by(*holders: tuple[str, str, str]) -> PodResourcesSnapshot:
    return PodResourcesSnapshot(
        allocations=tuple(
            Allocation(ns, pod, container, "nvidia.com/gpu", parse_device_id(GPU))
            for ns, pod, container in holders
        ),
        allocatable=None,
        allocated=(),
        taken_at=1.7e9,
    )


def _rows(
    root: Path,
    pods: PodResourcesSnapshot,
    kube: KubernetesView | None = None,
    pod_dirs: tuple[tuple[str, str], ...] = (),
) -> tuple[set[tuple[str, str, str]], dict[str, int]]:
    """The containers GPU 0's process is counted for, and its unattributed reasons, with the two
    conflicting names in the log root. Which of them a directory lists last is the file system's
    business (by hash on ext4), so callers try each name as the right one."""
    logs = _logs(root / "log", REAL, FORGED)
    for namespace, pod in pod_dirs:
        add_pod_log_dir(logs, namespace, pod, UID)
    proc = host_proc(root)
    add_process(proc, 4242, 9000, POD_CGROUP)
    owner = HostPidOwners(proc, logs, Clock()).owner(4242)
    node = _node(owner)
    [device] = pod_usage(node, attribute(node, pods), kube).values()
    rows = {key for key, usage in device.by_container.items() if usage.processes}
    return rows - {UNATTRIBUTED}, dict(device.unattributed)


def test_the_pod_that_holds_the_device_names_the_process(tmp_path: Path) -> None:
    other = ("other", "pod-9", "main")
    assert _rows(tmp_path / "a", _held_by(REAL, other)) == ({REAL}, {})
    assert _rows(tmp_path / "b", _held_by(FORGED, other)) == ({FORGED}, {})
    assert _rows(tmp_path / "c", _held_by(other)) == (set(), {NOT_HOLDER: 1})


def test_when_both_hold_the_device_the_process_is_ambiguous(tmp_path: Path) -> None:
    assert _rows(tmp_path, _held_by(REAL, FORGED)) == (set(), {AMBIGUOUS: 1})


def _kube_naming(pod: tuple[str, str, str]) -> KubernetesView:
    meta = PodMetadata(pod[0], pod[1], UID, "", "", ())
    return replace(EMPTY_VIEW, pods=MappingProxyType({pod[:2]: meta}), pods_synced=True)


def test_the_kubernetes_view_of_the_pod_uid_decides(tmp_path: Path) -> None:
    both = _held_by(REAL, FORGED)
    assert _rows(tmp_path / "a", both, _kube_naming(REAL)) == ({REAL}, {})
    assert _rows(tmp_path / "b", both, _kube_naming(FORGED)) == ({FORGED}, {})


def test_the_pods_log_directory_of_the_cgroups_uid_decides(tmp_path: Path) -> None:
    both = _held_by(REAL, FORGED)
    assert _rows(tmp_path / "a", both, pod_dirs=(REAL[:2],)) == ({REAL}, {})
    assert _rows(tmp_path / "b", both, pod_dirs=(FORGED[:2],)) == ({FORGED}, {})
    # Two directories for the one UID decide nothing.
    assert _rows(tmp_path / "c", both, pod_dirs=(REAL[:2], FORGED[:2])) == (set(), {AMBIGUOUS: 1})


FAMILY = "kube_gpu_exporter_process_log_name_conflicts"


@pytest.fixture
def tree(sim: FakeNvml, tmp_path: Path) -> Iterator[HostTree]:
    table = ProcessTable(sim, FakeKubelet(sim, tmp_path / "kubelet.sock"))
    sim.processes = table
    yield HostTree(table, tmp_path / "host").refresh()


def _config(tree: HostTree, processes: bool = True) -> CollectionConfig:
    return replace(
        FAST,
        xid_enabled=False,
        gpm_enabled=False,
        processes_enabled=processes,
        proc_root=str(tree.proc_root),
        log_root=str(tree.log_root),
    )


def _scraped(sim: FakeNvml, config: CollectionConfig) -> NodeSnapshot:
    """A snapshot after one process-accounting round, as the exporter wires it (its own
    HostPidOwners over the configured roots); the round runs on this thread, so that the sweep
    after it reports it."""
    stepped = SteppedHelpers()
    poller = Poller(config, lambda s: None, sim.source(), workers=8, runner=stepped)
    try:
        poller.sweep()
        stepped.run_once()
        return poller.sweep()
    finally:
        poller.stop(timeout=2.0)


def _busy_container(tree: HostTree) -> SimContainer:
    return next(p.container for p in tree.table.processes() if p.container is not None)


def test_two_log_names_for_one_container_id_are_counted_and_exported(
    sim: FakeNvml, tree: HostTree
) -> None:
    real = _busy_container(tree)
    # A pod that mounts the host's /var/log writable plants a second name for the same ID.
    add_container_log(tree.log_root, "billing-0", "prod", real.name, real.container_id)
    assert len(list((tree.log_root / "containers").glob(f"*-{real.container_id}.log"))) == 2

    snapshot = _scraped(sim, _config(tree))
    assert snapshot.process_log_name_conflicts == 1
    text = render(snapshot)
    assert f"# HELP {FAMILY} Container IDs or pod UIDs" in text
    assert f"# TYPE {FAMILY} gauge\n{FAMILY} 1\n" in text
    # The reason such a conflict may leave on a device's unattributed row is documented with
    # the others.
    [unattributed_help] = [
        line
        for line in text.splitlines()
        if line.startswith("# HELP kube_gpu_exporter_gpu_processes_unattributed ")
    ]
    assert "exited, unknown_container, ambiguous_container (the kubelet's log names" in (
        unattributed_help
    )
    # The conflict is settled by the pod UID's single /var/log/pods directory, so the process is
    # still its real pod's: counted, not misnamed.
    named = {
        (p.owner.namespace, p.owner.pod)
        for g in snapshot.gpus
        for p in g.processes or ()
        if p.owner is not None and p.owner.container_id == real.container_id
    }
    assert named == {(real.namespace, real.pod)}


def test_no_conflict_reads_zero_and_no_process_accounting_no_family(
    sim: FakeNvml, tree: HostTree
) -> None:
    snapshot = _scraped(sim, _config(tree))
    assert snapshot.process_log_name_conflicts == 0
    assert f"\n{FAMILY} 0\n" in render(snapshot)

    # Off: nothing looked, so no 0 that would read as "looked, found none".
    off = _scraped(sim, _config(tree, processes=False))
    assert off.process_log_name_conflicts is None
    assert FAMILY not in render(off)


def test_the_api_servers_word_on_the_pod_uid_outranks_its_log_directory(tmp_path: Path) -> None:
    """A pod that can write the host's /var/log can rename the UID's /var/log/pods directory as
    easily as it adds a symlink. The API server is not writable from there, so with --kubernetes
    its name for the cgroup's pod UID decides, and the directory only where it says nothing."""
    real, forged = REAL, FORGED
    both = _held_by(real, forged)
    # The only directory for the UID now names the forged pod; the API names the real one.
    assert _rows(tmp_path / "a", both, _kube_naming(real), pod_dirs=(forged[:2],)) == ({real}, {})
    # Without the API the directory is all there is, as before.
    assert _rows(tmp_path / "b", both, pod_dirs=(forged[:2],)) == ({forged}, {})


# --- files in the proc root that would block a read ---------------------------------------------
#
# A FIFO in a proc root blocks open() until something writes to it; these are real ones
# (os.mkfifo). What the process sampler makes of one is in test_process_sampler.py.

# A round that has not returned by then is hung, not slow: every read here takes microseconds.
HANG_S = 5.0


def run_bounded(work: Callable[[], object], fifos: list[Path]) -> tuple[bool, object]:
    """Run `work` on a daemon thread; (whether it returned within HANG_S, its result). A thread
    still blocked in a FIFO's open() is released by opening the FIFOs for writing, so that a
    failing run does not leave it behind."""
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    thread.join(HANG_S)
    finished = not thread.is_alive()
    deadline = time.monotonic() + HANG_S
    while thread.is_alive() and time.monotonic() < deadline:
        for fifo in fifos:
            with contextlib.suppress(OSError):  # no reader waits on this one
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(0.05)
    return finished, result[0] if result else None


def test_fifos_and_devices_in_the_proc_root_are_refused_at_once_with_one_line_each(
    proc: Path, logs: Path, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kube_gpu_exporter.exporter.processes")
    pod = POD_CGROUP
    for pid in (300, 301, 302, 303):
        add_process(proc, pid, 9000 + pid, pod)
    fifos = [proc / "300" / "stat", proc / "301" / "cgroup"]
    for fifo in fifos:
        fifo.unlink()
        os.mkfifo(fifo)
    (proc / "302" / "stat").unlink()
    (proc / "302" / "stat").symlink_to("/dev/zero")
    owners = HostPidOwners(proc, logs, clock)

    def lookups() -> list[ProcessOwner | str]:
        # Twice: a hostile entry is logged once, not once per sweep.
        return [owners.owner(pid) for _ in range(2) for pid in (300, 301, 302, 303)]

    finished, found = run_bounded(lookups, fifos)
    assert finished, "a FIFO in the proc root blocked the lookup"
    assert found == [OTHER_PID_NAMESPACE] * 3 + [TRAINER] + [OTHER_PID_NAMESPACE] * 3 + [TRAINER]
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said
    for path, kind in zip(
        (fifos[0], fifos[1], proc / "302" / "stat"),
        ("FIFO", "FIFO", "character device"),
        strict=True,
    ):
        assert any(str(path) in line and kind in line for line in said), (path, said)
    assert all("\n" not in line for line in said)

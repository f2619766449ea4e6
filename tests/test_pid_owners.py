"""PID -> container -> pod from a proc root and the kubelet's log layout, on fake trees in temp
directories: every cgroup layout of docs/process-accounting.md, the log index, the per-PID cache
and the checks behind problem()."""

from __future__ import annotations

import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from exporter.processes import host_pids
from exporter.processes.cgroup_path import PodCgroup, pod_cgroup
from exporter.processes.host_pids import HostPidOwners
from exporter.processes.kubelet_logs import (
    ContainerNames,
    KubeletLogIndex,
    PodNames,
    parse_container_log_name,
    parse_pod_log_dir_name,
)
from exporter.processes.owner import EXITED, HOST, OTHER_PID_NAMESPACE
from exporter.snapshot import ProcessOwner

UID = "2edf54f8-6911-449f-9abe-3d468a770d6b"
UID_ = UID.replace("-", "_")
STATIC_UID = "6b3b5c4fa4c7e2bd0a1c7bbf4bd04f3e"
CID = "02de72688d6bb0908d279bbbb05ffa9d7e0b2ae17a8bf23683a33cc1349e55aa"
NODE_ID = "3350ade4226f0adcd9e4e9545d7c2a16a5aa362d12315f2a88e2024cea1246cf"
OTHER_UID = "c9c501eb-9423-4bd6-b96f-7f10f7f4527c"
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
    caplog.set_level(logging.WARNING, logger="exporter.processes.host_pids")
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

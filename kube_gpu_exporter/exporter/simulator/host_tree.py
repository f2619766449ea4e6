"""The simulated node's host view, written into a directory: a proc root and a log root that the
process collector reads as it would read the host's /proc (with hostPID) and /var/log.

    <root>/proc/1/{stat,cgroup}                 the host's init
    <root>/proc/<pid>/{stat,cgroup}             every live GPU process of the process table
    <root>/log/pods/<namespace>_<pod>_<uid>/<container>/0.log
    <root>/log/containers/<pod>_<namespace>_<container>-<container id>.log   symlink to the above

Formats are the kernel's and the kubelet's. /proc/<pid>/stat is the kernel's 52 fields with the
command name in parentheses (it may hold spaces and parentheses itself) and the start time in
clock ticks since boot as field 22. /proc/<pid>/cgroup is one `0::<path>` line on cgroup v2 and
one `<id>:<controllers>:<path>` line per hierarchy on v1. The container's cgroup path depends on
the fleet's `cgroup_layout`:

    systemd-containerd-v2   /kubepods.slice/kubepods-burstable.slice/
                            kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope
    systemd-crio-v2         .../kubepods-burstable-pod<uid with _>.slice/crio-<id>.scope/container
                            (crun, CRI-O's default runtime, ran the payload in a "container"
                            sub-cgroup of the scope on cgroup v2 until it dropped that default
                            in 2025, containers/crun PR #1768)
    cgroupfs-containerd-v1  /kubepods/burstable/pod<uid>/<id> in every v1 hierarchy
    cgroupfs-containerd-v2  /kubepods/burstable/pod<uid>/<id>

Guaranteed pods sit directly under kubepods (`kubepods-pod<uid>.slice`, `/kubepods/pod<uid>`),
best-effort ones under `besteffort`. The host's tool runs in a systemd service of system.slice.

`refresh()` brings the tree in line with the table after processes exit or PIDs are reused. A PID
directory is replaced whole, so a reader sees the old process, none, or the new one, never a mix.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

from kube_gpu_exporter.exporter.simulator.fleet import CGROUP_LAYOUTS
from kube_gpu_exporter.exporter.simulator.processes import HOST_UNIT, ProcessTable
from kube_gpu_exporter.exporter.simulator.sim_process import SimContainer, SimProcess

# cgroup v1 hierarchies as the kernel lists them (highest id first), and whether the container
# runtime places its containers there: misc (Linux 5.13) is newer than the runtimes of the v1 era,
# which leave it at the root, so a parser must not take the first line for the container's.
_V1_HIERARCHIES = (
    (13, "misc", False),
    (12, "rdma", True),
    (11, "hugetlb", True),
    (10, "cpuset", True),
    (9, "net_cls,net_prio", True),
    (8, "blkio", True),
    (7, "memory", True),
    (6, "freezer", True),
    (5, "pids", True),
    (4, "devices", True),
    (3, "cpu,cpuacct", True),
    (2, "perf_event", True),
    (1, "name=systemd", True),
)
# The hierarchies in which systemd moves its own units (accounting on).
_SYSTEMD_MANAGED = frozenset({"name=systemd", "pids", "memory", "cpu,cpuacct", "blkio", "devices"})
INIT_SCOPE = "/init.scope"
_KERNEL_FLAGS = 4194560  # PF_RANDOMIZE | PF_FORKNOEXEC, as ordinary user processes show
_ULONG_MAX = 2**64 - 1
# A file name in /var/log/containers is cut at ext4's 255 bytes, ".log" included.
_MAX_LOG_NAME = 255


def pod_cgroup(container: SimContainer, layout: str) -> str:
    """The pod's cgroup path as the kubelet's cgroup driver names it."""
    uid = container.pod_uid
    qos = "" if container.qos == "guaranteed" else container.qos
    if layout.startswith("systemd-"):
        # The systemd driver escapes the UID's dashes: "-" separates slice levels in unit names.
        escaped = uid.replace("-", "_")
        if not qos:
            return f"/kubepods.slice/kubepods-pod{escaped}.slice"
        return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{escaped}.slice"
    return f"/kubepods/{qos}/pod{uid}" if qos else f"/kubepods/pod{uid}"


def container_cgroup(container: SimContainer, layout: str) -> str:
    pod = pod_cgroup(container, layout)
    if layout == "systemd-containerd-v2":
        return f"{pod}/cri-containerd-{container.container_id}.scope"
    if layout == "systemd-crio-v2":
        return f"{pod}/crio-{container.container_id}.scope/container"
    return f"{pod}/{container.container_id}"


def cgroup_file(path: str, layout: str, systemd_unit: bool = False) -> str:
    """/proc/<pid>/cgroup of a process in `path`. On v1, a systemd unit's path shows only in the
    hierarchies systemd manages; a container's in every one its runtime joins."""
    if layout.endswith("-v2"):
        return f"0::{path}\n"
    lines = []
    for hierarchy, controllers, joined in _V1_HIERARCHIES:
        placed = controllers in _SYSTEMD_MANAGED if systemd_unit else joined
        lines.append(f"{hierarchy}:{controllers}:{path if placed else '/'}\n")
    return "".join(lines)


def process_cgroup_file(process: SimProcess, layout: str) -> str:
    if process.container is None:
        return cgroup_file(f"/system.slice/{HOST_UNIT}", layout, systemd_unit=True)
    return cgroup_file(container_cgroup(process.container, layout), layout)


def stat_line(
    pid: int, comm: str, start_ticks: int, parent: int, threads: int, rss_pages: int
) -> str:
    """/proc/<pid>/stat: 52 space-separated fields, the second the command name in parentheses."""
    fields = [
        str(pid),
        f"({comm})",
        "S",  # sleeping: a GPU process mostly waits on the device
        str(parent),
        str(pid),  # process group
        str(pid),  # session
        "0",  # no controlling terminal
        "-1",
        str(_KERNEL_FLAGS),
        *("0",) * 8,  # page faults and CPU times, own and children's
        "20",  # priority
        "0",  # nice
        str(threads),
        "0",
        str(start_ticks),  # field 22
        str(rss_pages * 4096 * 4),  # virtual size
        str(rss_pages),
        str(_ULONG_MAX),  # rsslim
        *("0",) * 12,  # code and stack addresses, signals, wchan, nswap
        "17",  # exit signal: SIGCHLD
        str(pid % 64),  # last CPU
        *("0",) * 13,  # scheduling, delay accounting, guest time, memory map, exit code
    ]
    return " ".join(fields) + "\n"


def log_symlink_name(container: SimContainer) -> str:
    """The kubelet's /var/log/containers name: pod, namespace, container and container ID."""
    stem = f"{container.pod}_{container.namespace}_{container.name}-{container.container_id}"
    return stem[: _MAX_LOG_NAME - len(".log")] + ".log"


def pod_log_directory(container: SimContainer) -> str:
    return f"{container.namespace}_{container.pod}_{container.pod_uid}"


class HostTree:
    def __init__(self, table: ProcessTable, root: str | Path, layout: str | None = None) -> None:
        layout = layout or table.cgroup_layout
        if layout not in CGROUP_LAYOUTS:
            raise ValueError(f"unknown cgroup layout {layout!r}")
        self.table = table
        self.layout = layout
        self.root = Path(root)
        self.proc_root = self.root / "proc"
        self.log_root = self.root / "log"
        self._written: dict[int, int] = {}  # pid -> start ticks of what its directory holds
        self._lock = threading.Lock()

    def refresh(self) -> HostTree:
        """Write what is missing or stale and remove what has exited."""
        with self._lock:
            self.proc_root.mkdir(parents=True, exist_ok=True)
            if 1 not in self._written:
                self._write_pid(
                    1,
                    stat_line(1, "systemd", 1, 0, 1, 3000),
                    cgroup_file(INIT_SCOPE, self.layout, systemd_unit=True),
                )
                self._written[1] = 1
            live = {p.pid: p for p in self.table.processes()}
            for pid in [pid for pid in self._written if pid != 1 and pid not in live]:
                self._remove_pid(pid)
            for pid, process in live.items():
                if self._written.get(pid) != process.start_ticks:
                    self._write_pid(
                        pid,
                        stat_line(pid, process.comm, process.start_ticks, pid - 1, 24, 250_000),
                        process_cgroup_file(process, self.layout),
                    )
                    self._written[pid] = process.start_ticks
            self._write_logs()
        return self

    def _write_pid(self, pid: int, stat: str, cgroup: str) -> None:
        final = self.proc_root / str(pid)
        fresh = self.proc_root / f".{pid}.new"
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir()
        (fresh / "stat").write_text(stat)
        (fresh / "cgroup").write_text(cgroup)
        if final.exists():
            stale = self.proc_root / f".{pid}.old"
            shutil.rmtree(stale, ignore_errors=True)
            final.rename(stale)
            fresh.rename(final)
            shutil.rmtree(stale)
        else:
            fresh.rename(final)

    def _remove_pid(self, pid: int) -> None:
        shutil.rmtree(self.proc_root / str(pid), ignore_errors=True)
        self._written.pop(pid, None)

    def _write_logs(self) -> None:
        pods = self.log_root / "pods"
        links = self.log_root / "containers"
        links.mkdir(parents=True, exist_ok=True)
        for container in self.table.containers:
            log = pods / pod_log_directory(container) / container.name / "0.log"
            if not log.exists():
                log.parent.mkdir(parents=True, exist_ok=True)
                # The CRI log format: time, stream, full/partial tag, message.
                log.write_text("2025-01-01T00:00:00.000000000Z stdout F started\n")
            link = links / log_symlink_name(container)
            if not link.is_symlink():
                # The kubelet writes an absolute target; this one points into the tree so that it
                # resolves wherever the tree is.
                os.symlink(log.resolve(), link)

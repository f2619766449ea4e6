"""PID -> pod and container on the host, from a proc root and the kubelet's log layout.

A PID is resolved once per process: the cache is keyed by PID and checked against the process's
start time, so a long-lived process costs one read of its `stat` per sweep, and a PID the kernel
gave to a new process (a new start time) is resolved again. Why each PID without an owner has
none, and the checks behind problem(), are in docs/process-accounting.md, 'Host PID owners'.

Not thread-safe: one collector thread owns an instance.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kube_gpu_exporter.exporter.processes.cgroup_path import (
    PodCgroup,
    container_id_of_segment,
    pod_cgroup,
)
from kube_gpu_exporter.exporter.processes.kubelet_logs import (
    ContainerNames,
    KubeletLogIndex,
    PodNames,
)
from kube_gpu_exporter.exporter.processes.owner import EXITED, HOST, OTHER_PID_NAMESPACE
from kube_gpu_exporter.exporter.processes.proc_files import NotRegularFile, read_head
from kube_gpu_exporter.exporter.snapshot import ProcessOwner

log = logging.getLogger(__name__)

# `stat` is one line of about 300 bytes; a v1 `cgroup` file has a dozen lines of at most a few
# hundred. Reading no more keeps a hostile or odd proc tree from costing memory.
STAT_READ_LIMIT = 1024
CGROUP_READ_LIMIT = 8192
DEFAULT_CACHE_CAP = 65_536
# An entry not looked up for a whole round belongs to a process that left the GPU (or exited).
DEFAULT_ROUND_S = 60.0
DEFAULT_PROBLEM_RECHECK_S = 300.0
# Field 22 of `stat` is the start time; the fields after the command's closing ")" start at 3.
_START_TIME_INDEX = 22 - 3
_FLAGS_INDEX = 9 - 3
# include/linux/sched.h: set on kernel threads, which only the initial PID namespace lists.
_PF_KTHREAD = 0x00200000
_KTHREADD_PID = 2
# Paths refused as not regular files, each logged once; past this many the memory is reset (a
# tree that full of them says so again, which is no flood at one line per path).
_REFUSED_LOGGED_CAP = 1024


@dataclass(slots=True)
class _Entry:
    start_time: int
    owner: ProcessOwner | str
    # False while the log index has not named the pod and container: asked again on each
    # lookup, since the kubelet writes the log symlink only after the container starts.
    named: bool
    seen_at: float


class HostPidOwners:
    """`PidOwners` for a process tree in `proc_root`, named from the logs under `log_root`."""

    def __init__(
        self,
        proc_root: str | os.PathLike[str],
        log_root: str | os.PathLike[str],
        clock: Callable[[], float] = time.monotonic,
        *,
        cache_cap: int = DEFAULT_CACHE_CAP,
        round_s: float = DEFAULT_ROUND_S,
        problem_recheck_s: float = DEFAULT_PROBLEM_RECHECK_S,
        log_index: KubeletLogIndex | None = None,
    ) -> None:
        self._proc = Path(proc_root)
        self._clock = clock
        self._logs = log_index or KubeletLogIndex(log_root, clock)
        self._cache: dict[int, _Entry] = {}
        self._cache_cap = cache_cap
        self._round_s = round_s
        self._round_started = clock()
        self._problem_recheck_s = problem_recheck_s
        self._problem: str | None = None
        self._host_namespace = False
        self._checked_at: float | None = None
        self._said_partial = False
        self._refused_logged: set[str] = set()

    def owner(self, pid: int) -> ProcessOwner | str:
        now = self._clock()
        self._end_round_if_due(now)
        if pid <= 0:
            # The driver reports 0 for a process it cannot place in the caller's PID namespace.
            return OTHER_PID_NAMESPACE
        try:
            start_time = self._start_time(pid)
        except PermissionError:
            # hidepid=1 lists the directory but denies its files to other users.
            return OTHER_PID_NAMESPACE
        except NotRegularFile as refused:
            return self._refused(pid, refused)
        except (OSError, ValueError):
            return self._vanished(pid)
        entry = self._cache.get(pid)
        if entry is not None and entry.start_time == start_time:
            entry.seen_at = now
            if not entry.named and isinstance(entry.owner, ProcessOwner):
                entry.owner, entry.named = self._named(entry.owner)
            return entry.owner
        return self._resolve(pid, start_time, now)

    def problem(self) -> str | None:
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self._problem_recheck_s:
            self._checked_at = now
            self._problem = self._diagnose()
        return self._problem

    @property
    def cached(self) -> int:
        return len(self._cache)

    def _resolve(self, pid: int, start_time: int, now: float) -> ProcessOwner | str:
        self._cache.pop(pid, None)
        try:
            text = read_head(self._proc / str(pid) / "cgroup", CGROUP_READ_LIMIT)
        except PermissionError:
            return OTHER_PID_NAMESPACE
        except NotRegularFile as refused:
            return self._refused(pid, refused)
        except OSError:
            # Its stat was there a moment ago.
            return EXITED
        if len(text) >= CGROUP_READ_LIMIT:
            # A cut line could name a shorter path than the process's: keep whole lines only.
            text = text[: text.rfind("\n") + 1]
        found = pod_cgroup(text)
        owner: ProcessOwner | str
        named = True
        if found is None:
            owner = HOST
        else:
            owner, named = self._named(_unnamed(found))
        self._remember(pid, _Entry(start_time, owner, named, now))
        return owner

    @property
    def log_name_conflicts(self) -> int:
        """Container IDs and pod UIDs that the kubelet's log names give more than one name."""
        return self._logs.conflicts

    def _named(self, owner: ProcessOwner) -> tuple[ProcessOwner, bool]:
        """The owner with the names the kubelet's logs give, and whether they gave all there are
        to give. A pod the logs do not name keeps its UID alone: the attribution join can still
        name it from the Kubernetes view, so it is not reported as an unknown container here."""
        names = self._logs.containers(owner.container_id) if owner.container_id else ()
        if len(names) == 1:
            [only] = names
            complete = ProcessOwner(
                owner.pod_uid, owner.container_id, only.namespace, only.pod, only.container
            )
            return complete, True
        if names:
            # Every name goes to the join, which asks the API server first: the directory of the
            # UID is only the kubelet's word where nobody rewrote /var/log. Asked again on each
            # lookup (dictionary lookups), so that once a rescan no longer finds the conflict the
            # process is named without waiting for its cache entry to go.
            candidates = tuple((n.namespace, n.pod, n.container) for n in names)
            pod = self._pod_directory_agreeing(owner.pod_uid, names)
            namespace, pod_name = (pod.namespace, pod.pod) if pod is not None else ("", "")
            conflicted = ProcessOwner(
                owner.pod_uid, owner.container_id, namespace, pod_name, name_candidates=candidates
            )
            return conflicted, False
        pod = self._logs.pod(owner.pod_uid)
        if pod is None:
            return owner, False
        partial = ProcessOwner(owner.pod_uid, owner.container_id, pod.namespace, pod.pod)
        return partial, not owner.container_id

    def _refused(self, pid: int, refused: NotRegularFile) -> str:
        """A FIFO, device or the like where procfs has a regular file: not the kernel's /proc, so
        nothing about this PID can be believed; it is skipped, every other PID still read."""
        self._cache.pop(pid, None)
        where = str(refused.path)
        if where not in self._refused_logged:
            if len(self._refused_logged) >= _REFUSED_LOGGED_CAP:
                self._refused_logged.clear()
            self._refused_logged.add(where)
            log.warning("processes collector: skipping PID %d: %s", pid, refused)
        return OTHER_PID_NAMESPACE

    def _pod_directory_agreeing(
        self, pod_uid: str, names: tuple[ContainerNames, ...]
    ) -> PodNames | None:
        """The pod the UID's log directory names, when it is one of `names`' pods. The UID is the
        kernel's (the cgroup's); its directory counts only when it is the only one naming that
        UID, since a second would be as much a forgery as a second symlink."""
        pod = self._logs.pod(pod_uid)
        if pod is None or not any((n.namespace, n.pod) == (pod.namespace, pod.pod) for n in names):
            return None
        return pod

    def _vanished(self, pid: int) -> str:
        if self._cache.pop(pid, None) is not None:
            return EXITED
        # NVML's PIDs are the host's: in the host's PID namespace a PID with no /proc entry has
        # ended; anywhere else it was never visible.
        self.problem()
        return EXITED if self._host_namespace else OTHER_PID_NAMESPACE

    def _start_time(self, pid: int) -> int:
        return int(
            _stat_fields(read_head(self._proc / str(pid) / "stat", STAT_READ_LIMIT))[
                _START_TIME_INDEX
            ]
        )

    def _remember(self, pid: int, entry: _Entry) -> None:
        if len(self._cache) >= self._cache_cap:
            self._evict(entry.seen_at - self._round_s)
        while len(self._cache) >= self._cache_cap:
            # Everything was seen this round: drop the oldest resolution.
            del self._cache[next(iter(self._cache))]
        self._cache[pid] = entry

    def _end_round_if_due(self, now: float) -> None:
        if now - self._round_started >= self._round_s:
            self._evict(self._round_started)
            self._round_started = now

    def _evict(self, seen_before: float) -> None:
        stale = [pid for pid, entry in self._cache.items() if entry.seen_at < seen_before]
        for pid in stale:
            del self._cache[pid]

    def _diagnose(self) -> str | None:
        self._host_namespace = False
        where = self._proc
        try:
            init_cgroup = read_head(where / "1" / "cgroup", CGROUP_READ_LIMIT)
        except OSError as error:
            return (
                f"process attribution is off: cannot read {where / '1' / 'cgroup'} "
                f"({error.strerror or error}); it needs the host's /proc, through hostPID or "
                "--processes.proc-root"
            )
        in_pod = pod_cgroup(init_cgroup)
        if in_pod is not None or _names_a_container(init_cgroup):
            whose = f"pod {in_pod.pod_uid}" if in_pod is not None else "a container"
            return (
                f"process attribution is off: PID 1 in {where} belongs to {whose}, so the "
                "exporter sees a container's PID namespace; run it with hostPID: true or mount "
                "the host's /proc at --processes.proc-root"
            )
        if _at_namespace_root(init_cgroup) and not self._kthreadd_visible():
            return (
                f"process attribution is off: {where} lists no kernel threads (PID 2 is not "
                "kthreadd), so it is a container's PID namespace; run the exporter with "
                "hostPID: true or mount the host's /proc at --processes.proc-root"
            )
        self._host_namespace = True
        missing_logs = self._logs.missing()
        if missing_logs and not self._said_partial:
            # Not a reason to stop: pods still resolve by UID, named through --kubernetes.
            log.warning("process attribution is partial: %s", missing_logs)
            self._said_partial = True
        return None

    def _kthreadd_visible(self) -> bool:
        try:
            text = read_head(self._proc / str(_KTHREADD_PID) / "stat", STAT_READ_LIMIT)
            return bool(int(_stat_fields(text)[_FLAGS_INDEX]) & _PF_KTHREAD)
        except (OSError, ValueError, IndexError):
            return False


def _stat_fields(text: str) -> list[str]:
    """The fields after the command name, which may itself hold spaces and parentheses."""
    closing = text.rfind(")")
    if closing < 0:
        raise ValueError("no command name in stat")
    fields = text[closing + 1 :].split()
    if len(fields) <= _START_TIME_INDEX:
        raise ValueError("stat is too short")
    return fields


def _unnamed(found: PodCgroup) -> ProcessOwner:
    return ProcessOwner(found.pod_uid, found.container_id)


def _cgroup_paths(cgroup_text: str) -> list[str]:
    return [parts[2] for line in cgroup_text.splitlines() if len(parts := line.split(":", 2)) == 3]


def _names_a_container(cgroup_text: str) -> bool:
    return any(
        container_id_of_segment(path.rstrip("/").rpartition("/")[2])
        for path in _cgroup_paths(cgroup_text)
    )


def _at_namespace_root(cgroup_text: str) -> bool:
    """Every hierarchy reads "/": PID 1 of a host without systemd, or the init of a container
    with its own cgroup namespace. Only then are kernel threads needed to tell them apart (a
    systemd host's PID 1 is in /init.scope)."""
    paths = _cgroup_paths(cgroup_text)
    return not paths or all(path == "/" for path in paths)

"""Who a GPU process belongs to, as far as the host's /proc and /var/log can tell without the API
server: the pod's UID and the container's ID from the process's cgroup, and their names from the
kubelet's log-file layout. The attribution join checks the owner against the pods that hold the
device (pod_usage.py)."""

from __future__ import annotations

from typing import Protocol

# Defined with the snapshot that carries it, so that what reads a snapshot (the renderer) needs
# nothing from this package; imported from here as well, with the rest of the owner lookup.
from kube_gpu_exporter.exporter.snapshot import ProcessOwner

# Why a process has no owner (the `reason` of the unattributed counts).
HOST = "host"  # a process outside any pod (its cgroup is not under kubepods)
OTHER_PID_NAMESPACE = "pid_not_visible"  # NVML's PID is not in the proc root we read
EXITED = "exited"  # the process ended between the NVML call and the /proc read
UNKNOWN_CONTAINER = "unknown_container"  # a pod cgroup, but no log files name it


class PidOwners(Protocol):
    """pid -> owner, or the reason there is none. Implementations cache per (pid, start time).

    One member is optional, so that an owner table that reads no kubelet logs (a test's, an
    embedder's) need not invent it: `log_name_conflicts`, an int, the container IDs and pod UIDs
    to which the kubelet's log names give more than one name (a leftover or forged name; the
    processes concerned are named only from what the kubelet reports). Read it through
    `log_name_conflicts()`, which answers None where an implementation does not count them."""

    def owner(self, pid: int) -> ProcessOwner | str: ...

    def problem(self) -> str | None:
        """Why process attribution cannot work here (no host PID namespace, unreadable proc
        root), in one line; None when it can."""
        ...


def log_name_conflicts(owners: PidOwners) -> int | None:
    """PidOwners' optional `log_name_conflicts`, or None where `owners` does not count them.
    Read on the sweep thread: implementations answer from their last log scan, never scan."""
    found = getattr(owners, "log_name_conflicts", None)
    # bool is an int to Python, but never a count.
    return found if isinstance(found, int) and not isinstance(found, bool) else None

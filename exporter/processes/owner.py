"""Who a GPU process belongs to, as far as the host's /proc and /var/log can tell without the API
server: the pod's UID and the container's ID from the process's cgroup, and their names from the
kubelet's log-file layout. The exposition checks the owner against the pods that hold the device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# Why a process has no owner (the `reason` of the unattributed counts).
HOST = "host"  # a process outside any pod (its cgroup is not under kubepods)
OTHER_PID_NAMESPACE = "pid_not_visible"  # NVML's PID is not in the proc root we read
EXITED = "exited"  # the process ended between the NVML call and the /proc read
UNKNOWN_CONTAINER = "unknown_container"  # a pod cgroup, but no log files name it


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    pod_uid: str
    container_id: str
    # Names from /var/log/pods and /var/log/containers; empty where the logs do not tell (the
    # exposition then looks the UID up in the Kubernetes view, with --kubernetes).
    namespace: str = ""
    pod: str = ""
    container: str = ""


class PidOwners(Protocol):
    """pid -> owner, or the reason there is none. Implementations cache per (pid, start time)."""

    def owner(self, pid: int) -> ProcessOwner | str: ...

    def problem(self) -> str | None:
        """Why process attribution cannot work here (no host PID namespace, unreadable proc
        root), in one line; None when it can."""
        ...

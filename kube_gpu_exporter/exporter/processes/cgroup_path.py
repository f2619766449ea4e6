"""The pod and container a process belongs to, read from the text of `/proc/<pid>/cgroup`.

The layouts, and the sources they were checked against, are in docs/process-accounting.md,
'Cgroup layouts'. Parsing is strict: a path that does not follow a kubelet layout, from the top
of the hierarchy down, is not a pod's, so a host process can never be mistaken for one, even one
moved into a cgroup named like a pod's under a login user's delegated subtree.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# The API server's UIDs are canonical UUIDs; a static pod's is the kubelet's MD5 of its manifest,
# 32 hex digits without dashes.
_POD_UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32}")
_ID = "[0-9a-f]{64}"
# The container's own cgroup under its pod's: the systemd scopes of containerd's CRI plugin,
# CRI-O and Docker (cri-dockerd), CRI-O's cgroupfs directory, and containerd's or Docker's bare ID.
_CONTAINER_SEGMENT = re.compile(
    rf"(?:cri-containerd|crio|docker)-(?P<scope>{_ID})\.scope|crio-(?P<crio>{_ID})|(?P<bare>{_ID})"
)
_QOS_CLASSES = frozenset({"burstable", "besteffort"})
_BARE_ID = re.compile(_ID)
_NODE_SCOPE = re.compile(rf"docker-{_ID}\.scope")
# systemd's units that may hold cgroups; a kubelet's cgroupfs hierarchy is never below one.
_UNIT_SUFFIXES = (".slice", ".scope", ".service")
# Where the cgroup hierarchy above a path is hidden by the reader's cgroup namespace, the kernel
# writes ".." for each level, so "kubepods" itself may read as "..".
_HIDDEN_ANCESTOR = ".."
# Lines tried first: the unified hierarchy, then v1 controllers every kubelet places pods in.
_PREFERRED_CONTROLLERS = ("", "pids", "memory", "cpu", "name=systemd")


class PodCgroup(NamedTuple):
    pod_uid: str  # canonical: dashes, as the API server writes it
    # "" when the process is in the pod's cgroup but in no container's: CRI-O's conmon, or a
    # process moved into the pod-level cgroup itself.
    container_id: str


def pod_cgroup(cgroup_text: str) -> PodCgroup | None:
    """The pod and container of a process from its `/proc/<pid>/cgroup`, or None when it is not
    in a pod (a host process, or a layout this parser does not know)."""
    fallback: PodCgroup | None = None
    for path in _paths_by_preference(cgroup_text):
        found = pod_cgroup_of_path(path)
        if found is None:
            continue
        if found.container_id:
            return found
        fallback = fallback or found
    return fallback


def pod_cgroup_of_path(path: str) -> PodCgroup | None:
    """The pod and container named by one cgroup path (the part after the second ':').

    The pod's cgroup counts only where the kubelet makes it: its hierarchy must start at the top
    of what the path shows (after the `..` of a cgroup namespace and a kind or minikube node's
    own container, if any), or below plain directories of a cgroupfs `--cgroup-root`. Anywhere
    else it could be a login user's look-alike: systemd hands every user a subtree
    (`/user.slice/user-<uid>.slice/user@<uid>.service/...`) in which any name can be created,
    and /var/log/containers tells anyone a pod's UID and container IDs."""
    segments = [segment for segment in path.split("/") if segment]
    hidden = 0
    while hidden < len(segments) and segments[hidden] == _HIDDEN_ANCESTOR:
        hidden += 1
    top = hidden + _node_container_length(segments[hidden:])
    found = _systemd_pod(segments, top) or _cgroupfs_pod(segments, top)
    if found is None:
        return None
    uid, pod_index = found
    following = segments[pod_index + 1] if pod_index + 1 < len(segments) else ""
    return PodCgroup(uid, container_id_of_segment(following))


def container_id_of_segment(segment: str) -> str:
    """The container ID a cgroup directory names, or "" (CRI-O's `crio-conmon-<id>` scope holds
    the runtime's monitor, not the container, and is deliberately not matched)."""
    match = _CONTAINER_SEGMENT.fullmatch(segment)
    if match is None:
        return ""
    return next(group for group in match.groups() if group)


def _paths_by_preference(cgroup_text: str) -> list[str]:
    ranked: list[tuple[int, str]] = []
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            continue
        _hierarchy, controllers, path = parts
        rank = len(_PREFERRED_CONTROLLERS)
        for position, wanted in enumerate(_PREFERRED_CONTROLLERS):
            if controllers == wanted or (wanted and wanted in controllers.split(",")):
                rank = position
                break
        ranked.append((rank, path))
    return [path for _rank, path in sorted(ranked, key=lambda item: item[0])]


def _node_container_length(segments: list[str]) -> int:
    """How many leading segments are a kind or minikube node's own container, seen from the host
    that runs it: `/docker/<id>` (cgroupfs) or `/system.slice/docker-<id>.scope` (systemd). Only
    root can place a container there: rootless engines put theirs under the user's subtree."""
    if len(segments) >= 2:
        if segments[0] == "docker" and _BARE_ID.fullmatch(segments[1]):
            return 2
        if segments[0] == "system.slice" and _NODE_SCOPE.fullmatch(segments[1]):
            return 2
    return 0


def _systemd_pod(segments: list[str], top: int) -> tuple[str, int] | None:
    """(pod UID, index of the pod's slice) when the segments from `top` are an unbroken chain of
    slices ending in a pod's: systemd names each slice after its parent plus one `-` component,
    and hands users subtrees only under a service or scope, never as a slice of this chain."""
    parent: list[str] | None = None
    for index in range(top, len(segments)):
        parts = _slice_parts(segments[index])
        if parts is None or (parent is not None and parts[:-1] != parent):
            return None
        uid = _systemd_pod_uid(parts)
        if uid is not None:
            return uid, index
        parent = parts
    return None


def _slice_parts(segment: str) -> list[str] | None:
    if not segment.endswith(".slice"):
        return None
    parts = segment.removesuffix(".slice").split("-")
    return parts if all(parts) else None


def _systemd_pod_uid(parts: list[str]) -> str | None:
    """`kubepods-burstable-pod<uid>.slice`: systemd spells the whole ancestry in the slice's
    name, with each "-" inside a part escaped as "_"."""
    if len(parts) < 2 or not parts[-1].startswith("pod") or "kubepods" not in parts[:-1]:
        return None
    between = parts[parts.index("kubepods") + 1 : -1]
    if between and (len(between) > 1 or between[0] not in _QOS_CLASSES):
        return None
    return _canonical_uid(parts[-1].removeprefix("pod").replace("_", "-"))


def _cgroupfs_pod(segments: list[str], top: int) -> tuple[str, int] | None:
    """(pod UID, index of the pod's directory) for `[burstable|besteffort/]pod<uid>` at the top
    of a cgroup namespace's view (`kubepods` is one of the hidden levels), or for
    `kubepods/[burstable|besteffort/]pod<uid>` below plain directories only (the kubelet's
    `--cgroup-root`, kind's `/kubelet`). A systemd unit above it is a user's or a service's."""
    if top > 0 and segments[top - 1] == _HIDDEN_ANCESTOR:
        found = _cgroupfs_pod_at(segments, top)
        if found is not None:
            return found
    for index in range(top, len(segments)):
        segment = segments[index]
        if segment == "kubepods":
            return _cgroupfs_pod_at(segments, index + 1)
        if segment.endswith(_UNIT_SUFFIXES) or segment == _HIDDEN_ANCESTOR:
            return None
    return None


def _cgroupfs_pod_at(segments: list[str], index: int) -> tuple[str, int] | None:
    """`[burstable|besteffort/]pod<uid>` from `index`."""
    if index < len(segments) and segments[index] in _QOS_CLASSES:
        index += 1
    if index >= len(segments) or not segments[index].startswith("pod"):
        return None
    uid = _canonical_uid(segments[index].removeprefix("pod"))
    return None if uid is None else (uid, index)


def is_pod_uid(text: str) -> bool:
    return _POD_UID.fullmatch(text) is not None


def _canonical_uid(candidate: str) -> str | None:
    return candidate if is_pod_uid(candidate) else None

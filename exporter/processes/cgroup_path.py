"""The pod and container a process belongs to, read from the text of `/proc/<pid>/cgroup`.

The layouts, and the sources they were checked against, are in docs/process-accounting.md,
'Cgroup layouts'. Parsing is strict: a path that does not follow a kubelet layout is not a pod's,
so a host process can never be mistaken for one.
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
    """The pod and container named by one cgroup path (the part after the second ':')."""
    segments = [segment for segment in path.split("/") if segment]
    for index, segment in enumerate(segments):
        uid = _systemd_pod_uid(segment) or _cgroupfs_pod_uid(segments, index)
        if uid is None:
            continue
        following = segments[index + 1] if index + 1 < len(segments) else ""
        return PodCgroup(uid, container_id_of_segment(following))
    return None


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


def _systemd_pod_uid(segment: str) -> str | None:
    """`kubepods-burstable-pod<uid>.slice`: systemd spells the whole ancestry in the slice's
    name, with each "-" inside a part escaped as "_"."""
    if not segment.endswith(".slice"):
        return None
    parts = segment.removesuffix(".slice").split("-")
    if len(parts) < 2 or not parts[-1].startswith("pod") or "kubepods" not in parts[:-1]:
        return None
    between = parts[parts.index("kubepods") + 1 : -1]
    if between and (len(between) > 1 or between[0] not in _QOS_CLASSES):
        return None
    return _canonical_uid(parts[-1].removeprefix("pod").replace("_", "-"))


def _cgroupfs_pod_uid(segments: list[str], index: int) -> str | None:
    """`kubepods/[burstable|besteffort/]pod<uid>`, under any cgroup root."""
    segment = segments[index]
    if not segment.startswith("pod") or segment.endswith(".slice"):
        return None
    above = segments[:index]
    if above and above[-1] in _QOS_CLASSES:
        above = above[:-1]
    if not above or above[-1] not in ("kubepods", _HIDDEN_ANCESTOR):
        return None
    return _canonical_uid(segment.removeprefix("pod"))


def is_pod_uid(text: str) -> bool:
    return _POD_UID.fullmatch(text) is not None


def _canonical_uid(candidate: str) -> str | None:
    return candidate if is_pod_uid(candidate) else None

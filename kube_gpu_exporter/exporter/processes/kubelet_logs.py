"""Pod and container names from the kubelet's log-file layout under the host's /var/log.

The kubelet names every container's log symlink and every pod's log directory after the pod, so
the directory listings alone map a container ID and a pod UID to names, without the API server.
Only names are read: no symlink is followed and no file is opened. The layout and its sources are
in docs/process-accounting.md, 'Kubelet log layout'.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import TypeVar

from kube_gpu_exporter.exporter.processes.cgroup_path import is_pod_uid

log = logging.getLogger(__name__)

CONTAINERS_DIR = "containers"
PODS_DIR = "pods"
LOG_SUFFIX = ".log"

# The API's validation rules: namespaces and container names are DNS labels, pod names DNS
# subdomains. None may hold "_", which is what makes the "_"-joined names unambiguous.
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(_LABEL)
_DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")
_DNS_LABEL_MAX = 63
_DNS_SUBDOMAIN_MAX = 253
_CONTAINER_ID = re.compile(r"[0-9a-f]{64}")

DEFAULT_RESCAN_INTERVAL_S = 10.0
# Per directory: a node runs at most a few hundred pods, so this is only reached by a directory
# that is not the kubelet's, and it bounds both the scan's time and the index's memory.
DEFAULT_MAX_ENTRIES = 50_000
# A conflict's log line names this many of its names at most, so it stays one short line.
_NAMES_LOGGED = 3


@dataclass(frozen=True, slots=True)
class ContainerNames:
    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class PodNames:
    namespace: str
    pod: str


_Names = TypeVar("_Names", ContainerNames, PodNames)


def parse_container_log_name(name: str) -> tuple[str, ContainerNames] | None:
    """`<pod>_<namespace>_<container>-<container id>.log` -> (container id, names), or None for
    anything else, including names the kubelet cut at 255 characters (they lose the ID's end)."""
    if not name.endswith(LOG_SUFFIX):
        return None
    fields = name.removesuffix(LOG_SUFFIX).split("_")
    if len(fields) != 3:
        return None
    pod, namespace, container_and_id = fields
    container, _, container_id = container_and_id.rpartition("-")
    if not (
        _CONTAINER_ID.fullmatch(container_id)
        and _is_pod_name(pod)
        and _is_label(namespace)
        and _is_label(container)
    ):
        return None
    return container_id, ContainerNames(namespace, pod, container)


def parse_pod_log_dir_name(name: str) -> tuple[str, PodNames] | None:
    """`<namespace>_<pod>_<uid>` -> (uid, names), or None for anything else (the bare-UID
    directories of kubelets older than 1.14 name no pod)."""
    fields = name.split("_")
    if len(fields) != 3:
        return None
    namespace, pod, uid = fields
    if not (is_pod_uid(uid) and _is_label(namespace) and _is_pod_name(pod)):
        return None
    return uid, PodNames(namespace, pod)


class KubeletLogIndex:
    """container ID -> names and pod UID -> names, from `<log_root>/containers` and
    `<log_root>/pods`. Scanned lazily: on the first lookup, then again on a miss at most once per
    `rescan_interval_s`, so a sweep that finds only known containers lists no directory.

    The kubelet names a container ID once and a pod UID once. A second name is a leftover or a
    forgery (a pod that mounts the host's /var/log writable can add one), so no name is picked by
    listing order: `container` and `pod` answer only a single name, `containers` gives every
    one, for the caller to choose by what the kubelet itself says; each conflict is counted in
    `conflicts` and logged once."""

    def __init__(
        self,
        log_root: str | os.PathLike[str],
        clock: Callable[[], float] = time.monotonic,
        *,
        rescan_interval_s: float = DEFAULT_RESCAN_INTERVAL_S,
        max_entries: int = DEFAULT_MAX_ENTRIES,
    ) -> None:
        self._root = Path(log_root)
        self._clock = clock
        self._rescan_interval_s = rescan_interval_s
        self._max_entries = max_entries
        # Every name of each ID and UID, sorted, so the listing order decides nothing.
        self._containers: dict[str, tuple[ContainerNames, ...]] = {}
        self._pods: dict[str, tuple[PodNames, ...]] = {}
        self._scanned_at: float | None = None
        self.scans = 0
        # Whether the last scan stopped at max_entries in either directory.
        self.truncated = False
        # Container IDs and pod UIDs with more than one name in the last scan.
        self._conflicting: frozenset[str] = frozenset()

    @property
    def conflicts(self) -> int:
        """Container IDs and pod UIDs the last scan found more than one name for."""
        return len(self._conflicting)

    def containers(self, container_id: str) -> tuple[ContainerNames, ...]:
        """Every name the log symlinks give the container: one, or none, unless they conflict."""
        found = self._containers.get(container_id)
        if found is None and self._may_rescan():
            self.rescan()
            found = self._containers.get(container_id)
        return found or ()

    def container(self, container_id: str) -> ContainerNames | None:
        """The container's one name; None when the logs give none, or several."""
        found = self.containers(container_id)
        return found[0] if len(found) == 1 else None

    def pod(self, pod_uid: str) -> PodNames | None:
        """The pod's one name; None when no directory names it, or several do."""
        found = self._pods.get(pod_uid)
        if found is None and self._may_rescan():
            self.rescan()
            found = self._pods.get(pod_uid)
        return found[0] if found is not None and len(found) == 1 else None

    def rescan(self) -> None:
        self._scanned_at = self._clock()
        self.scans += 1
        container_names, containers_cut = self._names(self._root / CONTAINERS_DIR, dirs=False)
        pod_names, pods_cut = self._names(self._root / PODS_DIR, dirs=True)
        self._containers = _grouped(map(parse_container_log_name, container_names))
        self._pods = _grouped(map(parse_pod_log_dir_name, pod_names))
        self.truncated = containers_cut or pods_cut
        self._note_conflicts()

    def _note_conflicts(self) -> None:
        conflicting = {
            key: names
            for table in (self._containers, self._pods)
            for key, names in table.items()
            if len(names) > 1
        }
        # Logged when first seen, not on every scan while it lasts.
        for key in sorted(conflicting.keys() - self._conflicting):
            names = conflicting[key]
            shown = ", ".join("/".join(astuple(n)) for n in names[:_NAMES_LOGGED])
            more = f" and {len(names) - _NAMES_LOGGED} more" if len(names) > _NAMES_LOGGED else ""
            log.warning(
                "processes collector: the kubelet's log names under %s disagree: %s is named "
                "%s%s; its processes are named only from what the kubelet reports",
                self._root,
                key,
                shown,
                more,
            )
        self._conflicting = frozenset(conflicting)

    def missing(self) -> str | None:
        """Why the index can name nothing here, in one line; None when it can."""
        present = [name for name in (CONTAINERS_DIR, PODS_DIR) if (self._root / name).is_dir()]
        if present:
            return None
        return (
            f"neither {self._root / CONTAINERS_DIR} nor {self._root / PODS_DIR} exists, so "
            "processes are named by pod UID only: mount the host's /var/log read-only at "
            "--processes.log-root"
        )

    def _may_rescan(self) -> bool:
        return (
            self._scanned_at is None or self._clock() - self._scanned_at >= self._rescan_interval_s
        )

    def _names(self, directory: Path, *, dirs: bool) -> tuple[list[str], bool]:
        """The entry names of one directory that are directories (or, with dirs=False, anything
        else: the kubelet's symlinks), and whether the listing stopped at max_entries."""
        names: list[str] = []
        for examined, entry in enumerate(_entries(directory)):
            if examined >= self._max_entries:
                return names, True
            # DirEntry answers from the listing's file type, without following a symlink.
            if entry.is_dir(follow_symlinks=False) == dirs:
                names.append(entry.name)
        return names, False


def _grouped(pairs: Iterable[tuple[str, _Names] | None]) -> dict[str, tuple[_Names, ...]]:
    grouped: defaultdict[str, set[_Names]] = defaultdict(set)
    for pair in pairs:
        if pair is not None:
            grouped[pair[0]].add(pair[1])
    return {key: tuple(sorted(values, key=astuple)) for key, values in grouped.items()}


def _entries(directory: Path) -> Iterator[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as listing:
            yield from listing
    except OSError:
        # Missing or unreadable: missing() says so; a lookup simply finds nothing.
        return


def _is_label(name: str) -> bool:
    return len(name) <= _DNS_LABEL_MAX and _DNS_LABEL.fullmatch(name) is not None


def _is_pod_name(name: str) -> bool:
    return len(name) <= _DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(name) is not None

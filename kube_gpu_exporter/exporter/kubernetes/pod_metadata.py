"""What the enrichment knows, as immutable values, and how it is derived from API objects."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kube_gpu_exporter.exporter.dra.slices import SliceDevice
from kube_gpu_exporter.exporter.kubernetes.label_names import (
    is_series_label,
    is_unicode_text,
    is_valid_label_name,
    sanitize_label_name,
    series_label_name,
)

# gpu-feature-discovery and the MIG manager label nodes under nvidia.com/. The GFD timestamp
# changes on every relabel and would only churn series.
NODE_LABEL_PREFIX = "nvidia.com/"
NODE_LABELS_IGNORED = frozenset({"nvidia.com/gfd.timestamp"})


@dataclass(frozen=True, slots=True)
class PodMetadata:
    namespace: str
    name: str
    uid: str
    owner_kind: str
    owner_name: str
    labels: tuple[tuple[str, str], ...]  # sanitised Prometheus label name -> raw value, sorted
    # The same labels as the DCGM series carry them (--kubernetes.enable-pod-labels): no prefix,
    # sorted. Empty unless that option is on, so no memory is spent on them otherwise.
    series_labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class KubernetesView:
    pods: Mapping[tuple[str, str], PodMetadata]
    node_labels: tuple[tuple[str, str], ...]
    pods_synced: bool
    node_synced: bool
    pods_updated_at: float | None
    node_updated_at: float | None
    watch_errors: int
    relists: int
    labels_dropped: int
    # (reason, pod label keys left off the DCGM series for it), every reason in SERIES_DROP_REASONS
    # once --kubernetes.enable-pod-labels is on; empty otherwise.
    series_labels_dropped: tuple[tuple[str, int], ...] = ()
    # NVIDIA GPU DRA devices this node's ResourceSlices offer, by (pool, device name); only
    # those of the newest generation of each pool. Empty unless the ResourceSlice watch runs.
    resource_slices: Mapping[tuple[str, str], SliceDevice] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # None: the ResourceSlice watch is off, or the cluster serves no resource.k8s.io API;
    # False: on and not (or no longer) synced.
    slices_synced: bool | None = None
    slices_updated_at: float | None = None


EMPTY_VIEW = KubernetesView(MappingProxyType({}), (), False, False, None, None, 0, 0, 0)

# Why a pod label key is not on the DCGM series: its name is one the series carry already
# (`pod`, `gpu`, `hostname`, ...), it is no valid label name (it starts with a digit), another
# key of the pod sanitises to the same name (the first in key order stays), the pod has more
# than --kubernetes.max-pod-labels of them (the first names in order stay), or its value is not
# Unicode text (a lone surrogate).
RESERVED, INVALID, DUPLICATE, CAP = "reserved", "invalid", "duplicate", "cap"
NOT_TEXT = "not_text"
SERIES_DROP_REASONS = (CAP, DUPLICATE, INVALID, NOT_TEXT, RESERVED)


def owner_of(metadata: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str, str]:
    """The controlling owner, with a ReplicaSet reported as its Deployment.

    Resolving a ReplicaSet's owner exactly would take a GET per ReplicaSet (and RBAC for it);
    Deployment-made ReplicaSets are named <deployment>-<pod-template-hash>, which is enough.
    """
    refs = metadata.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if not ref:
        return "", ""
    kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
    template_hash = labels.get("pod-template-hash")
    if kind == "ReplicaSet" and template_hash and name.endswith("-" + template_hash):
        return "Deployment", name[: -len(template_hash) - 1]
    return kind, name


def selected_labels(
    labels: Mapping[str, str], allowlist: re.Pattern[str] | None, cap: int
) -> tuple[tuple[tuple[str, str], ...], int]:
    """Allow-listed labels under Prometheus names, and how many were dropped: over the per-pod
    cap, or with a value that is not Unicode text."""
    if allowlist is None:
        return (), 0
    chosen: dict[str, str] = {}
    not_text = 0
    for key in sorted(labels):
        if allowlist.fullmatch(key):
            value = str(labels[key])
            if not is_unicode_text(value):
                not_text += 1
                continue
            # Two keys can sanitise to one name; the first in key order wins, deterministically.
            chosen.setdefault(sanitize_label_name(key), value)
    names = sorted(chosen)
    return tuple((n, chosen[n]) for n in names[:cap]), max(0, len(names) - cap) + not_text


def series_labels(
    labels: Mapping[str, str], allowlist: re.Pattern[str] | None, cap: int
) -> tuple[tuple[tuple[str, str], ...], Counter[str]]:
    """The pod's labels for the DCGM series, dcgm-exporter's spelling: every label, or those the
    allow-list matches, under names that cannot clash with the series' own; and how many keys
    were left out, by reason."""
    chosen: dict[str, str] = {}
    dropped: Counter[str] = Counter()
    for key in sorted(labels):
        if allowlist is not None and not allowlist.fullmatch(key):
            continue
        name = series_label_name(key)
        if not is_valid_label_name(name):
            dropped[INVALID] += 1
        elif is_series_label(name):
            dropped[RESERVED] += 1
        elif name in chosen:
            dropped[DUPLICATE] += 1
        elif not is_unicode_text(str(labels[key])):
            dropped[NOT_TEXT] += 1
        else:
            chosen[name] = str(labels[key])
    names = sorted(chosen)
    if len(names) > cap:
        dropped[CAP] += len(names) - cap
    return tuple((n, chosen[n]) for n in names[:cap]), dropped


@dataclass(frozen=True, slots=True)
class LabelSelection:
    """Which pod labels the watcher keeps, and in which spellings."""

    allowlist: re.Pattern[str] | None = None
    cap: int = 10
    # --kubernetes.enable-pod-labels: keep them for the DCGM series as well.
    on_series: bool = False


def pod_metadata(
    obj: Mapping[str, Any], selection: LabelSelection
) -> tuple[PodMetadata, int, Counter[str]]:
    """The pod's metadata; how many labels the allocation metric's cap dropped; and how many the
    DCGM series left out, by reason."""
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    kind, name = owner_of(metadata, labels)
    chosen, dropped = selected_labels(labels, selection.allowlist, selection.cap)
    on_series: tuple[tuple[str, str], ...] = ()
    series_dropped: Counter[str] = Counter()
    if selection.on_series:
        on_series, series_dropped = series_labels(labels, selection.allowlist, selection.cap)
    return (
        PodMetadata(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            owner_kind=kind,
            owner_name=name,
            labels=chosen,
            series_labels=on_series,
        ),
        dropped,
        series_dropped,
    )


def node_gpu_labels(obj: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return tuple(
        sorted(
            (k, str(v))
            for k, v in labels.items()
            if k.startswith(NODE_LABEL_PREFIX) and k not in NODE_LABELS_IGNORED
        )
    )

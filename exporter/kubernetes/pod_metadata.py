"""What the enrichment knows, as immutable values, and how it is derived from API objects."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from exporter.kubernetes.label_names import sanitize_label_name

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


EMPTY_VIEW = KubernetesView(MappingProxyType({}), (), False, False, None, None, 0, 0, 0)


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
    """Allow-listed labels under Prometheus names, and how many the per-pod cap dropped."""
    if allowlist is None:
        return (), 0
    chosen: dict[str, str] = {}
    for key in sorted(labels):
        if allowlist.fullmatch(key):
            # Two keys can sanitise to one name; the first in key order wins, deterministically.
            chosen.setdefault(sanitize_label_name(key), str(labels[key]))
    names = sorted(chosen)
    return tuple((n, chosen[n]) for n in names[:cap]), max(0, len(names) - cap)


def pod_metadata(
    obj: Mapping[str, Any], allowlist: re.Pattern[str] | None, cap: int
) -> tuple[PodMetadata, int]:
    metadata = obj.get("metadata") or {}
    labels = metadata.get("labels") or {}
    kind, name = owner_of(metadata, labels)
    chosen, dropped = selected_labels(labels, allowlist, cap)
    return (
        PodMetadata(
            namespace=str(metadata.get("namespace", "")),
            name=str(metadata.get("name", "")),
            uid=str(metadata.get("uid", "")),
            owner_kind=kind,
            owner_name=name,
            labels=chosen,
        ),
        dropped,
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

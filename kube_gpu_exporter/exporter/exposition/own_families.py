"""The exporter's own metric families, beside the DCGM_* ones: one table of names, types, HELP
and label names that every writer takes its headers from. Checked at import, so a clash or a
malformed declaration fails the first test that renders anything, not a user's scrape."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, Profile
from kube_gpu_exporter.exporter.exposition.dcgm_families import families_for
from kube_gpu_exporter.exporter.exposition.metric_family import (
    DCGM_ENTITY,
    HOST,
    LABEL_PREFIXED,
    Declared,
    MetricFamily,
)

PREFIX = "kube_gpu_exporter_"
GAUGE, COUNTER = "gauge", "counter"

_TABLE: list[MetricFamily] = []


def _own(name: str, kind: str, help_text: str, labels: tuple[str, ...] = ()) -> MetricFamily:
    family = MetricFamily(PREFIX + name, kind, help_text, labels)
    _TABLE.append(family)
    return family


DEVICE = ("gpu", "UUID", "pci_bus_id", "device", HOST)

# NVML and the poller: rendered once per snapshot.
BUILD_INFO = _own(
    "build_info",
    GAUGE,
    "Build information of kube-gpu-exporter, with the node it runs on; always 1. Join "
    "the exporter's own series to a node with `and on (instance)` against this one.",
    ("version", "python_version", "nvml_binding_version", HOST),
)
NVML_UP = _own("nvml_up", GAUGE, "Whether NVML is initialised and answering (1) or not (0).")
COLLECTION_DURATION_SECONDS = _own(
    "collection_duration_seconds", GAUGE, "Duration of the last NVML sweep."
)
LAST_COLLECTION_SUCCESS_TIMESTAMP_SECONDS = _own(
    "last_collection_success_timestamp_seconds",
    GAUGE,
    "Unix time of the last sweep in which NVML answered.",
)
COLLECTOR_SUCCESS = _own(
    "collector_success",
    GAUGE,
    "Whether the collector's last run succeeded (1) or not (0).",
    ("collector",),
)
COLLECTOR_DURATION_SECONDS = _own(
    "collector_duration_seconds", GAUGE, "Duration of the collector's last run.", ("collector",)
)
NVML_ERRORS_TOTAL = _own(
    "nvml_errors_total",
    COUNTER,
    "NVML calls that returned an error, by function and NVML error name.",
    ("function", "error"),
)
READINGS_REJECTED_TOTAL = _own(
    "readings_rejected_total",
    COUNTER,
    "NVML readings left out as missing samples because the GPU cannot produce them (board power "
    "outside its limits, a value that is not finite), by GPU, DCGM field and reason.",
    ("UUID", "field", "reason"),
)
DEVICE_UP = _own(
    "device_up",
    GAUGE,
    "Whether the GPU answered NVML in the last sweep (1) or is lost or failing (0).",
    DEVICE,
)
DEVICE_STALE = _own(
    "device_stale",
    GAUGE,
    "Whether the GPU's values are from an earlier sweep because a call hung (1).",
    DEVICE,
)
DEVICE_INFO = _own(
    "device_info",
    GAUGE,
    "Static GPU attributes; always 1.",
    (*DEVICE, "model_name", "driver_version", "mig_mode"),
)
MIG_INSTANCE_INFO = _own(
    "mig_instance_info",
    GAUGE,
    "MIG instances and their identifiers; always 1.",
    (*DEVICE, "GPU_I_ID", "GPU_I_PROFILE", "compute_instance_id", "mig_uuid"),
)
NVLINK_DATA_BYTES_TOTAL = _own(
    "nvlink_data_bytes_total",
    COUNTER,
    "NVLink data transmitted (tx) and received (rx) over all links, from NVML's cumulative "
    "counters. DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL is DCGM's rate between two samples; rate() "
    "over this counter gives the rate over any window.",
    (*DEVICE, "direction"),
)
NVLINK_DOMAIN_INFO = _own(
    "nvlink_domain_info",
    GAUGE,
    "The multi-node NVLink domain the fabric manager registered the GPU in (its cluster UUID "
    "and clique ID, from NVML's fabric info); always 1. Only GPUs whose fabric registration "
    "completed have a series. Group GPUs by NVLink domain with `by (cluster_uuid, clique_id)`.",
    (*DEVICE, "cluster_uuid", "clique_id"),
)
CLOCK_EVENT_ACTIVE = _own(
    "clock_event_active",
    GAUGE,
    "Whether a clock event (throttle) reason is active on the GPU (1) or not (0).",
    (*DEVICE, "clock_event"),
)

# The GPU's health verdict (kube_gpu_exporter/exporter/health/, docs/health.md 'The GPU health
# verdict'): one series per reason that holds, or one reason="healthy"; on the GPU's DCGM labels
# (MIG instances and pod labels included) so alerts join it with the DCGM series.
GPU_HEALTH_REASON = _own(
    "gpu_health_reason",
    GAUGE,
    "A reason the GPU is not healthy (1), with its severity and the action to take; exactly one "
    'reason="healthy" series when none holds.',
    (DCGM_ENTITY, "reason", "severity", "action"),
)

# Capacity, from NVML and the kubelet.
NODE_PHYSICAL_GPUS = _own(
    "node_physical_gpus", GAUGE, "GPUs NVML sees on this node, healthy or not.", (HOST,)
)
NODE_MIG_INSTANCES = _own(
    "node_mig_instances",
    GAUGE,
    "MIG instances on this node by profile, from NVML.",
    (HOST, "profile"),
)
DEVICE_ALLOCATABLE_UNITS = _own(
    "device_allocatable_units",
    GAUGE,
    "Device IDs the kubelet can allocate that this GPU backs: 1 for a whole GPU, one per "
    "time-slicing replica or MIG instance, plus the DRA devices NVIDIA's DRA driver offers "
    "on it (held ones only, without the ResourceSlice watch); 0 when neither the device "
    "plugin nor the DRA driver offers the GPU.",
    DEVICE,
)
NODE_ALLOCATABLE_DEVICES = _own(
    "node_allocatable_devices",
    GAUGE,
    "Devices the kubelet can allocate per resource: healthy devices only, each "
    "time-slicing replica or memory unit counted once; DRA devices the node's "
    "ResourceSlices offer under resource gpu.nvidia.com (whole GPUs) or "
    "gpu.nvidia.com/mig-<profile>.",
    (HOST, "resource"),
)
NODE_ALLOCATED_DEVICES = _own(
    "node_allocated_devices",
    GAUGE,
    "Devices held by active pods per resource, from the kubelet pod-resources API; DRA "
    "devices once each, however many claims share them, under resource gpu.nvidia.com or "
    "gpu.nvidia.com/mig-<profile>.",
    (HOST, "resource"),
)
DRA_DEVICES_UNRESOLVED = _own(
    "dra_devices_unresolved",
    GAUGE,
    "DRA devices of running containers that the exporter cannot tie to an NVML device, by "
    "driver and reason (foreign_driver, unknown_name, no_such_gpu, no_such_mig_instance, "
    "ambiguous_mig_instance), and those whose ResourceSlice names another GPU than NVML's "
    "minor number does (slice_conflict; attributed by the minor number).",
    (HOST, "driver", "reason"),
)

# dcgm-exporter's DRA labels (--kubernetes-enable-dra), plus the kubelet's share ID.
DRA_LABELS = (
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_device_name",
    "dra_driver_name",
    "dra_mig_device_uuid",
    "dra_mig_profile",
    "dra_pool_name",
    "dra_share_id",
)

# A device (or MIG instance) and one container holding or using it: what the allocation and the
# per-pod usage families both start with.
POD_USAGE_LABELS = (
    "gpu",
    "UUID",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    HOST,
    "namespace",
    "pod",
    "container",
)

# Pod attribution, from the kubelet and (with --kubernetes) the API server.
POD_DEVICE_ALLOCATION = _own(
    "pod_device_allocation",
    GAUGE,
    "Devices (or time-slicing/MPS replicas of a device) held by a container, per device, "
    "from the kubelet pod-resources API. Join on UUID and GPU_I_ID to attribute usage.",
    (
        *POD_USAGE_LABELS,
        "resource",
        "device_id",
        *DRA_LABELS,
        "pod_uid",
        "owner_kind",
        "owner_name",
        LABEL_PREFIXED,
    ),
)

# Per-container use of shared devices, from NVML's process accounting (--collector.processes).
POD_GPU_MEMORY_USED_BYTES = _own(
    "pod_gpu_memory_used_bytes",
    GAUGE,
    "Device memory the container's processes hold on this GPU or MIG instance, from NVML's "
    "process accounting; the row with an empty pod holds everything not attributed to a pod "
    "that holds the device. Driver overhead is in no row.",
    POD_USAGE_LABELS,
)
POD_GPU_SM_UTILIZATION_RATIO = _own(
    "pod_gpu_sm_utilization_ratio",
    GAUGE,
    "Share of the GPU's SM time the container's processes used over the last sample window "
    "(0-1), from NVML's process utilization; whole GPUs only (NVML has none on MIG).",
    POD_USAGE_LABELS,
)
POD_GPU_PROCESSES = _own(
    "pod_gpu_processes",
    GAUGE,
    "Processes the container runs on this GPU or MIG instance; the row with an empty pod "
    "counts the unattributed ones.",
    POD_USAGE_LABELS,
)
GPU_PROCESSES_UNATTRIBUTED = _own(
    "gpu_processes_unattributed",
    GAUGE,
    "Processes on this GPU or MIG instance not counted for any pod, by reason: host "
    "(outside any pod), not_holder (a pod that does not hold the device), holder_unknown (a "
    "pod's process with pod-resources off), pid_not_visible, exited, unknown_container, "
    "ambiguous_container (the kubelet's log names give its container several names, more than "
    "one of them a pod holding the device).",
    (*POD_USAGE_LABELS[:5], "reason"),
)
PROCESS_LOG_NAME_CONFLICTS = _own(
    "process_log_name_conflicts",
    GAUGE,
    "Container IDs or pod UIDs the kubelet's log names give more than one name; forged or "
    "left-over names. As of the last scan of the log directories; their processes are named "
    "only from what the kubelet reports. With --collector.processes only.",
)

# Energy per container, whenever pod attribution is on: holders alone give the idle split, so it
# does not wait for process accounting (docs/pods.md, 'Energy per pod').
POD_GPU_ENERGY_JOULES_TOTAL = _own(
    "pod_gpu_energy_joules_total",
    COUNTER,
    "Energy the container's work used on this GPU or MIG instance, in joules: each increase of "
    "the GPU's energy counter, split by its processes' SM shares while any is busy, else evenly "
    "among the containers holding the device (MIG: among instances by GPM activity, else by "
    "slices). The row with an empty pod takes the rest, so a GPU's rows add up to its own "
    "energy. Starts at 0 with the exporter: use increase().",
    POD_USAGE_LABELS,
)

# Health of the pod-resources and Kubernetes sources.
PODRESOURCES_UP = _own(
    "podresources_up",
    GAUGE,
    "Whether the last call to the kubelet pod-resources API succeeded (1) or not (0).",
)
PODRESOURCES_LAST_SUCCESS_TIMESTAMP_SECONDS = _own(
    "podresources_last_success_timestamp_seconds",
    GAUGE,
    "Unix time of the last successful pod-resources refresh.",
)
PODRESOURCES_ERRORS_TOTAL = _own(
    "podresources_errors_total",
    COUNTER,
    "Failed pod-resources calls by gRPC status code.",
    ("code",),
)
KUBERNETES_WATCH_UP = _own(
    "kubernetes_watch_up",
    GAUGE,
    "Whether the watch of this node's pods, of the node object or of its ResourceSlices is "
    "synced (1) or not (0).",
    ("resource",),
)
KUBERNETES_LAST_UPDATE_TIMESTAMP_SECONDS = _own(
    "kubernetes_last_update_timestamp_seconds",
    GAUGE,
    "Unix time of the last list, event or bookmark received per watched resource.",
    ("resource",),
)
KUBERNETES_WATCH_ERRORS_TOTAL = _own(
    "kubernetes_watch_errors_total", COUNTER, "Errors of the Kubernetes API watches."
)
KUBERNETES_RELISTS_TOTAL = _own(
    "kubernetes_relists_total", COUNTER, "Relists after the API server answered 410 Gone."
)
POD_LABELS_DROPPED_TOTAL = _own(
    "pod_labels_dropped_total",
    COUNTER,
    "Pod label keys left out because a pod exceeded the per-pod label cap, or because their value "
    "is not Unicode text (a lone surrogate, which no exposition can carry).",
)
POD_SERIES_LABELS_DROPPED_TOTAL = _own(
    "pod_series_labels_dropped_total",
    COUNTER,
    "Pod label keys left off the DCGM series (--kubernetes.enable-pod-labels), by reason: "
    "reserved (a name the series carry already), invalid (no valid label name), duplicate "
    "(another key of the pod sanitises to the same name), cap (over --kubernetes.max-pod-labels), "
    "not_text (a value that is not Unicode text, such as a lone surrogate).",
    ("reason",),
)
FIELDS_UNSUPPORTED = _own(
    "fields_unsupported",
    GAUGE,
    "DCGM fields the --collectors file lists that are not exported, by field and reason; always 1.",
    ("field", "reason"),
)
RENDER_ERRORS_TOTAL = _own(
    "render_errors_total",
    COUNTER,
    "Renders of /metrics that left a part out because it failed (a family, or a group such as "
    "the pod join), by part; the rest of the body is served. Absent until one fails.",
    ("part",),
)
NODE_INFO = _own(
    "node_info",
    GAUGE,
    "This node's GPU labels from gpu-feature-discovery and the MIG manager; always 1.",
    (HOST, LABEL_PREFIXED),
)

# The per-scrape tail: what depends on the moment of the request.
SNAPSHOT_AGE_SECONDS = _own(
    "snapshot_age_seconds", GAUGE, "Seconds since the served snapshot was collected."
)
SNAPSHOT_STALE = _own(
    "snapshot_stale",
    GAUGE,
    "Whether the served snapshot is older than the staleness bound (1) or not (0).",
)
RENDER_DURATION_SECONDS = _own(
    "render_duration_seconds",
    GAUGE,
    "Time taken to render the served snapshot's exposition.",
)
HTTP_CONNECTIONS = _own("http_connections", GAUGE, "HTTP connections open to the exporter.")
HTTP_CONNECTIONS_EVICTED_TOTAL = _own(
    "http_connections_evicted_total",
    COUNTER,
    "Idle HTTP connections closed because --web.max-connections were open, or their client "
    "address held its share (--web.max-connections-per-address).",
)

OWN_FAMILIES: tuple[MetricFamily, ...] = tuple(_TABLE)
PLACEHOLDERS = (HOST, LABEL_PREFIXED, DCGM_ENTITY)


def all_families(profile: Profile) -> tuple[Declared, ...]:
    """Every family one profile's exposition may write: its DCGM_* spellings and our own."""
    return (*families_for(profile).declared, *OWN_FAMILIES)


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def declaration_problems(families: Iterable[Declared], own: Iterable[MetricFamily]) -> list[str]:
    """What is wrong with a set of declarations; empty when nothing is."""
    families = list(families)
    problems = [
        f"{name} is declared {n} times"
        for name, n in Counter(f.name for f in families).items()
        if n > 1
    ]
    problems += [
        f"{f.name!r} is not a metric name" for f in families if not _METRIC_NAME.fullmatch(f.name)
    ]
    problems += [
        f"{f.name} has type {f.kind!r}" for f in families if f.kind not in (GAUGE, COUNTER)
    ]
    for family in own:
        if not family.name.startswith(PREFIX):
            problems.append(f"{family.name} lacks the {PREFIX} prefix")
        # promtool's lint; the DCGM names cannot follow it, ours can.
        if family.kind == COUNTER and not family.name.endswith("_total"):
            problems.append(f"counter {family.name} does not end in _total")
        names = [n for n in family.labels if n not in PLACEHOLDERS]
        problems += [
            f"{family.name}: bad label name {n!r}" for n in names if not _LABEL_NAME.fullmatch(n)
        ]
        if len(set(family.labels)) != len(family.labels):
            problems.append(f"{family.name} declares a label twice")
    return problems


def meaning_problems(written: Iterable[tuple[str, str]]) -> list[str]:
    """A DCGM name must mean one reading in every profile that writes it, so that a 4.9 name
    never reuses a classic name of another meaning (a dashboard for one would read the other).
    `written`: (name, classic name of what it means) over all profiles."""
    meanings: dict[str, set[str]] = {}
    for name, classic in written:
        meanings.setdefault(name, set()).add(classic)
    return [
        f"{name} means {' and '.join(sorted(classics))} in different profiles"
        for name, classics in meanings.items()
        if len(classics) > 1
    ]


def profile_problems(profiles: Iterable[Profile], own: Iterable[MetricFamily]) -> list[str]:
    profiles, own = list(profiles), list(own)
    problems = [
        f"--compat.dcgm-exporter={profile.version}: {problem}"
        for profile in profiles
        for problem in declaration_problems((*families_for(profile).declared, *own), own)
    ]
    return problems + meaning_problems(
        pair for profile in profiles for pair in families_for(profile).meanings()
    )


_problems = profile_problems(PROFILES.values(), OWN_FAMILIES)
if _problems:
    raise ValueError("metric family declarations: " + "; ".join(_problems))

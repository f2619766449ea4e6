"""GPU Cluster Capacity: what the fleet has, what pods can get, what they hold, what they use,
and where GPUs are wasted. Reads the recording rules (kube_gpu_exporter/bundle/alerts/recording.py)
so it stays fast on a 1,000-node cluster; only the per-pod idle table reads raw device series."""

from __future__ import annotations

from fractions import Fraction

from kube_gpu_exporter.bundle.alerts import gpu_health as gh
from kube_gpu_exporter.bundle.alerts import recording as r
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dashboards import variables
from kube_gpu_exporter.bundle.dashboards.panels import (
    Cell,
    TableQuery,
    bargauge,
    row,
    stat,
    table,
    target,
    timeseries,
)
from kube_gpu_exporter.bundle.dcgm_units import number, plain, scaled, unit_factor
from kube_gpu_exporter.bundle.promql import QueryBuilder

TITLE = "Cluster Capacity"
FILE = "gpu-cluster-capacity"
GIB = 2**30
GIB_HOURS = "GPU-memory GiB-hours"
OWNERS = (
    "Owners need the exporter's Kubernetes enrichment (--kubernetes); without it all pods of a "
    "namespace share one row."
)


def workload_columns(q: QueryBuilder) -> dict[str, str]:
    """The label columns of a table per owning workload."""
    return {q.namespace: "Namespace", "owner_kind": "Kind", "owner_name": "Workload"}


def cells(config: BundleConfig) -> list[Cell]:
    q = QueryBuilder(config, dashboard=True)
    node_filter = f'{q.node}=~"$node"'
    ns_filter = f'{q.namespace}=~"$namespace"'
    # Whole GPUs and MIG devices of both allocation paths, device plugin and DRA.
    whole = f'resource=~"{config.resources.whole_gpu_regex}"'
    mig = f'resource=~"{config.resources.mig_regex}"'
    th = config.thresholds

    def total(record: str, *extra: str) -> str:
        return f"sum({q.recorded(record, *extra)})"

    def per_node(record: str, *extra: str) -> str:
        return f"sum by ({q.node}) ({q.recorded(record, node_filter, *extra)})"

    gpu_hours = "$__range_s / 3600"
    # Recorded utilization is in the profile's unit: percent, or a ratio under 4.9.
    util_unit = q.display("DCGM_FI_DEV_GPU_UTIL")[1]
    full = plain(q.utilization(100))
    as_percent = unit_factor("%", q.utilization_unit, "%")
    as_ratio = unit_factor("%", q.utilization_unit, "ratio")
    held_here = (ns_filter, f'{q.host}=~"$node"')
    device_labels = f"{q.namespace}, {q.pod}, {q.host}, gpu, UUID, GPU_I_ID"
    return [
        row("Overview"),
        stat(
            "Physical GPUs",
            "GPUs NVML enumerates on every node, healthy or not.",
            "none",
            [target(total(r.cluster_total(r.PHYSICAL)))],
        ),
        stat(
            "GPUs answering NVML",
            "GPUs whose last NVML sweep succeeded. Fewer than physical means lost or hung GPUs.",
            "none",
            [target(total(r.cluster_total(r.ANSWERING)))],
        ),
        stat(
            "GPUs offered to pods",
            "Physical GPUs on which the device plugin or the DRA driver offers at least one "
            "device (whole, time-sliced replica or MIG instance). Fewer than physical means GPUs "
            "marked unhealthy. Free DRA GPUs count only where the exporter runs with "
            "--kubernetes (it reads the driver's ResourceSlices).",
            "none",
            [target(total(r.cluster_total(r.OFFERED)))],
        ),
        stat(
            "Devices allocated",
            "Devices held by running pods, all GPU resources together (whole GPUs, replicas "
            "and MIG instances, through the device plugin or DRA claims).",
            "none",
            [target(total(r.cluster_total(r.ALLOCATED, "resource")))],
        ),
        stat(
            "Whole GPUs free",
            f"Allocatable whole GPUs ({', '.join(config.resources.whole_gpus)}) no pod holds.",
            "none",
            [target(total(r.cluster_total(r.FREE, "resource"), whole))],
            steps=((None, "orange"), (1, "green")),
        ),
        stat(
            "Allocated but idle",
            f"Allocated GPUs and MIG instances whose utilization stayed below "
            f"{th.idle_utilization_percent:g}% for the last {th.idle_window}. MIG instances "
            "count where GPM engine activity exists (Hopper and newer); NVML has no utilization "
            "for them.",
            "none",
            [target(total(r.NS_IDLE) + " or vector(0)")],
            steps=((None, "green"), (1, "orange")),
        ),
        row("Capacity by resource"),
        table(
            "Devices by resource",
            "Allocatable, allocated and free devices per resource on every node: the device "
            "plugin's resources, from the kubelet, and DRA devices under the driver's name (MIG "
            "devices as <driver>/mig-<profile>), allocatable from its ResourceSlices where the "
            "exporter runs with --kubernetes. Time-sliced GPUs count once per replica.",
            "none",
            [
                TableQuery(
                    header,
                    f"sum by (resource) ({q.recorded(r.cluster_total(record, 'resource'))})",
                )
                for header, record in (
                    ("Allocatable", r.ALLOCATABLE),
                    ("Allocated", r.ALLOCATED),
                    ("Free", r.FREE),
                )
            ],
            labels={"resource": "Resource"},
            sort_by="Free",
            descending=True,
        ),
        bargauge(
            "MIG instances by profile",
            "MIG instances that exist on the nodes, by profile, from NVML.",
            "none",
            [
                target(
                    f"sum by (profile) ({q.recorded(r.cluster_total(r.MIG, 'profile'))})",
                    "{{profile}}",
                    instant=True,
                )
            ],
            width=12,
        ),
        row("Per node"),
        table(
            "GPU capacity per node",
            "Physical GPUs, GPUs answering NVML, GPUs offered to pods, and devices allocatable, "
            "allocated and free per node.",
            "none",
            [
                TableQuery("Physical", per_node(r.PHYSICAL)),
                TableQuery("Answering", per_node(r.ANSWERING)),
                TableQuery("Offered", per_node(r.OFFERED)),
                TableQuery("Allocatable", per_node(r.ALLOCATABLE)),
                TableQuery("Allocated", per_node(r.ALLOCATED)),
                TableQuery("Free", per_node(r.FREE)),
            ],
            labels={q.node: "Node"},
            sort_by="Free",
            descending=True,
            width=24,
        ),
        table(
            "MIG slices per node",
            "MIG devices offered, held and free per node and MIG resource (profile), through "
            "the device plugin or the DRA driver.",
            "none",
            [
                TableQuery(
                    header, f"sum by ({q.node}, resource) ({q.recorded(record, node_filter, mig)})"
                )
                for header, record in (
                    ("Allocatable", r.ALLOCATABLE),
                    ("Allocated", r.ALLOCATED),
                    ("Free", r.FREE),
                )
            ],
            labels={q.node: "Node", "resource": "Resource"},
            sort_by="Free",
            descending=True,
            width=24,
        ),
        timeseries(
            "Unhealthy or missing GPUs per node",
            "Physical GPUs minus GPUs offered to pods, per node. Above zero: a GPU lost, "
            "hung, or marked unhealthy by the device plugin or the DRA driver.",
            "none",
            [
                target(
                    f"{per_node(r.PHYSICAL)} - on ({q.node}) {per_node(r.OFFERED)}",
                    "{{" + q.node + "}}",
                )
            ],
        ),
        timeseries(
            "Allocated devices per node",
            "Devices held by pods on each node, all GPU resources together.",
            "none",
            [target(per_node(r.ALLOCATED), "{{" + q.node + "}}")],
            stack=True,
        ),
        row("Fragmentation"),
        bargauge(
            "Pods that still fit",
            "How many pods of each size (whole GPUs per pod) the free GPUs can still take, "
            "each pod on one node and through one allocation path (device plugin or DRA), "
            "cordoned nodes excluded. Few large pods fitting despite many "
            "free GPUs means the free GPUs are scattered: bin packing (e.g. the scheduler's "
            "MostAllocated strategy) is not working.",
            "none",
            [
                target(
                    f"sum by (gpus_per_pod) ({q.recorded(r.SCHEDULABLE_PODS)})",
                    "{{gpus_per_pod}}-GPU pods",
                    instant=True,
                )
            ],
        ),
        stat(
            "Largest free block",
            "The most whole GPUs free on any one schedulable node through one allocation path: "
            "the biggest pod that can start now.",
            "none",
            [target(f"max({q.recorded(r.LARGEST_FREE_BLOCK)})")],
            steps=((None, "orange"), (1, "green")),
            width=8,
            height=6,
        ),
        bargauge(
            "Nodes by free whole GPUs",
            "How many nodes have 0, 1, 2, ... whole GPUs free, device-plugin and DRA GPUs "
            "together. Many nodes with a few free GPUs each is fragmentation.",
            "none",
            [
                # Summed per node first: a node offering both paths has one series per resource.
                target(
                    f'count_values("free_gpus", sum by ({q.cluster}, {q.node}) '
                    f"({q.recorded(r.FREE, whole, node_filter)}))",
                    "{{free_gpus}} free",
                    instant=True,
                )
            ],
        ),
        row("Allocation and use"),
        timeseries(
            "Allocated devices per namespace",
            "Distinct devices held by the pods of each namespace.",
            "none",
            [
                target(
                    f"sum by ({q.namespace}) ({q.recorded(r.NS_ALLOCATED, ns_filter)})",
                    "{{" + q.namespace + "}}",
                )
            ],
            stack=True,
        ),
        timeseries(
            "Utilization per namespace",
            "Average utilization of the whole GPUs each namespace holds. Compare with the "
            "allocation beside it to find namespaces holding GPUs they do not use.",
            util_unit,
            [
                target(
                    q.recorded(r.NS_UTIL, ns_filter),
                    "{{" + q.namespace + "}}",
                )
            ],
            max_value=full,
        ),
        table(
            "Allocation and use per workload",
            "Devices held and average utilization per owning workload (Deployment, "
            f"StatefulSet, Job, ...). {OWNERS}",
            "none",
            [
                TableQuery(
                    "Devices",
                    f"sum by ({q.namespace}, owner_kind, owner_name) "
                    f"({q.recorded(r.WORKLOAD_ALLOCATED, ns_filter)})",
                ),
                # The table's unit is a count, so utilization is shown as a number of percent.
                TableQuery(
                    "Utilization %",
                    scaled(
                        f"avg by ({q.namespace}, owner_kind, owner_name) "
                        f"({q.recorded(r.WORKLOAD_UTIL, ns_filter)})",
                        as_percent,
                    ),
                ),
            ],
            labels=workload_columns(q),
            sort_by="Devices",
            descending=True,
        ),
        table(
            "Allocated GPUs by utilization, idlest first",
            "Every allocated whole GPU, and MIG instance where GPM exists (Hopper and newer), "
            "with its average and peak utilization over the dashboard's time range, lowest "
            "first: the top rows are GPUs paid for and unused. Read from "
            f"{config.dashboards.device_history_window} windows recorded by the rules, so the "
            "latest window is not in it yet.",
            util_unit,
            [
                TableQuery(
                    "Average %",
                    f"sort(avg by ({device_labels}) (avg_over_time("
                    f"{q.recorded(r.DEVICE_BUSY_AVG, *held_here)}"
                    "[$__range])))",
                ),
                TableQuery(
                    "Peak %",
                    f"max by ({device_labels}) (max_over_time("
                    f"{q.recorded(r.DEVICE_BUSY_MAX, *held_here)}"
                    "[$__range]))",
                ),
            ],
            labels={
                q.namespace: "Namespace",
                q.pod: "Pod",
                q.host: "Node",
                "gpu": "GPU",
                "GPU_I_ID": "MIG instance",
            },
            sort_by="Average %",
        ),
        table(
            "GPU-hours by namespace",
            "Device-hours held (and device-hours held while idle) per namespace and resource "
            "over the dashboard's time range, for chargeback. MIG instances are counted per "
            "instance under their own resource.",
            "h",
            [
                TableQuery(
                    "Device-hours",
                    f"sum by ({q.namespace}, resource) (avg_over_time("
                    f"{q.recorded(r.NS_ALLOCATED, ns_filter)}[$__range])) * {gpu_hours}",
                ),
            ],
            labels={q.namespace: "Namespace", "resource": "Resource"},
            sort_by="Device-hours",
            descending=True,
        ),
        table(
            "Usage-weighted GPU-hours by namespace",
            "What each namespace's processes used over the dashboard's time range, beside the "
            "device-hours it held: SM-hours (one GPU's SMs fully busy for one hour; whole GPUs "
            "only, NVML has no per-process utilization on MIG) and GPU-memory GiB-hours (device "
            "memory its processes held, MIG instances included). From process accounting "
            "(--collector.processes); processes no pod holding the device accounts for, and "
            "driver overhead, are charged to nobody, so the totals stay below the devices'.",
            "h",
            [
                TableQuery(
                    "SM-hours",
                    f"sum by ({q.namespace}) (avg_over_time("
                    f"{q.recorded(r.NS_POD_SM, ns_filter)}[$__range])) * {gpu_hours}",
                ),
                TableQuery(
                    GIB_HOURS,
                    f"sum by ({q.namespace}) (avg_over_time("
                    f"{q.recorded(r.NS_POD_MEMORY, ns_filter)}[$__range])) "
                    f"/ {GIB} * {gpu_hours}",
                ),
            ],
            labels={q.namespace: "Namespace"},
            sort_by="SM-hours",
            descending=True,
            # Grafana has no unit for a quantity times a duration.
            column_units={GIB_HOURS: "none"},
        ),
        timeseries(
            "Idle allocated GPUs per namespace",
            f"Allocated GPUs and MIG instances (where GPM exists) below "
            f"{th.idle_utilization_percent:g}% utilization for {th.idle_window}, per namespace.",
            "none",
            [
                target(
                    f"sum by ({q.namespace}) ({q.recorded(r.NS_IDLE, ns_filter)})",
                    "{{" + q.namespace + "}}",
                )
            ],
            stack=True,
        ),
        row("Pending GPU pods (kube-state-metrics)"),
        stat(
            "GPUs requested by pending pods",
            "GPU devices requested by pods still Pending, from kube-state-metrics: demand the "
            "cluster cannot meet right now. Empty without kube-state-metrics.",
            "none",
            # Zero only where kube-state-metrics runs: without it, "No data", not "0". Its node
            # series say so at one series per node; pod phases would read five per pod (1.8 s
            # for this panel at 1,000 nodes, against the rest of the dashboard's few ms).
            [
                target(
                    f"sum({q.recorded(r.PENDING)}) or "
                    f"(vector(0) and on () group({q.ksm('kube_node_spec_unschedulable')}))"
                )
            ],
            steps=((None, "green"), (1, "orange")),
            width=6,
            height=8,
        ),
        table(
            "Pending GPU requests per namespace",
            "GPU devices requested by Pending pods per namespace and resource (kube-state-metrics "
            "resource names).",
            "none",
            [TableQuery("Requested", f"sum by (namespace, resource) ({q.recorded(r.PENDING)})")],
            labels={"namespace": "Namespace", "resource": "Resource"},
            sort_by="Requested",
            descending=True,
            width=18,
        ),
        row("Trends"),
        timeseries(
            "Capacity over time",
            "Physical GPUs, GPUs offered to pods, and whole GPUs allocated and free.",
            "none",
            [
                target(total(r.cluster_total(r.PHYSICAL)), "physical"),
                target(total(r.cluster_total(r.OFFERED)), "offered to pods"),
                target(total(r.cluster_total(r.ALLOCATED, "resource"), whole), "allocated"),
                target(total(r.cluster_total(r.FREE, "resource"), whole), "free"),
            ],
        ),
        timeseries(
            "Allocation and utilization over time",
            "Share of allocatable devices held by pods, against average GPU utilization "
            "across the cluster.",
            "percentunit",
            [
                target(
                    f"{total(r.cluster_total(r.ALLOCATED, 'resource'))} / "
                    f"{total(r.cluster_total(r.ALLOCATABLE, 'resource'))}",
                    "allocated",
                ),
                target(scaled(f"avg({q.recorded(r.NODE_UTIL)})", as_ratio), "utilized"),
            ],
            max_value=1,
        ),
        # Last, so the panels above keep their ids (links to one panel name it by id).
        *energy(config),
        *nvlink_domains(config),
        *gpu_health(config),
    ]


DOMAIN_INFO = "kube_gpu_exporter_nvlink_domain_info"


def nvlink_domains(config: BundleConfig) -> list[Cell]:
    """GPUs grouped by the NVLink domain the fabric manager registered them in (GB200 NVL72
    racks and other multi-node NVLink systems): a job spanning nodes over NVLink needs its GPUs
    in one domain, so free GPUs count per domain, not per cluster. Raw series, one per GPU: only
    GPUs on a fabric have one."""
    q = QueryBuilder(config, dashboard=True)
    # The cluster too: a table over several clusters keeps each one's domains apart.
    domain = f"{q.cluster}, cluster_uuid, clique_id"
    info = q.on_nodes(DOMAIN_INFO)
    gpu = q.on(q.host, "UUID")
    # A GPU counts as held once, however many pods share it.
    allocation = q.on_nodes("kube_gpu_exporter_pod_device_allocation")
    held = f"max by ({q.cluster}, {q.host}, UUID) ({allocation})"
    return [
        row("NVLink domains"),
        table(
            "GPUs by NVLink domain",
            "GPUs per NVLink domain (the fabric's cluster UUID and clique), the nodes they are "
            "on, and how many pods hold. Only GPUs registered with an NVLink fabric appear. "
            "Allocated counts a time-sliced GPU once.",
            "none",
            [
                TableQuery("GPUs", f"count by ({domain}) ({info})"),
                TableQuery(
                    "Nodes", f"count by ({domain}) (count by ({domain}, {q.host}) ({info}))"
                ),
                TableQuery("Allocated", f"count by ({domain}) ({info} and {gpu} {held})"),
                TableQuery("Not allocated", f"count by ({domain}) ({info} unless {gpu} {held})"),
            ],
            labels={"cluster_uuid": "Cluster UUID", "clique_id": "Clique"},
            hide=(q.cluster,),
            sort_by="GPUs",
            descending=True,
            width=24,
        ),
    ]


def gpu_health(config: BundleConfig) -> list[Cell]:
    """GPUs the exporter's health verdict says need a reset, a reboot or a drain while pods
    still hold them, and the healthy GPUs nobody holds: the capacity a scheduler can really
    use. Raw series, one per GPU reason (and per MIG instance), as the NVLink domains' are."""
    q = QueryBuilder(config, dashboard=True)
    repair = [spec.action for spec in gh.ACTION_ALERTS]
    needs_repair = q.on_nodes(gh.HEALTH_REASON, 'action=~"' + "|".join(repair) + '"')
    allocation = q.on_nodes("kube_gpu_exporter_pod_device_allocation")
    gpu = q.on(q.host, "UUID")
    # The verdict's series carry the pods of their device; `and` with the allocation keeps the
    # pods the kubelet still lists as holders, so a pod that ended drops out of the table.
    holder = (q.host, "UUID", "GPU_I_ID", q.namespace, q.pod)
    held_unhealthy = (
        f"max by ({q.cluster}, {q.host}, gpu, GPU_I_ID, {q.namespace}, {q.pod}, reason, action) "
        f"({needs_repair} and {q.on(*holder)} {allocation})"
    )
    # A GPU counts once, whatever its MIG instances and pods.
    healthy_verdict = q.on_nodes(gh.HEALTH_REASON, 'reason="healthy"')
    healthy = f"max by ({q.cluster}, {q.host}, UUID) ({healthy_verdict})"
    per_gpu_unhealthy = f"max by ({q.cluster}, {q.host}, UUID) ({needs_repair})"
    held = f"max by ({q.cluster}, {q.host}, UUID) ({allocation})"
    return [
        row("GPU health"),
        stat(
            "Healthy GPUs nobody holds",
            "GPUs whose health verdict is healthy and that no pod holds (a GPU with any MIG "
            "instance held counts as held): what new pods can get without landing on a GPU "
            "that needs a repair.",
            "none",
            [target(f"count ({healthy} unless {gpu} {held}) or vector(0)")],
        ),
        stat(
            "Unhealthy GPUs pods hold",
            "GPUs whose verdict asks for a reset, a reboot or a drain while a pod still holds "
            "them: the pods are failing or computing on a GPU that needs repair.",
            "none",
            [target(f"count ({per_gpu_unhealthy} and {gpu} {held}) or vector(0)")],
            steps=((None, "green"), (1, "red")),
        ),
        timeseries(
            "GPUs by health per node",
            "Per node, GPUs whose verdict is healthy, and GPUs it asks to reset, reboot or drain.",
            "none",
            [
                target(f"count by ({q.host}) ({healthy})", "{{" + q.host + "}} healthy"),
                target(
                    f"count by ({q.host}) ({per_gpu_unhealthy}) or "
                    f"0 * count by ({q.host}) ({healthy})",
                    "{{" + q.host + "}} needs repair",
                ),
            ],
            width=16,
        ),
        table(
            "Unhealthy GPUs still held by pods",
            "Each pod holding a GPU (or MIG instance) whose verdict asks for a reset, a reboot "
            "or a drain, with the reason and the action: the pods to move before the repair. "
            "GPUNeedsReset, GPUNeedsReboot and GPUNeedsDrain fire for the same GPUs.",
            "none",
            [TableQuery(None, held_unhealthy)],
            labels={
                q.host: "Node",
                "gpu": "GPU",
                "GPU_I_ID": "Instance",
                q.namespace: "Namespace",
                q.pod: "Pod",
                "reason": "Reason",
                "action": "Action",
            },
            hide=(q.cluster,),
            sort_by="Node",
            width=24,
        ),
    ]


def energy(config: BundleConfig) -> list[Cell]:
    """Energy by namespace and workload over the time range and the last hour, what no pod
    accounts for, and, with carbon_intensity_g_per_kwh set, the namespaces' estimated emissions.

    A time range's energy adds up the recorded rates a minute apart, as the hourly records do:
    right for any range of a minute or more, and only since the rules were installed (a record has
    no past). `increase(...[$__range])` of the raw counters instead would read every container's
    samples of the range on each refresh, and could not count two exporter pods reporting one
    container once without losing one's share of the range (see
    kube_gpu_exporter/bundle/alerts/recording.py)."""
    q = QueryBuilder(config, dashboard=True)
    ns_filter = f'{q.namespace}=~"$namespace"'
    node_filter = f'{q.node}=~"$node"'
    owner = f"{q.namespace}, owner_kind, owner_name"
    kwh = f"/ {r.JOULES_PER_KWH}"

    def over_range(record: str, *extra: str) -> str:
        return r.energy_over(q.recorded(r.power(record), *extra), "$__range")

    def columns(record: str, by: str, unit: str) -> list[TableQuery]:
        return [
            TableQuery("Time range", f"sum by ({by}) ({over_range(record, ns_filter)}) {unit}"),
            TableQuery("Last hour", f"sum by ({by}) ({q.recorded(record, ns_filter)}) {unit}"),
        ]

    since = (
        "Recorded by the rules from the exporter's per-container energy counters, so only "
        "since the rules were installed."
    )
    cells = [
        row("Energy by namespace"),
        table(
            "Energy by namespace",
            "GPU energy the containers of each namespace used over the dashboard's time range "
            "and over the last hour: each GPU's energy split among the containers holding it by "
            "their processes' SM shares, evenly while none is busy. " + since,
            "kwatth",
            columns(r.NS_ENERGY, q.namespace, kwh),
            labels={q.namespace: "Namespace"},
            sort_by="Time range",
            descending=True,
        ),
        table(
            "Energy by workload",
            "GPU energy per owning workload (Deployment, StatefulSet, Job, ...), most first. "
            f"{OWNERS} {since}",
            "kwatth",
            columns(r.WORKLOAD_ENERGY, owner, kwh),
            labels=workload_columns(q),
            sort_by="Time range",
            descending=True,
        ),
        timeseries(
            "Energy per hour by namespace",
            "GPU energy used in the hour up to each point, per namespace, and what no pod "
            "holding the GPU accounts for (processes outside pods, the driver, or a GPU nobody "
            "holds): together, all the GPUs' energy.",
            "kwatth",
            [
                target(
                    f"sum by ({q.namespace}) ({q.recorded(r.NS_ENERGY, ns_filter)}) {kwh}",
                    "{{" + q.namespace + "}}",
                ),
                target(
                    f"sum({q.recorded(r.NODE_UNATTRIBUTED_ENERGY, node_filter)}) {kwh}",
                    "not attributed",
                ),
            ],
            stack=True,
            width=18,
        ),
        stat(
            "Energy not attributed",
            "GPU energy over the dashboard's time range that no pod holding the GPU accounts "
            "for: processes outside pods, the driver, and GPUs nobody holds. " + since,
            "kwatth",
            [
                target(
                    f"sum({over_range(r.NODE_UNATTRIBUTED_ENERGY, node_filter)}) {kwh}",
                    instant=True,
                )
            ],
            width=6,
            height=8,
        ),
    ]
    intensity = config.carbon_intensity_g_per_kwh
    if intensity is not None:
        cells.append(
            table(
                "Estimated emissions by namespace",
                "Estimated kg CO2e of each namespace's GPU energy over the dashboard's time "
                f"range and the last hour, at {number(Fraction(str(intensity)))} g CO2e per kWh "
                "(carbon_intensity_g_per_kwh in the bundle config): the GPUs' own energy "
                "only, not the rest of the servers, cooling or the data centre's overhead. "
                + since,
                "masskg",
                columns(r.NS_CARBON, q.namespace, "/ 1000"),
                labels={q.namespace: "Namespace"},
                sort_by="Time range",
                descending=True,
            )
        )
    return cells


def variable_list(config: BundleConfig) -> list:
    return [
        variables.datasource(config),
        variables.cluster(config),
        variables.node(config),
        variables.namespace(config),
    ]

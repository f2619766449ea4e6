"""Recording rules that carry the capacity dashboard's aggregations, so its panels read a few
pre-aggregated series per node or namespace instead of every device series of a 1,000-node fleet.

Names follow `level:metric:operations`. The level names the labels kept; the exporter's host
label is copied to `node`, the name kube-state-metrics uses, so the two join directly. A record
about a DCGM family carries the profile's spelling of it (`QueryBuilder.name`), and its values are
in that family's unit under the profile (a ratio for 4.9's utilization, percent before).
"""

from __future__ import annotations

from fractions import Fraction

from kube_gpu_exporter.bundle.alerts.rule_types import Group, Record
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dcgm_units import number
from kube_gpu_exporter.bundle.promql import QueryBuilder

# Recorded names the dashboards read; kept here so a rename cannot miss a panel. They name DCGM
# families by their classic names; `QueryBuilder.name` gives the profile's.
PHYSICAL = "node:kube_gpu_exporter_node_physical_gpus:max"
ANSWERING = "node:kube_gpu_exporter_device_up:sum"
OFFERED = "node:kube_gpu_exporter_allocatable_gpus:sum"
ALLOCATABLE = "node_resource:kube_gpu_exporter_node_allocatable_devices:max"
ALLOCATED = "node_resource:kube_gpu_exporter_node_allocated_devices:max"
FREE = "node_resource:kube_gpu_exporter_node_free_devices:max"
MIG = "node_profile:kube_gpu_exporter_node_mig_instances:max"
SCHEDULABLE_PODS = "cluster:kube_gpu_exporter_schedulable_pods:sum"
LARGEST_FREE_BLOCK = "cluster:kube_gpu_exporter_node_free_devices:max"
NODE_UTIL = "node:DCGM_FI_DEV_GPU_UTIL:avg"
NS_ALLOCATED = "namespace_resource:kube_gpu_exporter_allocated_devices:count"
NS_UTIL = "namespace:DCGM_FI_DEV_GPU_UTIL:avg"
NS_IDLE = "namespace:kube_gpu_exporter_allocated_idle_gpus:sum"
WORKLOAD_ALLOCATED = "namespace_workload:kube_gpu_exporter_allocated_devices:count"
WORKLOAD_UTIL = "namespace_workload:DCGM_FI_DEV_GPU_UTIL:avg"
PENDING = "namespace_resource:kube_pod_container_resource_requests_gpu_pending:sum"
# One held device's utilization (`QueryBuilder.busy`) averaged, and peaked, over each history window
# (`dashboards.device_history_window`). The window stays out of the name, so a shorter one (the
# local stack's) does not rename the series the committed dashboards read.
DEVICE_BUSY_AVG = "pod_device:DCGM_FI_DEV_GPU_UTIL:avg_over_window"
DEVICE_BUSY_MAX = "pod_device:DCGM_FI_DEV_GPU_UTIL:max_over_window"
# What each namespace's processes use of the GPUs (process accounting, `--collector.processes`):
# device memory in bytes, and SM utilization as a number of fully busy GPUs (a sum of 0-1 ratios;
# MIG instances have none). The basis of usage-weighted chargeback.
NS_POD_MEMORY = "namespace:kube_gpu_exporter_pod_gpu_memory_used_bytes:sum"
NS_POD_SM = "namespace:kube_gpu_exporter_pod_gpu_sm_utilization_ratio:sum"
# Energy each namespace's and each workload's containers used, and what no pod holding the device
# accounts for, per node: from the exporter's per-container energy counter, whose rows of a device
# add up to the device's energy. With carbon_intensity_g_per_kwh, the namespaces' estimated
# emissions too. Each as a rate (`power`: joules, or grams, per second) and over the last hour.
POD_ENERGY = "kube_gpu_exporter_pod_gpu_energy_joules_total"
NS_ENERGY = "namespace:kube_gpu_exporter_pod_gpu_energy_joules:increase1h"
WORKLOAD_ENERGY = "namespace_workload:kube_gpu_exporter_pod_gpu_energy_joules:increase1h"
NODE_UNATTRIBUTED_ENERGY = "node:kube_gpu_exporter_pod_gpu_energy_joules_unattributed:increase1h"
NS_CARBON = "namespace:kube_gpu_exporter_pod_gpu_carbon_grams:increase1h"
JOULES_PER_KWH = 3_600_000
# The step at which the rates are added up into energy, here and on the dashboard: no longer than
# a rate's range (`dashboards.rate_interval`), so that no minute falls between two steps' rates.
ENERGY_STEP = "1m"
ENERGY_STEP_SECONDS = 60
# An hour of steps as a subquery range, one millisecond short of the hour: Prometheus 2 includes
# both ends of a range, so a range of exactly 1h holds 61 steps wherever an evaluation falls on
# the clock's minute (always, in promtool and in a backfill).
_HOUR_OF_STEPS = "59m59s999ms"


def power(hourly: str) -> str:
    """The rate record an hourly energy record adds up: `...:increase1h` -> `...:rate`. Its range
    stays out of the name, as the device history's window does, so changing it renames nothing
    the dashboards read."""
    return hourly.removesuffix(":increase1h") + ":rate"


def energy_over(record: str, steps: str) -> str:
    """The joules of a rate record over a subquery range: its value at each step, which is the
    rate over the step's last `dashboards.rate_interval`, times the step."""
    return f"sum_over_time({record}[{steps}:{ENERGY_STEP}]) * {ENERGY_STEP_SECONDS}"


def cluster_total(record: str, *keep: str) -> str:
    """`node:x:max` -> `cluster:x:sum`, or `node_resource:x:max` -> `cluster_resource:x:sum`."""
    metric = record.split(":")[1]
    return ":".join(("_".join(("cluster", *keep)), metric, "sum"))


def node_groups(config: BundleConfig) -> Group:
    q = QueryBuilder(config)
    node = q.node
    per_node = q.by(node)

    def from_exporter(metric: str, *keep: str) -> str:
        return f"max {q.by(node, *keep)} ({q.as_node(q.exporter(metric))})"

    def per_gpu(metric: str) -> str:
        return f"max {q.by(node, 'gpu', 'UUID')} ({q.as_node(q.exporter(metric))})"

    unschedulable = f"{q.ksm('kube_node_spec_unschedulable')} == 1"
    # One FREE series per node and resource: a pod gets all its GPUs through one path (device
    # plugin or one DRA claim), so a node's free device-plugin and DRA GPUs never pool into one pod.
    whole = f'resource=~"{config.resources.whole_gpu_regex}"'
    return Group(
        "kube-gpu-exporter-capacity.rules",
        (
            Record(PHYSICAL, from_exporter("kube_gpu_exporter_node_physical_gpus")),
            Record(ANSWERING, f"sum {per_node} ({per_gpu('kube_gpu_exporter_device_up')})"),
            Record(
                OFFERED,
                f"sum {per_node} ({per_gpu('kube_gpu_exporter_device_allocatable_units')} "
                "> bool 0)",
            ),
            Record(
                ALLOCATABLE, from_exporter("kube_gpu_exporter_node_allocatable_devices", "resource")
            ),
            Record(
                ALLOCATED, from_exporter("kube_gpu_exporter_node_allocated_devices", "resource")
            ),
            Record(
                FREE,
                f"clamp_min({ALLOCATABLE} - {q.on(node, 'resource')} {ALLOCATED}, 0)",
            ),
            Record(MIG, from_exporter("kube_gpu_exporter_node_mig_instances", "profile")),
            Record(
                q.name(NODE_UTIL),
                f"avg {per_node} ({q.as_node(q.exporter('DCGM_FI_DEV_GPU_UTIL'))})",
            ),
            # Cordoned nodes keep their free GPUs but cannot take new pods.
            *(
                Record(
                    SCHEDULABLE_PODS,
                    f"sum {q.by()} (floor({FREE}{{{whole}}} / {size}) "
                    f"unless {q.on(node)} ({unschedulable}))",
                    (("gpus_per_pod", str(size)),),
                )
                for size in config.resources.pod_sizes
            ),
            Record(
                LARGEST_FREE_BLOCK,
                f"max {q.by()} ({FREE}{{{whole}}} unless {q.on(node)} ({unschedulable}))",
            ),
        ),
    )


def cluster_group(config: BundleConfig) -> Group:
    q = QueryBuilder(config)
    totals = [
        Record(cluster_total(PHYSICAL), f"sum {q.by()} ({PHYSICAL})"),
        Record(cluster_total(ANSWERING), f"sum {q.by()} ({ANSWERING})"),
        Record(cluster_total(OFFERED), f"sum {q.by()} ({OFFERED})"),
        Record(cluster_total(ALLOCATABLE, "resource"), f"sum {q.by('resource')} ({ALLOCATABLE})"),
        Record(cluster_total(ALLOCATED, "resource"), f"sum {q.by('resource')} ({ALLOCATED})"),
        Record(cluster_total(FREE, "resource"), f"sum {q.by('resource')} ({FREE})"),
        Record(cluster_total(MIG, "profile"), f"sum {q.by('profile')} ({MIG})"),
    ]
    return Group("kube-gpu-exporter-cluster.rules", tuple(totals))


def dra_mig_resource(allocation: str) -> str:
    """`allocation` with the rows of DRA MIG devices under `<driver>/mig-<profile>`.

    A DRA holder's row names the driver as its resource, MIG devices included, while the node
    figures count DRA MIG devices as `<driver>/mig-<profile>`, as the device plugin does. Renaming
    here makes per-namespace figures split MIG from whole GPUs on both paths. A row without
    `dra_mig_profile` joins to a value ending in `/mig-`, which the pattern refuses, so it keeps
    its resource (a device-plugin MIG row, `nvidia.com/mig-1g.10gb/mig-`, included)."""
    joined = f'label_join({allocation}, "dra_mig_resource", "/mig-", "resource", "dra_mig_profile")'
    return f'label_replace({joined}, "resource", "$1", "dra_mig_resource", "(.+/mig-[^/]+)")'


def container_key(q: QueryBuilder) -> tuple[str, ...]:
    """The labels of one container's series on one device, less the scrape's own (`instance`):
    `max by` them counts a container once while a replaced exporter pod's series and its
    replacement's overlap."""
    return (q.host, "gpu", "UUID", "GPU_I_ID", q.namespace, q.pod, "container")


def usage_group(config: BundleConfig) -> Group:
    q = QueryBuilder(config)
    ns, pod, host = q.namespace, q.pod, q.host
    th = config.thresholds
    allocation = q.exporter("kube_gpu_exporter_pod_device_allocation")
    by_resource = dra_mig_resource(allocation)
    # Whole GPUs by NVML utilization, MIG instances by GPM engine activity where available.
    busy = q.busy()
    owner = ("owner_kind", "owner_name")
    device = (host, "UUID", "GPU_I_ID")
    requests = q.ksm(
        "kube_pod_container_resource_requests",
        f'resource=~"{config.resources.gpu_ksm_regex}"',
    )
    pending = q.ksm("kube_pod_status_phase", 'phase="Pending"')

    def pod_usage(metric: str) -> str:
        # The unattributed series (empty pod) is nobody's to pay for. `max by` one container's
        # series on one device: while a replaced exporter pod's last scrape is still fresh, the
        # old and the new instance report the same process twice.
        attributed = q.exporter(metric, f'{pod}!=""')
        return f"sum {q.by(ns)} (max {q.by(*container_key(q))} ({attributed}))"

    return Group(
        "kube-gpu-exporter-usage.rules",
        (
            # Distinct devices: a pod's time-slicing replicas of one GPU, or a device shared by
            # several claims of the namespace, count once.
            Record(
                NS_ALLOCATED,
                f"count {q.by(ns, 'resource')} (max {q.by(*device, ns, 'resource')} "
                f"({by_resource}))",
            ),
            Record(q.name(NS_UTIL), f"avg {q.by(ns)} ({busy})"),
            # `< bool` keeps a 0 for namespaces with no idle GPU, so panels show a flat line.
            Record(
                NS_IDLE,
                f"sum {q.by(ns)} (max {q.by(host, 'UUID', 'GPU_I_ID', ns, pod)} "
                f"({q.busy(over=th.idle_window)}) < bool "
                f"{number(q.utilization(th.idle_utilization_percent))})",
            ),
            # Owners come from the exporter's Kubernetes enrichment (--kubernetes).
            Record(
                WORKLOAD_ALLOCATED,
                f"count {q.by(ns, *owner)} (max {q.by(*device, ns, *owner)} ({allocation}))",
            ),
            # `group`, not `max`: an allocation's value is the container's replica count, and
            # the join must only copy the owner labels, never scale the utilization.
            Record(
                q.name(WORKLOAD_UTIL),
                f"avg {q.by(ns, *owner)} ({busy} * {q.on(host, 'UUID', ns, pod)} "
                f"group_left ({', '.join(owner)}) group {q.by(host, 'UUID', ns, pod, *owner)} "
                f"({allocation}))",
            ),
            Record(NS_POD_MEMORY, pod_usage("kube_gpu_exporter_pod_gpu_memory_used_bytes")),
            Record(NS_POD_SM, pod_usage("kube_gpu_exporter_pod_gpu_sm_utilization_ratio")),
            # Requests of Pending pods; max by dedupes two kube-state-metrics replicas.
            Record(
                PENDING,
                f"sum {q.by('namespace', 'resource')} ("
                f"max {q.by('namespace', 'pod', 'container', 'resource')} ({requests}) "
                f"* {q.on('namespace', 'pod')} group_left () "
                f"max {q.by('namespace', 'pod')} ({pending} == 1))",
            ),
        ),
    )


def device_history_group(config: BundleConfig) -> Group:
    """Per-device utilization, one average and one peak per window. Evaluated once per window,
    the windows tile time, so over whole windows the average of the averages (each window holds
    the same number of scrapes) and the max of the peaks equal those of the raw samples."""
    q = QueryBuilder(config)
    window = config.dashboards.device_history_window
    device = (q.namespace, q.pod, q.host, "gpu", "UUID", "GPU_I_ID")
    return Group(
        "kube-gpu-exporter-device-history.rules",
        (
            Record(
                q.name(DEVICE_BUSY_AVG),
                f"max {q.by(*device)} ({q.busy(over=window, fn='avg_over_time')})",
            ),
            Record(q.name(DEVICE_BUSY_MAX), f"max {q.by(*device)} ({q.busy(over=window)})"),
        ),
        interval=window,
    )


def energy_group(config: BundleConfig) -> Group:
    """Energy per namespace, per workload and unattributed per node, as rates and per hour.

    The counters start at 0 whenever an exporter starts, so only rate() reads them, which takes a
    counter's reset in its stride. Two exporter pods can report one container at once while one
    replaces the other, the old one's counter counting from its own start and the new one's from
    0: a `max by` of their increases over a whole hour would keep the larger share and drop the
    other, and their sum would count the overlap twice. Their rates over one
    `dashboards.rate_interval` agree instead, so a `max by` per container series counts the
    container once, as the usage records do, and an hour adds up the rates a minute apart.
    Adding rates rather than increases also leaves the result alone whatever the evaluation
    interval and offset of the group, and needs no window on the clock."""
    q = QueryBuilder(config)
    ns, pod, host = q.namespace, q.pod, q.host
    window = q.rate_interval
    owner = ("owner_kind", "owner_name")
    pod_device = (host, "UUID", ns, pod)

    def rate(by: tuple[str, ...], *extra: str) -> str:
        return f"max {q.by(*by)} (rate({q.exporter(POD_ENERGY, *extra)}[{window}]))"

    def records(hourly: str, rate_expr: str) -> tuple[Record, Record]:
        return Record(power(hourly), rate_expr), Record(
            hourly, energy_over(power(hourly), _HOUR_OF_STEPS)
        )

    attributed = rate(container_key(q), f'{pod}!=""')
    # Each pod's owner over the rate's range, not at its end: a pod that ended within it has no
    # allocation row left there, and its last joules must still reach its workload. `group`, as
    # for WORKLOAD_UTIL: the allocation's value is a replica count, and the join only copies
    # labels. `topk` keeps one owner per pod: one whose owner labels arrived within the range
    # (the enrichment saw it after the kubelet did) has two rows, and two would fail the join.
    allocation = q.exporter("kube_gpu_exporter_pod_device_allocation")
    owners = (
        f"topk {q.by(*pod_device)} (1, group {q.by(*pod_device, *owner)} "
        f"(last_over_time({allocation}[{window}])))"
    )
    unattributed = rate((host, "gpu", "UUID", "GPU_I_ID"), f'{pod}=""')
    rules = [
        *records(NS_ENERGY, f"sum {q.by(ns)} ({attributed})"),
        # Owners come from the exporter's Kubernetes enrichment (--kubernetes).
        *records(
            WORKLOAD_ENERGY,
            f"sum {q.by(ns, *owner)} ({attributed} * {q.on(*pod_device)} "
            f"group_left ({', '.join(owner)}) {owners})",
        ),
        *records(NODE_UNATTRIBUTED_ENERGY, f"sum {q.by(q.node)} ({q.as_node(unattributed)})"),
    ]
    intensity = config.carbon_intensity_g_per_kwh
    if intensity is not None:
        # Multiplied before divided: whole joules times a whole intensity stay exact, and only
        # the division rounds.
        grams = f"* {number(Fraction(str(intensity)))} / {JOULES_PER_KWH}"
        rules += [
            Record(power(NS_CARBON), f"{power(NS_ENERGY)} {grams}"),
            Record(NS_CARBON, f"{NS_ENERGY} {grams}"),
        ]
    return Group("kube-gpu-exporter-energy.rules", tuple(rules))

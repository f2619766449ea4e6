"""Alerts on GPU hardware: lost or unallocatable GPUs, XIDs, memory errors, throttling, heat and
memory pressure. One alert per GPU (or per MIG instance where the signal is per instance); the
pods using it are named in the description."""

from __future__ import annotations

from kube_gpu_exporter.bundle.alerts import templates
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Group
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dcgm_units import number
from kube_gpu_exporter.bundle.promql import QueryBuilder, regex_of


def _per_gpu(queries: QueryBuilder, expr: str, *extra: str) -> str:
    """Collapses MIG-instance series (and any duplicate scrape) to one series per GPU."""
    return f"max {queries.by(*queries.gpu_key, *extra)} ({expr})"


def group(config: BundleConfig) -> Group:
    queries = QueryBuilder(config)
    thresholds, severity = config.thresholds, config.severity
    gpu, pods = templates.gpu(config), templates.holders(config)
    key = queries.on(*queries.gpu_key)
    xid = queries.exporter(
        "DCGM_EXP_XID_ERRORS_TOTAL", f'xid=~"{regex_of(thresholds.xid_critical_codes)}"'
    )
    # A counter series is "new" (its first XID) only if no series of the same exporter, device and
    # code existed a window ago. The pod labels are left out of that match: when the pod holding a
    # GPU ends or changes, the counter's series is relabelled, not restarted, and must not fire
    # again. `instance` stays in it, because a restarted exporter counts from zero.
    xid_series = queries.on("instance", *queries.gpu_key, "GPU_I_ID", "xid")
    used, free, reserved = (
        queries.exporter(f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED")
    )
    device_up = queries.exporter("kube_gpu_exporter_device_up")
    allocatable_units = queries.exporter("kube_gpu_exporter_device_allocatable_units")
    physical_gpus = queries.exporter("kube_gpu_exporter_node_physical_gpus")
    node = templates.label(queries.host)
    instance_key = (*queries.gpu_key, "GPU_I_ID", "GPU_I_PROFILE")
    return Group(
        "kube-gpu-exporter-devices",
        (
            Alert(
                "GPULost",
                _per_gpu(queries, device_up) + " == 0",
                thresholds.gpu_lost_for,
                severity.critical,
                "A GPU stopped answering NVML.",
                f"{gpu} has been lost or unresponsive for {thresholds.gpu_lost_for}{pods}. Its "
                "workloads are failing; drain the node and reset or replace the GPU.",
            ),
            Alert(
                "GPUMissing",
                f"max {queries.by(queries.host)} ({physical_gpus}) < "
                f"max {queries.by(queries.host)} (max_over_time("
                f"{physical_gpus}[{thresholds.gpu_missing_lookback}]))",
                thresholds.gpu_missing_for,
                severity.warning,
                "A node enumerates fewer GPUs than it recently had.",
                f"Node {node}{templates.in_cluster(config)} now enumerates "
                f"{{{{ $value }}}} GPUs, fewer than in the last {thresholds.gpu_missing_lookback}: "
                "a GPU fell off the bus or failed to initialise after a reboot.",
            ),
            # Units count DRA devices too: a free GPU the DRA driver offers is not unallocatable.
            Alert(
                "GPUUnallocatable",
                f"({_per_gpu(queries, allocatable_units)} == 0)"
                f" and {key} "
                f"({_per_gpu(queries, device_up)} == 1)",
                thresholds.gpu_unallocatable_for,
                severity.warning,
                "A healthy GPU is not offered to pods.",
                f"{gpu} answers NVML but neither the device plugin nor the DRA driver has "
                f"offered a device on it for {thresholds.gpu_unallocatable_for}: it was marked "
                "unhealthy (often after an XID) or its MIG layout matches no resource, and it "
                "is paid for but unschedulable. On a DRA node, the exporter may instead lack "
                "--kubernetes and see only claimed GPUs.",
            ),
            Alert(
                "GPUXidCritical",
                _per_gpu(
                    queries,
                    f"increase({xid}[{thresholds.xid_window}]) > 0 "
                    f"or ({xid} unless {xid_series} {xid} offset {thresholds.xid_window})",
                    "xid",
                ),
                thresholds.latched_for,
                severity.critical,
                "A GPU reported a critical XID error.",
                f"{gpu} reported XID {templates.label('xid')} in the last "
                f"{thresholds.xid_window}{pods}. "
                "This XID means the GPU needs a reset, a drain or replacement.",
            ),
            Alert(
                "GPUEccUncorrectableErrors",
                _per_gpu(queries, queries.exporter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")) + " > 0",
                thresholds.latched_for,
                severity.critical,
                "A GPU has uncorrectable ECC memory errors.",
                f"{gpu} has counted {{{{ $value }}}} uncorrectable (double-bit) ECC errors "
                f"since the driver loaded{pods}. Data on it may be corrupt; drain the node and "
                "reset the GPU.",
            ),
            Alert(
                "GPURowRemapFailure",
                _per_gpu(queries, queries.exporter("DCGM_FI_DEV_ROW_REMAP_FAILURE")) + " == 1",
                thresholds.latched_for,
                severity.critical,
                "A GPU failed to remap a faulty memory row.",
                f"{gpu} could not remap a memory row with uncorrectable errors{pods}. "
                "The GPU has run out of spare rows and should be replaced.",
            ),
            Alert(
                "GPURowRemapPending",
                _per_gpu(queries, queries.exporter("DCGM_FI_DEV_ROW_REMAP_PENDING")) + " == 1",
                thresholds.latched_for,
                severity.warning,
                "A GPU has a memory row remap pending.",
                f"{gpu} has remapped a faulty memory row that takes effect at the next GPU "
                f"reset{pods}. Schedule a drain and reset.",
            ),
            Alert(
                "GPUThermalSlowdown",
                _per_gpu(
                    queries,
                    queries.exporter(
                        "kube_gpu_exporter_clock_event_active",
                        'clock_event=~"hw_thermal|sw_thermal"',
                    ),
                    "clock_event",
                )
                + " == 1",
                thresholds.throttle_for,
                severity.warning,
                "A GPU is slowed down by heat.",
                f"{gpu} has had its clocks cut by {templates.label('clock_event')} slowdown for "
                f"{thresholds.throttle_for}{pods}. Check cooling and airflow.",
            ),
            Alert(
                "GPUPowerBrakeSlowdown",
                _per_gpu(
                    queries,
                    queries.exporter(
                        "kube_gpu_exporter_clock_event_active", 'clock_event="hw_power_brake"'
                    ),
                )
                + " == 1",
                thresholds.throttle_for,
                severity.warning,
                "A GPU is slowed down by the power brake.",
                f"{gpu} has been held at low clocks by the external power-brake signal for "
                f"{thresholds.throttle_for}{pods}. Check the power supply and the chassis BMC.",
            ),
            *(
                Alert(
                    "GPUTemperatureHigh",
                    _per_gpu(queries, queries.exporter("DCGM_FI_DEV_GPU_TEMP")) + f" > {limit:g}",
                    for_,
                    level,
                    "A GPU is running hot.",
                    f'{gpu} has been at {{{{ printf "%.0f" $value }}}} °C, above {limit:g} °C, for '
                    f"{for_}{pods}.",
                )
                for limit, for_, level in (
                    (
                        thresholds.temperature_warning_celsius,
                        thresholds.temperature_warning_for,
                        severity.warning,
                    ),
                    (
                        thresholds.temperature_critical_celsius,
                        thresholds.temperature_critical_for,
                        severity.critical,
                    ),
                )
            ),
            Alert(
                "GPUMemoryNearlyFull",
                f"max {queries.by(*instance_key)} ({used} / ({used} + {free} + {reserved}))"
                f" > {thresholds.memory_full_ratio:g}",
                thresholds.memory_full_for,
                severity.warning,
                "GPU memory is nearly full.",
                f"{templates.gpu(config, instance=True)} has used "
                f"{{{{ humanizePercentage $value }}}} of its memory for "
                f"{thresholds.memory_full_for}{templates.holders(config, instance=True)}. "
                "Allocations may soon fail with out of memory.",
            ),
            Alert(
                "GPUAllocatedIdle",
                f"max {queries.by(*queries.gpu_key, 'GPU_I_ID', queries.namespace, queries.pod)} "
                f"({queries.busy(over=thresholds.idle_window)})"
                f" < {number(queries.utilization(thresholds.idle_utilization_percent))}",
                thresholds.idle_for,
                severity.info,
                "A GPU is allocated to a pod that does not use it.",
                f"{gpu} is held by {templates.label(queries.namespace)}/"
                f"{templates.label(queries.pod)} but has stayed below "
                f"{thresholds.idle_utilization_percent:g}% utilization for {thresholds.idle_for}. "
                "Release it or right-size the workload.",
            ),
        ),
    )

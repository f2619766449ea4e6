"""Alerts on GPU hardware: lost or unallocatable GPUs, XIDs, memory errors, throttling, heat and
memory pressure. One alert per GPU (or per MIG instance where the signal is per instance); the
pods using it are named in the description."""

from __future__ import annotations

from alerts import templates as t
from alerts.rule_types import Alert, Group
from bundle.config import BundleConfig
from bundle.promql import Q, regex_of


def _per_gpu(q: Q, expr: str, *extra: str) -> str:
    """Collapses MIG-instance series (and any duplicate scrape) to one series per GPU."""
    return f"max {q.by(*q.gpu_key, *extra)} ({expr})"


def group(config: BundleConfig) -> Group:
    q = Q(config)
    th, sev = config.thresholds, config.severity
    gpu, pods = t.gpu(config), t.holders(config)
    key = q.on(*q.gpu_key)
    xid = q.exporter("DCGM_EXP_XID_ERRORS_TOTAL", f'xid=~"{regex_of(th.xid_critical_codes)}"')
    # A counter series is "new" (its first XID) only if no series of the same exporter, device and
    # code existed a window ago. The pod labels are left out of that match: when the pod holding a
    # GPU ends or changes, the counter's series is relabelled, not restarted, and must not fire
    # again. `instance` stays in it, because a restarted exporter counts from zero.
    xid_series = q.on("instance", *q.gpu_key, "GPU_I_ID", "xid")
    fb = {part: q.exporter(f"DCGM_FI_DEV_FB_{part}") for part in ("USED", "FREE", "RESERVED")}
    instance_key = (*q.gpu_key, "GPU_I_ID", "GPU_I_PROFILE")
    return Group(
        "kube-gpu-exporter-devices",
        (
            Alert(
                "GPULost",
                _per_gpu(q, q.exporter("kube_gpu_exporter_device_up")) + " == 0",
                th.gpu_lost_for,
                sev.critical,
                "A GPU stopped answering NVML.",
                f"{gpu} has been lost or unresponsive for {th.gpu_lost_for}{pods}. Its "
                "workloads are failing; drain the node and reset or replace the GPU.",
            ),
            Alert(
                "GPUMissing",
                f"max {q.by(q.host)} ({q.exporter('kube_gpu_exporter_node_physical_gpus')}) < "
                f"max {q.by(q.host)} (max_over_time("
                f"{q.exporter('kube_gpu_exporter_node_physical_gpus')}"
                f"[{th.gpu_missing_lookback}]))",
                th.gpu_missing_for,
                sev.warning,
                "A node enumerates fewer GPUs than it recently had.",
                f"Node {t.label(q.host)}{t.in_cluster(config)} now enumerates "
                f"{{{{ $value }}}} GPUs, fewer than in the last {th.gpu_missing_lookback}: "
                "a GPU fell off the bus or failed to initialise after a reboot.",
            ),
            Alert(
                "GPUUnallocatable",
                f"({_per_gpu(q, q.exporter('kube_gpu_exporter_device_allocatable_units'))} == 0)"
                f" and {key} "
                f"({_per_gpu(q, q.exporter('kube_gpu_exporter_device_up'))} == 1)",
                th.gpu_unallocatable_for,
                sev.warning,
                "A healthy GPU is not offered to pods.",
                f"{gpu} answers NVML but the device plugin has offered no device on it for "
                f"{th.gpu_unallocatable_for}: it was marked unhealthy (often after an XID), or "
                "its MIG layout matches no resource. It is paid for and unschedulable.",
            ),
            Alert(
                "GPUXidCritical",
                _per_gpu(
                    q,
                    f"increase({xid}[{th.xid_window}]) > 0 or ({xid} unless {xid_series} {xid} "
                    f"offset {th.xid_window})",
                    "xid",
                ),
                th.latched_for,
                sev.critical,
                "A GPU reported a critical XID error.",
                f"{gpu} reported XID {t.label('xid')} in the last {th.xid_window}{pods}. "
                "This XID means the GPU needs a reset, a drain or replacement.",
            ),
            Alert(
                "GPUEccUncorrectableErrors",
                _per_gpu(q, q.exporter("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")) + " > 0",
                th.latched_for,
                sev.critical,
                "A GPU has uncorrectable ECC memory errors.",
                f"{gpu} has counted {{{{ $value }}}} uncorrectable (double-bit) ECC errors "
                f"since the driver loaded{pods}. Data on it may be corrupt; drain the node and "
                "reset the GPU.",
            ),
            Alert(
                "GPURowRemapFailure",
                _per_gpu(q, q.exporter("DCGM_FI_DEV_ROW_REMAP_FAILURE")) + " == 1",
                th.latched_for,
                sev.critical,
                "A GPU failed to remap a faulty memory row.",
                f"{gpu} could not remap a memory row with uncorrectable errors{pods}. "
                "The GPU has run out of spare rows and should be replaced.",
            ),
            Alert(
                "GPURowRemapPending",
                _per_gpu(q, q.exporter("DCGM_FI_DEV_ROW_REMAP_PENDING")) + " == 1",
                th.latched_for,
                sev.warning,
                "A GPU has a memory row remap pending.",
                f"{gpu} has remapped a faulty memory row that takes effect at the next GPU "
                f"reset{pods}. Schedule a drain and reset.",
            ),
            Alert(
                "GPUThermalSlowdown",
                _per_gpu(
                    q,
                    q.exporter(
                        "kube_gpu_exporter_clock_event_active",
                        'clock_event=~"hw_thermal|sw_thermal"',
                    ),
                    "clock_event",
                )
                + " == 1",
                th.throttle_for,
                sev.warning,
                "A GPU is slowed down by heat.",
                f"{gpu} has had its clocks cut by {t.label('clock_event')} slowdown for "
                f"{th.throttle_for}{pods}. Check cooling and airflow.",
            ),
            Alert(
                "GPUPowerBrakeSlowdown",
                _per_gpu(
                    q,
                    q.exporter(
                        "kube_gpu_exporter_clock_event_active", 'clock_event="hw_power_brake"'
                    ),
                )
                + " == 1",
                th.throttle_for,
                sev.warning,
                "A GPU is slowed down by the power brake.",
                f"{gpu} has been held at low clocks by the external power-brake signal for "
                f"{th.throttle_for}{pods}. Check the power supply and the chassis BMC.",
            ),
            *(
                Alert(
                    "GPUTemperatureHigh",
                    _per_gpu(q, q.exporter("DCGM_FI_DEV_GPU_TEMP")) + f" > {limit:g}",
                    for_,
                    severity,
                    "A GPU is running hot.",
                    f'{gpu} has been at {{{{ printf "%.0f" $value }}}} °C, above {limit:g} °C, for '
                    f"{for_}{pods}.",
                )
                for limit, for_, severity in (
                    (th.temperature_warning_celsius, th.temperature_warning_for, sev.warning),
                    (th.temperature_critical_celsius, th.temperature_critical_for, sev.critical),
                )
            ),
            Alert(
                "GPUMemoryNearlyFull",
                f"max {q.by(*instance_key)} ({fb['USED']} / ({fb['USED']} + {fb['FREE']} + "
                f"{fb['RESERVED']})) > {th.memory_full_ratio:g}",
                th.memory_full_for,
                sev.warning,
                "GPU memory is nearly full.",
                f"{t.gpu(config, instance=True)} has used {{{{ humanizePercentage $value }}}} "
                f"of its memory for {th.memory_full_for}"
                f"{t.holders(config, instance=True)}. Allocations may soon fail with out of "
                "memory.",
            ),
            Alert(
                "GPUAllocatedIdle",
                f"max {q.by(*q.gpu_key, 'GPU_I_ID', q.namespace, q.pod)} "
                f"({q.busy_percent(over=th.idle_window)}) < {th.idle_utilization_percent:g}",
                th.idle_for,
                sev.info,
                "A GPU is allocated to a pod that does not use it.",
                f"{gpu} is held by {t.label(q.namespace)}/{t.label(q.pod)} but has stayed "
                f"below {th.idle_utilization_percent:g}% utilization for {th.idle_for}. "
                "Release it or right-size the workload.",
            ),
        ),
    )

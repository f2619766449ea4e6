"""Alerts on the exporter's GPU health verdict (kube_gpu_exporter_gpu_health_reason): one alert
per action the verdict can ask for, reset, reboot and drain, so the page says what to do rather
than what broke. The cause alerts (GPUXidCritical, GPULost, the row-remap and ECC alerts,
GPURecoveryActionRequired) stay, for the detail each carries; docs/bundle.md says how to keep
the two from paging twice.

One alert per GPU: MIG instances inherit their GPU's reasons, and the pods holding the GPU
change without the repair changing, so instance and pod labels are aggregated away and the
description names the reasons and the pods from live queries. A GPU whose verdict asks for
several actions raises only the strongest one's alert (drain, then reboot, then reset): the
exporter orders its actions so, a drain takes the GPU out of service before any repair, and a
reboot resets every GPU of the node.
"""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.bundle.alerts import templates
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Group
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.promql import QueryBuilder

HEALTH_REASON = "kube_gpu_exporter_gpu_health_reason"


@dataclass(frozen=True, slots=True)
class ActionAlert:
    name: str
    # The `action` label value of the verdict's series.
    action: str
    summary: str
    # What the GPU needs, completing "GPU 3 (...) on node n1 ...".
    needs: str
    advice: str


# Strongest first: each alert is quiet while a stronger one holds for the same GPU.
ACTION_ALERTS = (
    ActionAlert(
        "GPUNeedsDrain",
        "drain",
        "A GPU must be drained.",
        "must be drained",
        "Cordon the node and move every pod off it, then do what the reasons ask: a reset for "
        "the driver's drain and reset, a repair or replacement for a failed row remap or an "
        "unhealthy fabric.",
    ),
    ActionAlert(
        "GPUNeedsReboot",
        "reboot",
        "A GPU needs its node rebooted.",
        "needs its node rebooted",
        "Cordon and drain the node, then reboot it.",
    ),
    ActionAlert(
        "GPUNeedsReset",
        "reset",
        "A GPU needs a reset.",
        "needs a GPU reset",
        "Move the pods off it, then reset the GPU (nvidia-smi -r) or reboot the node.",
    ),
)


def group(config: BundleConfig) -> Group:
    queries = QueryBuilder(config)
    thresholds, severity = config.thresholds, config.severity
    gpu, pods = templates.gpu(config), templates.holders(config)
    reasons = templates.health_reasons(config, queries.name(HEALTH_REASON))
    per_gpu = f"max {queries.by(*queries.gpu_key)}"
    key = queries.on(*queries.gpu_key)
    timing = {
        "drain": (thresholds.health_drain_for, severity.critical),
        "reboot": (thresholds.health_reboot_for, severity.critical),
        # Warning: the reset reasons (a pending row remap or page retirement, a contained fault)
        # leave the rest of the node serving, and the repair can wait for its pods to be moved.
        # Where a reset reason makes the GPU unusable, its cause alert (GPUXidCritical,
        # GPURecoveryActionRequired) already pages critical.
        "reset": (thresholds.health_reset_for, severity.warning),
    }
    alerts = []
    for index, spec in enumerate(ACTION_ALERTS):
        wanted = queries.exporter(HEALTH_REASON, f'action="{spec.action}"')
        expr = f"{per_gpu} ({wanted})"
        stronger = [s.action for s in ACTION_ALERTS[:index]]
        if stronger:
            matcher = 'action=~"' + "|".join(stronger) + '"'
            expr += f" unless {key} {per_gpu} ({queries.exporter(HEALTH_REASON, matcher)})"
        for_, level = timing[spec.action]
        alerts.append(
            Alert(
                spec.name,
                expr,
                for_,
                level,
                spec.summary,
                f"{gpu} {spec.needs}{pods}.{reasons} {spec.advice}",
            )
        )
    return Group("kube-gpu-exporter-gpu-health", tuple(alerts))

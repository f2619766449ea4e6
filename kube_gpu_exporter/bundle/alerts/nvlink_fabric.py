"""Alerts on NVLink, the NVLink fabric, NVLink-C2C and the driver's recovery action: the health
state Hopper, Blackwell and Grace nodes report (GB200 NVL72 trays above all). One alert per GPU,
and per counter or condition where a GPU can have several at once; the pods holding the GPU are
named in the description.

Every family read here is off by default in the exporter (a --collectors file turns them on), so
on a node that does not export them these alerts have nothing to read and stay quiet.

The fabric's health mask packs one small field per condition (NVML_GPU_FABRIC_HEALTH_MASK_*: a
shift, a width mask and the values each field takes). PromQL has no bitwise operators, so a field
is read as `floor(mask / 2^shift) % (width + 1)`, with the layout of
kube_gpu_exporter/exporter/fabric_health.py, which reads it from pynvml.
"""

from __future__ import annotations

from collections.abc import Sequence

import pynvml

from kube_gpu_exporter.bundle.alerts import templates
from kube_gpu_exporter.bundle.alerts.rule_types import Alert, Group
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.promql import QueryBuilder
from kube_gpu_exporter.exporter import fabric_health

# Hopper and earlier: per-GPU totals of the four classic NVLink error counters.
CLASSIC_ERROR_TOTALS = tuple(
    f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_TOTAL"
    for kind in ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
)
# Blackwell: the error counters among the per-GPU NVLink counts (summed over links). Left out:
# traffic (bytes, packets) and successful link recoveries, which a working link also counts.
BLACKWELL_ERROR_COUNTS = tuple(
    f"DCGM_FI_DEV_NVLINK_COUNT_{suffix}"
    for suffix in (
        "RX_MALFORMED_PACKET_ERRORS",
        "RX_BUFFER_OVERRUN_ERRORS",
        "RX_ERRORS",
        "RX_REMOTE_ERRORS",
        "RX_GENERAL_ERRORS",
        "LOCAL_LINK_INTEGRITY_ERRORS",
        "TX_DISCARDS",
        "LINK_RECOVERY_FAILED_EVENTS",
        "RX_SYMBOL_ERRORS",
        "EFFECTIVE_ERRORS",
    )
)
NVLINK_ERROR_COUNTERS = CLASSIC_ERROR_TOTALS + BLACKWELL_ERROR_COUNTS

FABRIC_STATUS = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_HEALTH_MASK = "DCGM_FI_DEV_FABRIC_HEALTH_MASK"
FABRIC_HEALTH_SUMMARY = "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"
C2C_LINK_COUNT = "DCGM_FI_DEV_C2C_LINK_COUNT"
C2C_LINK_STATUS = "DCGM_FI_DEV_C2C_LINK_STATUS"
RECOVERY_ACTION = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"

# The fabric manager status DCGM publishes: NVML's fabric state (1 not started, 2 in progress,
# 3 completed), with 4 for a registration that completed with an error.
STATUS_NOT_STARTED = pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED
STATUS_COMPLETED = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
STATUS_COMPLETED_WITH_ERROR = STATUS_COMPLETED + 1


def mask_true(name: str) -> int:
    """The value the health-mask field nvml.h calls `name` holds when its condition is there."""
    return fabric_health.BY_NVML[name].true


# The recovery actions NVML defines, in words for the description. Newer drivers add values:
# those this pynvml lacks are named by number.
RECOVERY_ACTIONS: tuple[tuple[str, str], ...] = (
    ("GPU_RESET", "a GPU reset"),
    ("NODE_REBOOT", "a node reboot"),
    ("DRAIN_P2P", "draining peer-to-peer (NVLink) traffic"),
    ("DRAIN_AND_RESET", "a drain and a GPU reset"),
    ("RECOVER_IMEX_DOMAIN", "recovering the IMEX domain"),
    ("BUS_RESET", "a bus reset"),
    ("SYSTEM_REBOOT", "a system reboot"),
)


def known_actions() -> list[tuple[int, str]]:
    return [
        (int(getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name}")), words)
        for name, words in RECOVERY_ACTIONS
        if hasattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{name}")
    ]


def _action_in_words() -> str:
    """A Go template naming the action `$value` holds. `$value` is a float, and text/template's
    `eq` refuses to compare it with an integer literal, so the literals are floats."""
    branches = [f"if eq $value {value:.1f} }}}}{words}" for value, words in known_actions()]
    return (
        "{{ "
        + "{{ else ".join(branches)
        + '{{ else }}recovery action {{ printf "%.0f" $value }}{{ end }}'
    )


def _labelled(expr: str, label: str, value: str) -> str:
    """`expr` with a constant label, so series of different conditions stay apart in an `or`."""
    return f'label_replace({expr}, "{label}", "{value}", "", "")'


def mask_field(mask: str, name: str) -> str:
    layout = fabric_health.BY_NVML[name]
    shift, width = layout.shift, layout.width
    shifted = mask if shift == 0 else f"floor({mask} / {2**shift})"
    return f"{shifted} % {width + 1}"


def _any_of(queries: QueryBuilder, label: str, conditions: Sequence[tuple[str, str]]) -> str:
    """One series per GPU and condition that holds: `conditions` are (value, filter expr)."""
    parts = " or ".join(_labelled(expr, label, value) for value, expr in conditions)
    return f"max {queries.by(*queries.gpu_key, label)} ({parts})"


def group(config: BundleConfig) -> Group:
    queries = QueryBuilder(config)
    thresholds, severity = config.thresholds, config.severity
    gpu, pods = templates.gpu(config), templates.holders(config)
    key = queries.on(*queries.gpu_key)
    window = thresholds.nvlink_error_window
    errors = _any_of(
        queries,
        "counter",
        [
            (queries.name(name), f"increase({queries.exporter(name)}[{window}])")
            for name in NVLINK_ERROR_COUNTERS
        ],
    )
    mask = queries.exporter(FABRIC_HEALTH_MASK)
    summary = queries.exporter(FABRIC_HEALTH_SUMMARY)
    status = queries.exporter(FABRIC_STATUS)
    grace = thresholds.fabric_startup_grace
    incorrect = mask_field(mask, "INCORRECT_CONFIGURATION")
    degraded = _any_of(
        queries,
        "condition",
        [
            (
                "limited_capacity",
                f"{summary} == {pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_LIMITED_CAPACITY}",
            ),
            (
                "degraded_bandwidth",
                f"{mask_field(mask, 'DEGRADED_BW')} == {mask_true('DEGRADED_BW')}",
            ),
            (
                "route_recovery",
                f"{mask_field(mask, 'ROUTE_RECOVERY')} == {mask_true('ROUTE_RECOVERY')}",
            ),
            (
                "access_timeout_recovery",
                f"{mask_field(mask, 'ACCESS_TIMEOUT_RECOVERY')} "
                f"== {mask_true('ACCESS_TIMEOUT_RECOVERY')}",
            ),
        ],
    )
    unhealthy = _any_of(
        queries,
        "condition",
        [
            ("unhealthy", f"{summary} == {pynvml.NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY}"),
            (
                "route_unhealthy",
                f"{mask_field(mask, 'ROUTE_UNHEALTHY')} == {mask_true('ROUTE_UNHEALTHY')}",
            ),
            # An enum, not a flag: 0 not supported, 1 none, anything above an error.
            (
                "incorrect_configuration",
                f"{incorrect} > {pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE}",
            ),
            ("registration_failed", f"{status} == {STATUS_COMPLETED_WITH_ERROR}"),
            # Not started or in progress at every sample of the grace, and the series already
            # there a grace ago: an exporter that just started says nothing about the boot.
            (
                "registration_pending",
                f"(max_over_time({status}[{grace}]) < {STATUS_COMPLETED} "
                f"and min_over_time({status}[{grace}]) >= {STATUS_NOT_STARTED}) "
                f"and {status} offset {grace}",
            ),
        ],
    )
    action = queries.exporter(RECOVERY_ACTION)
    c2c_status = queries.exporter(C2C_LINK_STATUS)
    c2c_count = queries.exporter(C2C_LINK_COUNT)
    per_gpu = f"max {queries.by(*queries.gpu_key)}"
    return Group(
        "kube-gpu-exporter-nvlink-fabric",
        (
            Alert(
                "GPUNvlinkErrors",
                f"{errors} > {thresholds.nvlink_error_threshold:g}",
                thresholds.nvlink_errors_for,
                severity.warning,
                "A GPU's NVLink links are counting errors.",
                f'{gpu} counted {{{{ printf "%.0f" $value }}}} NVLink errors on '
                f"{templates.label('counter')} in the last {window}, more than "
                f"{thresholds.nvlink_error_threshold:g}{pods}. A link, its cable tray or the "
                "NVLink switch is failing; multi-GPU jobs on it slow down or fail.",
            ),
            Alert(
                "GPUFabricDegraded",
                degraded,
                thresholds.fabric_degraded_for,
                severity.warning,
                "A GPU's NVLink fabric runs degraded.",
                f"{gpu} reports NVLink fabric condition {templates.label('condition')} for "
                f"{thresholds.fabric_degraded_for}{pods}. The fabric still carries traffic, with "
                "less bandwidth or through recovered routes; plan a drain.",
            ),
            Alert(
                "GPUFabricUnhealthy",
                unhealthy,
                thresholds.fabric_unhealthy_for,
                severity.critical,
                "A GPU's NVLink fabric is unhealthy or not registered.",
                f"{gpu} reports NVLink fabric condition {templates.label('condition')} for "
                f"{thresholds.fabric_unhealthy_for}{pods}. Jobs spanning its NVLink domain "
                "fail or cannot start; check the fabric manager and the NVLink switches.",
            ),
            Alert(
                "GPURecoveryActionRequired",
                f"{per_gpu} ({action}) > 0",
                thresholds.latched_for,
                severity.critical,
                "The driver asks for a recovery action on a GPU.",
                f"The driver asks for {_action_in_words()} on {gpu}{pods}. The GPU stays "
                "unusable until it is done.",
            ),
            Alert(
                "GPUC2CLinkInactive",
                f"({per_gpu} ({c2c_status}) == 0) and {key} ({per_gpu} ({c2c_count}) > 0)",
                thresholds.c2c_inactive_for,
                severity.critical,
                "A GPU's NVLink-C2C link to its CPU is down.",
                f"{gpu} has NVLink-C2C links to its Grace CPU but reports them inactive for "
                f"{thresholds.c2c_inactive_for}{pods}. The GPU cannot reach the CPU's memory "
                "coherently; drain the node.",
            ),
        ),
    )

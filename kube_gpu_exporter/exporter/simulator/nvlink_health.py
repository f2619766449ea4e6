"""A simulated board's NVLink error counters, NVLink fabric registration and the driver's
recovery action: the slow-moving health state that Blackwell and Grace nodes report, and that the
control API moves (docs/simulator.md, 'Simulator fault injection').

Counters are per link, as NVML keeps them; totals are sums over the board's links. A board with
no NVLink has no counters at all (NVML answers NOT_SUPPORTED, fields.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pynvml

from kube_gpu_exporter.exporter import fabric_health

# The per-link error counters of every NVLink board (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_*).
CLASSIC_KINDS = ("crc_flit", "crc_data", "replay", "recovery")
# The Blackwell per-link counters (NVML_FI_DEV_NVLINK_COUNT_*), by the kind a burst names.
BLACKWELL_KINDS = (
    "malformed_packet",
    "buffer_overrun",
    "rx",
    "rx_remote",
    "rx_general",
    "local_link_integrity",
    "tx_discards",
    "link_recovery_successful",
    "link_recovery_failed",
    "symbol",
    "effective",
)
KINDS = CLASSIC_KINDS + BLACKWELL_KINDS

# Fabric states (nvmlGpuFabricState_t) by the name the control API takes.
FABRIC_STATES = {
    "not_started": pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED,
    "in_progress": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS,
    "completed": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
}


# The recovery actions the control API may request (NVML_GPU_RECOVERY_ACTION_*).
RECOVERY_ACTIONS = {
    "none": pynvml.NVML_GPU_RECOVERY_ACTION_NONE,
    "reset": pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET,
    "reboot": pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT,
    "drain": pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P,
}


HEALTHY_MASK = fabric_health.mask_with({})


@dataclass
class FabricState:
    """What nvmlDeviceGetGpuFabricInfoV answers for one GPU of a fabric."""

    cluster_uuid: bytes
    clique_id: int
    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    # The probe's result, meaningful once the state is completed.
    status: int = pynvml.NVML_SUCCESS
    health_mask: int = HEALTHY_MASK


@dataclass
class NvlinkHealth:
    """One board's link counters, fabric and recovery action."""

    links: int
    # Kind -> count per link.
    errors: dict[str, list[int]] = field(default_factory=dict)
    fabric: FabricState | None = None
    recovery_action: int = pynvml.NVML_GPU_RECOVERY_ACTION_NONE

    def __post_init__(self) -> None:
        for kind in KINDS:
            self.errors.setdefault(kind, [0] * self.links)

    def burst(self, kind: str, link: int, count: int) -> None:
        self.errors[kind][link] += count
        # A link that recovered was counted as a recovery event by the Blackwell counters too.
        if kind == "recovery":
            self.errors["link_recovery_successful"][link] += count

    def count(self, kind: str, link: int) -> int:
        return self.errors[kind][link]

    def total(self, kind: str) -> int:
        return sum(self.errors[kind])

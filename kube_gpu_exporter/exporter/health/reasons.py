"""The reason table: every condition NVML can show that makes a GPU less than healthy, as data.

Each row says what the NVML evidence is, how bad it is (`severity`), what an operator or an
automated remediator should do (`action`), when the reason goes away (`clears`), and where
dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS would file it (`watch`, `code`). verdict.py decides
which rows hold; nothing else in the package knows a reason by name except through this table.

XID resolutions follow the "Resolution Bucket (Immediate Action)" column of NVIDIA's Xid Catalog
for Ampere and newer GPUs (docs.nvidia.com, deploy/xid-errors, 'Analyzing Xid Errors with the
Xid Catalog'), mapped onto our vocabulary: RESTART_APP -> watch, RESET_GPU -> reset,
RESTART_VM / reboot -> reboot, and a GPU that needs replacing -> drain. The application XIDs are
the ones NVIDIA's k8s-device-plugin leaves healthy (xid_messages.APPLICATION_XIDS).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from kube_gpu_exporter.exporter.xid_messages import APPLICATION_XIDS, xid_message


class Severity(StrEnum):
    NONE = "none"
    WARNING = "warning"
    CRITICAL = "critical"


class Action(StrEnum):
    """Ordered from least to most disruptive: the worst reason's action is the GPU's."""

    NONE = "none"
    WATCH = "watch"
    RESET = "reset"
    REBOOT = "reboot"
    DRAIN = "drain"


class Clears(StrEnum):
    AT_ONCE = "at once: when the evidence is gone"
    AT_RESET = "at the GPU's next reset (or driver reload)"
    LATCHED = "latched: until the driver or the board says otherwise"
    WINDOW = "XID_HOLD_SECONDS after the XID's last event"


SEVERITY_ORDER = tuple(Severity)
ACTION_ORDER = tuple(Action)

# How long an XID holds the verdict after its last event. NVML gives no signal when a GPU reset
# has taken effect, so an XID alone cannot be latched until one; the driver's recovery action
# (DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION, raised with XID 154) is the latch that outlives this.
XID_HOLD_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Reason:
    name: str
    evidence: str
    severity: Severity
    action: Action
    clears: Clears
    # dcgm-exporter's health_watch and health_error_code for it, and DCGM's health result.
    watch: str
    code: str

    @property
    def dcgm_result(self) -> int:
        """DCGM's health result: PASS 0, WARN 10, FAIL 20."""
        return {Severity.NONE: 0, Severity.WARNING: 10, Severity.CRITICAL: 20}[self.severity]


HEALTHY = Reason(
    "healthy",
    "no other reason holds",
    Severity.NONE,
    Action.NONE,
    Clears.AT_ONCE,
    "ALL",
    "DCGM_FR_OK",
)

_C, _W = Severity.CRITICAL, Severity.WARNING

REASONS: tuple[Reason, ...] = (
    Reason(
        "gpu_lost",
        "NVML answers GPU_IS_LOST (or another error) for the device: it is not up",
        _C,
        # Off the bus, as XID 79: the node must be drained before anything is tried on it.
        Action.DRAIN,
        Clears.AT_ONCE,
        "PCIE",
        "DCGM_FR_FALLEN_OFF_BUS",
    ),
    Reason(
        "recovery_action_reset",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION = 1 (GPU reset)",
        _C,
        Action.RESET,
        Clears.LATCHED,
        "DRIVER",
        "DCGM_FR_GPU_RECOVERY_RESET",
    ),
    Reason(
        "recovery_action_reboot",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION = 2 (node reboot)",
        _C,
        Action.REBOOT,
        Clears.LATCHED,
        "DRIVER",
        "DCGM_FR_GPU_RECOVERY_REBOOT",
    ),
    Reason(
        "recovery_action_drain_p2p",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION = 3 (drain peer-to-peer traffic)",
        _C,
        Action.DRAIN,
        Clears.LATCHED,
        "NVLINK",
        "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
    ),
    Reason(
        "recovery_action_drain_reset",
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION = 4 (drain, then reset)",
        _C,
        Action.DRAIN,
        Clears.LATCHED,
        "DRIVER",
        "DCGM_FR_GPU_RECOVERY_DRAIN_RESET",
    ),
    Reason(
        "ecc_dbe_volatile",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 (double-bit ECC errors since the last reset)",
        _C,
        Action.RESET,
        Clears.AT_RESET,
        "MEM",
        "DCGM_FR_VOLATILE_DBE_DETECTED",
    ),
    Reason(
        "row_remap_pending",
        "DCGM_FI_DEV_ROW_REMAP_PENDING = 1 (a remap waits for a reset to apply)",
        _C,
        Action.RESET,
        Clears.AT_RESET,
        "MEM",
        "DCGM_FR_PENDING_ROW_REMAP",
    ),
    Reason(
        "row_remap_failure",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE = 1 (a row could not be remapped)",
        _C,
        Action.DRAIN,
        Clears.LATCHED,
        "MEM",
        "DCGM_FR_ROW_REMAP_FAILURE",
    ),
    Reason(
        "retired_pages_pending",
        "DCGM_FI_DEV_RETIRED_PENDING > 0 (pre-Ampere: a page waits for a reset to retire)",
        _C,
        Action.RESET,
        Clears.AT_RESET,
        "MEM",
        "DCGM_FR_PENDING_PAGE_RETIREMENTS",
    ),
    Reason(
        "fabric_degraded",
        "fabric health mask: DEGRADED_BW, ROUTE_RECOVERY or ACCESS_TIMEOUT_RECOVERY true",
        _W,
        Action.WATCH,
        Clears.AT_ONCE,
        "NVLINK",
        "DCGM_FR_LOW_BANDWIDTH",
    ),
    Reason(
        "fabric_unhealthy",
        "fabric health mask: ROUTE_UNHEALTHY true, or INCORRECT_CONFIGURATION set",
        _C,
        Action.DRAIN,
        Clears.AT_ONCE,
        "NVLINK",
        "DCGM_FR_FABRIC_PROBE_STATE",
    ),
    Reason(
        "fabric_registration_failed",
        "DCGM_FI_DEV_FABRIC_MANAGER_STATUS = 4 (registration completed with an error)",
        _C,
        Action.DRAIN,
        Clears.AT_ONCE,
        "NVLINK",
        "DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR",
    ),
    Reason(
        "pcie_downtrained",
        "PCIe link generation or width below the board's maximum (DCGM_FI_DEV_PCIE_LINK_GEN "
        "< _MAX_GEN, or _WIDTH < _MAX_WIDTH), where the readings exist",
        _W,
        Action.WATCH,
        Clears.AT_ONCE,
        "PCIE",
        "DCGM_FR_PCIE_GENERATION",
    ),
    Reason(
        "hw_slowdown",
        "clock-event reason hw_slowdown (0x8) active this sweep",
        _W,
        Action.WATCH,
        Clears.AT_ONCE,
        "THERMAL",
        "DCGM_FR_THROTTLING_VIOLATION",
    ),
    Reason(
        "thermal_brake",
        "clock-event reason hw_thermal (0x40) active this sweep",
        _W,
        Action.WATCH,
        Clears.AT_ONCE,
        "THERMAL",
        "DCGM_FR_CLOCK_THROTTLE_THERMAL",
    ),
    Reason(
        "power_brake",
        "clock-event reason hw_power_brake (0x80) active this sweep",
        _W,
        Action.WATCH,
        Clears.AT_ONCE,
        "POWER",
        "DCGM_FR_CLOCK_THROTTLE_POWER",
    ),
)

# XID code -> (action, the watch DCGM files it under), after NVIDIA's Xid Catalog. Codes not
# listed and not application XIDs get UNLISTED_XID.
_XID_ACTIONS: dict[int, tuple[Action, str]] = {
    48: (Action.RESET, "MEM"),  # double-bit ECC
    63: (Action.RESET, "MEM"),  # row remap / page retirement recorded: reset to apply
    64: (Action.DRAIN, "MEM"),  # row remap / page retirement recording failed
    74: (Action.RESET, "NVLINK"),  # NVLink error
    # Fallen off the bus: a reboot may bring the GPU back, but its pods have lost it and it is
    # suspect hardware, so drain first (NVIDIA's Health Validation files critical XIDs under
    # "drain").
    79: (Action.DRAIN, "PCIE"),
    92: (Action.WATCH, "MEM"),  # high single-bit ECC rate
    94: (Action.RESET, "MEM"),  # contained ECC error
    95: (Action.RESET, "MEM"),  # uncontained ECC error
    119: (Action.RESET, "DRIVER"),  # GSP RPC timeout
    120: (Action.RESET, "DRIVER"),  # GSP error
    123: (Action.RESET, "PMU"),  # SPI PMU RPC write failure
    136: (Action.RESET, "NVLINK"),  # ALI training failure
    140: (Action.RESET, "MEM"),  # unrecovered ECC error
    143: (Action.REBOOT, "DRIVER"),  # GPU initialisation failure
    144: (Action.RESET, "NVLINK"),
    145: (Action.RESET, "NVLINK"),
    146: (Action.RESET, "NVLINK"),
    147: (Action.RESET, "NVLINK"),
    148: (Action.RESET, "NVLINK"),
    149: (Action.RESET, "NVLINK"),
    150: (Action.RESET, "NVLINK"),
    154: (Action.WATCH, "DRIVER"),  # recovery action changed: the recovery-action row acts
    157: (Action.DRAIN, "MEM"),  # resource retirement failure
    158: (Action.RESET, "DRIVER"),  # GPU fatal timeout
    171: (Action.RESET, "MEM"),  # uncorrectable DRAM error
    172: (Action.RESET, "MEM"),  # uncorrectable SRAM error
}
UNLISTED_XID = (Action.WATCH, "ALL")


def xid_reason(code: int) -> Reason:
    """The row for XID `code`: `xid_<code>`, held for XID_HOLD_SECONDS after its last event."""
    if code in APPLICATION_XIDS:
        action, watch, severity = Action.WATCH, "SM", Severity.WARNING
    else:
        action, watch = _XID_ACTIONS.get(code, UNLISTED_XID)
        severity = Severity.WARNING if action is Action.WATCH else Severity.CRITICAL
    return Reason(
        f"xid_{code}",
        f"XID {code} ({xid_message(code)}) within the last {XID_HOLD_SECONDS:g} s",
        severity,
        action,
        Clears.WINDOW,
        watch,
        "DCGM_FR_XID_ERROR",
    )


# Codes the documented table lists one by one (the rest follow UNLISTED_XID).
DOCUMENTED_XIDS: tuple[int, ...] = tuple(sorted(set(_XID_ACTIONS) | APPLICATION_XIDS))

BY_NAME = MappingProxyType({r.name: r for r in (HEALTHY, *REASONS)})

# The recovery action row's values (NVML_GPU_RECOVERY_ACTION_*) -> reason.
RECOVERY_REASONS = MappingProxyType(
    {
        1: BY_NAME["recovery_action_reset"],
        2: BY_NAME["recovery_action_reboot"],
        3: BY_NAME["recovery_action_drain_p2p"],
        4: BY_NAME["recovery_action_drain_reset"],
    }
)

# dcgm-exporter's health watches, in the order its series are written.
WATCHES: tuple[str, ...] = (
    "PCIE",
    "NVLINK",
    "PMU",
    "MCU",
    "MEM",
    "SM",
    "INFOROM",
    "THERMAL",
    "POWER",
    "DRIVER",
    "ALL",
)


def worse(a: Reason, b: Reason) -> bool:
    """Whether `a` outranks `b`: by action first (what must be done), then severity."""
    return (ACTION_ORDER.index(a.action), SEVERITY_ORDER.index(a.severity)) > (
        ACTION_ORDER.index(b.action),
        SEVERITY_ORDER.index(b.severity),
    )

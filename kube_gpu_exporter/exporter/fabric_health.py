"""The GPU fabric's health mask, NVML's `healthMask` (nvml.h, NVML_GPU_FABRIC_HEALTH_MASK_*): one
small field per condition at a shift, a width mask over it, and the values it takes. The layout is
read from pynvml, so it is nvml.h's and stated nowhere else; the simulator sets these fields, the
bundle's alerts and dashboards read them.

docs/nvml.md, 'Fabric, NVLink errors, C2C and the recovery action', says what each means.
"""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

_MASK = "NVML_GPU_FABRIC_HEALTH_MASK_"


@dataclass(frozen=True, slots=True)
class MaskField:
    name: str
    # The word nvml.h names the field by (DEGRADED_BW), in its SHIFT_ and WIDTH_ constants.
    nvml: str
    shift: int
    width: int
    # The value the field holds when the condition is there, and when it is not.
    true: int
    false: int

    def value(self, mask: int) -> int:
        return (mask >> self.shift) & self.width

    def holds(self, mask: int) -> bool:
        return self.value(mask) == self.true


def _field(name: str, nvml: str, true: str = "TRUE", false: str = "FALSE") -> MaskField:
    """`true` and `false` name the values' constants after the field's word (DEGRADED_BW_TRUE)."""
    return MaskField(
        name,
        nvml,
        int(getattr(pynvml, f"{_MASK}SHIFT_{nvml}")),
        int(getattr(pynvml, f"{_MASK}WIDTH_{nvml}")),
        int(getattr(pynvml, f"{_MASK}{nvml}_{true}")),
        int(getattr(pynvml, f"{_MASK}{nvml}_{false}")),
    )


FIELDS: tuple[MaskField, ...] = (
    _field("degraded_bandwidth", "DEGRADED_BW"),
    _field("route_recovery", "ROUTE_RECOVERY"),
    _field("route_unhealthy", "ROUTE_UNHEALTHY"),
    _field("access_timeout_recovery", "ACCESS_TIMEOUT_RECOVERY"),
    # An enum, not a flag: "true" is its first error value (an incorrect system GUID).
    _field(
        "incorrect_configuration",
        "INCORRECT_CONFIGURATION",
        true="INCORRECT_SYSGUID",
        false="NONE",
    ),
)
BY_NAME = {f.name: f for f in FIELDS}
BY_NVML = {f.nvml: f for f in FIELDS}


def mask_with(conditions: dict[str, bool]) -> int:
    """The mask a fabric reports with these conditions there (the others not)."""
    mask = 0
    for f in FIELDS:
        mask |= (f.true if conditions.get(f.name, False) else f.false) << f.shift
    return mask

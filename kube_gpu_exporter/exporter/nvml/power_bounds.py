"""What board power a GPU can report, so that a glitched reading is a missing sample.

A board reading 0xFFFFFFFF mW (NVML's uint32 ceiling, 4.29 MW) for two sweeps once added 8.6 MJ
to the energy counter that board power carries between NVML reads (energy_estimate.py), and the
whole spike went to one pod. A reading is plausible when it is finite, not negative, and at most
`TOLERANCE` times the board's ceiling: the highest power limit the board has said it can take
(nvmlDeviceGetPowerManagementLimitConstraints' maximum, read with the identity) or is enforcing
now, whichever is higher. The tolerance leaves room for an instantaneous reading that overshoots
the limit while the power controller catches up (boards older than Ampere report the
instantaneous draw); the energy estimate still integrates no more than the ceiling itself.

`MAX_BOARD_MW` is well above what any board NVML reports on is rated for (B300 boards are rated
1.1 to 1.4 kW) and far below the glitch values. It stands in where NVML gives no limit at all,
and a limit above it is taken for a glitch of its own, not a reason to accept any power.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from kube_gpu_exporter.exporter.nvml.rejected_readings import ABOVE_LIMIT, NEGATIVE, NOT_FINITE

TOLERANCE = 1.25
MAX_BOARD_MW = 4_000_000


def ceiling_mw(limits_mw: Iterable[float | int | None]) -> float:
    """The most the board can draw: the highest of its known power limits."""
    known = [float(limit) for limit in limits_mw if limit is not None and 0 < limit <= MAX_BOARD_MW]
    return max(known) if known else float(MAX_BOARD_MW)


def rejection(power_mw: float | int, ceiling: float) -> str | None:
    """Why `power_mw` cannot be a reading of a board whose ceiling is `ceiling`; None if it can."""
    if not math.isfinite(power_mw):
        return NOT_FINITE
    if power_mw < 0:
        return NEGATIVE
    if power_mw > ceiling * TOLERANCE:
        return ABOVE_LIMIT
    return None

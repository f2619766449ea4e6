"""Which clock-event reasons each NVML performance policy's violation counter counts, in the
simulated board (docs/nvml.md, 'Violation counters').

A real board's counter (`nvmlDeviceGetViolationStatus`, or field values 74-81) is the time, in
nanoseconds since the driver loaded, that its policy held the clocks back. The simulator models
each as the time any of its reason bits was set (SimGpu.advance integrates it in simulated time),
so a board held at its power cap or by a thermal brake sees its counters rise at one second per
second, and a board that is not stays flat.

The choices, where NVML does not say which reason feeds which policy:

- power: the SW power cap, or the HW power brake (an external power-brake signal);
- thermal: the SW or HW thermal slowdown;
- sync boost: the sync-boost reason;
- board limit: HW slowdown, and the throttle-named BoardLimit bit;
- low utilization: the GPU-idle reason;
- reliability: the throttle-named Reliability bit;
- total below application clocks: any reason that lowers the clock the board runs at, all of the
  above but idle (an idle board is not held back, it has nothing to do), the application-clock
  setting and the display clock;
- total below base clocks: the reasons that cut clocks hard (the simulator multiplies the SM
  clock by 0.6 for them): thermal slowdown, HW slowdown and the HW power brake. A power cap alone
  trims clocks within the boost range, so it does not count here.
"""

from __future__ import annotations

from types import MappingProxyType

GPU_IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2
SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8
SYNC_BOOST = 0x10
SW_THERMAL_SLOWDOWN = 0x20
HW_THERMAL_SLOWDOWN = 0x40
HW_POWER_BRAKE_SLOWDOWN = 0x80
DISPLAY_CLOCK_SETTING = 0x100
# Named only by the older nvmlClocksThrottleReason* constants.
BOARD_LIMIT = 0x200
RELIABILITY = 0x400

POWER = SW_POWER_CAP | HW_POWER_BRAKE_SLOWDOWN
THERMAL = SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN
BOARD = HW_SLOWDOWN | BOARD_LIMIT
# Reasons that bring the SM clock well below its base (sim_gpu.SimGpu.sm_clock_mhz).
CLOCK_CUT = THERMAL | HW_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN

# Policy (the DCGM field's word) -> the reason bits that count towards it.
POLICY_REASONS = MappingProxyType(
    {
        "power": POWER,
        "thermal": THERMAL,
        "sync_boost": SYNC_BOOST,
        "board_limit": BOARD,
        "low_util": GPU_IDLE,
        "reliability": RELIABILITY,
        "total_app_clocks": POWER | THERMAL | SYNC_BOOST | BOARD | RELIABILITY,
        "total_base_clocks": CLOCK_CUT,
    }
)
POLICIES = tuple(POLICY_REASONS)


def active_policies(reasons: int) -> tuple[str, ...]:
    """The policies whose counters run while `reasons` (an NVML clock-event bitmask) holds."""
    return tuple(policy for policy, bits in POLICY_REASONS.items() if reasons & bits)

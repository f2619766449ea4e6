"""NVML's clock event (throttle) reason bits and the `clock_event` label value dcgm-exporter gives
each (its DCGM_EXP_CLOCK_EVENTS_COUNT / _TOTAL collectors). Shared by the poller, which counts them,
and the exposition, which names them."""

from __future__ import annotations

CLOCK_EVENTS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)

"""Validation on a real GPU: the exporter's exposition against NVML and nvidia-smi read directly.

`GpuFacts` is what every reference source (nvidia-smi's XML, pynvml calls of our own) reduces a
GPU to, so that one comparison serves both; GPUs are keyed by `bus_id_key`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIB = 1 << 20

_BUS_ID = re.compile(r"^([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


@dataclass(frozen=True, slots=True)
class GpuFacts:
    """One physical GPU as a reference source reads it; None: unknown, N/A or NOT_SUPPORTED."""

    name: str | None = None
    pci_device_id: int | None = None
    memory_total_bytes: int | None = None
    # As nvidia-smi's "Used" and DCGM's FB_USED: nvmlMemory_v2's `used`, without the driver's
    # reservation (v1's, with it, on drivers before R510, which have no v2).
    memory_used_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    gpu_util_pct: float | None = None
    mem_util_pct: float | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None


def bus_id_key(text: str) -> str:
    """A PCI bus id in one spelling, "00000000:18:00.0": nvidia-smi, NVML's legacy and current
    fields and the exporter's label differ in case and in the width of the domain."""
    match = _BUS_ID.match(text.strip().lower())
    if match is None:
        raise ValueError(f"not a PCI bus id: {text!r}")
    domain, bus, device, function = match.groups()
    return f"{int(domain, 16):08x}:{bus}:{device}.{function}"

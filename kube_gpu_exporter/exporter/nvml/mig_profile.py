"""Where the MIG profile name (`GPU_I_PROFILE`, e.g. "1g.10gb") comes from.

An unprivileged exporter cannot ask for GPU-instance info (that needs admin rights), so:
1. parse the MIG device's name, "<parent name> MIG <profile>", which NVML always returns;
2. otherwise derive it from `nvmlDeviceGetAttributes` the way go-nvlib sizes profiles: memory as a
   fraction of the parent in eighths, rounded up, times the parent's total in whole GiB.
"""

from __future__ import annotations

import math
import re

_MIG_NAME = re.compile(r"\bMIG\s+(?P<profile>(?:\d+c\.)?\d+g\.\d+gb(?:[+-][a-z.]+)?)\s*$")
_MIB = 1 << 20
_GIB = 1 << 30


def profile_from_name(name: str) -> str | None:
    match = _MIG_NAME.search(name)
    return match.group("profile") if match else None


def profile_from_attributes(
    gpu_instance_slices: int,
    compute_instance_slices: int,
    memory_size_mib: int,
    parent_total_bytes: int,
) -> str | None:
    if gpu_instance_slices <= 0 or parent_total_bytes <= 0:
        return None
    fraction = math.ceil(memory_size_mib * _MIB / parent_total_bytes * 8) / 8
    total_gb = math.ceil(parent_total_bytes / _GIB)
    gb = round(fraction * total_gb)
    base = f"{gpu_instance_slices}g.{gb}gb"
    if compute_instance_slices and compute_instance_slices != gpu_instance_slices:
        return f"{compute_instance_slices}c.{base}"
    return base

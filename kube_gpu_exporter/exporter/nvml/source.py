"""The NVML a poller is handed, and what about it differs from one node to another.

The poller and its helpers make every NVML call through `NvmlSource.api`: an object with
nvidia-ml-py's `nvml*` functions as attributes. On a real node that is the `pynvml` module itself
(binding.real_nvml); under --simulate it is the simulator's stand-in, so nothing has to replace
functions inside `pynvml`. Constants, structs and error classes are still read from `pynvml`:
they are data, the same for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class NvmlSource:
    # pynvml's module or an object with the same `nvml*` attributes; untyped, as pynvml is.
    api: Any
    # Why NVML refuses the GPU-instance queries when that is known and intended (a simulated node
    # runs unprivileged on purpose): then the refusal is no advice to give, and MigReader logs it
    # at debug with this reason. None on a real node, where it is worth knowing.
    expected_refusal: str | None = None

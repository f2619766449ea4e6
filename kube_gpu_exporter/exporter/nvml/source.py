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
    # How soon the XID watcher retries registering for events after a driver reload. Not a flag:
    # only tests, which reload the driver many times, have a reason to change it.
    xid_reregister_delay_seconds: float = 1.0
    # How long one NVML event wait blocks. An event ends the wait at once, so this only sets how
    # often the idle watcher wakes, and each wake-up costs CPU (some 300 µs on the 2-core
    # development VM: a CPU-second an hour at one a second). Stopping the watcher waits out the
    # current wait, so it stays within the exporter's shutdown time (app.py, SHUTDOWN_SECONDS);
    # tests that start and stop many pollers shorten it.
    xid_event_wait_ms: int = 2000

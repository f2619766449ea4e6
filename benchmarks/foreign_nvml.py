"""The one place that points nvidia-ml-py's module at the simulator, for a program we do not own.

Our exporter and the baseline are handed their NVML (an NvmlSource, or the simulator's api
object). nvitop-exporter cannot be: nvitop.api.libnvml imports pynvml itself, copies its `nvml*`
functions into its own globals at import time (`from pynvml import *`), resolves the names its
queries give by `getattr` on itself, and calls `pynvml.nvmlInitWithFlags` and `nvmlShutdown`
through the module; none of it takes an object. To measure it beside ours on the same simulated
node, the process that runs it replaces pynvml's functions with the simulator's before nvitop is
imported. Only that process does: nothing in kube_gpu_exporter/exporter/ or the tests patches pynvml
(tests/unit/test_import_graph.py holds that, and names this file as the exception).
"""

from __future__ import annotations

import inspect
from typing import Any

import pynvml


def point_pynvml_at(api: Any) -> None:
    """pynvml's `nvml*` functions become `api`'s (the simulator's object, which has them all),
    for the rest of this process. Call it before nvitop is imported."""
    for name, value in list(vars(pynvml).items()):
        if name.startswith("nvml") and inspect.isfunction(value):
            setattr(pynvml, name, getattr(api, name))

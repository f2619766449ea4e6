"""The simulated NVML as the object a poller is handed (NvmlSource.api): one attribute per `nvml*`
function of nvidia-ml-py, called as pynvml's own would be.

Each stand-in method (marked with core.nvml_call) is wrapped once, when the object is built: the
call is counted, fails as the real library does before nvmlInit, for a symbol the fleet's driver
lacks, on a lost GPU or on a handle of the wrong kind, honours injected faults (faults.py), and
costs the caller what the real call costs (call_costs.py). Any `nvml*` function not modelled
raises NOT_SUPPORTED, so nothing reaches a real libnvidia-ml.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.call_costs import CHARGE_FLOOR_US, MEASURED, charge
from kube_gpu_exporter.exporter.simulator.nvml.core import PROCESS_LISTS, NvmlCore
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimMigInstance

# nvidia-ml-py's unversioned process-list wrappers call the _v3 symbol and turn its absence into
# NVMLLibraryMismatchError, a plain Exception rather than an NVMLError.
_UNVERSIONED = {name: f"{name}_v3" for name in PROCESS_LISTS}
# nvml*-named helpers of nvidia-ml-py itself that never reach libnvidia-ml: the object carries
# pynvml's own, for callers that build exception classes or convert structs.
_BINDING_HELPERS = frozenset(
    {"nvmlExceptionClass", "nvmlStructToFriendlyObject", "nvmlFriendlyObjectToStruct"}
)
# A layer between a modelled call and its charge: (function name, call) -> call. The benchmarks'
# replay of remembered answers is one (benchmarks/precomputed_answers.py).
Layer = Callable[[str, Callable[..., Any]], Callable[..., Any]]


class NvmlApi:
    """pynvml's `nvml*` functions as attributes of a plain object, answered by the simulator; the
    attributes are set by `build_api`. No __getattr__ or __setattr__: either would put a Python
    hook on every attribute read, and reading one is the whole cost of reaching a call."""


def build_api(sim: NvmlCore, layer: Layer | None = None) -> Any:
    """An NvmlApi over `sim`'s stand-ins, with `layer` (if any) around each modelled call. Typed
    Any, as the `pynvml` module it stands in for is."""
    modelled = {}
    for attr in dir(type(sim)):
        meta = getattr(getattr(type(sim), attr), "_nvml", None)
        if meta is None:
            continue
        call = _checked(sim, getattr(sim, attr), *meta)
        if layer is not None:
            call = layer(meta[0], call)
        modelled[meta[0]] = _charged(sim, meta[0], call)
    api = NvmlApi()
    for name, original in vars(pynvml).items():
        if name.startswith("nvml") and inspect.isfunction(original):
            if name in _BINDING_HELPERS:
                setattr(api, name, original)
            else:
                setattr(api, name, modelled.get(name) or _not_modelled(sim, name))
    return api


def _charged(sim: NvmlCore, name: str, call: Callable) -> Callable:
    """`call`, costing the caller what the real call costs (call_costs.py), whether its answer is
    computed or replayed; as it is, under flat costs."""
    if sim.fleet.call_costs != "measured":
        return call
    if name == "nvmlDeviceGetFieldValues":

        def charged_fields(*args: Any, **kwargs: Any) -> Any:
            charge(MEASURED.of_call(name, args))
            return call(*args, **kwargs)

        return functools.update_wrapper(charged_fields, call)
    cost = MEASURED.call(name)
    if max(cost.cpu_us, cost.wait_us) < CHARGE_FLOOR_US:
        return call

    def charged(*args: Any, **kwargs: Any) -> Any:
        charge(cost)
        return call(*args, **kwargs)

    return functools.update_wrapper(charged, call)


def _not_modelled(sim: NvmlCore, name: str) -> Callable:
    def not_modelled(*args: Any, **kwargs: Any) -> Any:
        sim.count_call(name)
        sim.require_init(name)
        raise pynvml.NVMLError_NotSupported()

    not_modelled.__name__ = name
    return not_modelled


def _checked(
    sim: NvmlCore, method: Callable, name: str, device: bool, on_mig: str, gpu_instance: bool
) -> Callable:
    versioned = _UNVERSIONED.get(name)

    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        sim.count_call(name)
        sim.require_init(name)
        if sim.lacks(name):
            raise pynvml.NVMLError_FunctionNotFound()
        if versioned is not None and sim.lacks(versioned):
            raise pynvml.NVMLLibraryMismatchError(
                f"{name}: the driver has no {versioned}; call a versioned function"
            )
        if not device:
            sim.faults.before_call(name, None)
            sim.latency()
            return method(*args, **kwargs)
        if not args:
            raise pynvml.NVMLError_InvalidArgument()
        instance: SimMigInstance | None
        if gpu_instance:
            gpu, instance = sim.resolve_gpu_instance(args[0])
        else:
            gpu, instance = sim.resolve(args[0])
        sim.faults.before_call(name, gpu.index)
        if gpu.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if instance is not None and on_mig == "unsupported" and not gpu_instance:
            raise pynvml.NVMLError_NotSupported()
        if instance is None and on_mig == "only":
            raise pynvml.NVMLError_InvalidArgument()
        sim.latency()
        return method(gpu, instance, *args[1:], **kwargs)

    return call

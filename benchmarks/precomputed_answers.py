"""Precomputed answers: the simulated NVML at near-zero cost, for measuring an exporter's own CPU.

The simulator computes every answer from its workload models, and that cost lands in whichever
process calls NVML. A benchmark that wants an exporter's own cost (the simulator's share removed)
hands the exporter `precomputed_api(sim)` instead of `sim.api`: the first CYCLE calls of each
function with the same arguments are answered by the simulator and remembered; every later call
replays them in turn, so values still change from one call to the next (nothing an exporter could
skip as unchanged) while each answer costs a dictionary lookup. The replay sits between the
simulated call and its charge (call_costs.py), so a replayed answer still costs the caller what
the real call costs.

Stateful calls pass through: library init and shutdown, XID event sets, GPM sample buffers, and
anything whose arguments are not plain values (ctypes structures filled in place). GPM metrics
are the exception worth making, because they are most of GPM's simulated cost: the metric values
for a (GPU, GPU instance, metric list) are replayed into the caller's structure.

Every replayed answer still makes one trivial C call through ctypes, as each real NVML call does:
ctypes lets go of the GIL around a foreign call, and that hand-off, which decides how threads
taking turns cost, is part of a real exporter's own cost.

Replayed counters (energy, NVLink bytes) and field timestamps repeat every CYCLE calls, so a
counter goes back now and then; exporters treat that as a reset. Faults injected through the
control API do not apply to replayed answers: this mode is for cost, not behaviour.
"""

from __future__ import annotations

import ctypes
import itertools
import threading
from collections.abc import Callable, Hashable
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

# Distinct answers kept per call; enough that consecutive sweeps see different values.
CYCLE = 4
# Distinct argument sets kept per function; a caller passing ever-new arguments (timestamps)
# stops being cached instead of growing the table.
MAX_KEYS_PER_FUNCTION = 4096
_PASS_THROUGH = frozenset(
    {
        "nvmlInit",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlEventSetCreate",
        "nvmlEventSetFree",
        "nvmlEventSetWait",
        "nvmlEventSetWait_v2",
        "nvmlDeviceRegisterEvents",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmSampleGet",
        "nvmlGpmMigSampleGet",
    }
)
_UNCACHEABLE = object()
# A C function that does nothing worth measuring, called the way pynvml calls libnvidia-ml.
_FOREIGN_CALL = ctypes.CDLL(None).getppid


def _handle_types() -> tuple[type[ctypes._Pointer[Any]], ...]:
    return tuple(
        getattr(pynvml, name)
        for name in ("c_nvmlDevice_t", "c_nvmlGpuInstance_t", "c_nvmlComputeInstance_t")
        if hasattr(pynvml, name)
    )


_HANDLES = _handle_types()


def _key_of(value: Any) -> Hashable:
    """A hashable stand-in for one argument, or _UNCACHEABLE. Handles count by the address they
    hold (the bytes of the pointer, the cheapest way ctypes has to read it)."""
    if isinstance(value, _HANDLES):
        return bytes(value)
    if isinstance(value, list):
        value = tuple(value)
    try:
        hash(value)
    except TypeError:
        return _UNCACHEABLE
    return value


class _Replay:
    """Up to CYCLE remembered outcomes of one call, handed out in turn."""

    __slots__ = ("outcomes", "turn")

    def __init__(self) -> None:
        self.outcomes: list[tuple[bool, Any]] = []  # (raised?, value or NVML error code)
        self.turn = itertools.count()


def precomputed_api(sim: FakeNvml) -> Any:
    """An api object over `sim` that replays remembered answers (see the module's docstring)."""
    return sim.layered_api(PrecomputedAnswers(sim.gpm_sample).wrap)


class PrecomputedAnswers:
    def __init__(self, gpm_sample: Callable[[Any], Any]) -> None:
        # gpm_sample: the simulator's lookup from a GPM sample handle to what it recorded.
        self._gpm_sample = gpm_sample
        self._tables: dict[str, dict[Hashable, _Replay]] = {}
        self._lock = threading.Lock()

    def wrap(self, name: str, call: Callable) -> Callable:
        if name in _PASS_THROUGH:
            return call
        if name == "nvmlGpmMetricsGet":
            return self._wrap_gpm_metrics(call)
        table: dict[Hashable, _Replay] = self._tables.setdefault(name, {})

        def replayed(*args: Any, **kwargs: Any) -> Any:
            key = tuple(map(_key_of, args))
            if kwargs:
                key += tuple(sorted(kwargs.items()))
            if _UNCACHEABLE in key:
                return call(*args, **kwargs)
            replay = table.get(key)
            if replay is None:
                if len(table) >= MAX_KEYS_PER_FUNCTION:
                    return call(*args, **kwargs)
                with self._lock:
                    replay = table.setdefault(key, _Replay())
            return self._answer(replay, lambda: call(*args, **kwargs))

        replayed.__name__ = name
        return replayed

    @staticmethod
    def _answer(replay: _Replay, compute: Callable[[], Any]) -> Any:
        _FOREIGN_CALL()
        turn = next(replay.turn)
        if len(replay.outcomes) < CYCLE:
            try:
                value = compute()
            except pynvml.NVMLError as exc:
                replay.outcomes.append((True, exc.value))
                raise
            replay.outcomes.append((False, value))
            return value
        raised, value = replay.outcomes[turn % CYCLE]
        if raised:
            # A fresh instance each time: re-raising one object would grow its traceback.
            raise pynvml.NVMLError(value)
        return value

    def _wrap_gpm_metrics(self, call: Callable) -> Callable:
        table: dict[Hashable, _Replay] = {}

        def replayed(request: Any) -> Any:
            first = self._gpm_sample(request.sample1)
            count = request.numMetrics
            if not 0 < count <= pynvml.NVML_GPM_METRIC_MAX:
                return call(request)
            ids = tuple(request.metrics[i].metricId for i in range(count))
            key = (first.gpu, first.gpu_instance_id, ids)
            with self._lock:
                replay = table.setdefault(key, _Replay())
            # While learning, the call fills `request` itself; writing the same values back
            # keeps one path for both.
            values = self._answer(replay, lambda: (call(request), _metric_values(request))[1])
            for i, (status, value, names) in enumerate(values):
                metric = request.metrics[i]
                metric.nvmlReturn, metric.value = status, value
                if names is not None:
                    info = metric.metricInfo
                    info.shortName, info.longName, info.unit = names
            return request

        replayed.__name__ = "nvmlGpmMetricsGet"
        return replayed


def _metric_values(request: Any) -> tuple[tuple[int, float, tuple[Any, Any, Any] | None], ...]:
    values = []
    for i in range(request.numMetrics):
        metric = request.metrics[i]
        info = metric.metricInfo
        names = (info.shortName, info.longName, info.unit) if metric.nvmlReturn == 0 else None
        values.append((metric.nvmlReturn, metric.value, names))
    return tuple(values)

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

What the simulator's models still spend (learning each call's answers, the calls that pass
through, arguments that cannot be keyed) is its share, not the exporter's, yet it lands on the
calling thread. Rare calls make it large: the slow fields, the energy counter and GPM are asked a
few times a minute, so their CYCLE answers are still being learnt minutes into a run (on the
default node at a 5 s poll, 0.8 CPU-s/h over the 300 s after a 25 s warm-up, GPM metrics and
field batches most of it, where the whole exporter cost about 4). Each modelled call's
thread CPU is therefore added up (SimulatorCpu), and where BENCH_SIMULATOR_CPU_FILE names a file,
the running total is kept in it for the benchmark to take out of the process's CPU
(benchmarks/overhead.py). The real calls' charges are outside this layer and stay counted.
"""

from __future__ import annotations

import ctypes
import itertools
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Hashable
from pathlib import Path
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
# The file the simulator's CPU is kept in: nanoseconds as one little-endian unsigned 64-bit int.
SIMULATOR_CPU_VARIABLE = "BENCH_SIMULATOR_CPU_FILE"
_TOTAL = struct.Struct("<Q")


class SimulatorCpu:
    """The thread CPU spent inside the simulator's models, all threads together; kept in a
    memory-mapped file when one is named, so another process can read it at any moment without
    this one writing a file per call."""

    def __init__(self, path: str | None = None) -> None:
        self._nanoseconds = 0
        # By thread name, numbered names (a pool's workers) under their stem.
        self._by_thread: dict[str, int] = {}
        self._lock = threading.Lock()
        self._shared: mmap.mmap | None = None
        if path:
            with open(path, "w+b") as file:
                file.write(_TOTAL.pack(0))
                file.flush()
                self._shared = mmap.mmap(file.fileno(), _TOTAL.size)

    @property
    def seconds(self) -> float:
        return self._nanoseconds / 1e9

    def seconds_by_thread(self) -> dict[str, float]:
        with self._lock:
            return {name: ns / 1e9 for name, ns in self._by_thread.items()}

    def timed(self, call: Callable) -> Callable:
        """`call`, its thread CPU added to the total."""

        def modelled(*args: Any, **kwargs: Any) -> Any:
            started = time.thread_time_ns()
            try:
                return call(*args, **kwargs)
            finally:
                self.add(time.thread_time_ns() - started)

        modelled.__name__ = getattr(call, "__name__", "modelled")
        return modelled

    def add(self, nanoseconds: int) -> None:
        name = threading.current_thread().name
        thread = name.rstrip("0123456789").rstrip("-_") or name
        with self._lock:
            self._nanoseconds += nanoseconds
            self._by_thread[thread] = self._by_thread.get(thread, 0) + nanoseconds
            if self._shared is not None:
                _TOTAL.pack_into(self._shared, 0, self._nanoseconds)


def simulator_cpu_seconds(path: Path) -> float:
    """The total a participant keeps in `path` (0 before it has written one)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0.0
    return _TOTAL.unpack(data[: _TOTAL.size])[0] / 1e9 if len(data) >= _TOTAL.size else 0.0


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


def precomputed_api(sim: FakeNvml, simulator_cpu: SimulatorCpu | None = None) -> Any:
    """An api object over `sim` that replays remembered answers (see the module's docstring);
    the models' CPU goes to `simulator_cpu`, by default one kept where the environment says."""
    if simulator_cpu is None:
        simulator_cpu = SimulatorCpu(os.environ.get(SIMULATOR_CPU_VARIABLE))
    return sim.layered_api(PrecomputedAnswers(sim.gpm_sample, simulator_cpu).wrap)


class PrecomputedAnswers:
    def __init__(self, gpm_sample: Callable[[Any], Any], simulator_cpu: SimulatorCpu) -> None:
        # gpm_sample: the simulator's lookup from a GPM sample handle to what it recorded.
        self._gpm_sample = gpm_sample
        self._simulator_cpu = simulator_cpu
        self._tables: dict[str, dict[Hashable, _Replay]] = {}
        self._lock = threading.Lock()

    def wrap(self, name: str, call: Callable) -> Callable:
        # Every way below reaches the model through this one; a replayed answer does not.
        call = self._simulator_cpu.timed(call)
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
            # While learning, the call fills `request` itself and a copy is kept; a replay puts
            # the copy's bytes back in one C call, as the driver fills the structure, rather
            # than field by field in Python (about 25 µs a call, the driver's 0.8).
            saved = self._answer(replay, lambda: (call(request), _saved_metrics(request))[1])
            ctypes.memmove(
                ctypes.addressof(request.metrics), ctypes.addressof(saved), ctypes.sizeof(saved)
            )
            return request

        replayed.__name__ = "nvmlGpmMetricsGet"
        return replayed


def _saved_metrics(request: Any) -> Any:
    """The request's metrics as the call filled them, in an array of their own that holds the
    names' strings too: its bytes, pointers included, stay valid to copy into any request for as
    long as the array lives (the replay's table keeps it)."""
    count = request.numMetrics
    saved = (type(request.metrics)._type_ * count)()
    for i in range(count):
        source, target = request.metrics[i], saved[i]
        target.metricId, target.nvmlReturn = source.metricId, source.nvmlReturn
        target.value = source.value
        if source.nvmlReturn == pynvml.NVML_SUCCESS:
            names, copied = source.metricInfo, target.metricInfo
            copied.shortName, copied.longName, copied.unit = (
                names.shortName,
                names.longName,
                names.unit,
            )
    return saved

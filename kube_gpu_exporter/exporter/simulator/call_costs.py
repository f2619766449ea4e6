"""What each simulated NVML call costs the caller: CPU time and waiting, as a real GPU charged it.

A real NVML getter is a synchronous call into the driver: the calling thread spends the time on
the CPU, most of it in the kernel, with the GIL released (ctypes lets go of it around a foreign
call). The costs are far from uniform: most getters take 1-10 µs, a few take 40-90 µs, and the
total energy counter takes 4 ms of CPU per read (docs/nvml.md, 'Timing'). So a benchmark that
charges a flat cost per call misjudges an exporter in both directions; one run on a real H200 said
ours cost 1.6 times nvitop-exporter where the flat model had said 0.45.

The table is a real measurement (`measured/nvml-costs-*.yaml`, the schema the validation harness
writes); the rules for what it does not say are here:

- A call the table lists costs its `cpu_us` of CPU where that was measured, else its `wall_us`,
  all of it CPU: a getter does not sleep in the driver.
- Calls whose time is a wait the simulator models by behaviour cost nothing more here:
  `nvmlDeviceGetPcieThroughput` blocks for its sample window (`latency.pcie_window_ms`), and
  `nvmlEventSetWait*` until an event or the timeout.
- A call the table does not list costs what its closest measured relative does (ALIASES), else
  DEFAULT_CALL_US, about what most getters cost.
- `nvmlDeviceGetFieldValues` costs the sum of its fields' single-read costs (on the H200 a batch
  of 16 cost 3,454 µs against 3,438 µs for the same fields read one by one); a field the table does
  not list costs DEFAULT_FIELD_US.

The one table is the H200's and serves every model: Hopper boards are taken to cost what the H200
does, and the other architectures are assumed to, until a run on one of them says otherwise.

The table's microseconds are the measured host's. A faster or slower CPU runs the driver's code
faster or slower too, as it does the exporter's own Python, so the simulator charges the same
amount of work, not the same time: both hosts time one pure-Python reference workload
(`reference_us` in the table, `reference_workload` here), and a call is charged as the share of
that workload its cost was there (CpuBurner). Without the conversion, a development machine that
runs Python twice as fast as the measured host would make every NVML call look twice as heavy
against the exporter's own work.

The CPU is spent in one OpenSSL call without the GIL (CpuBurner), so, as with a real driver call,
other threads run meanwhile, and the time lands on the calling thread as CPU /proc sees. Costs
below CHARGE_FLOOR_US are not charged: the simulator's own path through a call costs about that
much even when it replays a remembered answer.
"""

from __future__ import annotations

import hashlib
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from kube_gpu_exporter.exporter import small_yaml

DEFAULT_CALL_US = 2.0
DEFAULT_FIELD_US = 3.0
CHARGE_FLOOR_US = 5.0
# Waits the simulator models by what the call does, not by charging.
MODELLED_WAITS = frozenset(
    {"nvmlDeviceGetPcieThroughput", "nvmlEventSetWait", "nvmlEventSetWait_v2"}
)
# Unmeasured calls and the measured call or field (an int) that does the same work.
ALIASES: Mapping[str, str | int] = {
    "nvmlDeviceGetMemoryInfo_v2": "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetCurrentClocksThrottleReasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlGpmMigSampleGet": "nvmlGpmSampleGet",
    "nvmlDeviceGetPcieReplayCounter": 94,
    "nvmlDeviceGetTotalEccErrors": 3,
    "nvmlDeviceGetRemappedRows": 142,
}
MEASURED_TABLE = "measured/nvml-costs-nvidia-h200.yaml"
# Distinct field requests remembered with their cost; a caller passing ever-new ones stops being
# cached instead of growing the table.
MAX_BATCHES = 1024


@dataclass(frozen=True, slots=True)
class Cost:
    cpu_us: float
    wait_us: float = 0.0

    @property
    def wall_us(self) -> float:
        return self.cpu_us + self.wait_us


FREE = Cost(0.0)


class CostModel:
    def __init__(self, table: Mapping[str, Any]) -> None:
        # The reference workload's CPU time on the measured host, µs (see CpuBurner).
        self.reference_us = float(table["reference_us"])
        self.model_name = str(table["model_name"])
        self.driver_version = str(table["driver_version"])
        self.source = str(table["source"])
        self.captured = str(table["captured"])
        self._calls = {name: _cost(entry) for name, entry in table["calls"].items()}
        self._fields = {int(fid): _cost(entry).cpu_us for fid, entry in table["fields"].items()}
        self._batches: dict[tuple[Any, ...], Cost] = {}

    def call(self, name: str) -> Cost:
        """One call of `name` (for nvmlDeviceGetFieldValues, see `fields`)."""
        if name in MODELLED_WAITS:
            return FREE
        found = self._calls.get(name)
        if found is not None:
            return found
        alias = ALIASES.get(name)
        if isinstance(alias, int):
            return Cost(self._fields.get(alias, DEFAULT_FIELD_US))
        if alias is not None:
            return self.call(alias)
        return Cost(DEFAULT_CALL_US)

    def fields(self, requested: Sequence[int | tuple[int, int]]) -> Cost:
        """One nvmlDeviceGetFieldValues call for these field ids or (id, scope) pairs."""
        key = tuple(requested)
        found = self._batches.get(key)
        if found is None:
            total = 0.0
            for entry in key:
                field_id = entry[0] if isinstance(entry, tuple) else entry
                total += self._fields.get(field_id, DEFAULT_FIELD_US)
            found = Cost(total)
            if len(self._batches) < MAX_BATCHES:
                self._batches[key] = found
        return found

    def of_call(self, name: str, args: Sequence[Any]) -> Cost:
        """One call of `name` with these arguments: a field-values call by its fields."""
        if name == "nvmlDeviceGetFieldValues" and len(args) > 1:
            return self.fields(args[1])
        return self.call(name)

    def describe(self) -> str:
        return f"{self.model_name}, driver {self.driver_version}, {self.source} ({self.captured})"


def _cost(entry: Mapping[str, Any]) -> Cost:
    cpu = entry.get("cpu_us")
    wall = float(entry["wall_us"])
    if cpu is None:
        return Cost(wall)
    return Cost(float(cpu), max(0.0, wall - float(cpu)))


def load_table(text: str) -> CostModel:
    return CostModel(small_yaml.load(text))


def _measured() -> CostModel:
    return load_table(
        resources.files("kube_gpu_exporter.exporter.simulator")
        .joinpath(MEASURED_TABLE)
        .read_text("utf-8")
    )


MEASURED = _measured()


def reference_workload() -> int:
    """A fixed piece of pure-Python work like an exporter's (tuples, dict updates, string
    formatting), timed on both hosts to compare their speed."""
    table: dict[tuple[str, int, str], float] = {}
    for i in range(2000):
        key = ("gpu", i % 64, f"field{i % 13}")
        table[key] = table.get(key, 0.0) + i * 0.5
    lines = [f'{name}{{gpu="{gpu}"}} {value:g}' for (name, gpu, _), value in table.items()]
    return len("\n".join(sorted(lines)))


def reference_us(repeats: int = 25) -> float:
    """The reference workload's CPU time on this host: the fastest of `repeats` runs, µs."""
    return _fastest_us(reference_workload, repeats)


def _fastest_us(work: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        work()
        best = min(best, time.thread_time() - started)
    return best * 1e6


def _pbkdf2(iterations: int) -> None:
    # One OpenSSL call, made by CPython without the GIL, whatever the iteration count.
    hashlib.pbkdf2_hmac("sha1", b"nvml", b"simulated cost", iterations)


class CpuBurner:
    """Spends what a call cost on the measured host as a fixed amount of work on this one.

    The work is PBKDF2 iterations: one OpenSSL call without the GIL, so other threads run
    meanwhile, as around a driver call (a loop of small hashes would take the GIL back after each,
    and every hand-off can keep this thread a switch interval behind a busy one), and no memory.
    How many iterations one measured-host microsecond is worth comes from the reference workload:
    timed here back to back with the iterations, their ratio does not depend on how fast this
    machine happens to run at that moment (a busy neighbour on a shared host slows both alike),
    and the table's `reference_us` says how long the workload took there. A later slowdown then
    stretches the charged calls as it stretches the exporter's own Python, as it would a driver.
    """

    _ITERATIONS = 2000

    def __init__(self, measured_reference_us: float) -> None:
        self._measured_reference_us = measured_reference_us
        self._per_us = 0.0  # iterations per measured-host µs
        self._lock = threading.Lock()

    def iterations_per_us(self) -> float:
        if not self._per_us:
            with self._lock:
                if not self._per_us:
                    self._per_us = self._calibrate()
        return self._per_us

    def spend(self, measured_us: float) -> None:
        _pbkdf2(max(1, round(measured_us * self.iterations_per_us())))

    def _calibrate(self) -> float:
        # Iterations the reference workload is worth: each pair timed back to back, the median
        # of the pairs.
        worth = []
        for _ in range(9):
            workload = _fastest_us(reference_workload, 3)
            hashing = _fastest_us(lambda: _pbkdf2(self._ITERATIONS), 3)
            worth.append(workload / hashing * self._ITERATIONS)
        return statistics.median(worth) / self._measured_reference_us

    def host_ratio(self) -> float:
        """This host's µs per measured-host µs, as of now (for reports)."""
        here = _fastest_us(lambda: _pbkdf2(self._ITERATIONS), 5) / self._ITERATIONS
        return here * self.iterations_per_us()


BURNER = CpuBurner(MEASURED.reference_us)


def charge(cost: Cost) -> None:
    """Spend `cost` (in the measured host's time) on this thread: its CPU as the same work here,
    its wait asleep."""
    if cost.cpu_us >= CHARGE_FLOOR_US:
        BURNER.spend(cost.cpu_us)
    if cost.wait_us >= CHARGE_FLOOR_US:
        time.sleep(cost.wait_us / 1e6)

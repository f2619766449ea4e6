"""The per-pod energy counters (docs/pods.md, 'Energy per pod'): each joined snapshot, every
GPU's energy increase since the previous one is split by the join's shares (energy_shares.py) and
added to its rows' sums. State kept between snapshots, so one ledger per exposition store, fed
each joined snapshot in order on the thread that renders it (kube_gpu_exporter/exporter/app.py),
never per scrape.

The counters start at 0 with the exporter and never decrease while it runs. A row not credited
for RETENTION_SECONDS (its container went, or its GPU stopped answering) is dropped, so its last
increase is scraped first and the memory stays bounded by what the node has held lately.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kube_gpu_exporter.exporter.attribution.model import (
    AttributedNode,
    EnergyShares,
    Labels,
    ValueRow,
)
from kube_gpu_exporter.exporter.snapshot import GpuReadings, GpuSnapshot, NodeSnapshot

# The part a failing ledger is counted under in render_errors_total.
POD_ENERGY = "pod energy"
# How long a row outlives its last credit: several scrape intervals, so that the increase a
# container made just before it went is scraped, and a short kubelet outage loses no series.
RETENTION_SECONDS = 300.0
_MJ_PER_J = 1000.0


@dataclass(slots=True)
class _Reading:
    """A GPU's energy figures at the last snapshot the ledger took from it."""

    at: float  # the snapshot's monotonic time
    energy_mj: int | None
    power_mw: float | None


@dataclass(slots=True)
class _Counter:
    joules: float
    credited_at: float


class PodEnergyLedger:
    """Cumulative joules per pod energy row. Not thread-safe: one caller at a time, as the
    exposition store's render lock ensures."""

    def __init__(self, retention_seconds: float = RETENTION_SECONDS) -> None:
        self._retention = retention_seconds
        self._readings: dict[str, _Reading] = {}
        self._counters: dict[Labels, _Counter] = {}
        # The rows in label order, kept until a row comes or goes.
        self._order: list[Labels] | None = None

    def attach(self, node: AttributedNode) -> AttributedNode:
        """`node` with its pod energy rows. A ledger that fails costs only its family: it is
        named in `failures`, and the renderer counts it, as for the join's own parts."""
        try:
            rows = self.record(node.snapshot, node.energy_shares)
        except Exception as exc:
            return replace(node, failures=(*node.failures, (POD_ENERGY, exc)))
        return replace(node, pod_energy=rows)

    def record(
        self, snapshot: NodeSnapshot, shares: tuple[EnergyShares, ...] | None
    ) -> tuple[ValueRow, ...] | None:
        """Credit each GPU's increase since the previous snapshot by `shares`; the counters
        after it, in label order (None while there are none). With `shares` None (the join
        could not say who uses what), nothing is credited and each GPU keeps its previous
        reading, so the next split covers the gap instead of charging it to nobody."""
        now = snapshot.monotonic_at
        if shares is not None:
            gpus = {gpu.identity.uuid: gpu for gpu in snapshot.gpus}
            for device in shares:
                gpu = gpus.get(device.uuid)
                increase_mj = None if gpu is None else self._increase(gpu, now)
                if increase_mj is not None:
                    self._credit(device.rows, increase_mj, now)
        self._expire(now)
        if not self._counters:
            return None
        if self._order is None:
            self._order = sorted(self._counters)
        counters = self._counters
        return tuple((labels, counters[labels].joules) for labels in self._order)

    def _increase(self, gpu: GpuSnapshot, now: float) -> float | None:
        """mJ the GPU used since the ledger's previous reading of it: 0 at the first one;
        None where it has no energy data at all (then it has no rows), or where this
        snapshot holds no fresh reading of it (a stale or failing GPU: the reading is kept,
        and the next fresh one covers the gap)."""
        readings = gpu.readings
        if gpu.stale or readings is None:
            return None
        if readings.energy_mj is None and readings.power_mw is None:
            self._readings.pop(gpu.identity.uuid, None)
            return None
        previous = self._readings.get(gpu.identity.uuid)
        self._readings[gpu.identity.uuid] = _Reading(now, readings.energy_mj, readings.power_mw)
        if previous is None or now <= previous.at:
            return 0.0
        return _between(previous, readings, now - previous.at)

    def _credit(self, rows: tuple[ValueRow, ...], increase_mj: float, now: float) -> None:
        joules = increase_mj / _MJ_PER_J
        if not math.isfinite(joules):
            return  # one bad step must not make the counters NaN or infinite for good
        counters = self._counters
        for labels, fraction in rows:
            if not math.isfinite(fraction):
                continue
            counter = counters.get(labels)
            if counter is None:
                counter = counters[labels] = _Counter(0.0, now)
                self._order = None
            counter.joules += joules * fraction
            counter.credited_at = now

    def _expire(self, now: float) -> None:
        oldest = now - self._retention
        gone = [labels for labels, c in self._counters.items() if c.credited_at < oldest]
        for labels in gone:
            del self._counters[labels]
        if gone:
            self._order = None
        for uuid in [u for u, r in self._readings.items() if r.at < oldest]:
            del self._readings[uuid]


def _between(previous: _Reading, readings: GpuReadings, seconds: float) -> float:
    """The increase between two readings of one GPU, in mJ.

    The GPU's exported energy counter where both readings have it: it is NVML's total energy
    counter, carried forward by board power between reads of it (nvml/energy_estimate.py), so
    its increase is what DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION shows and the rows add up to it. A
    counter that fell restarted (a driver reload): 0 for this step, the new value the next base.
    Without the counter, board power integrated over the snapshots' times (trapezoids, as
    energy_estimate.py does between reads). The step on which the counter appears counts 0: it
    has no earlier value to subtract."""
    if readings.energy_mj is not None:
        if previous.energy_mj is None:
            return 0.0
        return float(max(0, readings.energy_mj - previous.energy_mj))
    if readings.power_mw is not None and previous.power_mw is not None:
        return (readings.power_mw + previous.power_mw) / 2 * seconds
    return 0.0

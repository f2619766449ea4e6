"""What splitting each GPU's energy among its pods costs per sweep on a busy node: the join's
shares (kube_gpu_exporter/exporter/attribution/energy_shares.py) and the ledger's counters
(kube_gpu_exporter/exporter/attribution/pod_energy.py) over 8 GPUs x 50 processes, every GPU
time-sliced among containers of 5 processes each, all busy (the SM-share rule, the costliest), with
the shares moving from sweep to sweep as process accounting would report them.

    python -m benchmarks.pod_energy [--gpus 8] [--processes 50] [--sweeps 3000]

The inputs the join already has (holders from pod-resources, per-container use from process
accounting) are built once per variant, outside the timing: they are the join's other parts,
timed in the render. Each timed sweep is the split of one snapshot and the ledger's update.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from dataclasses import dataclass, replace

from benchmarks.process_accounting import PROCESSES_PER_CONTAINER, Node
from kube_gpu_exporter.exporter.attribution.energy_shares import energy_shares
from kube_gpu_exporter.exporter.attribution.model import EnergyShares
from kube_gpu_exporter.exporter.attribution.pod_energy import PodEnergyLedger
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.podresources.allocations import Allocation, PodResourcesSnapshot
from kube_gpu_exporter.exporter.podresources.attribution import Attribution, attribute
from kube_gpu_exporter.exporter.podresources.device_ids import parse_device_id
from kube_gpu_exporter.exporter.processes.pod_usage import DeviceKey, DeviceUsage, pod_usage
from kube_gpu_exporter.exporter.snapshot import (
    POWER_USAGE,
    TOTAL_ENERGY_CONSUMPTION,
    GpuIdentity,
    GpuProcess,
    GpuReadings,
    GpuSnapshot,
    NodeSnapshot,
)

LABELS = LabelConfig(node_name="bench-node")
# Distinct SM-share patterns the sweeps cycle through.
VARIANTS = 16
WARMUP_SWEEPS = 200
# A sweep's energy: about 700 W for a 1 s poll, in mJ.
SWEEP_MJ = 700_000


@dataclass(frozen=True, slots=True)
class Inputs:
    """One sweep's snapshot and what the join hands the split for it."""

    snapshot: NodeSnapshot
    attribution: Attribution
    usage: dict[DeviceKey, DeviceUsage]


def _uuid(gpu: int) -> str:
    return f"GPU-{gpu:08d}-0000-4000-8000-000000000000"


def _snapshot(node: Node, variant: int) -> NodeSnapshot:
    gpus = []
    for index in range(node.gpus):
        processes = tuple(
            GpuProcess(
                pid,
                None,
                1 << 30,
                (pid * 7 + variant * 13) % 20 + 1,  # every process busy, shares moving
                node.container_of(pid).owner,
            )
            for pid in node.pids(index)
        )
        gpus.append(
            GpuSnapshot(
                GpuIdentity(index, _uuid(index), "NVIDIA H100 80GB HBM3", f"0000:{index:02X}:00.0"),
                up=True,
                readings=GpuReadings.of({TOTAL_ENERGY_CONSUMPTION: 0, POWER_USAGE: 700_000}),
                processes=processes,
            )
        )
    return NodeSnapshot(0.0, 0.0, 0.01, True, "580.65.06", tuple(gpus))


def _holders(node: Node) -> PodResourcesSnapshot:
    """Each container holds a time-slicing replica of the GPU its processes run on."""
    allocations = []
    for index in range(node.gpus):
        pids = node.pids(index)
        for replica, pid in enumerate(pids[::PROCESSES_PER_CONTAINER]):
            c = node.container_of(pid)
            device = parse_device_id(f"{_uuid(index)}::{replica}")
            allocations.append(
                Allocation(c.namespace, c.pod, c.name, "nvidia.com/gpu.shared", device)
            )
    return PodResourcesSnapshot(tuple(allocations), None, (), 0.0)


def inputs(gpus: int, processes: int) -> list[Inputs]:
    node = Node(gpus, processes)
    pods = _holders(node)
    variants = []
    for variant in range(VARIANTS):
        snapshot = _snapshot(node, variant)
        attribution = attribute(snapshot, pods)
        variants.append(Inputs(snapshot, attribution, pod_usage(snapshot, attribution)))
    return variants


def _at(snapshot: NodeSnapshot, sweep: int) -> NodeSnapshot:
    """`snapshot` as sweep number `sweep`: its time, and each GPU's energy counter by then."""
    gpus = tuple(
        replace(g, readings=g.readings.with_values({TOTAL_ENERGY_CONSUMPTION: sweep * SWEEP_MJ}))
        for g in snapshot.gpus
        if g.readings is not None
    )
    return replace(snapshot, monotonic_at=float(sweep), gpus=gpus)


def measure(gpus: int = 8, processes: int = 50, sweeps: int = 3000) -> dict[str, float]:
    """Microseconds per sweep (mean, p50, p99; "shares" and "ledger" apart, means), and the
    rows' largest departure from the GPUs' own energy at the end, relative."""
    variants = inputs(gpus, processes)
    ledger = PodEnergyLedger()
    total: list[float] = []
    split: list[float] = []
    rows = None
    gc.collect()
    for sweep in range(WARMUP_SWEEPS + sweeps):
        given = variants[sweep % VARIANTS]
        snapshot = _at(given.snapshot, sweep)
        started = time.perf_counter()
        shares: tuple[EnergyShares, ...] = energy_shares(
            snapshot, given.attribution, given.usage, LABELS
        )
        shared = time.perf_counter()
        rows = ledger.record(snapshot, shares)
        ended = time.perf_counter()
        if sweep >= WARMUP_SWEEPS:
            total.append((ended - started) * 1e6)
            split.append((shared - started) * 1e6)
    if rows is None:
        raise RuntimeError("the ledger kept no counter: the figures would mean nothing")
    expected_j = (WARMUP_SWEEPS + sweeps - 1) * SWEEP_MJ / 1000
    per_gpu: dict[str, float] = {}
    for labels, joules in rows:
        uuid = dict(labels)["UUID"]
        per_gpu[uuid] = per_gpu.get(uuid, 0.0) + joules
    if len(per_gpu) != gpus:
        raise RuntimeError(f"{len(per_gpu)} GPUs have rows, {gpus} expected")
    ordered = sorted(total)
    return {
        "mean_us": statistics.fmean(total),
        "p50_us": ordered[len(ordered) // 2],
        "p99_us": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "shares_us": statistics.fmean(split),
        "ledger_us": statistics.fmean(total) - statistics.fmean(split),
        "rows": float(len(rows)),
        "worst_error": max(abs(j - expected_j) / expected_j for j in per_gpu.values()),
    }


def summary(gpus: int = 8, processes: int = 50, sweeps: int = 3000) -> str:
    """One line for the report: what the split costs per sweep, measured now."""
    f = measure(gpus, processes, sweeps)
    return (
        f"energy per pod, {gpus} GPUs x {processes} processes ({f['rows']:.0f} counters), "
        f"over {sweeps} sweeps: {f['mean_us']:.0f} µs per sweep on average (shares "
        f"{f['shares_us']:.0f} µs, ledger {f['ledger_us']:.0f} µs), p50 {f['p50_us']:.0f} µs, "
        f"p99 {f['p99_us']:.0f} µs; the rows kept each GPU's energy within "
        f"{f['worst_error']:.1e} of it"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pod_energy")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=50, help="per GPU")
    parser.add_argument("--sweeps", type=int, default=3000)
    args = parser.parse_args(argv)
    print(summary(args.gpus, args.processes, args.sweeps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

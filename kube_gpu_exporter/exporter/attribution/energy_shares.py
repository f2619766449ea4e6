"""How each GPU's energy is split among the containers that use or hold it, as of one snapshot
(docs/pods.md, 'Energy per pod'). A pure function of the snapshot, its holders (pod-resources and
DRA, podresources/attribution.py) and its per-container use (processes/pod_usage.py), computed in
the join; the ledger (pod_energy.py) applies these fractions to each energy increase.

A whole GPU:
- some process busy (an SM share above 0): in proportion to the processes' SM shares, summed per
  container; a process counted for no holder (a host tool, a pod that does not hold the GPU...)
  counts for the unattributed row, as in the per-pod usage families;
- none busy: evenly among the containers that hold it (time-slicing and DRA sharers included),
  since an idle GPU's power is the price of holding it;
- no holder: all of it to the unattributed row.

A MIG-enabled GPU: among its instances by their share of the GPU's activity, from GPM (each
instance's SM activity is relative to its own slices, so times its slice count), or by slice count
alone where GPM has no reading or every instance is idle (an estimate: idle power is not measured
per instance). Within an instance, evenly among its holders (NVML has no per-process SM share on
MIG), else to the instance's unattributed row. A MIG-enabled GPU with no instance gives its energy
to the GPU's own unattributed row. The slices no instance occupies are not charged apart: NVML's
slice total is not in the snapshot, so the instances present share the whole board.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from kube_gpu_exporter.exporter.attribution.devices import container_labels, host_labels
from kube_gpu_exporter.exporter.attribution.model import EnergyShares, Labels, ValueRow
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.podresources.attribution import Attribution, Holder
from kube_gpu_exporter.exporter.processes.pod_usage import (
    UNATTRIBUTED,
    ContainerKey,
    DeviceKey,
    DeviceUsage,
)
from kube_gpu_exporter.exporter.snapshot import GpuSnapshot, MigInstance, NodeSnapshot

# The part a failing split is counted under in render_errors_total.
ENERGY_SHARES = "energy shares"
# The rule that gave a GPU's split (EnergyShares.basis).
SM_SHARES = "sm_shares"
HOLDERS = "holders"
UNHELD = "unheld"
MIG_GPM = "mig_gpm"
MIG_SLICES = "mig_slices"
NO_INSTANCES = "no_instances"

# The GPU-instance part of a MIG profile name: "3g" of "3g.40gb" and of the compute-instance
# profile "1c.3g.40gb".
_SLICES = re.compile(r"(?:^|\.)(\d+)g\.")


def energy_shares(
    snapshot: NodeSnapshot,
    attribution: Attribution,
    usage: Mapping[DeviceKey, DeviceUsage],
    config: LabelConfig,
) -> tuple[EnergyShares, ...]:
    """The split of every answering GPU of `snapshot`; whether it has energy data is the
    ledger's to judge."""
    host = host_labels(config)
    shares: list[EnergyShares] = []
    for gpu in snapshot.gpus:
        if not gpu.up or not gpu.identity.uuid:
            continue
        if gpu.identity.mig_enabled:
            shares.append(_mig_gpu(gpu, attribution, host))
        else:
            use = usage.get((gpu.identity.uuid, None))
            shares.append(_whole_gpu(gpu, attribution, use, host))
    return tuple(shares)


def _whole_gpu(
    gpu: GpuSnapshot, attribution: Attribution, use: DeviceUsage | None, host: Labels
) -> EnergyShares:
    device = (("gpu", str(gpu.identity.index)), ("UUID", gpu.identity.uuid), *host)
    holders = _containers(attribution.for_device(gpu.identity.uuid, None))
    users = [] if use is None else [key for key in use.by_container if key != UNATTRIBUTED]
    # Every container that holds or uses the GPU has a row, busy or not.
    weights = dict.fromkeys([UNATTRIBUTED, *sorted({*holders, *users})], 0.0)
    busy = {} if use is None else {k: u.sm_pct for k, u in use.by_container.items() if u.sm_pct}
    if busy:
        basis = SM_SHARES
        for key, sm_pct in busy.items():
            weights[key] = float(sm_pct)
    elif holders:
        basis = HOLDERS
        for key in holders:
            weights[key] = 1.0
    else:
        basis = UNHELD
        weights[UNATTRIBUTED] = 1.0
    total = sum(weights.values())
    rows = tuple((container_labels(device, key), weight / total) for key, weight in weights.items())
    return EnergyShares(gpu.identity.uuid, rows, basis)


def _mig_gpu(gpu: GpuSnapshot, attribution: Attribution, host: Labels) -> EnergyShares:
    ident = gpu.identity
    board = (("gpu", str(ident.index)), ("UUID", ident.uuid))
    instances = gpu.mig_instances
    if not instances:
        rows = ((container_labels((*board, *host), UNATTRIBUTED), 1.0),)
        return EnergyShares(ident.uuid, rows, NO_INSTANCES)
    fractions, basis = _instance_fractions(gpu)
    out: list[ValueRow] = [(container_labels((*board, *host), UNATTRIBUTED), 0.0)]
    for inst, fraction in zip(instances, fractions, strict=True):
        device = (
            *board,
            ("GPU_I_PROFILE", inst.profile),
            ("GPU_I_ID", str(inst.gpu_instance_id)),
            *host,
        )
        holders = _containers(attribution.for_device(ident.uuid, inst.gpu_instance_id))
        out.append((container_labels(device, UNATTRIBUTED), 0.0 if holders else fraction))
        out.extend((container_labels(device, key), fraction / len(holders)) for key in holders)
    return EnergyShares(ident.uuid, tuple(out), basis)


def _instance_fractions(gpu: GpuSnapshot) -> tuple[list[float], str]:
    """Each instance's fraction of the GPU's energy, and the rule that gave it."""
    slices = [slice_count(inst) for inst in gpu.mig_instances]
    activity = [_activity(gpu, inst) for inst in gpu.mig_instances]
    if all(a is not None for a in activity):
        weights = [(a or 0.0) * s for a, s in zip(activity, slices, strict=True)]
        total = sum(weights)
        if total > 0:
            return [w / total for w in weights], MIG_GPM
    total_slices = sum(slices)
    return [s / total_slices for s in slices], MIG_SLICES


def _activity(gpu: GpuSnapshot, inst: MigInstance) -> float | None:
    """GPM's SM activity of the instance (graphics engine activity where SM has none), 0-1 of
    the instance's own slices; None without a GPM reading."""
    profiling = gpu.profiling_of(inst.gpu_instance_id)
    if profiling is None:
        return None
    active = profiling.sm_active if profiling.sm_active is not None else profiling.graphics_active
    if active is None or not math.isfinite(active):
        return None
    # A ratio of the instance's own time: anything outside 0-1 is rounding, or a bad sample.
    return min(1.0, max(0.0, active))


def slice_count(inst: MigInstance) -> int:
    """The GPU instance's compute slices, from its profile name; 1 where the name does not say."""
    match = _SLICES.search(inst.profile)
    return max(1, int(match.group(1))) if match else 1


def _containers(holders: Iterable[Holder]) -> list[ContainerKey]:
    """Each holding container once, in the attribution's order (a container holding several
    replicas or claims of one device is still one container)."""
    return list(dict.fromkeys((h.namespace, h.pod, h.container) for h in holders))

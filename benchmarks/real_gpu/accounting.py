"""Process accounting: does the exporter's per-process memory (`--collector.processes`) agree with
what NVML lists and nvidia-smi reports?

The harness runs the exporter with `--no-podresources`, so no process belongs to a pod: every
process of a GPU lands on that GPU's unattributed row of
`kube_gpu_exporter_pod_gpu_memory_used_bytes` (namespace, pod and container empty), the harness's
load generator with reason `host`. So, on a real GPU under load:

- the load generator's PID must be in NVML's process list of each GPU it loads, and
- where it is the only process on the GPU, that row must be within 5 % of the memory nvidia-smi
  reports for the PID (`--query-compute-apps`), or NVML's own figure where there is no
  nvidia-smi.

Under --simulate there is no load generator; the simulated node's own processes are the
reference instead: the row's process count must equal what the harness's simulator lists on the
GPU, and its memory must be within 5 % of their sum. The two simulators (the exporter's and the
harness's) are instances of one seeded fleet, with the same PIDs, whose clocks started apart.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.real_gpu import MIB, bus_id_key
from benchmarks.real_gpu.independent import GpuProcesses

MEMORY_FAMILY = "kube_gpu_exporter_pod_gpu_memory_used_bytes"
PROCESSES_FAMILY = "kube_gpu_exporter_pod_gpu_processes"
TOLERANCE = 0.05
SMI_QUERY = ("--query-compute-apps=gpu_bus_id,pid,used_memory", "--format=csv,noheader,nounits")


@dataclass(frozen=True, slots=True)
class UnattributedRow:
    memory_bytes: float | None
    processes: float | None


def unattributed_rows(exposition: str) -> dict[str, UnattributedRow]:
    """GPU UUID -> the whole GPU's unattributed row (MIG instances' rows are left out)."""
    memory: dict[str, float] = {}
    processes: dict[str, float] = {}
    wanted = {MEMORY_FAMILY: memory, PROCESSES_FAMILY: processes}
    for family in text_string_to_metric_families(exposition):
        into = wanted.get(family.name)
        if into is None:
            continue
        for sample in family.samples:
            labels = sample.labels
            if any(labels.get(k) for k in ("namespace", "pod", "container", "GPU_I_ID")):
                continue
            if labels.get("UUID"):
                into[labels["UUID"]] = float(sample.value)
    return {
        uuid: UnattributedRow(memory.get(uuid), processes.get(uuid))
        for uuid in memory.keys() | processes.keys()
    }


def parse_compute_apps(text: str) -> dict[tuple[str, int], float | None]:
    """(bus_id_key, pid) -> MiB from nvidia-smi's compute-apps CSV; None where it printed N/A."""
    apps: dict[tuple[str, int], float | None] = {}
    for row in csv.reader(io.StringIO(text)):
        cells = [cell.strip() for cell in row]
        if not cells or cells == [""]:
            continue
        if len(cells) != 3:
            raise ValueError(f"nvidia-smi compute-apps: unexpected row {row!r}")
        bus, pid, used = cells
        try:
            mib = float(used)
        except ValueError:
            mib = None  # "[N/A]": the driver keeps the figure from an unprivileged caller
        apps[(bus_id_key(bus), int(pid))] = mib
    return apps


@dataclass(frozen=True, slots=True)
class ProcessCheck:
    gpu: str
    pid: int | None
    # Whether NVML listed the load's PID on the GPU: None where that was not asked (simulated,
    # or the PID could not be told in this PID namespace).
    listed: bool | None
    exported_mib: float | None
    reference_mib: float | None
    reference: str  # where reference_mib came from
    ok: bool | None  # None: could not be judged, `note` says why
    note: str = ""


@dataclass(frozen=True, slots=True)
class Observation:
    """One snapshot's worth of what the check needs."""

    exposition: str
    nvml: Mapping[str, GpuProcesses]
    smi_apps: Mapping[tuple[str, int], float | None] | None  # None: nvidia-smi not read


def _within(exported_mib: float, reference_mib: float) -> bool:
    return abs(exported_mib - reference_mib) <= TOLERANCE * reference_mib


def _exported_mib(rows: Mapping[str, UnattributedRow], uuid: str | None) -> float | None:
    row = rows.get(uuid or "")
    if row is None or row.memory_bytes is None:
        return None
    return row.memory_bytes / MIB


def check_load(
    observation: Observation,
    load_pid: int,
    load_gpus: int,
    visible: frozenset[int] | None = None,
) -> list[ProcessCheck]:
    """One check per GPU with processes while the load runs on `load_gpus` GPUs, and a failed
    one if NVML shows the load on fewer. `visible` is the set of PIDs this PID namespace
    shows; None reads /proc."""
    rows = unattributed_rows(observation.exposition)
    checks = []
    refused = shown_on = 0
    for gpu, listed in sorted(observation.nvml.items()):
        if listed.error is not None:
            # Such a GPU can neither show the load nor miss it.
            refused += 1
            note = f"NVML refused the process list ({listed.error})"
            checks.append(ProcessCheck(gpu, load_pid, None, None, None, "-", None, note))
        elif listed.memory_by_pid:
            check = _check_gpu(observation, rows, gpu, listed, load_pid, visible)
            shown_on += check.listed is not False
            checks.append(check)
    missed = any(c.listed is False for c in checks)
    if shown_on < load_gpus - refused and not missed:
        note = f"the load runs on {load_gpus} GPU(s); NVML lists it on {shown_on}"
        checks.append(ProcessCheck("-", load_pid, False, None, None, "-", False, note))
    return checks


def _check_gpu(
    observation: Observation,
    rows: Mapping[str, UnattributedRow],
    gpu: str,
    listed: GpuProcesses,
    load_pid: int,
    visible: frozenset[int] | None,
) -> ProcessCheck:
    pids = listed.memory_by_pid
    exported = _exported_mib(rows, listed.uuid)
    if load_pid in pids:
        pid, found, note = load_pid, True, ""
    elif len(pids) == 1 and not _visible(next(iter(pids)), visible):
        # NVML names processes by the host's PIDs; in a container without the host's PID
        # namespace the load has another number here, and the one listed is not ours to see.
        pid, found = next(iter(pids)), None
        note = (
            f"the load is PID {load_pid} here; NVML lists only PID {pid}, which this PID "
            "namespace does not show (a container without the host's PID namespace?)"
        )
    else:
        note = f"load PID {load_pid} is not in NVML's list ({len(pids)} other process(es))"
        return ProcessCheck(gpu, load_pid, False, exported, None, "-", False, note)
    if len(pids) > 1:
        note = f"{len(pids) - 1} other process(es) on the GPU: the row is not the load's alone"
        return ProcessCheck(gpu, pid, found, exported, None, "-", None, note)
    reference, source = _reference_mib(observation, gpu, pid, pids[pid])
    if reference is None:
        return ProcessCheck(gpu, pid, found, exported, None, source, None, _join(note, source))
    if exported is None:
        note = _join(note, f"no unattributed row of {MEMORY_FAMILY}")
        return ProcessCheck(gpu, pid, found, None, reference, source, False, note)
    return ProcessCheck(
        gpu, pid, found, exported, reference, source, _within(exported, reference), note
    )


def _reference_mib(
    observation: Observation, gpu: str, pid: int, nvml_bytes: int | None
) -> tuple[float | None, str]:
    if observation.smi_apps is not None:
        if (gpu, pid) in observation.smi_apps:
            mib = observation.smi_apps[(gpu, pid)]
            return mib, "nvidia-smi" if mib is not None else "nvidia-smi printed N/A"
        return None, "nvidia-smi did not list the process"
    if nvml_bytes is None:
        return None, "NVML has no memory figure for the process"
    return nvml_bytes / MIB, "NVML (no nvidia-smi)"


def _visible(pid: int, visible: frozenset[int] | None) -> bool:
    return pid in visible if visible is not None else Path(f"/proc/{pid}").exists()


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def check_simulated(observation: Observation) -> list[ProcessCheck]:
    """Per whole GPU: the exporter's unattributed row against the harness simulator's list."""
    rows = unattributed_rows(observation.exposition)
    checks = []
    for gpu, listed in sorted(observation.nvml.items()):
        if listed.error is not None:
            continue  # a MIG-enabled parent: its processes are per instance
        memory = [m for m in listed.memory_by_pid.values() if m is not None]
        reference = sum(memory) / MIB
        row = rows.get(listed.uuid or "")
        source = f"simulator, {len(listed.memory_by_pid)} process(es)"
        if row is None or row.memory_bytes is None:
            note = f"no unattributed row of {MEMORY_FAMILY}"
            checks.append(ProcessCheck(gpu, None, None, None, reference, source, False, note))
            continue
        exported = row.memory_bytes / MIB
        count_ok = row.processes == len(listed.memory_by_pid)
        note = "" if count_ok else f"the row counts {_count(row.processes)} process(es)"
        ok = count_ok and _within(exported, reference)
        checks.append(ProcessCheck(gpu, None, None, exported, reference, source, ok, note))
    return checks


def _count(value: float | None) -> str:
    return "no" if value is None else f"{value:g}"


def merge(rounds: Sequence[Sequence[ProcessCheck]]) -> list[ProcessCheck]:
    """One row per GPU over all snapshots: the first failure (noting in how many), else the
    last judged row, else the last row."""
    grouped: dict[str, list[ProcessCheck]] = {}
    for checks in rounds:
        for check in checks:
            grouped.setdefault(check.gpu, []).append(check)
    merged = []
    for gpu in sorted(grouped):
        rows = grouped[gpu]
        failed = [c for c in rows if c.ok is False]
        if failed:
            note = _join(failed[0].note, f"failed in {len(failed)} of {len(rows)} snapshots")
            merged.append(replace(failed[0], note=note))
            continue
        judged = [c for c in rows if c.ok is not None]
        merged.append(judged[-1] if judged else rows[-1])
    return merged

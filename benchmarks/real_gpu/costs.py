"""The measured cost of each NVML call and field as a YAML table, `nvml-costs-<model>.yaml`: the
schema the simulator's cost model reads (kube_gpu_exporter/exporter/simulator/call_costs.py).

    model_name, pci_device_id, driver_version, source, captured
    reference_us: the simulator's reference workload on this host (call_costs.reference_us), so
                  that the simulator can convert these costs to the speed of the host it runs on
    calls:  function name -> {wall_us, cpu_us}            one entry per function
    fields: field id      -> {name, wall_us, cpu_us[, return]}

wall_us is the median of the timed calls, cpu_us the mean user + system CPU of the calling
thread; both rounded to 0.1 µs. `return` is given only where the field did not answer success.
A function called with several arguments (the clock domains, the PCIe directions) gets one
entry over all its calls. The field batch itself is not in `calls`: the model prices a batch as
the sum of its fields.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import yaml

from benchmarks.real_gpu.latency import FIELD_BATCH_FUNCTION, CallTiming, FieldTiming
from kube_gpu_exporter.exporter.simulator.call_costs import reference_us

HEADER_KEYS = ("model_name", "pci_device_id", "driver_version", "source", "captured")


def _us(value: float) -> float:
    return round(value, 1)


def call_entries(timings: Sequence[CallTiming]) -> dict[str, dict[str, float]]:
    by_function: dict[str, list[CallTiming]] = {}
    for timing in timings:
        if timing.wall_us and timing.function != FIELD_BATCH_FUNCTION:
            by_function.setdefault(timing.function, []).append(timing)
    entries: dict[str, dict[str, float]] = {}
    for function in sorted(by_function):
        parts = by_function[function]
        walls = [w for t in parts for w in t.wall_us]
        entry = {"wall_us": _us(statistics.median(walls))}
        cpu_total = sum((t.cpu_us or 0.0) * len(t.wall_us) for t in parts)
        if all(t.cpu_us is not None for t in parts):
            entry["cpu_us"] = _us(cpu_total / len(walls))
        entries[function] = entry
    return entries


def field_entries(timings: Sequence[FieldTiming]) -> dict[int, dict[str, Any]]:
    entries: dict[int, dict[str, Any]] = {}
    for timing in sorted(timings, key=lambda t: t.field_id):
        if timing.median_us is None:
            continue  # the call itself failed: nothing was timed
        entry: dict[str, Any] = {"name": timing.name, "wall_us": _us(timing.median_us)}
        if timing.cpu_us is not None:
            entry["cpu_us"] = _us(timing.cpu_us)
        if timing.nvml_return is not None:
            entry["return"] = timing.nvml_return
        entries[timing.field_id] = entry
    return entries


def cost_table(
    record: dict[str, Any],
    calls: Sequence[CallTiming],
    fields: Sequence[FieldTiming],
    host_reference_us: float | None = None,
) -> dict[str, Any]:
    """The table, its identity taken from the device record of the same run; the host's speed
    timed now unless given."""
    table: dict[str, Any] = {key: record[key] for key in HEADER_KEYS}
    table["reference_us"] = _us(reference_us() if host_reference_us is None else host_reference_us)
    table["calls"] = call_entries(calls)
    table["fields"] = field_entries(fields)
    return table


def cost_header(source: str, captured: str, prog: str) -> str:
    if source == "real":
        return (
            f"NVML call costs measured on a real GPU by `{prog}` on {captured}.\n"
            "wall_us: median per call; cpu_us: mean user + system CPU of the calling thread.\n"
            "Schema: benchmarks/real_gpu/costs.py; "
            "read by kube_gpu_exporter/exporter/simulator/call_costs.py."
        )
    return (
        f"NVML call costs of a SIMULATED GPU, written by `{prog} --simulate` on {captured}.\n"
        "They are the simulator's own charges read back; do not commit them as a model's costs."
    )


def cost_yaml(table: dict[str, Any], header: str) -> str:
    """The table under its header; the writer (report.write_outputs) checks it for identifiers."""
    # Flow style for the innermost mappings only, one call or field a line; wide enough that
    # none wraps.
    body = yaml.safe_dump(
        table, sort_keys=False, default_flow_style=None, allow_unicode=True, width=400
    )
    comments = "".join(f"# {line}\n" for line in header.splitlines())
    return comments + body

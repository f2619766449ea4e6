"""What NVML's GPU Performance Monitoring (GPM) reports for the simulated workload between two
samples: averages over the interval, built from the same utilization curve the classic NVML
calls return, so GPM's engine activity and `nvmlDeviceGetUtilizationRates` agree.

Per MIG instance the figures are relative to the instance's own slices. PCIe and NVLink traffic
belongs to the whole board, so a MIG sample answers NOT_SUPPORTED for those metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import pynvml

from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance

# Points averaged per interval: enough to follow the workload's slow wave and noise.
_STEPS = 16
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class PipeMix:
    """Share of busy time each unit is active, for one kind of work."""

    sm: float
    occupancy: float
    tensor: float
    hmma: float
    imma: float
    dfma: float
    fp64: float
    fp32: float
    fp16: float
    integer: float


PIPE_MIX: dict[str, PipeMix] = {
    # Mixed-precision training: tensor cores (HMMA) most of the time.
    "training": PipeMix(0.93, 0.55, 0.62, 0.58, 0.0, 0.0, 0.01, 0.18, 0.22, 0.08),
    # Inference: FP16/INT8 tensor work with more time spent outside the SMs.
    "inference": PipeMix(0.80, 0.35, 0.40, 0.22, 0.18, 0.0, 0.0, 0.12, 0.15, 0.10),
    # Batch simulation: FP64/FP32 math, hardly any tensor work.
    "batch": PipeMix(0.86, 0.45, 0.05, 0.02, 0.0, 0.03, 0.20, 0.45, 0.02, 0.12),
    "idle": PipeMix(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0),
}

M = pynvml
# metric id -> (PipeMix field or None for engine activity itself, short name, unit)
_ACTIVITY = {
    M.NVML_GPM_METRIC_GRAPHICS_UTIL: None,
    M.NVML_GPM_METRIC_SM_UTIL: "sm",
    M.NVML_GPM_METRIC_SM_OCCUPANCY: "occupancy",
    M.NVML_GPM_METRIC_INTEGER_UTIL: "integer",
    M.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor",
    M.NVML_GPM_METRIC_DFMA_TENSOR_UTIL: "dfma",
    M.NVML_GPM_METRIC_HMMA_TENSOR_UTIL: "hmma",
    M.NVML_GPM_METRIC_IMMA_TENSOR_UTIL: "imma",
    M.NVML_GPM_METRIC_FP64_UTIL: "fp64",
    M.NVML_GPM_METRIC_FP32_UTIL: "fp32",
    M.NVML_GPM_METRIC_FP16_UTIL: "fp16",
}
_BOARD_ONLY = {
    M.NVML_GPM_METRIC_PCIE_TX_PER_SEC,
    M.NVML_GPM_METRIC_PCIE_RX_PER_SEC,
    M.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC,
    M.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC,
}


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _instants(t1: float, t2: float) -> list[float]:
    step = (t2 - t1) / _STEPS
    return [t1 + step * (i + 0.5) for i in range(_STEPS)]


def metric_value(
    metric_id: int, gpu: SimGpu, instance: SimMigInstance | None, t1: float, t2: float
) -> float | None:
    """The metric over [t1, t2], in NVML's GPM units (percent, or MiB/s); None: NOT_SUPPORTED."""
    instants = _instants(t1, t2)
    if instance is not None:
        busy = _mean([gpu.instance_utilization(instance, t) for t in instants])
    else:
        busy = _mean([gpu.utilization(t) for t in instants])
    if metric_id in _ACTIVITY:
        field = _ACTIVITY[metric_id]
        share = 1.0 if field is None else getattr(PIPE_MIX[gpu.workload], field)
        return 100.0 * busy * share
    if metric_id == M.NVML_GPM_METRIC_DRAM_BW_UTIL:
        if instance is not None:
            return 100.0 * min(1.0, 0.55 * busy)
        return 100.0 * _mean([gpu.memory_copy_utilization(t) for t in instants])
    if metric_id not in _BOARD_ONLY or instance is not None:
        return None
    if metric_id in (M.NVML_GPM_METRIC_PCIE_TX_PER_SEC, M.NVML_GPM_METRIC_PCIE_RX_PER_SEC):
        transmit = metric_id == M.NVML_GPM_METRIC_PCIE_TX_PER_SEC
        return _mean([gpu.pcie_kbps(t, transmit) * 1024 / MIB for t in instants])
    if not gpu.model.nvlink_links:
        return None
    # The same load model the NVLink field counters integrate.
    transmit = metric_id == M.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
    return _mean([gpu.nvlink_kib_per_s(t, transmit) * 1024 / MIB for t in instants])


def metric_names(metric_id: int) -> tuple[bytes, bytes, bytes]:
    """(shortName, longName, unit) as NVML fills c_metricInfo_t."""
    name = _NAMES.get(metric_id, b"unknown")
    return name, name, b"MiB/sec" if metric_id in _BOARD_ONLY else b"%"


_NAMES: dict[int, bytes] = {
    metric_id: name.removeprefix("NVML_GPM_METRIC_").lower().encode()
    for name, metric_id in vars(pynvml).items()
    if name.startswith("NVML_GPM_METRIC_") and name != "NVML_GPM_METRIC_MAX"
}

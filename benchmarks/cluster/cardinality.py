"""Series per node: what the exporter serves, against what dcgm-exporter's default counter set
would serve for the same node.

dcgm-exporter's default CSV (etc/default-counters.csv; docs/dcgm-exporter-compatibility.md,
'Default counters') enables the fields below; it skips a field on an entity that has no value for
it. The exporter uses the same names and, on the simulated node, the same NOT_SUPPORTED matrix, so
its own series with these names are the series dcgm-exporter would export for that node.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# The active rows of dcgm-exporter's default CSV, as metric names. DCGM_FI_DEV_VGPU_LICENSE_STATUS
# is in the list too, but only vGPU guests have a value for it.
DCGM_DEFAULT_COUNTERS = frozenset(
    {
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_POWER_USAGE",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_DEC_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
    }
)


@dataclass(frozen=True)
class NodeCardinality:
    total: int  # everything the exporter serves for the node
    dcgm_default: int  # of which in dcgm-exporter's default set
    exporter_own: int  # kube_gpu_exporter_* (health, capacity, allocations)
    dcgm_extra: int  # DCGM-named series beyond the default set (ECC, clocks events, GPM pipes)


def metric_name(series: str) -> str:
    return series.split("{", 1)[0]


def node_cardinality(series: list[str]) -> NodeCardinality:
    names = Counter(metric_name(s) for s in series)
    default = sum(n for name, n in names.items() if name in DCGM_DEFAULT_COUNTERS)
    own = sum(n for name, n in names.items() if name.startswith("kube_gpu_exporter_"))
    return NodeCardinality(
        total=len(series),
        dcgm_default=default,
        exporter_own=own,
        dcgm_extra=len(series) - default - own,
    )

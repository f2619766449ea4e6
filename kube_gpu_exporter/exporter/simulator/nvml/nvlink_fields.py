"""The NVLink error, C2C and recovery-action field values, and nvmlDeviceGetGpuFabricInfoV, as
the driver answers them on each kind of board (docs/nvml.md, 'NOT_SUPPORTED matrix'):

- the classic NVLink error counters (per-link ids for links 0-11, and a total) on any board with
  NVLink; NOT_SUPPORTED for a link the board lacks, and on a board without NVLink;
- the Blackwell NVML_FI_DEV_NVLINK_COUNT_* family, one link per scopeId, on Blackwell only;
  INVALID_ARGUMENT for a scopeId past the board's links;
- the C2C fields only on a Grace superchip's GPU;
- the recovery action on every board of a driver that knows the field;
- the fabric on a fabric-capable board that a fabric manager registered.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter import fabric_health
from kube_gpu_exporter.exporter.simulator.nvlink_health import CLASSIC_KINDS
from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu

# Drivers from this branch answer NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; older ones do not know the
# field (docs/nvml.md, 'Fabric, NVLink errors, C2C and the recovery action': a chosen branch).
RECOVERY_ACTION_DRIVER = 570

_CLASSIC_NAMES = {
    "crc_flit": "CRC_FLIT",
    "crc_data": "CRC_DATA",
    "replay": "REPLAY",
    "recovery": "RECOVERY",
}


def _classic_ids() -> dict[int, tuple[str, int | None]]:
    """NVML field id -> (kind, link), link None for the total over every link."""
    ids: dict[int, tuple[str, int | None]] = {}
    for kind in CLASSIC_KINDS:
        stem = f"NVML_FI_DEV_NVLINK_{_CLASSIC_NAMES[kind]}_ERROR_COUNT_"
        ids[getattr(pynvml, stem + "TOTAL")] = (kind, None)
        for link in range(12):
            ids[getattr(pynvml, f"{stem}L{link}")] = (kind, link)
    return ids


CLASSIC_FIELDS: Mapping[int, tuple[str, int | None]] = MappingProxyType(_classic_ids())

_C = "NVML_FI_DEV_NVLINK_COUNT_"
# NVML_FI_DEV_NVLINK_COUNT_* error fields -> the simulator's counter kind.
COUNT_ERROR_FIELDS: Mapping[int, str] = MappingProxyType(
    {
        getattr(pynvml, _C + "MALFORMED_PACKET_ERRORS"): "malformed_packet",
        getattr(pynvml, _C + "BUFFER_OVERRUN_ERRORS"): "buffer_overrun",
        getattr(pynvml, _C + "RCV_ERRORS"): "rx",
        getattr(pynvml, _C + "RCV_REMOTE_ERRORS"): "rx_remote",
        getattr(pynvml, _C + "RCV_GENERAL_ERRORS"): "rx_general",
        getattr(pynvml, _C + "LOCAL_LINK_INTEGRITY_ERRORS"): "local_link_integrity",
        getattr(pynvml, _C + "XMIT_DISCARDS"): "tx_discards",
        getattr(pynvml, _C + "LINK_RECOVERY_SUCCESSFUL_EVENTS"): "link_recovery_successful",
        getattr(pynvml, _C + "LINK_RECOVERY_FAILED_EVENTS"): "link_recovery_failed",
        getattr(pynvml, _C + "SYMBOL_ERRORS"): "symbol",
        getattr(pynvml, _C + "EFFECTIVE_ERRORS"): "effective",
    }
)
# The traffic fields of the family, answered from the link's data counters: (transmit, bytes).
COUNT_TRAFFIC_FIELDS: Mapping[int, tuple[bool, bool]] = MappingProxyType(
    {
        getattr(pynvml, _C + "XMIT_PACKETS"): (True, False),
        getattr(pynvml, _C + "XMIT_BYTES"): (True, True),
        getattr(pynvml, _C + "RCV_PACKETS"): (False, False),
        getattr(pynvml, _C + "RCV_BYTES"): (False, True),
    }
)
# The simulator's packets carry this many bytes each, header and payload (a model, not a fact).
PACKET_BYTES = 256
C2C_FIELDS = frozenset(
    {
        pynvml.NVML_FI_DEV_C2C_LINK_COUNT,
        pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS,
        pynvml.NVML_FI_DEV_C2C_LINK_GET_MAX_BW,
    }
)
# Per C2C link, MB/s: the simulator's choice (docs/nvml.md, 'Fabric, NVLink errors, C2C and
# the recovery action').
C2C_LINK_MAX_MB_S = 45_000
RECOVERY_ACTION = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION

FIELD_IDS = frozenset(
    {*CLASSIC_FIELDS, *COUNT_ERROR_FIELDS, *COUNT_TRAFFIC_FIELDS, *C2C_FIELDS, RECOVERY_ACTION}
)


def health_field(gpu: SimGpu, field_id: int, scope: int, t: float, driver_major: int) -> int:
    """The value of one of FIELD_IDS; NVMLError where the board does not answer it."""
    health = gpu.nvlink_health
    links = gpu.model.nvlink_links
    if field_id == RECOVERY_ACTION:
        if driver_major < RECOVERY_ACTION_DRIVER:
            raise pynvml.NVMLError_NotSupported()
        return health.recovery_action
    if field_id in C2C_FIELDS:
        if not gpu.model.c2c_links:
            raise pynvml.NVMLError_NotSupported()
        if field_id == pynvml.NVML_FI_DEV_C2C_LINK_COUNT:
            return gpu.model.c2c_links
        if field_id == pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS:
            return 1  # active
        return C2C_LINK_MAX_MB_S
    if not links:
        raise pynvml.NVMLError_NotSupported()
    classic = CLASSIC_FIELDS.get(field_id)
    if classic is not None:
        kind, link = classic
        if link is None:
            return health.total(kind)
        if link >= links:
            raise pynvml.NVMLError_NotSupported()
        return health.count(kind, link)
    # The Blackwell family: one link per scopeId.
    if not gpu.model.nvlink_counts:
        raise pynvml.NVMLError_NotSupported()
    if scope >= links:
        raise pynvml.NVMLError_InvalidArgument()
    kind_name = COUNT_ERROR_FIELDS.get(field_id)
    if kind_name is not None:
        return health.count(kind_name, scope)
    transmit, in_bytes = COUNT_TRAFFIC_FIELDS[field_id]
    data = gpu.nvlink_kib(t, scope, transmit) * 1024
    return data if in_bytes else data // PACKET_BYTES


_S = "NVML_GPU_FABRIC_HEALTH_SUMMARY_"


def health_summary(mask: int) -> int:
    """The summary a v3 fabric struct carries: unhealthy when any condition is true, limited
    capacity when only the bandwidth is degraded, else healthy."""
    true_ones = {f.name for f in fabric_health.FIELDS if f.holds(mask)}
    if not true_ones:
        return int(getattr(pynvml, _S + "HEALTHY"))
    if true_ones == {"degraded_bandwidth"}:
        return int(getattr(pynvml, _S + "LIMITED_CAPACITY"))
    return int(getattr(pynvml, _S + "UNHEALTHY"))


class FabricCalls(NvmlCore):
    @nvml_call()
    def nvmlDeviceGetGpuFabricInfoV(self, gpu: SimGpu, instance: None, info: Any) -> int:
        fabric = gpu.nvlink_health.fabric
        if fabric is None:
            raise pynvml.NVMLError_NotSupported()
        with gpu.lock:
            for i, byte in enumerate(fabric.cluster_uuid):
                info.clusterUuid[i] = byte
            info.cliqueId = fabric.clique_id
            info.state = fabric.state
            info.status = fabric.status
            info.healthMask = fabric.health_mask
            if hasattr(info, "healthSummary"):
                info.healthSummary = health_summary(fabric.health_mask)
        return int(pynvml.NVML_SUCCESS)

"""The --collectors row of dcgm-exporter's DCGM_EXP_P2P_STATUS, and NVML's P2P status codes.

The family is one series per ordered pair of GPUs (a GPU and a peer), valued with NVML's
nvmlGpuP2PStatus_t for peer-to-peer over NVLink (nvmlDeviceGetP2PStatus with
NVML_P2P_CAPS_INDEX_NVLINK), labelled with dcgm-exporter's word for it. DCGM passes NVML's codes
through, so value and word agree with dcgm-exporter's 0..6. Read by
kube_gpu_exporter/exporter/nvml/p2p_status.py only when a --collectors file lists the family.
"""

from __future__ import annotations

from types import MappingProxyType

import pynvml

from kube_gpu_exporter.exporter.fields.dcgm_catalogue import P2P_STATUS
from kube_gpu_exporter.exporter.fields.model import Cadence, Computed, DcgmField, Scope

P2P_STATUS_ROW = DcgmField(
    name=P2P_STATUS,
    field_id=0,
    source=Computed(
        "`nvmlDeviceGetP2PStatus(gpu, peer, NVML_P2P_CAPS_INDEX_NVLINK)` for every ordered pair "
        "of GPUs, at start and every P2P_INTERVAL_SECONDS"
    ),
    native_unit="count",
    unit="count",
    kind="gauge",
    help="P2P NvLink status",
    scope=Scope.GPU,
    cadence=Cadence.SAMPLER,
    default=False,
)

# NVML_P2P_STATUS_* (the installed nvidia-ml-py's values) -> dcgm-exporter's link_status word.
# pynvml also names 1 NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED, NVML's own misspelling, kept as an
# alias: the value is the same.
LINK_STATUS = MappingProxyType(
    {
        pynvml.NVML_P2P_STATUS_OK: "OK",
        pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED: "ChipsetNotSupported",
        pynvml.NVML_P2P_STATUS_GPU_NOT_SUPPORTED: "GPUNotSupported",
        pynvml.NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED: "TopologyNotSupported",
        pynvml.NVML_P2P_STATUS_DISABLED_BY_REGKEY: "DisabledByRegKey",
        pynvml.NVML_P2P_STATUS_NOT_SUPPORTED: "NotSupported",
        pynvml.NVML_P2P_STATUS_UNKNOWN: "Unknown",
    }
)
UNKNOWN = pynvml.NVML_P2P_STATUS_UNKNOWN


def link_status(code: int) -> tuple[int, str]:
    """The value and word for an NVML answer; a code newer than this table reads as Unknown,
    as dcgm-exporter maps it."""
    return (code, LINK_STATUS[code]) if code in LINK_STATUS else (UNKNOWN, LINK_STATUS[UNKNOWN])

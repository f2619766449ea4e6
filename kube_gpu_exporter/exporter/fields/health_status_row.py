"""The --collectors row of dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS, which the health verdict
(kube_gpu_exporter/exporter/health/) feeds. It is not in the field table because it is computed from
the verdict, not read from NVML; collectors_file looks it up beside the table's rows, as it does the
P2P status row."""

from __future__ import annotations

from types import MappingProxyType

from kube_gpu_exporter.exporter.fields.dcgm_catalogue import GPU_HEALTH_STATUS
from kube_gpu_exporter.exporter.fields.model import Cadence, Computed, DcgmField, Scope

GPU_HEALTH_STATUS_ROW = DcgmField(
    name=GPU_HEALTH_STATUS,
    field_id=0,
    source=Computed(
        "the GPU health verdict (kube_gpu_exporter/exporter/health/), one series per health watch"
    ),
    native_unit="count",
    unit="count",
    kind="counter",
    help="DCGM reported health status",
    scope=Scope.GPU,
    cadence=Cadence.EVENTS,
    default=False,
)

HEALTH_ROWS = MappingProxyType({GPU_HEALTH_STATUS_ROW.name: GPU_HEALTH_STATUS_ROW})

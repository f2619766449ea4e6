"""nvmlDeviceGetFieldValues: the board counters NVML serves by field id, answered from the field
table's models (field_models.py) and, for board power and NVLink, here."""

from __future__ import annotations

from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.nvml.field_models import BY_FIELD_ID
from kube_gpu_exporter.exporter.simulator.nvml.nvlink_fields import FIELD_IDS as HEALTH_FIELD_IDS
from kube_gpu_exporter.exporter.simulator.nvml.nvlink_fields import health_field
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance

# Board power fields (nvml.h): 185 the 1 s average, 186 the instantaneous draw.
_FIELD_POWER_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)
_FIELD_POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)


class Unsupported(Exception):
    """A field this board does not serve: NOT_SUPPORTED in its entry, not a failed call."""


class FieldCalls(NvmlCore):
    @nvml_call(on_mig="ok")
    def nvmlDeviceGetFieldValues(
        self, gpu: SimGpu, instance: SimMigInstance | None, field_ids: list[Any]
    ) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        t = self.now()
        stamp = self.timestamp_us()
        for i, requested in enumerate(field_ids):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            entry = values[i]
            entry.fieldId, entry.scopeId, entry.timestamp = field_id, scope, stamp
            try:
                if instance is not None:
                    raise Unsupported  # board counters are not served per MIG device
                value = self._field(gpu, field_id, scope, t)
            except Unsupported:
                entry.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
                continue
            except pynvml.NVMLError as exc:
                entry.nvmlReturn = exc.value
                continue
            entry.nvmlReturn = pynvml.NVML_SUCCESS
            if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                entry.value.uiVal = value
            else:
                entry.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                entry.value.ullVal = value
        return values

    def _field(self, gpu: SimGpu, field_id: int, scope: int, t: float) -> int:
        model = BY_FIELD_ID.get(field_id)
        if model is not None:
            return model(gpu, t)
        if field_id in HEALTH_FIELD_IDS:
            return health_field(gpu, field_id, scope, t, self.fleet.driver_major)
        if field_id == _FIELD_POWER_INSTANT:
            return gpu.reported_power_mw(t, averaged=False)
        if field_id == _FIELD_POWER_AVERAGE:
            if not gpu.model.averaged_power:
                raise Unsupported
            return gpu.reported_power_mw(t, averaged=True)
        if field_id == pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT:
            if not gpu.model.nvlink_links:
                raise Unsupported
            return gpu.model.nvlink_links
        if field_id in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            if not gpu.model.nvlink_links:
                raise Unsupported
            if scope >= gpu.model.nvlink_links:
                raise pynvml.NVMLError_InvalidArgument()
            return gpu.nvlink_kib(
                t, scope, field_id == pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
            )
        raise Unsupported

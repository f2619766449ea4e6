"""nvmlDeviceGetFieldValues: the board counters NVML serves by field id."""

from __future__ import annotations

from typing import Any

import pynvml

from exporter.simulator.nvml.core import NvmlCore, nvml_call
from exporter.simulator.nvml.reliability import ecc_count, remapped_rows
from exporter.simulator.sim_gpu import SimGpu, SimMigInstance

# Board power fields (nvml.h): 185 the 1 s average, 186 the instantaneous draw.
_FIELD_POWER_AVERAGE = getattr(pynvml, "NVML_FI_DEV_POWER_AVERAGE", 185)
_FIELD_POWER_INSTANT = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", 186)
_FIELD_ECC = {
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: "sbe_volatile",
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: "dbe_volatile",
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: "sbe_aggregate",
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: "dbe_aggregate",
}


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
        if field_id in _FIELD_ECC:
            try:
                return ecc_count(gpu, _FIELD_ECC[field_id])
            except pynvml.NVMLError_NotSupported:
                raise Unsupported from None
        if field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
            if not gpu.model.hbm:
                raise Unsupported
            return gpu.memory_temperature_c(t)
        if field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return gpu.energy_mj(t)
        if field_id == pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER:
            return gpu.pcie_replays
        if field_id == _FIELD_POWER_INSTANT:
            return gpu.power_mw(t)
        if field_id == _FIELD_POWER_AVERAGE:
            if not gpu.model.averaged_power:
                raise Unsupported
            return gpu.power_average_mw(t)
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
        remap_fields = (
            pynvml.NVML_FI_DEV_REMAPPED_COR,
            pynvml.NVML_FI_DEV_REMAPPED_UNC,
            pynvml.NVML_FI_DEV_REMAPPED_PENDING,
            pynvml.NVML_FI_DEV_REMAPPED_FAILURE,
        )
        if field_id in remap_fields:
            try:
                return remapped_rows(gpu)[remap_fields.index(field_id)]
            except pynvml.NVMLError_NotSupported:
                raise Unsupported from None
        raise Unsupported

"""The simulated board's answer for each DCGM field the table reads through a field value or a
plain getter: one model entry per field, keyed by the field's DCGM name.

`nvmlDeviceGetFieldValues` (fields.py) answers a field id from the table row that names it, and
`ModelledGetters` answers each plain getter a row names (with the row's arguments) from that row's
model. A model raises NVMLError_NotSupported where the board lacks the field; the field-value batch
turns that into the entry's return code, as NVML does. Calls that answer several fields at once
(utilization, memory, clocks, the PCIe sampler) stay hand-written in sensors.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import pynvml

from kube_gpu_exporter.exporter.fields.model import FieldValue, Getter
from kube_gpu_exporter.exporter.fields.table import BY_NAME, GPU_FIELDS
from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.nvml.reliability import (
    ecc_count,
    remapped_rows,
    retired_pages,
)
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu
from kube_gpu_exporter.exporter.simulator.violations import POLICIES

# (board, simulated time) -> the field's value in its native unit.
FieldModel = Callable[[SimGpu, float], int]


def _hbm_only(gpu: SimGpu, t: float) -> int:
    if not gpu.model.hbm:
        raise pynvml.NVMLError_NotSupported()
    return gpu.memory_temperature_c(t)


def _passively_cooled(gpu: SimGpu, t: float) -> int:
    # Every simulated board is a passively cooled data-centre part, whose fans belong to the
    # server: NVML answers NOT_SUPPORTED (the H200's `nvidia-smi -q` says "Fan Speed : N/A").
    raise pynvml.NVMLError_NotSupported()


def _violation(policy: str) -> FieldModel:
    return lambda gpu, t: gpu.violation_ns(policy, t)


MODELS: Mapping[str, FieldModel] = MappingProxyType(
    {
        "DCGM_FI_DEV_GPU_TEMP": lambda gpu, t: gpu.temperature_c(t),
        "DCGM_FI_DEV_MEMORY_TEMP": _hbm_only,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": lambda gpu, t: gpu.power_limit_mw(),
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": lambda gpu, t: gpu.power_limit_mw(),
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": lambda gpu, t: gpu.energy_mj(t),
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": lambda gpu, t: gpu.pcie_replays,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": lambda gpu, t: ecc_count(gpu, "sbe_volatile"),
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": lambda gpu, t: ecc_count(gpu, "dbe_volatile"),
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": lambda gpu, t: ecc_count(gpu, "sbe_aggregate"),
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": lambda gpu, t: ecc_count(gpu, "dbe_aggregate"),
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": lambda gpu, t: remapped_rows(gpu)[0],
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": lambda gpu, t: remapped_rows(gpu)[1],
        "DCGM_FI_DEV_ROW_REMAP_PENDING": lambda gpu, t: remapped_rows(gpu)[2],
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": lambda gpu, t: remapped_rows(gpu)[3],
        "DCGM_FI_DEV_FAN_SPEED": _passively_cooled,
        # DCGM_FI_DEV_POWER_VIOLATION ... DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION.
        **{f"DCGM_FI_DEV_{p.upper()}_VIOLATION": _violation(p) for p in POLICIES},
        "DCGM_FI_DEV_RETIRED_SBE": lambda gpu, t: retired_pages(gpu)[0],
        "DCGM_FI_DEV_RETIRED_DBE": lambda gpu, t: retired_pages(gpu)[1],
        "DCGM_FI_DEV_RETIRED_PENDING": lambda gpu, t: retired_pages(gpu)[2],
    }
)

# NVML field id -> model, for the rows read as field values.
BY_FIELD_ID: Mapping[int, FieldModel] = MappingProxyType(
    {
        BY_NAME[name].source.nvml_field_id: model  # type: ignore[union-attr]
        for name, model in MODELS.items()
        if isinstance(BY_NAME[name].source, FieldValue)
    }
)


def _getter_stand_ins() -> dict[str, Any]:
    """One nvml_call stand-in per plain getter the modelled rows name: it finds the row by the
    call's arguments and answers from its model."""
    by_function: dict[str, dict[tuple[Any, ...], FieldModel]] = {}
    for row in GPU_FIELDS:
        getter = row.source
        if not isinstance(getter, Getter) or row.name not in MODELS:
            continue
        if len(getter.functions) != 1 or getter.pick is not None or getter.kwargs:
            raise ValueError(f"{row.name}: a modelled getter must be one plain call")
        by_function.setdefault(getter.functions[0], {})[getter.args] = MODELS[row.name]
    stand_ins: dict[str, Any] = {}
    for function, models in by_function.items():

        def stand_in(
            self: NvmlCore,
            gpu: SimGpu,
            instance: None,
            *args: Any,
            _models: dict[tuple[Any, ...], FieldModel] = models,
        ) -> int:
            model = _models.get(tuple(args))
            if model is None:
                raise pynvml.NVMLError_InvalidArgument()
            return model(gpu, self.now())

        stand_in.__name__ = function
        stand_ins[function] = nvml_call()(stand_in)
    return stand_ins


class ModelledGetters(NvmlCore):
    """The plain getters of the modelled rows, built from the table when this module loads: a row
    read by a plain getter needs no method of its own."""


for _function, _stand_in in _getter_stand_ins().items():
    setattr(ModelledGetters, _function, _stand_in)

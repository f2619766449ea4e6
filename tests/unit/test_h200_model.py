"""The simulated H200 answers what the committed device record says.

Expected figures are read from benchmarks/results/device-record-nvidia-h200.yaml (written from
public specifications until a real run replaces it), never from the simulator's own tables, so a
real capture that disagrees with the model fails here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from benchmarks.real_gpu.latency import gpm_pair
from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetError, FleetSpec
from kube_gpu_exporter.exporter.simulator.gpu_models import find_model
from kube_gpu_exporter.exporter.snapshot import GpuIdentity
from tests.conftest import fleet_from_yaml

RECORD_PATH = (
    Path(__file__).resolve().parents[2] / "benchmarks/results/device-record-nvidia-h200.yaml"
)
MODEL_KEY = "H200-141GB-HBM3e"
MIB = 2**20
MEMORY_SLICES = 8
# NVML_GPU_INSTANCE_PROFILE_* enum indexes from pynvml, not from the simulator.
PROFILE_ENUMS = tuple(
    getattr(pynvml, f"NVML_GPU_INSTANCE_PROFILE_{suffix}")
    for suffix in (
        "1_SLICE",
        "1_SLICE_REV1",
        "1_SLICE_REV2",
        "2_SLICE",
        "2_SLICE_REV1",
        "3_SLICE",
        "4_SLICE",
        "6_SLICE",
        "7_SLICE",
        "8_SLICE",
    )
)
# Layouts that use all seven compute slices of the board, as mig-parted would ask for them.
FULL_LAYOUTS = [
    ["1g.18gb"] * 7,
    ["1g.18gb+me"] + ["1g.18gb"] * 6,
    ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"],
    ["4g.71gb", "3g.71gb"],
    ["2g.35gb", "2g.35gb", "2g.35gb", "1g.18gb"],
    ["1g.35gb", "1g.35gb", "1g.35gb", "1g.35gb"],
    ["7g.141gb"],
]
MakeSim = Callable[[FleetSpec | None], FakeNvml]


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    loaded = small_yaml.load(small_yaml.read_text(RECORD_PATH, 64 * 1024))
    assert isinstance(loaded, dict)
    return loaded


def h200_fleet(record: dict[str, Any], mig: list[str] | None = None) -> FleetSpec:
    extra = "" if mig is None else f", mig: [{', '.join(mig)}]"
    return fleet_from_yaml(
        f'driver_version: "{record["driver_version"]}"\ngpus:\n  - {{model: {MODEL_KEY}{extra}}}\n'
    )


def nvml_error_value(name: str) -> int:
    value = getattr(pynvml, f"NVML_ERROR_{name}", None)
    assert isinstance(value, int), f"the record names an unknown NVML error {name!r}"
    return value


def test_record_is_the_h200_and_free_of_identifiers(record: dict[str, Any]) -> None:
    assert record["source"] in {"spec", "real"}
    assert record["model_name"] == "NVIDIA H200"
    text = RECORD_PATH.read_text()
    for marker in ("GPU-", "MIG-", "serial", "uuid", "board_part"):
        assert marker not in text


def test_fleet_files_can_name_the_model(record: dict[str, Any]) -> None:
    model = find_model(MODEL_KEY)
    assert model is not None and find_model(record["model_name"]) is model


def test_identity_memory_limits_and_clocks(make_sim: MakeSim, record: dict[str, Any]) -> None:
    sim = make_sim(h200_fleet(record))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert sim.api.nvmlSystemGetDriverVersion() == record["driver_version"]
    assert sim.api.nvmlDeviceGetName(handle) == record["model_name"]
    assert sim.api.nvmlDeviceGetPciInfo(handle).pciDeviceId == int(record["pci_device_id"], 16)
    assert sim.api.nvmlDeviceGetMemoryInfo(handle).total == record["memory_total_mib"] * MIB
    default_mw = record["power_limit_default_w"] * 1000
    assert sim.api.nvmlDeviceGetPowerManagementDefaultLimit(handle) == default_mw
    assert sim.api.nvmlDeviceGetPowerManagementLimit(handle) == default_mw
    assert sim.api.nvmlDeviceGetEnforcedPowerLimit(handle) == default_mw
    clocks = record["max_clocks_mhz"]
    assert sim.api.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM) == clocks["sm"]
    assert sim.api.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM) == clocks["memory"]
    assert sim.api.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) <= clocks["sm"]
    support = sim.api.nvmlGpmQueryDeviceSupport(handle)
    assert bool(support.isSupportedDevice) is record["gpm_supported"]


def test_power_limit_range(make_sim: MakeSim, record: dict[str, Any]) -> None:
    sim = make_sim(h200_fleet(record))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    low, high = sim.api.nvmlDeviceGetPowerManagementLimitConstraints(handle)
    assert (low, high) == (record["power_limit_min_w"] * 1000, record["power_limit_max_w"] * 1000)
    assert record["power_limit_min_w"] <= record["power_limit_default_w"]
    assert record["power_limit_default_w"] <= record["power_limit_max_w"]


def test_mig_profile_table(make_sim: MakeSim, record: dict[str, Any]) -> None:
    assert record["mig_capable"] is True
    sim = make_sim(h200_fleet(record, mig=["7g.141gb"]))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert sim.api.nvmlDeviceGetMigMode(handle) == [1, 1]
    seen = []
    for enum_index in PROFILE_ENUMS:
        try:
            info = sim.api.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum_index)
        except pynvml.NVMLError_NotSupported:
            continue
        name = info.name.decode() if isinstance(info.name, bytes) else info.name
        seen.append(
            {
                "name": name.removeprefix("MIG "),
                "gi_profile_id": info.id,
                "max_count": info.instanceCount,
                "memory_mib": info.memorySizeMB,
                "multiprocessors": info.multiprocessorCount,
            }
        )
    assert sorted(seen, key=_name) == sorted(record["mig_profiles"], key=_name)


def _name(row: dict[str, Any]) -> str:
    return str(row["name"])


@pytest.mark.parametrize("layout", FULL_LAYOUTS, ids=lambda layout: "+".join(layout))
def test_full_layouts_place_on_the_eight_memory_slices(
    make_sim: MakeSim, record: dict[str, Any], layout: list[str]
) -> None:
    profiles = {row["name"]: row for row in record["mig_profiles"]}
    sim = make_sim(replace(h200_fleet(record, mig=layout), nvml_privileged=True))
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(0)
    used = [False] * MEMORY_SLICES
    names = []
    for slot in range(len(layout)):
        mig = sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)
        name = sim.api.nvmlDeviceGetName(mig)
        assert name.startswith(f"{record['model_name']} MIG ")
        profile = name.rsplit(" MIG ", 1)[1]
        names.append(profile)
        assert sim.api.nvmlDeviceGetMemoryInfo(mig).total == profiles[profile]["memory_mib"] * MIB
        attributes = sim.api.nvmlDeviceGetAttributes(mig)
        assert attributes.multiprocessorCount == profiles[profile]["multiprocessors"]
        gi = sim.api.nvmlDeviceGetGpuInstanceId(mig)
        info = sim.api.nvmlGpuInstanceGetInfo(sim.api.nvmlDeviceGetGpuInstanceById(parent, gi))
        assert info.profileId == profiles[profile]["gi_profile_id"]
        span = range(info.placement.start, info.placement.start + info.placement.size)
        assert span.stop <= MEMORY_SLICES
        assert not any(used[s] for s in span), f"{profile} overlaps another instance"
        for s in span:
            used[s] = True
    assert sorted(names) == sorted(layout)
    for slot in range(len(layout), sim.api.nvmlDeviceGetMaxMigDeviceCount(parent)):
        with pytest.raises(pynvml.NVMLError_NotFound):
            sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, slot)


def test_layouts_the_board_cannot_hold_are_refused(record: dict[str, Any]) -> None:
    with pytest.raises(FleetError, match="no valid placement"):
        h200_fleet(record, mig=["3g.71gb", "3g.71gb", "1g.18gb"])
    with pytest.raises(FleetError, match=r"at most 4 x 1g\.35gb"):
        h200_fleet(record, mig=["1g.35gb"] * 5)
    with pytest.raises(FleetError, match=r"unknown MIG profile '1g\.10gb'"):
        h200_fleet(record, mig=["1g.10gb"])


def test_exporter_reads_h200_profile_ids_unprivileged(
    make_sim: MakeSim, record: dict[str, Any]
) -> None:
    layout = ["1g.35gb", "2g.35gb", "3g.71gb"]
    sim = make_sim(h200_fleet(record, mig=layout))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    identity = GpuIdentity(
        index=0,
        uuid=sim.api.nvmlDeviceGetUUID(handle),
        name=sim.api.nvmlDeviceGetName(handle),
        pci_bus_id="",
        mig_enabled=True,
    )
    instances = MigReader(GuardedNvml(ErrorTally(), sim.api), 3600.0).read(identity, handle)
    expected = {row["name"]: row["gi_profile_id"] for row in record["mig_profiles"]}
    # 1g.35gb and 2g.35gb have the same memory: only the profile name tells them apart.
    assert {m.profile: m.gpu_instance_profile_id for m in instances} == {
        name: expected[name] for name in layout
    }


def _arguments(function: str, handle: Any) -> tuple[Any, ...]:
    extra: dict[str, tuple[Any, ...]] = {
        "nvmlDeviceGetTemperature": (pynvml.NVML_TEMPERATURE_GPU,),
        "nvmlDeviceGetClockInfo": (pynvml.NVML_CLOCK_SM,),
        "nvmlDeviceGetMaxClockInfo": (pynvml.NVML_CLOCK_SM,),
        "nvmlDeviceGetGpuInstanceProfileInfo": (pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,),
        "nvmlDeviceGetFieldValues": ([pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION],),
        "nvmlDeviceGetPcieThroughput": (pynvml.NVML_PCIE_UTIL_TX_BYTES,),
    }
    return (handle, *extra.get(function, ()))


def _gpm_metrics(nvml: Any, handle: Any) -> None:
    """nvmlGpmMetricsGet as a caller makes it: two samples of the device, one metric."""
    request = gpm_pair(nvml, handle)
    try:
        nvml.nvmlGpmMetricsGet(request)
        if request.metrics[0].nvmlReturn != pynvml.NVML_SUCCESS:
            raise pynvml.NVMLError(request.metrics[0].nvmlReturn)
    finally:
        nvml.nvmlGpmSampleFree(request.sample1)
        nvml.nvmlGpmSampleFree(request.sample2)


def _call(nvml: Any, function: str, handle: Any) -> None:
    """One call of `function` with the arguments a real caller passes."""
    if function in ("nvmlDeviceGetCount", "nvmlSystemGetDriverVersion"):
        getattr(nvml, function)()
    elif function == "nvmlDeviceGetHandleByIndex":
        nvml.nvmlDeviceGetHandleByIndex(0)
    elif function == "nvmlGpmSampleGet":
        sample = nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmSampleGet(handle, sample)
        finally:
            nvml.nvmlGpmSampleFree(sample)
    elif function == "nvmlGpmMetricsGet":
        _gpm_metrics(nvml, handle)
    else:
        getattr(nvml, function)(*_arguments(function, handle))


def test_nvml_support_matrix(make_sim: MakeSim, record: dict[str, Any]) -> None:
    sim = make_sim(h200_fleet(record))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert record["nvml_support"], "the record lists no NVML functions"
    answers = {}
    for function in record["nvml_support"]:
        try:
            _call(sim.api, function, handle)
            answers[function] = "ok"
        except pynvml.NVMLError as exc:
            answers[function] = exc.value
    expected = {
        function: "ok" if answer == "ok" else nvml_error_value(answer)
        for function, answer in record["nvml_support"].items()
    }
    assert answers == expected

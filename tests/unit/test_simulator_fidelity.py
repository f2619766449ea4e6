"""The simulated NVML behaves like the real library: identities, units, MIG rules, error codes.

Expected figures come from docs/nvml.md, not from the simulator's own tables.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator

import pynvml
import pytest

from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from tests.conftest import fleet_from_yaml, quiet, wait_for

# (fleet key, NVML name, PCI device id, memory MiB, TDP mW) from docs/nvml.md, 'Device table'.
REFERENCE_DEVICES = [
    ("H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 0x233010DE, 81559, 700000),
    ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 0x20B210DE, 81920, 400000),
    ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 0x20B010DE, 40960, 400000),
    ("T4", "Tesla T4", 0x1EB810DE, 15360, 70000),
    ("L4", "NVIDIA L4", 0x27B810DE, 23034, 72000),
    ("H200-141GB-HBM3e", "NVIDIA H200", 0x233510DE, 143771, 700000),
]


@pytest.fixture
def stepped_sim() -> Iterator[tuple[FakeNvml, list[float]]]:
    """The default node on a clock the test moves: `now[0] += seconds`."""
    now = [0.0]
    with FakeNvml(quiet(default_fleet()), clock=lambda: now[0]) as sim:
        yield sim, now


def one_gpu(model: str, extra: str = "", driver: str = "550.54.15") -> str:
    return f"""
        driver_version: "{driver}"
        gpus:
          - model: {model}
            {extra}
    """


@pytest.mark.parametrize(("key", "name", "pci_id", "memory_mib", "tdp_mw"), REFERENCE_DEVICES)
def test_device_identity_matches_reference(make_sim, key, name, pci_id, memory_mib, tdp_mw):
    sim = make_sim(fleet_from_yaml(one_gpu(key)))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert sim.api.nvmlDeviceGetName(handle) == name
    pci = sim.api.nvmlDeviceGetPciInfo(handle)
    assert pci.pciDeviceId == pci_id
    assert pci.busId.startswith("00000000:") and len(pci.busId) == 16  # 8-hex domain
    assert pci.busIdLegacy.startswith("0000:") and len(pci.busIdLegacy) == 12
    assert sim.api.nvmlDeviceGetMemoryInfo(handle).total == memory_mib * 2**20
    assert sim.api.nvmlDeviceGetPowerManagementLimit(handle) == tdp_mw
    uuid = sim.api.nvmlDeviceGetUUID(handle)
    assert uuid.startswith("GPU-") and [len(p) for p in uuid[4:].split("-")] == [8, 4, 4, 4, 12]


def test_calls_before_init_raise_uninitialized(sim):
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.api.nvmlDeviceGetCount()
    sim.api.nvmlInit()
    assert sim.api.nvmlDeviceGetCount() == 8
    sim.api.nvmlShutdown()
    sim.api.nvmlShutdown()  # extra shutdowns are not an error
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        sim.api.nvmlDeviceGetCount()


def test_init_fails_when_driver_not_loaded(sim):
    sim.unload_driver()
    with pytest.raises(pynvml.NVMLError) as info:
        sim.api.nvmlInit()
    assert info.value.value == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert str(info.value) == "Driver Not Loaded"


def test_errors_are_the_real_generated_classes(sim):
    sim.api.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument) as info:
        sim.api.nvmlDeviceGetHandleByIndex(99)
    assert isinstance(info.value, pynvml.NVMLError)
    assert info.value.value == 2


def test_handles_to_the_same_device_are_distinct_objects(sim):
    sim.api.nvmlInit()
    a = sim.api.nvmlDeviceGetHandleByIndex(0)
    b = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert a is not b
    assert sim.api.nvmlDeviceGetUUID(a) == sim.api.nvmlDeviceGetUUID(b)
    assert isinstance(a, pynvml.c_nvmlDevice_t)


def test_units_are_nvml_units(stepped_sim):
    sim, now = stepped_sim
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)  # training H100
    power = sim.api.nvmlDeviceGetPowerUsage(handle)
    assert 60_000 <= power <= 700_000  # milliwatts
    assert 0 < sim.api.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) < 100
    assert 200 <= sim.api.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) <= 1980  # MHz
    first = sim.api.nvmlDeviceGetTotalEnergyConsumption(handle)
    now[0] += 0.05
    second = sim.api.nvmlDeviceGetTotalEnergyConsumption(handle)
    # mJ: 50 ms at >= 60 W is >= 3000 mJ
    assert second - first >= 2500
    mem = sim.api.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    # v2 splits the board three ways; v1 counts the reservation as used (a real H200's answers)
    assert mem.reserved > 0
    assert mem.total == mem.used + mem.free + mem.reserved
    v1 = sim.api.nvmlDeviceGetMemoryInfo(handle)
    assert (v1.total, v1.used, v1.free) == (mem.total, mem.used + mem.reserved, mem.free)
    tx = sim.api.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    assert 0 <= tx < 64_000_000  # KB/s, below PCIe Gen5 x16


def test_pcie_throughput_blocks_for_its_sample_window():
    fleet = fleet_from_yaml(one_gpu("H100-80GB-HBM3"))
    with FakeNvml(fleet) as sim:  # keeps the fleet's 20 ms window
        sim.api.nvmlInit()
        handle = sim.api.nvmlDeviceGetHandleByIndex(0)
        started = time.monotonic()
        sim.api.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        assert time.monotonic() - started >= 0.019


def test_utilization_power_and_temperature_move_together(sim):
    gpu = sim.gpus[4]  # inference: a wide wave
    times = [sim.now() + 30 * i for i in range(40)]
    util = [gpu.utilization(t) for t in times]
    power = [gpu.power_mw(t) for t in times]
    assert max(util) - min(util) > 0.3
    pairs = sorted(zip(util, power, strict=True))
    low, high = pairs[: len(pairs) // 4], pairs[-len(pairs) // 4 :]
    assert sum(p for _, p in high) / len(high) > 1.5 * sum(p for _, p in low) / len(low)
    # Temperature follows power with a lag, so compare against power 20 s earlier.
    hot = max(times, key=lambda t: gpu.power_mw(t - 20))
    cold = min(times, key=lambda t: gpu.power_mw(t - 20))
    assert gpu.temperature_c(hot) > gpu.temperature_c(cold)


def test_idle_gpu_reports_idle_clock_event_and_low_power(sim):
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(5)  # idle in the default fleet
    reasons = sim.api.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert reasons & pynvml.nvmlClocksEventReasonGpuIdle
    assert sim.api.nvmlDeviceGetUtilizationRates(handle).gpu == 0
    assert sim.api.nvmlDeviceGetPowerUsage(handle) < 100_000


# ---- MIG ----


def test_mig_profile_ids_are_driver_ids_not_enum_indexes(make_sim):
    sim = make_sim(fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [1g.10gb]")))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    expected = {  # enum index -> driver id, docs/nvml.md, 'GPU-instance profile ids'
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE: 19,
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1: 20,
        pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2: 15,
        pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE: 14,
        pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE: 9,
        pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE: 5,
        pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE: 0,
    }
    for enum_index, driver_id in expected.items():
        info = sim.api.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum_index)
        assert info.id == driver_id
    seven = sim.api.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    assert (seven.instanceCount, seven.multiprocessorCount) == (1, 132)


def test_profile_info_answers_while_mig_is_off_on_a_mig_capable_board(make_sim):
    sim = make_sim(fleet_from_yaml("gpus:\n  - {model: A100-SXM4-40GB}\n  - {model: T4}\n"))
    sim.api.nvmlInit()
    a100, t4 = (sim.api.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert sim.api.nvmlDeviceGetMigMode(a100) == [0, 0]
    assert sim.api.nvmlDeviceGetMaxMigDeviceCount(a100) == 0
    info = sim.api.nvmlDeviceGetGpuInstanceProfileInfo(
        a100, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    assert (info.id, info.memorySizeMB) == (0, 40192)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetGpuInstanceProfileInfo(t4, 0)


def test_seven_1g_instances_get_gpu_instance_ids_7_to_13(make_sim):
    sim = make_sim(
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [" + ", ".join(["1g.10gb"] * 7) + "]"))
    )
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(0)
    assert sim.api.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    ids = []
    for i in range(7):
        mig = sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        ids.append(sim.api.nvmlDeviceGetGpuInstanceId(mig))
        assert sim.api.nvmlDeviceGetComputeInstanceId(mig) == 0
        assert sim.api.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        assert sim.api.nvmlDeviceGetUUID(mig).startswith("MIG-")
        assert sim.api.nvmlDeviceGetMemoryInfo(mig).total == int(9.75 * 2**30)
    assert ids == list(range(7, 14))


def test_empty_mig_slots_are_not_found_and_bad_indexes_invalid(sim):
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(7)  # three instances
    sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2)
    with pytest.raises(pynvml.NVMLError_NotFound):
        sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)


def test_mig_handle_helpers(sim):
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(6)
    mig = sim.api.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    flag = sim.api.nvmlDeviceIsMigDeviceHandle(mig)
    assert bool(flag) and flag != 1  # a c_uint: truthy, but not == 1
    back = sim.api.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert sim.api.nvmlDeviceGetUUID(back) == sim.api.nvmlDeviceGetUUID(parent)
    by_uuid = sim.api.nvmlDeviceGetHandleByUUID(sim.api.nvmlDeviceGetUUID(mig))
    assert sim.api.nvmlDeviceGetGpuInstanceId(by_uuid) == sim.api.nvmlDeviceGetGpuInstanceId(mig)
    attrs = sim.api.nvmlDeviceGetAttributes(mig)
    assert (attrs.gpuInstanceSliceCount, attrs.memorySizeMB, attrs.multiprocessorCount) == (
        1,
        9984,
        16,
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetAttributes(parent)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        sim.api.nvmlDeviceGetGpuInstanceById(parent, 7)


def test_invalid_mig_layouts_are_rejected():
    from kube_gpu_exporter.exporter.simulator.fleet import FleetError

    with pytest.raises(FleetError, match=r"at most 1 x 4g\.40gb"):
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [4g.40gb, 4g.40gb]"))
    with pytest.raises(FleetError, match="compute slices"):
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [4g.40gb, 3g.40gb, 1g.10gb]"))
    with pytest.raises(FleetError, match="no valid placement"):
        # Two 3g instances take all eight memory slices; nothing is left for the 1g.
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [3g.40gb, 3g.40gb, 1g.10gb]"))
    with pytest.raises(FleetError, match=r"gpus\[0\]\.mig\[1\]: unknown MIG profile '1g.5gb'"):
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [1g.10gb, 1g.5gb]"))


# ---- NOT_SUPPORTED matrix ----


def test_not_supported_on_mig_enabled_parent(sim):
    sim.api.nvmlInit()
    parent = sim.api.nvmlDeviceGetHandleByIndex(6)
    for call in (
        lambda: sim.api.nvmlDeviceGetUtilizationRates(parent),
        lambda: sim.api.nvmlDeviceGetEncoderUtilization(parent),
        lambda: sim.api.nvmlDeviceGetDecoderUtilization(parent),
        lambda: sim.api.nvmlDeviceGetRemappedRows(parent),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    # Board-level values still work on the parent.
    assert sim.api.nvmlDeviceGetTemperature(parent, 0) > 0
    assert sim.api.nvmlDeviceGetPowerUsage(parent) > 0


def test_not_supported_on_mig_device_handles(sim):
    sim.api.nvmlInit()
    mig = sim.api.nvmlDeviceGetMigDeviceHandleByIndex(sim.api.nvmlDeviceGetHandleByIndex(6), 0)
    for name in (
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            getattr(sim.api, name)(mig)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetTemperature(mig, 0)
    assert sim.api.nvmlDeviceGetMemoryInfo(mig).total > 0


@pytest.mark.parametrize("model", ["T4", "L4"])
def test_mig_mode_not_supported_on_non_mig_boards(make_sim, model):
    sim = make_sim(fleet_from_yaml(one_gpu(model)))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetMigMode(handle)
    assert sim.api.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


def test_turing_has_no_row_remapping_and_gddr_no_memory_temperature(make_sim):
    sim = make_sim(fleet_from_yaml(one_gpu("T4")))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetRemappedRows(handle)
    values = sim.api.nvmlDeviceGetFieldValues(
        handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
    )
    assert values[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert values[1].nvmlReturn == pynvml.NVML_SUCCESS and values[1].value.ullVal > 0


def test_ecc_counters_not_supported_with_ecc_off(make_sim):
    sim = make_sim(fleet_from_yaml(one_gpu("L4", "ecc: false")))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetTotalEccErrors(handle, 1, 0)


def test_field_values_report_errors_per_entry(sim):
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    values = sim.api.nvmlDeviceGetFieldValues(
        handle,
        [
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 17),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 18),  # H100 SXM has 18 links: 0-17
            9999,
        ],
    )
    assert [v.nvmlReturn for v in values] == [
        pynvml.NVML_SUCCESS,
        pynvml.NVML_SUCCESS,
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_NOT_SUPPORTED,
    ]
    assert values[0].valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT


# ---- FunctionNotFound by driver version ----


def test_clock_event_reasons_need_r535(make_sim):
    sim = make_sim(fleet_from_yaml(one_gpu("A100-SXM4-40GB", driver="525.105.17")))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        sim.api.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert isinstance(sim.api.nvmlDeviceGetCurrentClocksThrottleReasons(handle), int)


def test_memory_info_v2_needs_r510(make_sim):
    sim = make_sim(fleet_from_yaml(one_gpu("T4", driver="470.182.03")))
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        sim.api.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert sim.api.nvmlDeviceGetMemoryInfo(handle).total == 15360 * 2**20


def test_unmodelled_functions_never_reach_the_real_library(sim):
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        sim.api.nvmlDeviceGetBAR1MemoryInfo(handle)


def test_the_api_object_has_every_nvml_function_and_pynvml_is_left_alone(sim):
    functions = {
        name: value
        for name, value in vars(pynvml).items()
        if name.startswith("nvml") and inspect.isfunction(value)
    }
    assert all(callable(getattr(sim.api, name)) for name in functions)
    # The binding's own helpers are its own; every other name answers from the simulator.
    assert sim.api.nvmlStructToFriendlyObject is pynvml.nvmlStructToFriendlyObject
    assert sim.api.nvmlInit is not pynvml.nvmlInit
    assert all(value.__module__ == "pynvml" for value in functions.values())


# ---- Events and faults ----


def test_xid_event_round_trip_and_timeout(sim):
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(6)
    event_set = sim.api.nvmlEventSetCreate()
    supported = sim.api.nvmlDeviceGetSupportedEventTypes(handle)
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    sim.api.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    sim.inject_xid(6, 31, gpu_instance_id=8)
    sim.inject_xid(0, 79)  # not registered on GPU 0: never delivered
    event = sim.api.nvmlEventSetWait_v2(event_set, 500)
    assert (event.eventType, event.eventData, event.gpuInstanceId) == (0x8, 31, 8)
    assert sim.api.nvmlDeviceGetUUID(event.device) == sim.api.nvmlDeviceGetUUID(handle)
    # The wait blocks on the system's clock, as NVML's does: kept short.
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        sim.api.nvmlEventSetWait_v2(event_set, 20)
    assert time.monotonic() - started >= 0.019
    sim.api.nvmlEventSetFree(event_set)
    assert sim.event_sets_open() == 0


def test_lost_gpu_raises_gpu_is_lost_and_can_come_back(sim):
    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(2)
    sim.lose_gpu(2)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sim.api.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        sim.api.nvmlDeviceGetHandleByIndex(2)
    assert sim.api.nvmlDeviceGetCount() == 8
    sim.api.nvmlDeviceGetPowerUsage(sim.api.nvmlDeviceGetHandleByIndex(3))
    sim.restore_gpu(2)
    assert sim.api.nvmlDeviceGetPowerUsage(sim.api.nvmlDeviceGetHandleByIndex(2)) > 0


def test_slow_and_hanging_calls(sim):
    import threading

    sim.api.nvmlInit()
    handle = sim.api.nvmlDeviceGetHandleByIndex(1)
    # A slow call sleeps on the system's clock, as a slow driver would: kept short.
    sim.faults.slow("nvmlDeviceGetPowerUsage", 0.02, gpu=1)
    started = time.monotonic()
    sim.api.nvmlDeviceGetPowerUsage(handle)
    assert time.monotonic() - started >= 0.02
    sim.faults.hang("nvmlDeviceGetTemperature", gpu=1)
    done = threading.Event()

    def read_temperature() -> None:
        sim.api.nvmlDeviceGetTemperature(handle, 0)
        done.set()

    threading.Thread(target=read_temperature, daemon=True).start()
    # Parked in the hang, not merely slow to start: it stays there until released.
    assert wait_for(lambda: sim.faults.hung_calls == 1)
    assert not done.is_set()
    sim.faults.release_all()
    assert done.wait(2)


@pytest.mark.parametrize(
    ("model", "averaged"),
    [("H100-80GB-HBM3", True), ("L4", True), ("A100-SXM4-80GB", False), ("T4", False)],
)
def test_power_fields_follow_the_architecture(model, averaged):
    """Field 185 (1 s average) exists on Ampere other than GA100 and newer; 186 (instant)
    everywhere; nvmlDeviceGetPowerUsage reports the average where there is one."""
    with FakeNvml(fleet_from_yaml(one_gpu(model))) as sim:
        sim.api.nvmlInit()
        handle = sim.api.nvmlDeviceGetHandleByIndex(0)
        average, instant = sim.api.nvmlDeviceGetFieldValues(handle, [185, 186])
        getter = sim.api.nvmlDeviceGetPowerUsage(handle)
        assert instant.nvmlReturn == pynvml.NVML_SUCCESS and instant.value.ullVal > 0
        if averaged:
            assert average.nvmlReturn == pynvml.NVML_SUCCESS
            assert abs(average.value.ullVal - getter) <= 0.05 * getter
        else:
            assert average.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
            assert abs(instant.value.ullVal - getter) <= 0.05 * getter

"""The simulated NVML behaves like the real library: identities, units, MIG rules, error codes.

Expected figures come from docs/nvml.md, not from the simulator's own tables.
"""

from __future__ import annotations

import time

import pynvml
import pytest

from exporter.simulator.fake_nvml import FakeNvml
from tests.conftest import fleet_from_yaml

# (fleet key, NVML name, PCI device id, memory MiB, TDP mW) from docs/nvml.md, 'Device table'.
REFERENCE_DEVICES = [
    ("H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", 0x233010DE, 81559, 700000),
    ("A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB", 0x20B210DE, 81920, 400000),
    ("A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", 0x20B010DE, 40960, 400000),
    ("T4", "Tesla T4", 0x1EB810DE, 15360, 70000),
    ("L4", "NVIDIA L4", 0x27B810DE, 23034, 72000),
    ("H200-141GB-HBM3e", "NVIDIA H200", 0x233510DE, 143771, 700000),
]


def one_gpu(model: str, extra: str = "", driver: str = "550.54.15") -> str:
    return f"""
        driver_version: "{driver}"
        gpus:
          - model: {model}
            {extra}
    """


@pytest.mark.parametrize(("key", "name", "pci_id", "memory_mib", "tdp_mw"), REFERENCE_DEVICES)
def test_device_identity_matches_reference(make_sim, key, name, pci_id, memory_mib, tdp_mw):
    make_sim(fleet_from_yaml(one_gpu(key)))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(handle) == name
    pci = pynvml.nvmlDeviceGetPciInfo(handle)
    assert pci.pciDeviceId == pci_id
    assert pci.busId.startswith("00000000:") and len(pci.busId) == 16  # 8-hex domain
    assert pci.busIdLegacy.startswith("0000:") and len(pci.busIdLegacy) == 12
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == memory_mib * 2**20
    assert pynvml.nvmlDeviceGetPowerManagementLimit(handle) == tdp_mw
    uuid = pynvml.nvmlDeviceGetUUID(handle)
    assert uuid.startswith("GPU-") and [len(p) for p in uuid[4:].split("-")] == [8, 4, 4, 4, 12]


def test_calls_before_init_raise_uninitialized(sim):
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 8
    pynvml.nvmlShutdown()
    pynvml.nvmlShutdown()  # extra shutdowns are not an error
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_init_fails_when_driver_not_loaded(sim):
    sim.unload_driver()
    with pytest.raises(pynvml.NVMLError) as info:
        pynvml.nvmlInit()
    assert info.value.value == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert str(info.value) == "Driver Not Loaded"


def test_errors_are_the_real_generated_classes(sim):
    pynvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_InvalidArgument) as info:
        pynvml.nvmlDeviceGetHandleByIndex(99)
    assert isinstance(info.value, pynvml.NVMLError)
    assert info.value.value == 2


def test_handles_to_the_same_device_are_distinct_objects(sim):
    pynvml.nvmlInit()
    a = pynvml.nvmlDeviceGetHandleByIndex(0)
    b = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert a is not b
    assert pynvml.nvmlDeviceGetUUID(a) == pynvml.nvmlDeviceGetUUID(b)
    assert isinstance(a, pynvml.c_nvmlDevice_t)


def test_units_are_nvml_units(sim):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)  # training H100
    power = pynvml.nvmlDeviceGetPowerUsage(handle)
    assert 60_000 <= power <= 700_000  # milliwatts
    assert 0 < pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU) < 100
    assert 200 <= pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM) <= 1980  # MHz
    first = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    time.sleep(0.05)
    second = pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    # mJ: 50 ms at >= 60 W is >= 3000 mJ
    assert second - first >= 2500
    mem = pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    # v2 splits the board three ways; v1 counts the reservation as used (a real H200's answers)
    assert mem.reserved > 0
    assert mem.total == mem.used + mem.free + mem.reserved
    v1 = pynvml.nvmlDeviceGetMemoryInfo(handle)
    assert (v1.total, v1.used, v1.free) == (mem.total, mem.used + mem.reserved, mem.free)
    tx = pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    assert 0 <= tx < 64_000_000  # KB/s, below PCIe Gen5 x16


def test_pcie_throughput_blocks_for_its_sample_window():
    fleet = fleet_from_yaml(one_gpu("H100-80GB-HBM3"))
    with FakeNvml(fleet):  # keeps the fleet's 20 ms window
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        started = time.monotonic()
        pynvml.nvmlDeviceGetPcieThroughput(handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
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
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(5)  # idle in the default fleet
    reasons = pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert reasons & pynvml.nvmlClocksEventReasonGpuIdle
    assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == 0
    assert pynvml.nvmlDeviceGetPowerUsage(handle) < 100_000


# ---- MIG ----


def test_mig_profile_ids_are_driver_ids_not_enum_indexes(make_sim):
    make_sim(fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [1g.10gb]")))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
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
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum_index)
        assert info.id == driver_id
    seven = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        handle, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    assert (seven.instanceCount, seven.multiprocessorCount) == (1, 132)


def test_profile_info_answers_while_mig_is_off_on_a_mig_capable_board(make_sim):
    make_sim(fleet_from_yaml("gpus:\n  - {model: A100-SXM4-40GB}\n  - {model: T4}\n"))
    pynvml.nvmlInit()
    a100, t4 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in (0, 1))
    assert pynvml.nvmlDeviceGetMigMode(a100) == [0, 0]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(a100) == 0
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(
        a100, pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE
    )
    assert (info.id, info.memorySizeMB) == (0, 40192)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(t4, 0)


def test_seven_1g_instances_get_gpu_instance_ids_7_to_13(make_sim):
    make_sim(
        fleet_from_yaml(one_gpu("H100-80GB-HBM3", "mig: [" + ", ".join(["1g.10gb"] * 7) + "]"))
    )
    pynvml.nvmlInit()
    parent = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(parent) == 7
    ids = []
    for i in range(7):
        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
        ids.append(pynvml.nvmlDeviceGetGpuInstanceId(mig))
        assert pynvml.nvmlDeviceGetComputeInstanceId(mig) == 0
        assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
        assert pynvml.nvmlDeviceGetUUID(mig).startswith("MIG-")
        assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == int(9.75 * 2**30)
    assert ids == list(range(7, 14))


def test_empty_mig_slots_are_not_found_and_bad_indexes_invalid(sim):
    pynvml.nvmlInit()
    parent = pynvml.nvmlDeviceGetHandleByIndex(7)  # three instances
    pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 2)
    with pytest.raises(pynvml.NVMLError_NotFound):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 3)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 7)


def test_mig_handle_helpers(sim):
    pynvml.nvmlInit()
    parent = pynvml.nvmlDeviceGetHandleByIndex(6)
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, 0)
    flag = pynvml.nvmlDeviceIsMigDeviceHandle(mig)
    assert bool(flag) and flag != 1  # a c_uint: truthy, but not == 1
    back = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert pynvml.nvmlDeviceGetUUID(back) == pynvml.nvmlDeviceGetUUID(parent)
    by_uuid = pynvml.nvmlDeviceGetHandleByUUID(pynvml.nvmlDeviceGetUUID(mig))
    assert pynvml.nvmlDeviceGetGpuInstanceId(by_uuid) == pynvml.nvmlDeviceGetGpuInstanceId(mig)
    attrs = pynvml.nvmlDeviceGetAttributes(mig)
    assert (attrs.gpuInstanceSliceCount, attrs.memorySizeMB, attrs.multiprocessorCount) == (
        1,
        9984,
        16,
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetAttributes(parent)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        pynvml.nvmlDeviceGetGpuInstanceById(parent, 7)


def test_invalid_mig_layouts_are_rejected():
    from exporter.simulator.fleet import FleetError

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
    pynvml.nvmlInit()
    parent = pynvml.nvmlDeviceGetHandleByIndex(6)
    for call in (
        lambda: pynvml.nvmlDeviceGetUtilizationRates(parent),
        lambda: pynvml.nvmlDeviceGetEncoderUtilization(parent),
        lambda: pynvml.nvmlDeviceGetDecoderUtilization(parent),
        lambda: pynvml.nvmlDeviceGetRemappedRows(parent),
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    # Board-level values still work on the parent.
    assert pynvml.nvmlDeviceGetTemperature(parent, 0) > 0
    assert pynvml.nvmlDeviceGetPowerUsage(parent) > 0


def test_not_supported_on_mig_device_handles(sim):
    pynvml.nvmlInit()
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(pynvml.nvmlDeviceGetHandleByIndex(6), 0)
    for name in (
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ):
        with pytest.raises(pynvml.NVMLError_NotSupported):
            getattr(pynvml, name)(mig)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTemperature(mig, 0)
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total > 0


@pytest.mark.parametrize("model", ["T4", "L4"])
def test_mig_mode_not_supported_on_non_mig_boards(make_sim, model):
    make_sim(fleet_from_yaml(one_gpu(model)))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetMigMode(handle)
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 0


def test_turing_has_no_row_remapping_and_gddr_no_memory_temperature(make_sim):
    make_sim(fleet_from_yaml(one_gpu("T4")))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetRemappedRows(handle)
    values = pynvml.nvmlDeviceGetFieldValues(
        handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
    )
    assert values[0].nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert values[1].nvmlReturn == pynvml.NVML_SUCCESS and values[1].value.ullVal > 0


def test_ecc_counters_not_supported_with_ecc_off(make_sim):
    make_sim(fleet_from_yaml(one_gpu("L4", "ecc: false")))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTotalEccErrors(handle, 1, 0)


def test_field_values_report_errors_per_entry(sim):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    values = pynvml.nvmlDeviceGetFieldValues(
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
    make_sim(fleet_from_yaml(one_gpu("A100-SXM4-40GB", driver="525.105.17")))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)
    assert isinstance(pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(handle), int)


def test_memory_info_v2_needs_r510(make_sim):
    make_sim(fleet_from_yaml(one_gpu("T4", driver="470.182.03")))
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2)
    assert pynvml.nvmlDeviceGetMemoryInfo(handle).total == 15360 * 2**20


def test_unmodelled_functions_never_reach_the_real_library(sim):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetBAR1MemoryInfo(handle)


# ---- Events and faults ----


def test_xid_event_round_trip_and_timeout(sim):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(6)
    event_set = pynvml.nvmlEventSetCreate()
    supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
    assert supported & pynvml.nvmlEventTypeXidCriticalError
    pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
    sim.inject_xid(6, 31, gpu_instance_id=8)
    sim.inject_xid(0, 79)  # not registered on GPU 0: never delivered
    event = pynvml.nvmlEventSetWait_v2(event_set, 500)
    assert (event.eventType, event.eventData, event.gpuInstanceId) == (0x8, 31, 8)
    assert pynvml.nvmlDeviceGetUUID(event.device) == pynvml.nvmlDeviceGetUUID(handle)
    started = time.monotonic()
    with pytest.raises(pynvml.NVMLError_Timeout):
        pynvml.nvmlEventSetWait_v2(event_set, 100)
    assert time.monotonic() - started >= 0.09
    pynvml.nvmlEventSetFree(event_set)
    assert sim.event_sets_open() == 0


def test_lost_gpu_raises_gpu_is_lost_and_can_come_back(sim):
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(2)
    sim.lose_gpu(2)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetCount() == 8
    pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(3))
    sim.restore_gpu(2)
    assert pynvml.nvmlDeviceGetPowerUsage(pynvml.nvmlDeviceGetHandleByIndex(2)) > 0


def test_slow_and_hanging_calls(sim):
    import threading

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    sim.faults.slow("nvmlDeviceGetPowerUsage", 0.1, gpu=1)
    started = time.monotonic()
    pynvml.nvmlDeviceGetPowerUsage(handle)
    assert time.monotonic() - started >= 0.1
    sim.faults.hang("nvmlDeviceGetTemperature", gpu=1)
    done = threading.Event()

    def read_temperature() -> None:
        pynvml.nvmlDeviceGetTemperature(handle, 0)
        done.set()

    threading.Thread(target=read_temperature, daemon=True).start()
    assert not done.wait(0.2)
    sim.faults.release_all()
    assert done.wait(2)


@pytest.mark.parametrize(
    ("model", "averaged"),
    [("H100-80GB-HBM3", True), ("L4", True), ("A100-SXM4-80GB", False), ("T4", False)],
)
def test_power_fields_follow_the_architecture(model, averaged):
    """Field 185 (1 s average) exists on Ampere other than GA100 and newer; 186 (instant)
    everywhere; nvmlDeviceGetPowerUsage reports the average where there is one."""
    with FakeNvml(fleet_from_yaml(one_gpu(model))):
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        average, instant = pynvml.nvmlDeviceGetFieldValues(handle, [185, 186])
        getter = pynvml.nvmlDeviceGetPowerUsage(handle)
        assert instant.nvmlReturn == pynvml.NVML_SUCCESS and instant.value.ullVal > 0
        if averaged:
            assert average.nvmlReturn == pynvml.NVML_SUCCESS
            assert abs(average.value.ullVal - getter) <= 0.05 * getter
        else:
            assert average.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
            assert abs(instant.value.ullVal - getter) <= 0.05 * getter

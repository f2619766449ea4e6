"""The simulated NVML's call costs: the real H200's table, the rules for what it does not list,
CPU spent without the GIL, and the fake charging them on computed and replayed answers alike."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest

from benchmarks.precomputed_answers import precomputed_api
from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.nvml.device_reader import SLOW_FIELDS
from kube_gpu_exporter.exporter.simulator import call_costs
from kube_gpu_exporter.exporter.simulator.call_costs import (
    DEFAULT_CALL_US,
    DEFAULT_FIELD_US,
    MEASURED,
    Cost,
    CpuBurner,
)
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import FleetError, default_fleet
from tests.conftest import fleet_from_yaml

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results/nvml-costs-nvidia-h200.yaml"
ENERGY = pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION


def test_the_simulator_charges_the_committed_record_of_the_real_run() -> None:
    packaged = Path(call_costs.__file__).parent / call_costs.MEASURED_TABLE
    assert packaged.read_text() == RESULTS.read_text()
    table = small_yaml.load(RESULTS.read_text())
    assert (table["source"], table["model_name"]) == ("real", "NVIDIA H200")


def test_a_listed_call_costs_its_measured_cpu_else_its_wall_time() -> None:
    energy = MEASURED.call("nvmlDeviceGetTotalEnergyConsumption")
    assert (energy.cpu_us, energy.wall_us) == pytest.approx((3950.6, 4033.5))
    assert MEASURED.call("nvmlDeviceGetPowerManagementLimit") == Cost(85.5)
    assert MEASURED.call("nvmlDeviceGetMemoryInfo") == Cost(7.9)  # mean CPU above the median


def test_unlisted_calls_cost_their_relative_or_the_default() -> None:
    assert MEASURED.call("nvmlGpmMigSampleGet") == MEASURED.call("nvmlGpmSampleGet")
    assert MEASURED.call("nvmlDeviceGetPcieReplayCounter") == Cost(147.7)  # as field 94
    assert MEASURED.call("nvmlDeviceGetSomethingNew") == Cost(DEFAULT_CALL_US)
    # Waits the simulator models by behaviour are not charged again.
    assert MEASURED.call("nvmlDeviceGetPcieThroughput").wall_us == 0
    assert MEASURED.call("nvmlEventSetWait_v2").wall_us == 0


def test_a_field_batch_costs_the_sum_of_its_fields() -> None:
    assert MEASURED.fields([ENERGY, 94]).cpu_us == pytest.approx(5800.0 + 147.7)
    assert MEASURED.fields([(138, 0), (138, 1), 9999]).cpu_us == pytest.approx(
        2 * 10.8 + DEFAULT_FIELD_US
    )
    slow = MEASURED.fields(list(SLOW_FIELDS)).cpu_us
    assert slow > 4000, "the slow fields carry the energy counter"
    fast = MEASURED.fields([82, 185, 186]).cpu_us
    assert fast < 20


def _thread_cpu_us(spend: Callable[[], None]) -> float:
    started = time.thread_time()
    spend()
    return (time.thread_time() - started) * 1e6


def test_spent_cpu_is_the_calling_threads_and_grows_with_the_cost() -> None:
    burner = CpuBurner(call_costs.reference_us())  # a measured host as fast as this one
    burner.iterations_per_us()
    small = min(_thread_cpu_us(lambda: burner.spend(2_000)) for _ in range(3))
    large = min(_thread_cpu_us(lambda: burner.spend(16_000)) for _ in range(3))
    # The same work, not the same time, so no bound in microseconds: eight times the cost is
    # several times the CPU, whatever this machine's speed at the moment.
    assert small > 0 and large > 3 * small


def test_other_threads_run_while_a_cost_is_spent() -> None:
    burner = CpuBurner(call_costs.reference_us())
    burner.iterations_per_us()
    others = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            others[0] += 1
            time.sleep(0)

    thread = threading.Thread(target=count)
    thread.start()
    try:
        before = others[0]
        burner.spend(50_000)
        during = others[0] - before
    finally:
        stop.set()
        thread.join()
    assert during > 0, "the GIL was held through the whole charge"


def test_a_slower_measured_host_makes_each_of_its_microseconds_less_work_here() -> None:
    here = call_costs.reference_us()
    same, half = CpuBurner(here), CpuBurner(2 * here)
    assert 0.35 < half.iterations_per_us() / same.iterations_per_us() < 0.65


def _batch_cpu_us(api: Any, fields: list[int], calls: int = 8) -> float:
    api.nvmlInit()
    handle = api.nvmlDeviceGetHandleByIndex(0)
    api.nvmlDeviceGetFieldValues(handle, fields)  # learnt (precomputed) or warmed up
    started = time.thread_time()
    for _ in range(calls):
        api.nvmlDeviceGetFieldValues(handle, fields)
    return (time.thread_time() - started) * 1e6 / calls


@pytest.mark.parametrize("precomputed", [False, True], ids=["live", "replayed"])
def test_the_fake_charges_the_energy_field_on_live_and_replayed_answers(precomputed: bool) -> None:
    fleet = replace(default_fleet(), pcie_window_ms=0.0)
    assert fleet.call_costs == "measured"
    with FakeNvml(fleet) as sim:
        api = precomputed_api(sim) if precomputed else sim.api
        with_energy = _batch_cpu_us(api, [ENERGY])
        without = _batch_cpu_us(api, [pynvml.NVML_FI_DEV_MEMORY_TEMP])
    # What charging the field's cost alone takes here, timed just after.
    direct = min(_thread_cpu_us(lambda: call_costs.BURNER.spend(5800.0)) for _ in range(3))
    assert with_energy - without >= 0.5 * direct


def test_flat_costs_charge_nothing_but_the_flat_sleep() -> None:
    fleet = fleet_from_yaml("latency: {call_us: 0}\ngpus:\n  - {model: H100-80GB-HBM3}\n")
    assert fleet.call_costs == "flat"
    with FakeNvml(fleet) as sim:
        assert _batch_cpu_us(sim.api, [ENERGY]) < 1000


def test_a_fleet_cannot_ask_for_measured_costs_and_a_flat_latency() -> None:
    with pytest.raises(FleetError, match=r"latency.call_us: applies only with costs: flat"):
        fleet_from_yaml("latency: {costs: measured, call_us: 5}\ngpus:\n  - {model: T4}\n")
    with pytest.raises(FleetError, match=r"latency.costs: 'free' is not one of measured, flat"):
        fleet_from_yaml("latency: {costs: free}\ngpus:\n  - {model: T4}\n")

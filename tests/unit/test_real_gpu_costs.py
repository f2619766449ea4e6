"""The cost table the harness writes (nvml-costs-<model>.yaml): its schema, as the simulator's
cost model reads it, built from timings shaped as a real H200 answered them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.real_gpu.costs import cost_header, cost_table, cost_yaml
from benchmarks.real_gpu.latency import CallTiming, FieldTiming
from benchmarks.real_gpu.report import RunReport, write_outputs
from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.simulator import call_costs

RECORD = {
    "model_name": "NVIDIA H200",
    "pci_device_id": "0x233510DE",
    "memory_total_mib": 143771,
    "driver_version": "580.159.04",
    "source": "real",
    "captured": "2026-11-26",
}


def _call(label: str, walls: tuple[float, ...], cpu: float | None) -> CallTiming:
    ordered = sorted(walls)
    median = ordered[len(ordered) // 2]
    return CallTiming(
        label, True, len(walls), median, ordered[-1], 1.0, None, cpu, None, None, walls
    )


def _field(
    field_id: int, name: str, wall: float, cpu: float, answer: str | None = None
) -> FieldTiming:
    return FieldTiming(field_id, None, name, 40, wall, wall, cpu, None, None, 1.0, answer)


CALLS = [
    _call("nvmlDeviceGetPowerUsage", (0.9, 0.94, 0.86), 1.6),
    # Two arguments of one function: one entry over all five calls, the CPU weighted by calls.
    _call("nvmlDeviceGetClockInfo(SM)", (1.0, 1.1, 1.2), 1.0),
    _call("nvmlDeviceGetClockInfo(MEM)", (1.4, 1.5), 2.0),
    _call("nvmlDeviceGetTotalEnergyConsumption", (4033.46, 4100.0, 3990.0), 3950.64),
    # The batch is priced from its fields; it has no entry of its own.
    _call("nvmlDeviceGetFieldValues(13 fields)", (4396.6, 4400.0, 4390.0), 4382.9),
    # Refused: nothing timed, no entry.
    CallTiming(
        "nvmlDeviceGetGridLicensableFeatures_v4", False, 0, None, None, 1.0, "NOT_SUPPORTED"
    ),
]
FIELDS = [
    _field(138, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 10.84, 10.46, "NOT_SUPPORTED"),
    _field(83, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 4054.06, 4025.34),
    _field(94, "NVML_FI_DEV_PCIE_REPLAY_COUNTER", 147.7, 147.7),
]


@pytest.fixture
def text() -> str:
    header = cost_header("real", "2026-11-26", "python -m benchmarks.real_gpu")
    return cost_yaml(cost_table(RECORD, CALLS, FIELDS, host_reference_us=1530.04), header)


def test_the_table_has_the_schema_the_cost_model_reads(text: str) -> None:
    table = small_yaml.load(text)
    assert list(table) == [
        "model_name",
        "pci_device_id",
        "driver_version",
        "source",
        "captured",
        "reference_us",
        "calls",
        "fields",
    ]
    assert table["reference_us"] == 1530.0
    assert table["pci_device_id"] == "0x233510DE" and table["captured"] == "2026-11-26"
    assert table["calls"] == {
        "nvmlDeviceGetClockInfo": {"wall_us": 1.2, "cpu_us": 1.4},
        "nvmlDeviceGetPowerUsage": {"wall_us": 0.9, "cpu_us": 1.6},
        "nvmlDeviceGetTotalEnergyConsumption": {"wall_us": 4033.5, "cpu_us": 3950.6},
    }
    assert table["fields"] == {
        83: {"name": "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "wall_us": 4054.1, "cpu_us": 4025.3},
        94: {"name": "NVML_FI_DEV_PCIE_REPLAY_COUNTER", "wall_us": 147.7, "cpu_us": 147.7},
        138: {
            "name": "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
            "wall_us": 10.8,
            "cpu_us": 10.5,
            "return": "NOT_SUPPORTED",
        },
    }
    model = call_costs.load_table(text)
    assert model.reference_us == 1530.0
    assert model.call("nvmlDeviceGetTotalEnergyConsumption").cpu_us == 3950.6
    assert model.fields([83, 94]).cpu_us == pytest.approx(4025.3 + 147.7)


def test_keys_are_sorted_one_entry_a_line(text: str) -> None:
    lines = text.splitlines()
    assert lines[0] == (
        "# NVML call costs measured on a real GPU by `python -m benchmarks.real_gpu` on 2026-11-26."
    )
    assert "reference_us: 1530.0" in lines
    calls = lines[lines.index("calls:") + 1 : lines.index("fields:")]
    assert calls == [
        "  nvmlDeviceGetClockInfo: {wall_us: 1.2, cpu_us: 1.4}",
        "  nvmlDeviceGetPowerUsage: {wall_us: 0.9, cpu_us: 1.6}",
        "  nvmlDeviceGetTotalEnergyConsumption: {wall_us: 4033.5, cpu_us: 3950.6}",
    ]
    fields = lines[lines.index("fields:") + 1 :]
    assert [line.split(":")[0] for line in fields] == ["  83", "  94", "  138"]
    assert fields[2] == (
        "  138: {name: NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, wall_us: 10.8, cpu_us: 10.5, "
        "return: NOT_SUPPORTED}"
    )


def test_a_simulated_table_says_so() -> None:
    header = cost_header("simulated", "2026-11-27", "python -m benchmarks.real_gpu")
    text = cost_yaml(cost_table({**RECORD, "source": "simulated"}, CALLS, FIELDS), header)
    assert text.startswith("# NVML call costs of a SIMULATED GPU")
    assert "do not commit" in text.splitlines()[1]
    assert small_yaml.load(text)["source"] == "simulated"


def test_the_committed_table_reads_back_through_the_same_writer() -> None:
    """The simulator's own table was written by hand from the H200 run; what the harness
    writes must read the same way, so a rerun can replace it."""
    committed = (Path(call_costs.__file__).parent / call_costs.MEASURED_TABLE).read_text()
    table = small_yaml.load(committed)
    again = small_yaml.load(cost_yaml(table, "header"))
    assert again == table


def test_all_three_files_share_the_models_slug(tmp_path: Path, text: str) -> None:
    report = RunReport("NVIDIA H200", False, 3, "580.159.04", 1, "no load: test")
    record = {**RECORD, "mig_profiles": []}
    written = write_outputs(tmp_path, report, record, "header", text)
    assert [written.report.name, written.record.name, written.costs.name] == [
        "real-gpu-nvidia-h200.md",
        "device-record-nvidia-h200.yaml",
        "nvml-costs-nvidia-h200.yaml",
    ]
    assert written.costs.read_text() == text
    with pytest.raises(ValueError, match="identifier"):
        write_outputs(tmp_path / "x", report, record, "h", text + "# GPU-91a7bbb9-6668-552d-\n")
    assert not (tmp_path / "x" / "nvml-costs-nvidia-h200.yaml").exists()

"""The real-GPU harness (benchmarks/real_gpu) without a GPU: its load-response verdicts, timings,
report, device record and cost table in process against the simulator, and one whole run on the
simulated node as `make validate-gpu` would start it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from benchmarks.real_gpu.accounting import ProcessCheck
from benchmarks.real_gpu.compare import Check
from benchmarks.real_gpu.latency import (
    SLOW_FIELD_US,
    CallTiming,
    FieldTiming,
    field_requests,
    percentile,
    return_name,
    time_fields,
    time_nvml_calls,
    timed_calls,
)
from benchmarks.real_gpu.load import (
    GPM_FAMILIES,
    POWER,
    SM_CLOCK,
    TEMPERATURE,
    UTIL,
    board_values,
    load_response,
    parse_banner,
)
from benchmarks.real_gpu.report import (
    RECORD_KEYS,
    ErrorGrowth,
    RunReport,
    device_record,
    failures,
    model_slug,
    nvml_errors,
    record_yaml,
    refuse_identifiers,
    render,
    unsupported_handling,
)
from benchmarks.real_gpu.run import UsageError, merge_checks, parse_args
from benchmarks.real_gpu.usage import ProcessUsage
from kube_gpu_exporter.exporter.nvml import device_reader
from kube_gpu_exporter.exporter.nvml.device_reader import BATCHED_FIELDS, NVLINK_FIELDS
from kube_gpu_exporter.exporter.simulator import call_costs
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet

REPO = Path(__file__).resolve().parents[2]
UUID_OR_SERIAL = re.compile(r"(GPU|MIG)-[0-9a-f]{8}-|serial", re.I)
GPU_A, GPU_B = "00000000:18:00.0", "00000000:2a:00.0"


def _scrape(family: str, value: float, gpu: str = GPU_A) -> dict[str, dict[str, float]]:
    return {family: {gpu: value}}


def _verdict(family: str, idle: list[float], load: list[float]) -> bool | None:
    responses = load_response(
        [_scrape(family, v) for v in idle], [_scrape(family, v) for v in load], True, [family]
    )
    assert len(responses) == 1
    return responses[0].ok


# Load response


@pytest.mark.parametrize(
    ("family", "idle", "load", "ok"),
    [
        (UTIL, [0, 2], [95, 99], True),
        (UTIL, [10, 10], [30, 35], False),  # +22.5 points: under the 30-point threshold
        (POWER, [100, 100], [125, 125], True),
        (POWER, [100, 100], [110, 115], False),
        (TEMPERATURE, [30, 31], [34, 35], True),
        (TEMPERATURE, [30, 30], [30, 31], True),  # under 2 C, but it rose
        (TEMPERATURE, [31, 31], [30, 31], False),
        (SM_CLOCK, [345, 345], [1980, 1980], True),
        (SM_CLOCK, [1980, 1980], [1980, 1980], False),
        ("DCGM_FI_PROF_SM_ACTIVE", [0.0, 0.01], [0.8, 0.9], True),
        ("DCGM_FI_PROF_SM_ACTIVE", [0.2, 0.2], [0.9, 0.9], False),  # busy while idle
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", [0.0, 0.0], [0.02, 0.03], False),  # never rose
    ],
)
def test_load_response_thresholds(family: str, idle: list, load: list, ok: bool) -> None:
    assert _verdict(family, idle, load) is ok


def test_load_response_not_judged_without_load_or_gpm() -> None:
    idle = [{UTIL: {GPU_A: 1.0, GPU_B: 2.0}}]
    load = [{UTIL: {GPU_A: 1.0, GPU_B: 2.0}}]
    responses = load_response(idle, load, load_ran=False, families=[UTIL, *GPM_FAMILIES])
    by_family = {(r.family, r.gpu): r for r in responses}
    assert {by_family[(UTIL, g)].ok for g in (GPU_A, GPU_B)} == {None}
    assert by_family[(UTIL, GPU_A)].note == "no load generator"
    for family in GPM_FAMILIES:
        assert by_family[(family, "-")].ok is None
        assert by_family[(family, "-")].note == "GPM not exported"


def test_board_values_keep_whole_gpus_and_lowercase_bus_ids() -> None:
    text = (
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",pci_bus_id="00000000:2A:00.0"} 97\n'
        "# TYPE DCGM_FI_PROF_SM_ACTIVE gauge\n"
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",pci_bus_id="00000000:18:00.0"} 0.5\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",pci_bus_id="00000000:18:00.0",GPU_I_ID="3"} 0.9\n'
        "# TYPE DCGM_FI_DEV_SM_CLOCK gauge\n"
        "DCGM_FI_DEV_SM_CLOCK 1\n"
    )
    assert board_values(text) == {
        UTIL: {GPU_B: 97.0},
        "DCGM_FI_PROF_SM_ACTIVE": {GPU_A: 0.5},
    }


def test_load_banner() -> None:
    assert parse_banner("backend=torch gpus=8 note=float16 8192x8192 matmul\n") == (
        "torch",
        8,
        "float16 8192x8192 matmul",
    )
    assert parse_banner("backend=none gpus=0 note=PyTorch is not installed; CuPy is not installed")[
        0
    ] == ("none")
    with pytest.raises(ValueError, match="not its backend"):
        parse_banner("Traceback (most recent call last):")


# nvitop-exporter beside ours


# Timings


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.95) == 95.0
    assert percentile(values, 0.5) == 50.0
    assert percentile([7.0], 0.95) == 7.0


def test_timed_calls_cover_every_call_of_the_sweep() -> None:
    """A function the device reader starts calling must be timed too."""
    source = (REPO / "kube_gpu_exporter" / "exporter" / "nvml" / "device_reader.py").read_text()
    called = set(re.findall(r'"(nvml[A-Za-z0-9_]+)"', source))
    # The deprecated spelling is only tried where the newer one is missing from the driver.
    fallbacks = {"nvmlDeviceGetCurrentClocksThrottleReasons"}
    timed = {spec.label.split("(", 1)[0] for spec in timed_calls(pynvml)}
    assert called - fallbacks - timed == set()


class _FieldBatches:
    """An NVML that answers nothing and notes the ids each labelled field batch asks for."""

    def __init__(self) -> None:
        self.label = ""
        self.asked: dict[str, list[object]] = {}

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def nvmlDeviceGetFieldValues(self, handle: Any, ids: list[object]) -> None:
        self.asked.setdefault(self.label, list(ids))


def test_the_sweeps_field_batch_leaves_out_the_fields_read_now_and_then() -> None:
    """Where the exporter reads its slow fields (energy, PCIe replays, ECC, remapping) only now
    and then, the batch of every sweep is timed without them and the full one apart."""
    nvml = _FieldBatches()
    asked = nvml.asked
    batches = [t for t in timed_calls(nvml) if t.label.startswith("nvmlDeviceGetFieldValues")]
    for spec in batches:
        nvml.label = spec.label
        spec.call(None)
    every = [t.label for t in batches if t.per_sweep]
    assert len(every) == 1
    slow = set(getattr(device_reader, "SLOW_FIELDS", {}))
    assert not slow & set(asked[every[0]])
    everything = {*BATCHED_FIELDS, device_reader.POWER_AVERAGE, device_reader.POWER_INSTANT}
    assert set().union(*asked.values()) == everything
    assert len(batches) == (2 if slow else 1)


@pytest.fixture
def slow_sim() -> Iterator[FakeNvml]:
    """The default fleet with its call latency on, the PCIe window shortened."""
    sim = FakeNvml(replace(default_fleet(), pcie_window_ms=2.0))
    sim.api.nvmlInit()
    yield sim
    sim.api.nvmlShutdown()
    sim.close()


def test_timings_see_the_simulators_costs(slow_sim: FakeNvml) -> None:
    """The fake charges each call the CPU its cost model says (call_costs.py); the timings
    must find at least that much of it on the calling thread, and the PCIe window as a wait."""
    timings = time_nvml_calls(slow_sim.api, repeats=10)
    assert {t.label for t in timings} >= {
        "nvmlDeviceGetTemperature",
        "nvmlGpmMetricsGet",
        "nvmlDeviceGetTotalEnergyConsumption",
    }
    for timing in timings:
        if timing.function == "nvmlDeviceGetGpuFabricInfoV":
            # The default node's H100s are in no NVLink fabric: NVML refuses, as on a real one.
            assert timing.error == "NOT_SUPPORTED", timing
            continue
        assert timing.error is None, timing
        assert timing.median_us is not None and timing.cpu_us is not None
        assert timing.p95_us is not None and timing.p95_us >= timing.median_us
        assert timing.simulated_us > 0, timing
        # Charged as the same work as on the measured host, so in this host's time; a shared
        # machine's speed wanders between the calls and the ratio's own timing, hence 0.4.
        charged = call_costs.MEASURED.call(timing.function).cpu_us
        if charged >= 50:
            assert timing.cpu_us >= 0.4 * charged * call_costs.BURNER.host_ratio(), timing
    pcie = [t for t in timings if t.function == "nvmlDeviceGetPcieThroughput"]
    assert len(pcie) == 2
    for timing in pcie:
        assert timing.median_us is not None and timing.median_us >= 2000 * 0.95
        assert timing.simulated_us == 20_000  # the default fleet's window, not the test's


def test_each_field_is_timed_alone_and_the_costly_ones_flagged(slow_sim: FakeNvml) -> None:
    fields = time_fields(slow_sim.api, repeats=10)
    requested = field_requests()
    assert len(fields) == len(requested) == len(BATCHED_FIELDS) + 2 + len(NVLINK_FIELDS) + 1
    # The exporter asks for NVLink fields per link; link 0 stands for them all.
    assert {(f.field_id, f.scope) for f in fields if f.scope is not None} == {
        (field_id, 0) for field_id in NVLINK_FIELDS
    }
    medians = [f.median_us or 0.0 for f in fields]
    assert medians == sorted(medians, reverse=True)
    by_id = {f.field_id: f for f in fields}
    energy = by_id[pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
    assert energy.name == "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    # The model charges 5.8 ms of the measured host's CPU for it and 148 µs for the replay
    # counter, as the same work here (call_costs.py).
    ratio = call_costs.BURNER.host_ratio()
    assert energy.slow and energy.cpu_us is not None and energy.cpu_us >= 0.4 * 5800 * ratio
    replay = by_id[pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER]
    assert replay.cpu_us is not None and replay.cpu_us >= 0.4 * 147.7 * ratio
    assert fields[0].field_id == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION
    # The H100s retire no pages (they remap rows), as real Ampere and newer boards answer.
    retired = {f.name for f in fields if f.name.startswith("NVML_FI_DEV_RETIRED_")}
    assert len(retired) == 3
    assert all(f.calls == 10 for f in fields)
    assert all((f.nvml_return == "NOT_SUPPORTED") == (f.name in retired) for f in fields)
    assert fields[0] is energy  # the slowest comes first


def test_a_field_is_slow_on_wall_or_on_cpu_time() -> None:
    def timing(median: float, cpu: float) -> FieldTiming:
        return FieldTiming(83, None, "x", 10, median, median, cpu, None, None, 1.0, None)

    assert not timing(SLOW_FIELD_US, SLOW_FIELD_US).slow
    assert timing(SLOW_FIELD_US + 1, 1.0).slow
    assert timing(1.0, SLOW_FIELD_US + 1).slow


def test_field_return_codes_are_named() -> None:
    assert return_name(pynvml.NVML_SUCCESS) is None
    assert return_name(pynvml.NVML_ERROR_NOT_SUPPORTED) == "NOT_SUPPORTED"
    assert return_name(9999) == "ERROR_9999"


# The device record


def test_device_record_of_the_simulated_model(slow_sim: FakeNvml) -> None:
    record = device_record(slow_sim.api, "simulated", {"nvmlDeviceGetEccMode": "ok"})
    assert tuple(record) == RECORD_KEYS
    assert record["model_name"] == "NVIDIA H100 80GB HBM3"
    assert re.fullmatch(r"0x[0-9A-F]{8}", record["pci_device_id"])
    assert record["memory_total_mib"] == 81559
    assert record["power_limit_default_w"] == 700
    assert record["max_clocks_mhz"]["sm"] > 0 and record["max_clocks_mhz"]["memory"] > 0
    assert record["gpm_supported"] is True and record["mig_capable"] is True
    # GPU 0 has MIG off; the profiles come from a MIG-enabled GPU of the same model.
    names = {p["name"] for p in record["mig_profiles"]}
    assert {"1g.10gb", "7g.80gb"} <= names
    support = record["nvml_support"]
    assert support["nvmlDeviceGetPowerManagementLimitConstraints"] == "ok"
    # The H100 model has no published bounds: the fake answers its default for both.
    assert record["power_limit_min_w"] == record["power_limit_max_w"] == 700
    assert support["nvmlDeviceGetEccMode"] == "ok"
    text = record_yaml(record, "header line")
    assert text.startswith("# header line\n")
    assert yaml.safe_load(text) == record
    assert not UUID_OR_SERIAL.search(text)


def test_identifiers_are_refused() -> None:
    with pytest.raises(ValueError, match="identifier"):
        refuse_identifiers("uuid: GPU-91a7bbb9-6668-552d-9865-d41f6d8f232b", "x")
    with pytest.raises(ValueError, match="identifier"):
        record_yaml({"serial": "1650123456789"}, "h")
    refuse_identifiers("model_name: NVIDIA H200", "x")


def test_model_slug() -> None:
    assert model_slug("NVIDIA H200") == "nvidia-h200"
    assert model_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    assert model_slug("  ") == "unknown-gpu"


# NOT_SUPPORTED handling and the report


ERRORS = (
    "# TYPE kube_gpu_exporter_nvml_errors_total counter\n"
    "kube_gpu_exporter_nvml_errors_total"
    '{function="nvmlDeviceGetEncoderUtilization",error="NOT_SUPPORTED"} %d\n'
    "kube_gpu_exporter_nvml_errors_total"
    '{function="nvmlDeviceGetDecoderUtilization",error="NOT_SUPPORTED"} 1\n'
)


def test_unsupported_handled_only_when_quiet() -> None:
    errors = ErrorGrowth(nvml_errors(ERRORS % 1), nvml_errors(ERRORS % 40))
    assert errors.grown("nvmlDeviceGetEncoderUtilization") == 39
    assert errors.grown("nvmlDeviceGetDecoderUtilization") == 0
    support = {
        "nvmlDeviceGetEncoderUtilization": "NOT_SUPPORTED",
        "nvmlDeviceGetDecoderUtilization": "NOT_SUPPORTED",
        "nvmlDeviceGetMemoryInfo": "NOT_SUPPORTED",
        "nvmlDeviceGetName": "ok",
    }
    rows = {u.function: u for u in unsupported_handling(support, {"DCGM_FI_DEV_FB_USED"}, errors)}
    assert set(rows) == set(support) - {"nvmlDeviceGetName"}
    assert not rows["nvmlDeviceGetEncoderUtilization"].handled  # an error storm
    assert rows["nvmlDeviceGetDecoderUtilization"].handled
    memory = rows["nvmlDeviceGetMemoryInfo"]
    assert not memory.families_absent and not memory.handled  # a series it cannot have


MB = 1_000_000


def _usage(user: float, system: float, rss_mb: float) -> ProcessUsage:
    rss = int(rss_mb * MB)
    return ProcessUsage(user, system, 240.0, [rss, rss], rss + MB)


def _report(simulate: bool, note: str = "", nvitop: bool = True) -> RunReport:
    checks = [
        Check("DCGM_FI_DEV_FB_TOTAL", GPU_A, 143771.0, 143771.0, 0.0, True),
        Check("DCGM_FI_DEV_GPU_TEMP", GPU_A, 40.0, 52.0, 3.0, False, note),
    ]
    energy = FieldTiming(
        83, None, "NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 300, 4054.1, 7195.6, 4025.3, 0.0,
        4025.3, 4025.3, None,
    )  # fmt: skip
    nvlink = FieldTiming(
        138, 0, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", 300, 10.8, 14.6, 10.5, None, None,
        10.8, "NOT_SUPPORTED",
    )  # fmt: skip
    return RunReport(
        model_name="NVIDIA H200",
        simulate=simulate,
        minutes=3,
        driver_version="580.159.04",
        gpus=1,
        load_description="torch on 1 GPU(s): float16 matmul",
        checks={"pynvml": checks},
        responses=load_response([_scrape(UTIL, 0)], [_scrape(UTIL, 99)], True, [UTIL]),
        unsupported=unsupported_handling(
            {"nvmlDeviceGetEncoderUtilization": "NOT_SUPPORTED"},
            set(),
            ErrorGrowth({}, {}),
        ),
        processes=[
            ProcessCheck(GPU_A, 449, True, 11122.0, 11114.0, "nvidia-smi", True),
            ProcessCheck(GPU_B, 449, True, 10507.0, 11114.0, "nvidia-smi", False),
        ],
        timings=[
            CallTiming(
                "nvmlDeviceGetTemperature", True, 300, 31.5, 44.0, 100.0, None, 33.0, 3.0, 30.0
            )
        ],
        fields=[energy, nvlink],
        sweep_seconds=[0.004, 0.005, 0.006],
        sweep_estimate_us=(410.0, 1300.0),
        scrape_seconds=[0.001, 0.002],
        usage=_usage(0.4, 1.6, 75.0),
        nvitop=_usage(0.2, 1.0, 66.0) if nvitop else None,
        nvitop_note="nvitop-exporter 1.7.2" if nvitop else "nvitop-exporter is not installed",
        run_seconds=221.0,
    )


def test_report_renders_every_section() -> None:
    text = render(_report(simulate=False))
    assert text.startswith("# Real-GPU validation: NVIDIA H200\n")
    assert "2 checks, 1 failed." in text
    assert (
        "| DCGM_FI_DEV_GPU_TEMP | 00000000:18:00.0 | 40.000 | 52.000 | 3.000 | **FAIL** |" in text
    )
    assert (
        "| nvmlDeviceGetEncoderUtilization | NOT_SUPPORTED | DCGM_FI_DEV_ENC_UTIL | absent |"
        in (text)
    )
    assert f"| {UTIL} | {GPU_A} | 0.00 | 99.00 | load - idle >= 30 points | ok |" in text
    assert (
        "| nvmlDeviceGetTemperature | every sweep | 300 | 31.5 | 44.0 | 33.0 | 3.0 / 30.0 | 100.0 "
        "| 0.32x |" in text
    )
    assert "410 µs measured, 1,300 µs in the simulator's model" in text
    # Fields, the costly one flagged (its CPU in the kernel, as on the H200), a refusal named.
    assert (
        "| 83 (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) | 300 | 4,054.1 | 7,195.6 | 4,025.3 "
        "| 0.0 / 4,025.3 | 4,025.3 |  | **slow** |" in text
    )
    assert "| 138 link 0 (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX) | 300 | 10.8 |" in text
    assert "| - | 10.8 | NOT_SUPPORTED |  |" in text
    # The exporter's CPU split, per hour: 0.4 and 1.6 s over 240 s.
    assert "| exporter CPU s/h user / system (1 s interval here) | 6.0 / 24.0 |" in text
    assert "| exporter CPU s/h (1 s interval here) | 30.0 |" in text
    assert "| CPU s/h | 30.0 | 18.0 | 1.67x |" in text
    assert "| RSS median / peak MB | 75.0 / 76.0 | 66.0 / 67.0 | 1.14x |" in text
    assert f"| {GPU_B} | 449 | yes | 10,507.0 | 11,114.0 | nvidia-smi | **FAIL** |" in text
    assert "Simulated run" not in text
    assert "Simulated run" in render(_report(simulate=True))


def test_the_summary_lists_each_failure_and_the_headline_figures() -> None:
    report = _report(simulate=False)
    text = render(report)
    summary = text[text.index("## Summary") : text.index("## Exported families")]
    lines = failures(report)
    assert lines == [
        "DCGM_FI_DEV_GPU_TEMP on 00000000:18:00.0 against pynvml: exported 40.000, "
        "reference 52.000, tolerance 3.000",
        "process accounting on 00000000:2a:00.0: exported 10,507.0 MiB, reference 11,114.0 MiB "
        "(nvidia-smi)",
    ]
    assert "2 failed check(s):" in summary
    for line in lines:
        assert f"- **FAIL** {line}\n" in summary
    assert "- Sweep: 5.00 ms median, 6.00 ms p95" in summary
    assert "- Exporter: 6.0 s/h user + 24.0 s/h system = 30.0 CPU-s/h; RSS 75.0 MB median" in (
        summary
    )
    assert "- nvitop-exporter 1.7.2 beside it: 3.0 s/h user + 15.0 s/h system" in summary
    assert "- Ours / nvitop-exporter: CPU 1.67x, RSS 1.14x" in summary
    assert (
        "- Fields above 100 µs read alone: 83 (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) "
        "4,054 µs wall, 4,025 µs CPU" in summary
    )
    assert "- Process accounting: 2 check(s), 2 judged, 1 failed" in summary
    assert "- The run took 3 min 41 s." in summary


def test_a_report_without_nvitop_or_a_process_check_says_why() -> None:
    report = replace(_report(simulate=False, nvitop=False), processes=[])
    report.processes_note = "no load ran (PyTorch is not installed; CuPy is not installed)"
    text = render(report)
    assert "- Beside nvitop-exporter: nvitop-exporter is not installed" in text
    assert "No comparison: nvitop-exporter is not installed." in text
    assert "Ours / nvitop-exporter" not in text
    assert "- Process accounting: could not run: no load ran (PyTorch is not installed;" in text
    assert "Could not run: no load ran (PyTorch is not installed; CuPy is not installed)." in text
    assert len(failures(report)) == 1  # the temperature only


def test_report_refuses_a_uuid_in_any_cell() -> None:
    with pytest.raises(ValueError, match="identifier"):
        render(_report(False, note="seen on GPU-91a7bbb9-6668-552d-9865-d41f6d8f232b"))


def test_checks_merge_to_the_first_failure() -> None:
    ok = Check("DCGM_FI_DEV_GPU_TEMP", GPU_A, 40.0, 41.0, 3.0, True)
    bad = Check("DCGM_FI_DEV_GPU_TEMP", GPU_A, 40.0, 52.0, 3.0, False)
    other = Check("DCGM_FI_DEV_FB_TOTAL", GPU_A, 1.0, 1.0, 0.0, True)
    merged = merge_checks([[ok, other], [bad, other], [ok, other]])
    assert len(merged) == 2
    temp = next(c for c in merged if c.family == "DCGM_FI_DEV_GPU_TEMP")
    assert temp.ok is False and temp.reference == 52.0
    assert temp.note == "failed in 1 of 3 snapshots"


def test_the_default_run_leaves_time_to_start_and_time_calls_within_five_minutes() -> None:
    # The phases, plus the load's start, the exporters' start and stop and the call timings,
    # which took under a minute on one H200; five minutes is the budget on 1 to 8 GPUs.
    assert parse_args([]).minutes <= 3.0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--minutes", "soon"], "not a number of minutes"),
        (["--minutes", "500"], "outside 0.05..120"),
        (["--repeats", "3"], "outside 10..100000"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_are_one_line(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        parse_args(argv)
    assert "\n" not in str(caught.value)


# The whole run

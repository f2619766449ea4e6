"""The real-GPU harness (benchmarks/real_gpu) without a GPU: its load-response verdicts, timings,
report and device record in process against the simulator, and one whole run on the simulated
node as `make validate-gpu` would start it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pynvml
import pytest
import yaml

from benchmarks.real_gpu.compare import Check
from benchmarks.real_gpu.latency import (
    SIM_CALL_US,
    CallTiming,
    ProcessUsage,
    percentile,
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
    model_slug,
    nvml_errors,
    record_yaml,
    refuse_identifiers,
    render,
    unsupported_handling,
)
from benchmarks.real_gpu.run import UsageError, merge_checks, parse_args
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet

REPO = Path(__file__).resolve().parent.parent
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


# Timings


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.95) == 95.0
    assert percentile(values, 0.5) == 50.0
    assert percentile([7.0], 0.95) == 7.0


def test_timed_calls_cover_every_call_of_the_sweep() -> None:
    """A function the device reader starts calling must be timed too."""
    source = (REPO / "exporter" / "nvml" / "device_reader.py").read_text()
    called = set(re.findall(r'"(nvml[A-Za-z0-9_]+)"', source))
    # The deprecated spelling is only tried where the newer one is missing from the driver.
    fallbacks = {"nvmlDeviceGetCurrentClocksThrottleReasons"}
    timed = {spec.label.split("(", 1)[0] for spec in timed_calls()}
    assert called - fallbacks - timed == set()


@pytest.fixture
def slow_sim() -> Iterator[FakeNvml]:
    """The default fleet with its call latency on, the PCIe window shortened."""
    sim = FakeNvml(replace(default_fleet(), pcie_window_ms=2.0)).install()
    pynvml.nvmlInit()
    yield sim
    pynvml.nvmlShutdown()
    sim.uninstall()


def test_timings_see_the_simulators_latency(slow_sim: FakeNvml) -> None:
    timings = time_nvml_calls(repeats=10)
    assert {t.label for t in timings} >= {"nvmlDeviceGetTemperature", "nvmlGpmMetricsGet"}
    for timing in timings:
        assert timing.error is None, timing
        assert timing.median_us is not None
        # The fake sleeps its call latency in every call; nothing can come back sooner.
        assert timing.median_us >= SIM_CALL_US * 0.95, timing
        assert timing.p95_us is not None and timing.p95_us >= timing.median_us


# The device record


def test_device_record_of_the_simulated_model(slow_sim: FakeNvml) -> None:
    record = device_record("simulated", {"nvmlDeviceGetEccMode": "ok"})
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


def _report(simulate: bool, note: str = "") -> RunReport:
    checks = [
        Check("DCGM_FI_DEV_FB_TOTAL", GPU_A, 143771.0, 143771.0, 0.0, True),
        Check("DCGM_FI_DEV_GPU_TEMP", GPU_A, 40.0, 52.0, 3.0, False, note),
    ]
    return RunReport(
        model_name="NVIDIA H200",
        simulate=simulate,
        minutes=4,
        driver_version="580.65.06",
        gpus=1,
        load_description="torch on 1 GPU(s): float16 matmul",
        checks={"pynvml": checks},
        responses=load_response([_scrape(UTIL, 0)], [_scrape(UTIL, 99)], True, [UTIL]),
        unsupported=unsupported_handling(
            {"nvmlDeviceGetEncoderUtilization": "NOT_SUPPORTED"},
            set(),
            ErrorGrowth({}, {}),
        ),
        timings=[CallTiming("nvmlDeviceGetTemperature", True, 300, 31.5, 44.0, 100.0, None)],
        sweep_seconds=[0.004, 0.005, 0.006],
        sweep_estimate_us=(410.0, 1300.0),
        scrape_seconds=[0.001, 0.002],
        usage=ProcessUsage(3.0, 240.0, [50_000_000, 52_000_000], 53_000_000),
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
    assert "| nvmlDeviceGetTemperature | sweep | 300 | 31.5 | 44.0 | 100 | 0.32x |" in text
    assert "410 µs measured, 1,300 µs in the simulator's model" in text
    assert "| exporter CPU s/h (1 s interval here) | 45.0 |" in text
    assert "Simulated run" not in text
    assert "Simulated run" in render(_report(simulate=True))


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


@pytest.mark.timeout(150)
def test_simulated_run_writes_report_and_record(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.real_gpu", "--simulate", "--minutes", "0.3"),
            *("--repeats", "50", "--out", str(tmp_path)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=140,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = tmp_path / "real-gpu-nvidia-h100-80gb-hbm3.md"
    record_path = tmp_path / "device-record-nvidia-h100-80gb-hbm3.yaml"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([report.name, record_path.name])
    record = yaml.safe_load(record_path.read_text())
    assert set(RECORD_KEYS) <= set(record)
    assert record["source"] == "simulated"
    text = report.read_text()
    for written in (text, record_path.read_text()):
        assert not UUID_OR_SERIAL.search(written)
        assert "sim-gpu-node-0" not in written  # the simulated node's host name
    assert "Simulated run" in text
    # Every GPU of the simulated node was compared, and the exporter's figures were read.
    for bus in ("00000000:18:00.0", "00000000:db:00.0"):
        assert f"| modelName | {bus} | NVIDIA H100 80GB HBM3 |" in text
    assert "sweep duration (exporter gauge)" in text
    assert "exporter RSS median / peak MB" in text

"""The real-GPU harness (benchmarks/real_gpu) without a GPU: its load-response verdicts, timings,:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_real_gpu_harness.py."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from benchmarks.real_gpu import neighbour
from benchmarks.real_gpu.latency import (
    field_requests,
)
from benchmarks.real_gpu.load import (
    go,
    prepare_load,
)
from benchmarks.real_gpu.report import (
    RECORD_KEYS,
)
from benchmarks.real_gpu.run import free_port, get
from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.simulator import call_costs
from tests.unit.test_real_gpu_harness import REPO, UUID_OR_SERIAL


@pytest.mark.timeout(60)
def test_the_load_child_starts_on_go_and_says_why_it_cannot_load() -> None:
    """Without PyTorch or CuPy with a GPU here, the child imports, waits for go, then answers
    `backend=none` with the reason."""
    prepared = prepare_load(5.0)
    try:
        assert (prepared.backend, prepared.gpus) == ("pending", 0)
        assert prepared.running  # waiting for go: it never starts on its own
        started = go(prepared, startup_timeout=50)
        assert started.backend == "none" and started.process is None, started
        assert "PyTorch" in started.note  # "is not installed" or "sees no CUDA device"
        assert prepared.process is not None and prepared.process.wait(10) == 0
    finally:
        prepared.stop()


def test_nvitop_runs_on_the_simulated_node_under_simulate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neighbour, "importable", lambda: True)
    assert neighbour.nvitop_argv(9400, simulate=True) == [
        *(sys.executable, "-m", "benchmarks.simulated", "default", "nvitop", "9400", "1"),
    ]
    argv = neighbour.nvitop_argv(9400, simulate=False)
    assert argv is not None and argv[:2] == [sys.executable, "-c"]
    assert argv[3:] == ["--bind-address=127.0.0.1", "--port=9400", "--interval=1"]


def test_nvitop_from_its_script_or_not_at_all(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(neighbour, "importable", lambda: False)
    script = "/opt/tools/nvitop-exporter"
    monkeypatch.setattr(neighbour.shutil, "which", lambda name: script)
    assert neighbour.nvitop_argv(9400, simulate=False) == [
        script,
        "--bind-address=127.0.0.1",
        "--port=9400",
        "--interval=1",
    ]
    assert neighbour.nvitop_argv(9400, simulate=True) is None  # it must import the simulator
    monkeypatch.setattr(neighbour.shutil, "which", lambda name: None)
    absent = neighbour.start(9400, False, REPO, tmp_path / "nvitop.log")
    assert absent.process is None and not absent.running
    assert absent.note == "nvitop-exporter is not installed: no comparison"


def test_an_nvitop_exporter_that_dies_is_noted_not_fatal(tmp_path: Path) -> None:
    log_path = tmp_path / "nvitop.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('no NVML here'); sys.exit(3)"], stdout=log
        )
    dead = neighbour.Neighbour(process, free_port(), "nvitop-exporter 1.7.2")
    neighbour.wait_ready(dead, get, log_path)
    assert dead.process is None
    assert dead.note == "nvitop-exporter exited with status 3 (no NVML here)"


@pytest.mark.timeout(150)
def test_simulated_run_writes_report_record_and_cost_table(tmp_path: Path) -> None:
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
    slug = "nvidia-h100-80gb-hbm3"
    report = tmp_path / f"real-gpu-{slug}.md"
    record_path = tmp_path / f"device-record-{slug}.yaml"
    costs_path = tmp_path / f"nvml-costs-{slug}.yaml"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [report.name, record_path.name, costs_path.name]
    )
    record = yaml.safe_load(record_path.read_text())
    assert set(RECORD_KEYS) <= set(record)
    assert record["source"] == "simulated"
    text = report.read_text()
    for written in (text, record_path.read_text(), costs_path.read_text()):
        assert not UUID_OR_SERIAL.search(written)
        assert "sim-gpu-node-0" not in written  # the simulated node's host name
    assert "Simulated run" in text
    assert text.index("## Summary") < text.index("## Exported families")
    # Every GPU of the simulated node was compared, and the exporter's figures were read.
    for bus in ("00000000:18:00.0", "00000000:db:00.0"):
        assert f"| modelName | {bus} | NVIDIA H100 80GB HBM3 |" in text
    assert "sweep duration (exporter gauge)" in text
    assert "exporter RSS median / peak MB" in text
    assert "exporter CPU s/h user / system (1 s interval here)" in text
    # The exporter's process rows against the harness's simulator, on each whole GPU.
    for bus in ("00000000:18:00.0", "00000000:ab:00.0"):
        assert re.search(
            rf"^\| {re.escape(bus)} \| - \| - \| [\d,.]+ \| [\d,.]+ \| simulator", text, re.M
        )
    assert "no unattributed row" not in text
    # The costly field is named at the top.
    assert "- Fields above 100 µs read alone: 83 (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION)" in text
    if neighbour.importable():
        assert re.search(r"^- Ours / nvitop-exporter: CPU [\d.]+x, RSS [\d.]+x$", text, re.M)
        assert "| CPU s/h user / system |" in text
    else:
        assert "- Beside nvitop-exporter: nvitop-exporter is not installed" in text
    # The cost table is the schema the simulator's cost model reads.
    table = small_yaml.load(costs_path.read_text())
    assert table["source"] == "simulated" and table["model_name"] == "NVIDIA H100 80GB HBM3"
    model = call_costs.load_table(costs_path.read_text())
    assert model.call("nvmlDeviceGetTotalEnergyConsumption").wall_us > 0
    assert set(table["fields"]) == {f if isinstance(f, int) else f[0] for f in field_requests()}

"""The exporter-side benchmark, shortened: all three exporters on the one-GPU node, each with a
real Prometheus scraping it and wrk driving it, and the report built from what they measured."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import exporter_report, exporter_side
from benchmarks.processes import proc_sample
from tests.conftest import wait_for

TINY = exporter_side.Settings(
    fleets=("one-gpu",),
    clients=(1, 4),
    wrk_seconds=1,
    runs=1,
    warmup_seconds=3,
    cpu_window_seconds=4,
    scrape_interval="1s",
    scrape_timeout="1s",
)


@pytest.fixture(scope="module")
def measured():
    [result] = exporter_side.run(TINY, progress=lambda _: None)
    return result


@pytest.mark.timeout(300)
def test_every_exporter_is_measured_the_same_way(measured):
    assert set(measured.measured) == set(exporter_side.PARTICIPANTS)
    for name, m in measured.measured.items():
        assert m.series > 10, name
        assert m.body_bytes > 1000 and m.gzip_bytes is not None and m.gzip_bytes < m.body_bytes
        assert m.cpu_seconds_per_hour > 0, name
        assert 15e6 < m.steady_rss_bytes <= m.peak_rss_bytes < 500e6, name
        # Scrapes during the latency runs may pass the 1 s timeout on a loaded machine; at least
        # the quiet ones must have succeeded, and failures are counted, not hidden.
        assert m.prometheus_scrape_seconds is not None, f"{name}: every Prometheus scrape failed"
        assert 0 < m.prometheus_scrape_seconds < 1.0, name
        assert [(r.clients, r.gzip) for r in m.latency] == [
            (1, False),
            (4, False),
            (1, True),
            (4, True),
        ]
        assert all(r.errors == 0 and 0 < r.p50_ms <= r.p99_ms for r in m.latency), name


def test_in_process_figures_count_calls_and_render(measured):
    ours, baseline = measured.inprocess["ours"], measured.inprocess["baseline"]
    assert 0 < ours["nvml_calls_per_sweep"] < baseline["nvml_calls_per_sweep"]
    assert ours["nvml_calls_by_function"]["nvmlDeviceGetFieldValues"] == 1  # one batch, one GPU
    assert "nvmlDeviceGetPowerUsage" not in ours["nvml_calls_by_function"]  # power is batched
    for name in exporter_side.PARTICIPANTS:
        assert measured.inprocess[name]["render_ms"] > 0


def test_report_has_every_exporter_and_every_row(measured):
    report = exporter_report.render([measured])
    for name in exporter_report.NAMES.values():
        assert report.count(f"| {name} |") == 1
    assert report.count("| `one-gpu` |") == 4  # clients x gzip rows of the latency table
    assert "p99 baseline / ours" in report


def test_a_quiet_window_stretches_until_a_cpu_tick_is_counted():
    """A 10 ms tick is coarse beside a short window: the rate must not read 0 by chance."""
    idle = subprocess.Popen(["sleep", "60"])
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        start = proc_sample(idle.pid)
        samples, seconds = exporter_side.quiet_window(idle.pid, start, 0.3)
        # Never a tick: the window ran to its longest, and the rate honestly reads 0.
        assert seconds >= 1.2 and samples[-1].cpu_seconds == start.cpu_seconds

        assert wait_for(lambda: proc_sample(busy.pid).cpu_seconds > 0, timeout=10)
        start = proc_sample(busy.pid)
        samples, seconds = exporter_side.quiet_window(busy.pid, start, 0.3)
        assert seconds >= 0.3 and samples[-1].cpu_seconds > start.cpu_seconds
    finally:
        for process in (idle, busy):
            process.kill()
            process.wait()

"""The exporter-side benchmark, shortened: all three exporters on the one-GPU node, each with a
real Prometheus scraping it and wrk driving it, and the report built from what they measured."""

from __future__ import annotations

import pytest

from benchmarks import exporter_report, exporter_side

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
        assert m.prometheus_scrape_seconds is not None, f"{name}: a Prometheus scrape failed"
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

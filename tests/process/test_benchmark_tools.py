"""The benchmarks' parsers and bookkeeping, on real output formats: the cases that start a process
or need a system package's binary; the others are in tests/unit/test_benchmark_tools.py."""

from __future__ import annotations

from benchmarks import pod_list_memory


def test_the_pod_list_benchmark_builds_its_list_to_size_and_measures_a_peak() -> None:
    pods, size, peak_mb = pod_list_memory.measure(256 * 1024)
    assert 200_000 < size <= 256 * 1024
    assert 40 < pods < 100, "pods of about 3.7 KB"
    # The simulated exporter alone holds some 90 MB; a peak below that was read from nothing.
    assert 60 < peak_mb < 200

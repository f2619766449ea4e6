"""benchmarks/energy_drift.py, shortened: the exported energy counter beside the simulated
board's own over simulated time, with the read interval following the drift or fixed."""

from __future__ import annotations

from benchmarks import energy_drift


def test_reads_stretch_with_a_small_drift_and_the_counter_stays_close() -> None:
    gpus = energy_drift.measure(5.0, 20.0, fixed=False)
    assert len(gpus) == 8
    for gpu in gpus:
        # Read at 0, 60, 180, 420 and 900 s: the interval doubling from the class's 60 s.
        assert gpu.reads_per_hour == 15.0, gpu
        assert gpu.settled_interval_seconds == 480.0, gpu
        assert gpu.worst_error_of_hour < 0.02, gpu
        assert 0 < gpu.worst_window_error[10] < 0.1, gpu
    report = energy_drift.render([(5.0, False, gpus)])
    assert report.count("| 5 s | as the drift allows |") == 8


def test_the_fixed_rule_reads_every_class_interval() -> None:
    gpus = energy_drift.measure(5.0, 20.0, fixed=True)
    assert {g.settled_interval_seconds for g in gpus} == {60.0}
    assert {g.reads_per_hour for g in gpus} == {60.0}
    from kube_gpu_exporter.exporter.nvml.energy_estimate import LONGEST_STRETCH

    assert LONGEST_STRETCH == 10.0, "put back after the run"

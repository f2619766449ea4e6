"""benchmarks/sweep_after_idle.py, reduced for CI: a sweep's CPU back to back and after a
pause. It sleeps for real and pins the process to one CPU, so it runs in the bench tier, alone."""

from __future__ import annotations

import os

from benchmarks import sweep_after_idle


def test_each_pause_is_measured_and_reported_against_back_to_back() -> None:
    cpus = os.sched_getaffinity(0)
    pauses = sweep_after_idle.measure("one-h200", sweeps=2, gaps=[0.05])
    assert os.sched_getaffinity(0) == cpus, "the caller's CPUs are put back"
    assert [(p.how, p.seconds, p.sweeps) for p in pauses] == [
        ("back to back", 0.0, sweep_after_idle.BACK_TO_BACK_SWEEPS),
        ("sleeping", 0.05, 2),
        ("spinning", 0.05, 2),
    ]
    assert all(p.cpu_ms > 0 for p in pauses)
    report = sweep_after_idle.render("one-h200", pauses)
    assert "| back to back | 200 |" in report
    assert "| sleeping 0.05 s | 2 |" in report and "| spinning 0.05 s | 2 |" in report
    assert report.splitlines()[-3].endswith(" 1.0 |")

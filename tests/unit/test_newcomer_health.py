"""Health that tells the truth (docs/health.md): a real exporter process without NVML, with the:
the cases that run inside this process; the others are in tests/process/test_newcomer_health.py."""

from __future__ import annotations

import logging

from kube_gpu_exporter.exporter.readiness import ReadinessLog, first_sync
from tests.process.test_newcomer_health import Clock


def test_the_readiness_log_repeats_once_a_minute_and_on_change(caplog):
    clock = Clock()
    why: list[str | None] = ["no NVML sweep has finished yet"]
    readiness = ReadinessLog(lambda: why[0], clock=clock)

    def lines() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name == "kube_gpu_exporter.exporter.readiness"
        ]

    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.readiness")
    readiness.step()
    clock.now += 4.9
    readiness.step()
    assert lines() == []  # within the start's grace
    clock.now += 0.1
    why[0] = "NVML does not answer (nvml_up 0): nvmlInit failed with DRIVER_NOT_LOADED: x"
    for _ in range(60):  # once a second, as the server's loop does
        readiness.step()
        clock.now += 1.0
    assert len(lines()) == 1 and lines()[0].startswith("not ready for 5s: NVML does not")
    readiness.step()  # 60 s after the first line
    assert len(lines()) == 2 and lines()[1].startswith("not ready for 65s")
    why[0] = "the Kubernetes API has not answered this node's pod LIST yet: y"
    readiness.step()  # a new reason is said at once
    assert len(lines()) == 3 and "Kubernetes" in lines()[2]
    clock.now += 10
    why[0] = None
    readiness.step()
    readiness.step()
    assert lines()[3:] == [
        "ready after 75s (was: the Kubernetes API has not answered this node's pod LIST yet: y)"
    ]


def test_first_sync_latches():
    synced = [False]
    problem = first_sync(lambda: synced[0], lambda: "no LIST yet")
    assert problem() == "no LIST yet"
    synced[0] = True
    assert problem() is None
    synced[0] = False  # the API went away after answering once
    assert problem() is None


def test_a_probe_answer_is_a_look_and_the_log_says_when_it_is_ready(caplog):
    clock = Clock()
    readiness = ReadinessLog(lambda: "never asked by a probe's look", clock=clock)
    caplog.set_level(logging.INFO, logger="kube_gpu_exporter.exporter.readiness")
    assert not readiness.ready  # nothing looked yet: the log's own loop looks often
    readiness.observe(None)
    assert readiness.ready  # the loop may now look seldom: probes look meanwhile
    clock.now += 30
    readiness.observe("NVML does not answer")  # what a failing probe found
    assert not readiness.ready
    assert [r.getMessage() for r in caplog.records] == [
        "not ready for 30s: NVML does not answer (said again every 60s until ready)"
    ]

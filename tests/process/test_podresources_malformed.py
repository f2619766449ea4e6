"""A kubelet that answers pod-resources calls with malformed HTTP/2 responses, over a real unix
socket: the cases that start a process or need a system package's binary; the others are in
tests/unit/test_podresources_malformed.py."""

from __future__ import annotations

from tests.process.test_process_resilience import post
from tests.support.exporter_process import get, scrape_until, start_exporter
from tests.unit.test_podresources_malformed import (
    MALFORMED_ANSWERS,
    HostileKubelet,
    _socket_path,
    podresources_state,
)


def test_the_exporter_survives_a_kubelet_sending_a_malformed_grpc_status():
    proc, base = start_exporter("--collector.interval=0.2s")
    try:
        path = _socket_path(proc)
        scrape_until(
            base, lambda t: podresources_state(t)[:2] == (1, 1), what="pod-resources up", proc=proc
        )
        post(base, "kubelet/stop")
        hostile = HostileKubelet(path)
        try:
            hostile.answer = MALFORMED_ANSWERS["5,000-digit grpc-status"]
            text = scrape_until(
                base,
                lambda t: podresources_state(t)[2] >= 2,
                what="two MALFORMED errors counted",
                proc=proc,
            )
            assert podresources_state(text)[:2] == (0, 0)
            assert get(f"{base}/healthz")[0] == 200  # the thread is fine; the kubelet is not
        finally:
            hostile.close()
        post(base, "kubelet/start")
        text = scrape_until(
            base,
            lambda t: podresources_state(t)[:2] == (1, 1),
            what="pod-resources up again",
            proc=proc,
        )
        assert 'pod="llm-pretrain-worker-0"' in text
    finally:
        proc.terminate()
        proc.wait(timeout=10)

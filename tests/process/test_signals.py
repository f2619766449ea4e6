"""Signals other than SIGTERM, sent to the real process: none may kill it (Python's default for
SIGHUP, SIGUSR1 and SIGUSR2 ends it on the spot, leaving the simulator's socket directory
behind). SIGHUP re-reads --web.config.file; see test_cert_rotation.py."""

from __future__ import annotations

import signal
import time

from tests.support.exporter_process import LoggedExporter, get, scrape_until


def test_sighup_sigusr1_and_sigusr2_leave_the_exporter_serving(tmp_path):
    exporter = LoggedExporter(tmp_path)
    try:
        scrape_until(exporter.base, lambda t: "DCGM_FI_DEV_GPU_TEMP{" in t, proc=exporter.proc)
        [socket_dir] = exporter.socket_dirs()
        for sig, says in (
            (signal.SIGUSR1, "ignoring SIGUSR1"),
            (signal.SIGUSR2, "ignoring SIGUSR2"),
            (signal.SIGHUP, "SIGHUP: there is no --web.config.file to re-read"),
        ):
            seen = len(exporter.lines)
            exporter.proc.send_signal(sig)
            exporter.wait_for_line(says, after=seen)
            assert get(f"{exporter.base}/metrics")[0] == 200
        assert socket_dir.exists()
        started = time.monotonic()
        assert exporter.stop() == 0
        assert time.monotonic() - started < 5
    finally:
        exporter.stop()
    assert exporter.socket_dirs() == []
    assert exporter.matching("Traceback") == []

"""Signals other than SIGTERM, sent to the real process: none may kill it (Python's default for
SIGHUP, SIGUSR1 and SIGUSR2 ends it on the spot, leaving the simulator's socket directory
behind). SIGHUP re-reads --web.config.file; see test_cert_rotation.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO
from tests.test_process import NotReady, free_port, get, scrape_until


class LoggedExporter:
    """`python -m exporter --simulate FLAGS` whose stderr is collected line by line as it comes,
    with its temporary files (the fake kubelet's socket directory) under `tmpdir`."""

    def __init__(self, tmpdir: Path, *flags: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmpdir = tmpdir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "--simulate",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--collector.interval=1s",
                *flags,
            ],
            cwd=REPO,
            env={**os.environ, "TMPDIR": str(tmpdir)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def matching(self, text: str) -> list[str]:
        return [line for line in list(self.lines) if text in line]

    def wait_for_line(self, text: str, timeout: float = 20.0, after: int = 0) -> str:
        """The first line from number `after` on that contains `text`; NotReady if none comes
        within `timeout` or the process exits first."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.lines[after:] if text in line]
            if found:
                return found[0]
            if self.proc.poll() is not None or time.monotonic() > deadline:
                state = (
                    f"exited with {self.proc.returncode}"
                    if self.proc.poll() is not None
                    else f"no such line after {timeout}s"
                )
                raise NotReady(f"waiting for {text!r}: {state}; stderr ends {self.lines[-5:]!r}")
            time.sleep(0.05)

    def until(self, what: str, condition: Callable[[], bool], timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                raise NotReady(f"{what}: exited with {self.proc.returncode}; {self.lines[-5:]!r}")
            if time.monotonic() > deadline:
                raise NotReady(f"{what}: not within {timeout}s; stderr ends {self.lines[-5:]!r}")
            time.sleep(0.05)

    def socket_dirs(self) -> list[Path]:
        return sorted(self.tmpdir.glob("kube-gpu-exporter-*"))

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=10)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)


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

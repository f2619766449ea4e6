"""The exporter as users run it, for the process-tier tests: `python -m kube_gpu_exporter
--simulate` on a free loopback port, scraped over real HTTP until what a test waits for shows, or
followed through its log lines (LoggedExporter: signals, reloads and rotations are seen in the log
first)."""

from __future__ import annotations

import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from kube_gpu_exporter.bundle.localstack.processes import free_port as listen_port
from tests.conftest import REPO


def free_port() -> int:
    return listen_port("127.0.0.1")


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def start_exporter(
    *flags: str, preexec_fn: Callable[[], None] | None = None
) -> tuple[subprocess.Popen, str]:
    """`python -m kube_gpu_exporter --simulate FLAGS` on a free loopback port; returns it and its
    URL (http://; the port is the same with TLS)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kube_gpu_exporter",
            "--simulate",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.interval=1s",
            *flags,
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=preexec_fn,
    )
    return proc, f"http://127.0.0.1:{port}"


class NotReady(AssertionError):
    """A process never reached the state a test waits for; the message says what it saw."""


def stop_exporter(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not gone within 5 s, and its pipes read to the end."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.communicate()


def scrape_until(
    base: str,
    ready: Callable[[str], bool],
    timeout: float = 20.0,
    *,
    what: str = "the awaited series",
    proc: subprocess.Popen | None = None,
) -> str:
    """Scrape /metrics until `ready(text)` holds and return that text; raise NotReady with the
    last response or error once `timeout` passes, or at once if `proc` has exited."""
    last = "no response yet"
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, text = get(f"{base}/metrics", 2)
        except (OSError, http.client.HTTPException) as exc:
            last = f"{type(exc).__name__}: {exc}"
        else:
            if status == 200 and ready(text):
                return text
            last = f"HTTP {status}, body ending {text[-1500:]!r}"
        if proc is not None and proc.poll() is not None:
            stderr = proc.communicate(timeout=5)[1] if proc.stderr else ""
            raise NotReady(
                f"{base} exited with {proc.returncode} before {what}; {last}; "
                f"stderr ends {(stderr or '')[-2000:]!r}"
            )
        if time.monotonic() >= deadline:
            raise NotReady(f"{base}/metrics not showing {what} after {timeout}s; {last}")
        time.sleep(0.2)


class LoggedExporter:
    """`python -m kube_gpu_exporter --simulate FLAGS` whose stderr is collected line by line as it
    comes, with its temporary files (the fake kubelet's socket directory) under `tmpdir`."""

    def __init__(self, tmpdir: Path, *flags: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmpdir = tmpdir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kube_gpu_exporter",
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

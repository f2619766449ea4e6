"""Child processes of the local stack: started in their own session, awaited until their
readiness URL answers, and stopped with SIGTERM (then SIGKILL) so nothing outlives the stack."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


class StackError(RuntimeError):
    """A part of the local stack could not start; str() is one line naming it."""


def find_binary(*names: str, package: str) -> str:
    """The first of `names` on PATH, or a StackError saying which Debian package provides it."""
    for name in names:
        if path := shutil.which(name):
            return path
    raise StackError(
        f"{names[0]} not found on PATH: install the Debian package `{package}` "
        "(`make system-deps` does)"
    )


def free_port(host: str) -> int:
    """A port nobody listens on right now. Another process could take it before we bind it;
    on loopback in a test run that race has not been seen."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def http_ok(url: str, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return 200 <= response.status < 300
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class ChildProcess:
    name: str
    argv: list[str]
    log_path: Path
    ready_url: str
    env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout: float = 30.0) -> None:
        if self.running:
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise StackError(
                    f"{self.name} exited with status {self._process.returncode} while starting: "
                    f"{self.log_tail()}"
                )
            if http_ok(self.ready_url):
                return
            time.sleep(0.1)
        self.stop()
        raise StackError(f"{self.name} not ready at {self.ready_url} after {timeout:g}s")

    def stop(self, timeout: float = 10.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def start_in_order(parts: Sequence[ChildProcess]) -> None:
    """Starts each part once the one before it is ready; if one fails, stops them all."""
    try:
        for part in parts:
            part.start()
    except BaseException:
        stop_in_reverse(parts)
        raise


def stop_in_reverse(parts: Sequence[ChildProcess]) -> None:
    for part in reversed(parts):
        part.stop()

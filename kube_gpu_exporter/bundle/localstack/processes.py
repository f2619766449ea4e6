"""Child processes of the local stack: started in their own session, awaited until their
readiness URL answers, and stopped with SIGTERM (then SIGKILL) so nothing outlives the stack."""

from __future__ import annotations

import os
import random
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


# Listening ports come from below Linux's ephemeral range (32768-60999 by default): a port from
# inside it, free when picked, can become the source port of some outgoing connection (a scrape,
# an API watch) before the part that was to listen on it binds, and then that bind fails. A CI run
# saw exactly that. Ports handed out once are not handed out again by this process.
_LISTEN_PORTS = range(20000, 32000)
_HANDED_OUT: set[int] = set()
_pick = random.Random()


def free_port(host: str) -> int:
    """A port nobody listens on right now, outside the ephemeral range, never one already handed
    out by this process. Another process could still take it before it is bound; that is rare."""
    for _ in range(1000):
        port = _pick.choice(_LISTEN_PORTS)
        if port in _HANDED_OUT:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise OSError(f"no free port in {_LISTEN_PORTS.start}-{_LISTEN_PORTS.stop - 1} on {host}")


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

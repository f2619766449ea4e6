"""nvitop-exporter, run beside ours on the same GPUs at the same poll, for a CPU and memory
comparison over one window.

On a real GPU it is started from this interpreter when it imports here (else from its console
script on PATH); under --simulate it runs on the simulated node as the benchmarks run it
(`python -m benchmarks.simulated default nvitop PORT INTERVAL`), which points that process's
pynvml at a simulator of the same fleet (benchmarks/foreign_nvml.py). When neither is possible,
the report says it was not installed.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 1.0
READY_TIMEOUT_S = 60.0
_DISTRIBUTION = "nvitop-exporter"
# GET url with a timeout -> (status, body): the harness's own HTTP helper.
Getter = Callable[[str, float], tuple[int, str]]
_FROM_THIS_INTERPRETER = "import sys; from nvitop_exporter.cli import main; sys.exit(main())"


def importable() -> bool:
    return importlib.util.find_spec("nvitop_exporter") is not None


def version() -> str:
    try:
        return importlib.metadata.version(_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "version unknown"


def nvitop_argv(port: int, simulate: bool) -> list[str] | None:
    """How to start it polling every POLL_SECONDS on 127.0.0.1:port; None: not installed."""
    if simulate:
        if not importable():
            return None
        poll = f"{POLL_SECONDS:g}"
        return [sys.executable, "-m", "benchmarks.simulated", "default", "nvitop", str(port), poll]
    flags = ["--bind-address=127.0.0.1", f"--port={port}", f"--interval={POLL_SECONDS:g}"]
    if importable():
        return [sys.executable, "-c", _FROM_THIS_INTERPRETER, *flags]
    script = shutil.which("nvitop-exporter")
    return None if script is None else [script, *flags]


@dataclass
class Neighbour:
    """The running nvitop-exporter, or why there is none (`note`)."""

    process: subprocess.Popen[bytes] | None
    port: int | None
    note: str

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(port: int, simulate: bool, cwd: Path, log_path: Path) -> Neighbour:
    """Start it; the caller waits for it with `wait_ready` once its own exporter is started."""
    argv = nvitop_argv(port, simulate)
    if argv is None:
        return Neighbour(None, None, f"{_DISTRIBUTION} is not installed: no comparison")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    return Neighbour(process, port, f"{_DISTRIBUTION} {version()}")


def wait_ready(neighbour: Neighbour, get: Getter, log_path: Path) -> None:
    """Until its /metrics answers; on failure it is stopped and `note` says why, since the
    comparison is an extra that must not sink the run."""
    if neighbour.process is None:
        return
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if neighbour.process.poll() is not None:
            tail = _last_line(log_path)
            neighbour.note = f"{_DISTRIBUTION} exited with status {neighbour.process.returncode}"
            neighbour.note += f" ({tail})" if tail else ""
            neighbour.process = None
            return
        with contextlib.suppress(OSError):
            if get(f"http://127.0.0.1:{neighbour.port}/metrics", 2.0)[0] == 200:
                return
        time.sleep(0.2)
    neighbour.stop()
    neighbour.process = None
    neighbour.note = f"{_DISTRIBUTION} did not serve /metrics within {READY_TIMEOUT_S:g} s"


def _last_line(path: Path) -> str:
    with contextlib.suppress(OSError):
        lines = path.read_text(errors="replace").strip().splitlines()
        return lines[-1][:160] if lines else ""
    return ""

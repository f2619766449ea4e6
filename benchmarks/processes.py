"""What every benchmark needs of a child process: start it pinned to a CPU, wait until it serves,
and read its memory, threads, descriptors and CPU time from /proc, so no figure includes the
harness's own allocations."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


def free_port() -> int:
    from kube_gpu_exporter.bundle.localstack.processes import free_port as free

    return free("127.0.0.1")


def pinned(cpu: int, argv: Sequence[str]) -> list[str]:
    """`argv` under `taskset -c cpu`, where there is a second CPU to keep the load generator on."""
    if shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", str(cpu), *argv]
    return list(argv)


def wait_ready(port: int, path: str = "/readyz", timeout: float = 30.0) -> None:
    from kube_gpu_exporter.bundle.localstack.processes import http_ok

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if http_ok(f"http://127.0.0.1:{port}{path}"):
            return
        time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not become ready")


def _status_kb(status: str, key: str) -> int:
    match = re.search(rf"^{key}:\s+(\d+)", status, re.M)
    if match is None:
        raise RuntimeError(f"/proc status has no {key}")
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class ProcSample:
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the highest RSS since the process started
    threads: int
    fds: int
    # All threads'. Apart, because on a real GPU much of an exporter's CPU is kernel time inside
    # NVML calls, which no user-space profile shows.
    user_seconds: float
    system_seconds: float

    @property
    def cpu_seconds(self) -> float:
        return self.user_seconds + self.system_seconds


def proc_sample(pid: int, proc: Path = PROC) -> ProcSample:
    folder = proc / str(pid)
    status = (folder / "status").read_text()
    # Fields 14 and 15 of /proc/PID/stat (utime, stime), counted after the command name, which
    # may itself hold spaces and parentheses: field N is at N - 3 after its last ')'.
    stat = (folder / "stat").read_text().rsplit(")", 1)[1].split()
    fds = folder / "fd"
    return ProcSample(
        rss_bytes=_status_kb(status, "VmRSS") * 1024,
        peak_rss_bytes=_status_kb(status, "VmHWM") * 1024,
        threads=_status_kb(status, "Threads"),
        fds=len(os.listdir(fds)) if fds.is_dir() else 0,
        user_seconds=int(stat[14 - 3]) / CLOCK_TICKS,
        system_seconds=int(stat[15 - 3]) / CLOCK_TICKS,
    )


def cpu_seconds_precise(pid: int) -> float:
    """CPU time of every live thread of `pid`, from the scheduler's nanosecond accounting
    (/proc/PID/task/*/schedstat) rather than /proc/PID/stat's 10 ms ticks, which make a quiet
    process's minute read a few dozen ticks. Threads that ended are not counted: compare only
    processes whose threads live as long as the window."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue  # the thread ended between listing and reading
    return total / 1e9


def stop(process: subprocess.Popen, timeout: float = 10.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def fake_kubelet(fleet: str, workdir: Path, cpu: int | None = None) -> Iterator[str]:
    """The fleet's fake kubelet in a process of its own, as the real one is (pinned to `cpu`
    where given), serving workdir/kubelet.sock: yields that path once it exists."""
    socket_path = str(workdir / "kubelet.sock")
    argv = [sys.executable, "-m", "benchmarks.simulated", fleet, "kubelet", socket_path]
    with (workdir / "kubelet.log").open("wb") as log:
        kubelet = subprocess.Popen(
            argv if cpu is None else pinned(cpu, argv),
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not Path(socket_path).exists():
                if time.monotonic() > deadline or kubelet.poll() is not None:
                    raise RuntimeError(f"fake kubelet for {fleet} did not start")
                time.sleep(0.1)
            yield socket_path
        finally:
            stop(kubelet)

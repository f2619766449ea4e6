"""Scrape load from wrk, pinned to the CPU the server is not on, and its output parsed."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from benchmarks.processes import pinned

_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
# wrk drops requests slower than its timeout from the latency figures; the baseline's tails run
# to seconds, so the timeout must be far above any of them or they would look better than they are.
TIMEOUT = "60s"


@dataclass(frozen=True, slots=True)
class WrkResult:
    p50_ms: float
    p99_ms: float
    rps: float
    requests: int
    errors: int  # non-2xx answers, socket errors and timeouts


def require_wrk() -> None:
    if not shutil.which("wrk"):
        raise SystemExit("benchmarks need wrk: `make bench` installs it (Debian package wrk)")


def parse(output: str) -> WrkResult:
    percentiles = {
        pct: float(value) * _UNIT_MS[unit]
        for pct, value, unit in re.findall(
            r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s)\s*$", output, re.M
        )
    }
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    requests = re.search(r"^\s*(\d+) requests in", output, re.M)
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output
    )
    if socket_errors:
        errors += sum(int(n) for n in socket_errors.groups())
    if "50" not in percentiles or "99" not in percentiles or rps is None:
        raise ValueError(f"unexpected wrk output: {output[:200]!r}")
    return WrkResult(
        p50_ms=percentiles["50"],
        p99_ms=percentiles["99"],
        rps=float(rps.group(1)),
        requests=int(requests.group(1)) if requests else 0,
        errors=errors,
    )


def run(url: str, clients: int, gzip: bool, seconds: float, cpu: int = 1) -> WrkResult:
    header = ["-H", "Accept-Encoding: gzip"] if gzip else []
    argv = ["wrk", "-t1", f"-c{clients}", f"-d{seconds:g}s", f"--timeout={TIMEOUT}", "--latency"]
    proc = subprocess.run(
        pinned(cpu, [*argv, *header, url]), capture_output=True, text=True, check=True
    )
    return parse(proc.stdout)

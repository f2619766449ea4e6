"""`make demo` as a user runs it, for each flavour of the bundle: it prints URLs that answer on
the Prometheus and Alertmanager actually installed and where that flavour's dashboards are, its
exporter serves that flavour's metric names, Ctrl-C (SIGINT) stops every part, a port in use is
one line and status 2, and the fastest way to an alert it prints does print an alert whose links
use the address it printed."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from tests.e2e.conftest import wait_until

ANY_PORTS = [f"--{part}-port=0" for part in ("exporter", "prometheus", "alertmanager", "webhook")]
BANNER_END = "Ctrl-C stops everything"


class Demo:
    """The demo's merged output, read on a thread so that waiting for a line has a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self._lines: list[str] = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._lines.append("")  # end of output
            self._changed.notify_all()

    def wait_for_line(self, pattern: str, timeout: float, after: int = 0) -> tuple[int, str]:
        """The index and text of the first line from `after` on matching `pattern`."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for index, line in enumerate(self._lines[after:], after):
                    if line == "":
                        raise AssertionError("demo exited early:\n" + "".join(self._lines))
                    if re.search(pattern, line):
                        return index, line
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no line matching {pattern!r} after {timeout:g}s:\n" + "".join(self._lines)
                    )
                self._changed.wait(left)

    def text(self, upto: int) -> str:
        with self._changed:
            return "".join(self._lines[: upto + 1])


@contextmanager
def demo(*args: str) -> Iterator[Demo]:
    process = subprocess.Popen(
        [sys.executable, "-m", "kube_gpu_exporter.bundle.localstack", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield Demo(process)
    finally:
        # Ctrl-C, as a user stops it: the demo stops its parts, which run in sessions of their
        # own and would outlive a killed demo (they did: a stack left running after the suite).
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def banner_rows(banner: str) -> dict[str, str]:
    rows = (line.strip() for line in banner.splitlines() if line.startswith("  "))
    return dict(re.split(r"\s{2,}", row, maxsplit=1) for row in rows if not row.startswith("curl "))


def printed_url(row: str) -> str:
    """The URL a row gives, whether a page or a curl example."""
    return next(word for word in row.split() if word.startswith("http://"))


def base_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.mark.parametrize("version", sorted(FLAVOURS))
def test_demo_prints_live_urls_and_stops_cleanly(tmp_path, version):
    with demo(f"--compat.dcgm-exporter={version}", f"--workdir={tmp_path}", *ANY_PORTS) as run:
        end, _ = run.wait_for_line(BANNER_END, 90)
        banner = run.text(end)
        rows = banner_rows(banner)
        dashboards = flavour_paths(version).grafana_com[0].parent
        assert f"import {dashboards}/*.json" in banner
        temperature = FLAVOURS[version].profile.name("DCGM_FI_DEV_GPU_TEMP")
        with urllib.request.urlopen(rows["Exporter metrics"], timeout=5) as response:
            assert f"\n{temperature}{{".encode() in response.read()
        # Every URL printed answers as printed, whichever UIs the installed builds carry.
        for name in ("Prometheus alerts", "Prometheus queries", "Alertmanager alerts"):
            if name in rows:
                with urllib.request.urlopen(printed_url(rows[name]), timeout=5) as response:
                    assert response.status == 200, name
        prometheus = base_of(printed_url(rows["Prometheus alerts"]))
        alertmanager = base_of(printed_url(rows["Alertmanager alerts"]))
        run.process.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert run.process.wait(timeout=15) == 0
        assert time.monotonic() - started < 15
        everything = (rows["Exporter metrics"], f"{prometheus}/-/ready", f"{alertmanager}/-/ready")
        wait_until(lambda: not any(map(_answers, everything)), 5, "every part to stop")


def test_fastest_way_to_an_alert_prints_it_with_links_to_the_printed_address(tmp_path):
    with demo("--fast-alerts", f"--workdir={tmp_path}", *ANY_PORTS) as run:
        end, _ = run.wait_for_line(BANNER_END, 90)
        banner = run.text(end)
        assert "Fastest way to see an alert" in banner
        inject = re.search(r"curl -X POST -d '(\{\"xid\": 79\})' (\S+)", banner)
        assert inject, banner
        request = urllib.request.Request(inject[2], data=inject[1].encode(), method="POST")
        urllib.request.urlopen(request, timeout=5).close()
        run.wait_for_line(r"^\[firing\s*\] GPUXidCritical .*gpu=0 xid=79", 60, after=end)
        rows = banner_rows(banner)
        prometheus = base_of(printed_url(rows["Prometheus alerts"]))
        api = f"{base_of(printed_url(rows['Alertmanager alerts']))}/api/v2/alerts"
        with urllib.request.urlopen(api, timeout=5) as response:
            alerts = json.load(response)
        xid = [a for a in alerts if a["labels"]["alertname"] == "GPUXidCritical"]
        assert xid and all(a["generatorURL"].startswith(f"{prometheus}/") for a in xid), xid


def test_a_port_in_use_is_one_line_and_status_2(tmp_path: Path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        finished = subprocess.run(
            [
                sys.executable,
                "-m",
                "kube_gpu_exporter.bundle.localstack",
                f"--workdir={tmp_path}",
                *ANY_PORTS,
                f"--alertmanager-port={port}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert finished.returncode == 2
    assert finished.stderr.splitlines() == [
        f"demo: --alertmanager-port: 127.0.0.1:{port} is already in use; "
        "pass --alertmanager-port=N (0 picks a free one)"
    ]
    assert not list(tmp_path.iterdir()), "nothing starts when a port is taken"


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except OSError:
        return False
    return True

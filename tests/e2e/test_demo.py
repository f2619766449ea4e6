"""`make demo` as a user runs it, for each flavour of the bundle: it prints working URLs and where
that flavour's dashboards are, its exporter serves that flavour's metric names, and Ctrl-C
(SIGINT) stops every part."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from bundle.flavours import FLAVOURS, flavour_paths
from tests.e2e.conftest import wait_until


@pytest.mark.parametrize("version", sorted(FLAVOURS))
def test_demo_prints_live_urls_and_stops_cleanly(tmp_path, version):
    ports = [f"--{part}-port=0" for part in ("exporter", "prometheus", "alertmanager", "webhook")]
    demo = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bundle.localstack",
            f"--compat.dcgm-exporter={version}",
            f"--workdir={tmp_path}",
            *ports,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines: list[str] = []
        assert demo.stdout is not None
        while not any("Ctrl-C stops everything" in line for line in lines):
            line = demo.stdout.readline()
            assert line, "demo exited early:\n" + "".join(lines)
            lines.append(line)
        banner = "".join(lines)
        urls = dict(
            re.findall(r"^  (Exporter metrics|Prometheus|Alertmanager)\s+(\S+)", banner, re.M)
        )
        assert set(urls) == {"Exporter metrics", "Prometheus", "Alertmanager"}
        dashboards = flavour_paths(version).grafana_com[0].parent
        assert f"import {dashboards}/*.json" in banner
        temperature = FLAVOURS[version].profile.name("DCGM_FI_DEV_GPU_TEMP")
        with urllib.request.urlopen(urls["Exporter metrics"], timeout=5) as response:
            assert f"\n{temperature}{{".encode() in response.read()
        for part in ("Prometheus", "Alertmanager"):
            with urllib.request.urlopen(f"{urls[part]}/-/ready", timeout=5) as response:
                assert response.status == 200
        demo.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert demo.wait(timeout=15) == 0
        assert time.monotonic() - started < 15
        everything = (
            urls["Exporter metrics"],
            f"{urls['Prometheus']}/-/ready",
            f"{urls['Alertmanager']}/-/ready",
        )
        wait_until(lambda: not any(map(_answers, everything)), 5, "every part to stop")
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=1).close()
    except OSError:
        return False
    return True

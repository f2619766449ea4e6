"""The installed command, run as users run it: real process, real HTTP, real signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tests.conftest import REPO, unexpected_lint_findings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_simulated_node_end_to_end():
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "--simulate",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.interval=1s",
            "--log.format=json",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if get(f"{base}/readyz", 1)[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        status, text = get(f"{base}/metrics")
        assert status == 200
        assert 'modelName="NVIDIA H100 80GB HBM3"' in text
        assert 'GPU_I_PROFILE="3g.40gb"' in text
        assert 'Hostname="sim-gpu-node-0"' in text
        assert unexpected_lint_findings(text) == []
        assert get(f"{base}/healthz")[0] == 200
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
        assert time.monotonic() - started < 5
        _, stderr = proc.communicate(timeout=5)
        assert '"msg": "shutting down"' in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""--collectors and its companions on the command line: dcgm-exporter's CSV, its variables and: the
cases that start a process or need a system package's binary; the others are in
tests/unit/test_cli_collectors.py."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO
from tests.unit import test_cli_collectors
from tests.unit.test_cli_collectors import one_error_line

# The unit half's fixture, which the tests below ask for by name.
csv = test_cli_collectors.csv


def test_an_unknown_field_stops_the_process_with_one_line(csv):
    path = csv("# mine\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_TEMPERATURE, gauge, x\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter", "--collectors", path],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    line = one_error_line(proc.stderr)
    assert line.endswith(
        f"collectors file {path}:3: DCGM_FI_DEV_GPU_TEMPERATURE is not a DCGM field"
    )

"""Files named on the command line that are not regular files: one line and exit status 2, at: the
cases that start a process or need a system package's binary; the others are in
tests/unit/test_input_files.py."""

from __future__ import annotations

import os

import pytest

from tests.unit.test_cli import assert_one_error_line
from tests.unit.test_input_files import run_limited


@pytest.mark.parametrize(
    ("args", "mentions"),
    [
        (["--simulate", "{fifo}"], "fleet file {fifo}: not a regular file but a FIFO"),
        (["--simulate", "/dev/zero"], "fleet file /dev/zero: not a regular file but a character"),
        (
            ["--web.config.file", "/dev/zero"],
            "web config /dev/zero: not a regular file but a character",
        ),
        (
            ["--kubernetes.kubeconfig", "{fifo}"],
            "--kubernetes.kubeconfig: {fifo}: not a regular file but a FIFO",
        ),
        (
            ["--kubernetes.kubeconfig", "/dev/zero"],
            "--kubernetes.kubeconfig: /dev/zero: not a regular file but a character",
        ),
    ],
)
def test_the_process_refuses_a_fifo_and_dev_zero_at_once(tmp_path, args, mentions):
    fifo = tmp_path / "fleet.yaml"
    os.mkfifo(fifo)
    proc = run_limited(*(a.format(fifo=fifo) for a in args))
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr[-2000:]
    assert_one_error_line(proc.stderr, mentions.format(fifo=fifo))

"""Flags, environment variables and bad input: one clear line and exit status 2; and
`hash-password` reading bytes from a pipe: the cases that start a process or need a system
package's binary; the others are in tests/unit/test_cli.py."""

from __future__ import annotations

import os
import subprocess
import sys

import bcrypt
import pytest

from tests.conftest import REPO
from tests.unit import test_cli
from tests.unit.test_cli import PROCESS_CASES, assert_one_error_line, run_cli

# The unit half's fixture, which the tests below ask for by name.
busy_port = test_cli.busy_port


@pytest.mark.parametrize(("args", "env", "mentions"), PROCESS_CASES)
def test_the_process_exits_2_with_one_line(args, env, mentions):
    proc = run_cli(*args, env=env)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert_one_error_line(proc.stderr, mentions)


def test_the_process_prints_its_version():
    proc = run_cli("--version")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "kube-gpu-exporter 0.1.0\n", "")


def test_the_process_with_its_port_in_use_exits_2_with_one_line(busy_port):
    address = f"127.0.0.1:{busy_port}"
    proc = run_cli("--simulate", f"--web.listen-address={address}")
    assert (proc.returncode, proc.stdout) == (2, "")
    assert_one_error_line(proc.stderr, f"--web.listen-address {address}: address already in use")


# ---- hash-password in a real process: what is not UTF-8 is one line and status 2, and what is
# UTF-8 is hashed as those bytes, whatever the locale says standard input is ----


def hash_password(data: bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter", "hash-password", "--cost=4"],
        input=data,
        capture_output=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize("data", [b"\xff\xfe", b"pass\xe9word\n", b"ok\xc3"])
@pytest.mark.parametrize("locale", ["C.UTF-8", "C"])
def test_bytes_that_are_not_utf8_are_one_line_and_status_2(data, locale):
    result = hash_password(data, LC_ALL=locale)
    assert result.returncode == 2
    assert result.stdout == b""
    [line] = result.stderr.decode().splitlines()
    assert line.startswith("kube-gpu-exporter: error: hash-password: standard input is not UTF-8")


def test_utf8_is_hashed_as_its_bytes_whatever_the_locale_decodes_it_as():
    # Under Latin-1, the text layer reads these bytes as 'cafÃ©', a password no client sends.
    result = hash_password("café\n".encode(), LC_ALL="C", PYTHONIOENCODING="latin-1")
    assert result.returncode == 0, result.stderr
    assert bcrypt.checkpw("café".encode(), result.stdout.strip())

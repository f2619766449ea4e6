"""`kube-gpu-exporter hash-password` reading bytes from a pipe, in a real process: what is not
UTF-8 is one line and status 2, and what is UTF-8 is hashed as those bytes, whatever the
locale says standard input is."""

from __future__ import annotations

import os
import subprocess
import sys

import bcrypt
import pytest

from tests.conftest import REPO


def hash_password(data: bytes, **env: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "hash-password", "--cost=4"],
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

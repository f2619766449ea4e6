"""--web.config.file under the real exporter process: a bad file refused at start-up, HTTPS with
basic auth, and SIGHUP applying basic_auth_users changes to the next request. The cases that run
inside this process are in tests/unit/test_web_config.py."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import bcrypt
import pytest

from tests.conftest import REPO
from tests.support.exporter_process import LoggedExporter, start_exporter
from tests.support.tls_certs import Certificates, make_certificates
from tests.unit.test_web_config import (
    HASH,
    PASSWORD,
    bad_files,
    basic,
    client_context,
    tls_section,
    write,
)

# Logged for a changed setting that a SIGHUP cannot apply.
RESTART = "takes effect at the next restart"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.mark.parametrize(
    "what",
    [
        "missing cert",
        "plain-text password",
        "unknown top key",
        "client auth type refused",
        "header Content-Type",
    ],
)
def test_the_cli_refuses_a_bad_file_at_startup(certs, tmp_path, what):
    _, doc, message = next(entry for entry in bad_files(certs) if entry[0] == what)
    path = write(tmp_path, doc)
    result = subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter", "--simulate", f"--web.config.file={path}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("kube-gpu-exporter: error: web config") and message in line


def test_exporter_process_serves_https_with_basic_auth(certs, tmp_path):
    path = write(
        tmp_path,
        {
            "tls_server_config": tls_section(certs, curve_preferences=["X25519"]),
            "basic_auth_users": {"prometheus": HASH},
        },
    )
    proc, base = start_exporter(f"--web.config.file={path}")
    port = int(base.rsplit(":", 1)[1])
    tls = client_context(certs)

    def fetch(headers: dict[str, str]) -> tuple[int, str]:
        request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5, context=tls) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                status, text = fetch(basic("prometheus", PASSWORD))
                if status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in text:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the HTTPS exporter never answered"
            time.sleep(0.2)
        assert fetch({})[0] == 401
        assert fetch(basic("prometheus", "nope"))[0] == 401
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    # The ignored key is reported once logging is set up, in its format.
    [warning] = [line for line in stderr.splitlines() if "curve_preferences" in line]
    assert warning.startswith("ts=") and "level=warn" in warning
    assert "with TLS)" in stderr


# ---- basic_auth_users re-read on SIGHUP, as exporter-toolkit does ----


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def status_of(exporter: LoggedExporter, user: str | None = None, password: str = "") -> int:
    """The status of GET /metrics, with basic auth as `user` unless None."""
    headers = basic(user, password) if user is not None else {}
    request = urllib.request.Request(f"{exporter.base}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def hangup(exporter: LoggedExporter, wanted: str) -> str:
    """Sends SIGHUP and returns the first line it logs that contains `wanted`."""
    seen = len(exporter.lines)
    exporter.proc.send_signal(signal.SIGHUP)
    return exporter.wait_for_line(wanted, after=seen)


def answers(exporter: LoggedExporter, user: str | None = None, password: str = "") -> bool:
    try:
        return status_of(exporter, user, password) == 200
    except OSError:
        return False


def test_sighup_revokes_removed_users_and_old_passwords_at_once(tmp_path):
    """A removed user, a changed password and a new user apply to the next request, remembered
    passwords included; a file that does not load keeps the last good users."""
    config = write(tmp_path, {"basic_auth_users": {"alice": hashed("one"), "bob": hashed("bob")}})
    exporter = LoggedExporter(tmp_path, f"--web.config.file={config}")
    try:
        exporter.until("serving with auth", lambda: answers(exporter, "alice", "one"))
        # Both are checked once, so both sit in the cache of successful checks.
        assert status_of(exporter, "alice", "one") == 200
        assert status_of(exporter, "bob", "bob") == 200

        write(tmp_path, {"basic_auth_users": {"alice": hashed("two"), "carol": hashed("carol")}})
        line = hangup(exporter, "re-read (SIGHUP)")
        assert status_of(exporter, "alice", "one") == 401  # the old password, though remembered
        assert status_of(exporter, "bob", "bob") == 401  # removed, though remembered
        assert status_of(exporter, "alice", "two") == 200
        assert status_of(exporter, "carol", "carol") == 200
        assert status_of(exporter) == 401
        assert "basic_auth_users: 1 added, 1 removed, 1 changed" in line
        assert not exporter.matching(RESTART)  # users are no restart-only setting any more

        # A file that does not load: one line, and the last good users go on being checked.
        write(tmp_path, {"basic_auth_users": {"alice": "two", "bob": hashed("bob")}})
        refused = hangup(exporter, "still serving the last good one")
        assert "basic_auth_users.alice" in refused and "level=error" in refused
        assert status_of(exporter, "alice", "two") == 200
        assert status_of(exporter, "bob", "bob") == 401
        assert len(exporter.matching("basic_auth_users.alice")) == 1
    finally:
        assert exporter.stop() == 0


def test_users_added_to_a_web_config_without_any_apply_on_sighup(tmp_path):
    headers = {"headers": {"X-Frame-Options": "deny"}}
    config = write(tmp_path, {"http_server_config": headers})
    exporter = LoggedExporter(tmp_path, f"--web.config.file={config}")
    try:
        exporter.until("serving", lambda: answers(exporter))
        write(tmp_path, {"http_server_config": headers, "basic_auth_users": {"al": hashed("pw")}})
        line = hangup(exporter, "re-read (SIGHUP)")
        assert status_of(exporter) == 401
        assert status_of(exporter, "al", "pw") == 200
        assert "basic_auth_users: 1 added" in line
        # And all removed: served without a password again, with a warning that says so.
        write(tmp_path, {"http_server_config": headers})
        warning = hangup(exporter, "has no basic_auth_users now")
        assert "level=warn" in warning
        assert status_of(exporter) == 200
    finally:
        assert exporter.stop() == 0

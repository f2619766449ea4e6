"""basic_auth_users re-read under a running exporter process: SIGHUP applies a removed user, a
changed password and a new user to the next request, as exporter-toolkit does, remembered
passwords included; a file that does not load keeps the last good users."""

from __future__ import annotations

import base64
import signal
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt
import yaml

from tests.test_signals import LoggedExporter

RESTART = "takes effect at the next restart"


def hashed(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def status(exporter: LoggedExporter, user: str | None = None, password: str = "") -> int:
    headers = {}
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        headers["Authorization"] = f"Basic {token}"
    request = urllib.request.Request(f"{exporter.base}/metrics", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def write(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc))


def hangup(exporter: LoggedExporter, wanted: str) -> str:
    """Sends SIGHUP and returns the first line it logs that contains `wanted`."""
    seen = len(exporter.lines)
    exporter.proc.send_signal(signal.SIGHUP)
    return exporter.wait_for_line(wanted, after=seen)


def test_sighup_revokes_removed_users_and_old_passwords_at_once(tmp_path):
    config = tmp_path / "web.yml"
    write(config, {"basic_auth_users": {"alice": hashed("one"), "bob": hashed("bob")}})
    exporter = LoggedExporter(tmp_path, f"--web.config.file={config}")
    try:
        exporter.until("serving with auth", lambda: _answers(exporter, "alice", "one"))
        # Both are checked once, so both sit in the cache of successful checks.
        assert status(exporter, "alice", "one") == 200
        assert status(exporter, "bob", "bob") == 200

        write(config, {"basic_auth_users": {"alice": hashed("two"), "carol": hashed("carol")}})
        line = hangup(exporter, "re-read (SIGHUP)")
        assert status(exporter, "alice", "one") == 401  # the old password, though remembered
        assert status(exporter, "bob", "bob") == 401  # removed, though remembered
        assert status(exporter, "alice", "two") == 200
        assert status(exporter, "carol", "carol") == 200
        assert status(exporter) == 401
        assert "basic_auth_users: 1 added, 1 removed, 1 changed" in line
        assert not exporter.matching(RESTART)  # users are no restart-only setting any more

        # A file that does not load: one line, and the last good users go on being checked.
        write(config, {"basic_auth_users": {"alice": "two", "bob": hashed("bob")}})
        refused = hangup(exporter, "still serving the last good one")
        assert "basic_auth_users.alice" in refused and "level=error" in refused
        assert status(exporter, "alice", "two") == 200
        assert status(exporter, "bob", "bob") == 401
        assert len(exporter.matching("basic_auth_users.alice")) == 1
    finally:
        assert exporter.stop() == 0


def test_users_added_to_a_web_config_without_any_apply_on_sighup(tmp_path):
    config = tmp_path / "web.yml"
    headers = {"headers": {"X-Frame-Options": "deny"}}
    write(config, {"http_server_config": headers})
    exporter = LoggedExporter(tmp_path, f"--web.config.file={config}")
    try:
        exporter.until("serving", lambda: _answers(exporter))
        write(config, {"http_server_config": headers, "basic_auth_users": {"al": hashed("pw")}})
        line = hangup(exporter, "re-read (SIGHUP)")
        assert status(exporter) == 401
        assert status(exporter, "al", "pw") == 200
        assert "basic_auth_users: 1 added" in line
        # And all removed: served without a password again, with a warning that says so.
        write(config, {"http_server_config": headers})
        warning = hangup(exporter, "has no basic_auth_users now")
        assert "level=warn" in warning
        assert status(exporter) == 200
    finally:
        assert exporter.stop() == 0


def _answers(exporter: LoggedExporter, user: str | None = None, password: str = "") -> bool:
    try:
        return status(exporter, user, password) == 200
    except OSError:
        return False

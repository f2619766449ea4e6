"""Certificates rotated under a running exporter process, the way Kubernetes updates a mounted: the
cases that run inside this process; the others are in tests/process/test_cert_rotation.py."""

from __future__ import annotations

import yaml

from kube_gpu_exporter.exporter.webconfig.parse import load_web_config
from kube_gpu_exporter.exporter.webconfig.reload import CHECK_INTERVAL_SECONDS, WebConfigReloader
from tests.process.test_cert_rotation import BROKEN, point, version, web_config


def test_checks_are_spaced_a_broken_file_is_logged_once_and_restart_only_settings_named(
    tmp_path, caplog
):
    """In-process, on a fake clock: what the SNI callback runs on every new connection."""
    ca = version(tmp_path, "v1")
    version(tmp_path, "v2", ca)
    point(tmp_path, "v1")
    path = web_config(tmp_path)
    now = [0.0]
    reloader = WebConfigReloader(load_web_config(path), clock=lambda: now[0])
    served = reloader.ssl_context
    assert served is not None and served.sni_callback is not None
    point(tmp_path, "v2")
    reloader.check()
    assert reloader.reloads == 0  # not a second since the last look
    now[0] += CHECK_INTERVAL_SECONDS
    reloader.check()
    assert reloader.reloads == 1
    (tmp_path / "v2" / "server.key").write_text("garbage\n")
    for _ in range(5):
        now[0] += CHECK_INTERVAL_SECONDS
        reloader.check()
    [refused] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "tls_server_config.key_file" in refused.getMessage()
    assert BROKEN in refused.getMessage()
    # Fixed, with a setting that only a restart can apply: the certificate applies now.
    (tmp_path / "v2" / "server.key").write_bytes((tmp_path / "v1" / "server.key").read_bytes())
    version(tmp_path, "v3", ca)
    point(tmp_path, "v3")
    doc = yaml.safe_load(path.read_text())
    doc["tls_server_config"]["min_version"] = "TLS13"
    doc["basic_auth_users"] = {"prometheus": "$2b$04$" + "a" * 53}
    path.write_text(yaml.safe_dump(doc))
    for _ in range(3):
        now[0] += CHECK_INTERVAL_SECONDS
        reloader.check()
    assert reloader.reloads == 2
    [later] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "tls_server_config.min_version changed" in later.getMessage()
    assert "next restart" in later.getMessage()

"""Certificates rotated under a running exporter process, the way Kubernetes updates a mounted
Secret (cert-manager's): each version in its own directory, and one symlink swapped atomically.
New TLS connections must get the new certificate, key and client CA without a restart."""

from __future__ import annotations

import ipaddress
import os
import signal
import socket
import ssl
import time
from pathlib import Path

import yaml
from cryptography import x509

from tests.support.exporter_process import LoggedExporter, NotReady
from tests.support.tls_certs import make_ca, make_leaf

SERVER_NAMES = [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
BROKEN = "still serving the last good one"


def version(root: Path, name: str, ca=None):
    """root/name/ holding server.crt and .key (and the CA with a client certificate when `ca`
    is not given: a rotation of the CA too); returns the CA it was signed with."""
    directory = root / name
    directory.mkdir()
    if ca is None:
        ca = make_ca(directory, "ca")
        make_leaf(directory, "client", ca, [x509.DNSName("prometheus")], server=False)
    make_leaf(directory, "server", ca, SERVER_NAMES, server=True)
    return ca


def point(root: Path, name: str) -> None:
    """Swap root/current to root/name in one rename, as the kubelet's atomic writer does."""
    staged = root / "current.staged"
    os.symlink(name, staged)
    os.replace(staged, root / "current")


def serial(path: Path) -> int:
    return x509.load_pem_x509_certificate(path.read_bytes()).serial_number


def fetch(port: int, context: ssl.SSLContext) -> tuple[int, str]:
    """A new TLS connection: the serial of the certificate it was served and the status line of
    GET /healthz over it."""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
        assert der is not None
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        status = tls.recv(64).decode().split("\r\n")[0]
    return x509.load_der_x509_certificate(der).serial_number, status


def trusting(*cas: Path, client: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for ca in cas:
        context.load_verify_locations(ca)
    if client is not None:
        context.load_cert_chain(client / "client.crt", client / "client.key")
    return context


def served_serial(exporter: LoggedExporter, context: ssl.SSLContext, wanted: int) -> None:
    """Wait until a new connection is served the certificate with serial `wanted`."""
    seen: list[object] = []

    def served() -> bool:
        try:
            seen.append(fetch(exporter.port, context)[0])
        except OSError as exc:  # still starting
            seen.append(exc)
        return seen[-1] == wanted

    try:
        exporter.until(f"serial {wanted} served", served)
    except NotReady as exc:
        raise NotReady(f"{exc}; last served {seen[-3:]}") from None


def web_config(root: Path, **tls: str) -> Path:
    path = root / "web.yml"
    section = {"cert_file": "current/server.crt", "key_file": "current/server.key", **tls}
    path.write_text(yaml.safe_dump({"tls_server_config": section}))
    return path


def test_rotated_certificates_are_served_and_a_broken_file_keeps_the_last_good(tmp_path):
    ca = version(tmp_path, "v1")
    version(tmp_path, "v2", ca)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "server.crt").write_text("-----BEGIN CERTIFICATE-----\nhalf written\n")
    (broken / "server.key").write_bytes((tmp_path / "v2" / "server.key").read_bytes())
    point(tmp_path, "v1")
    exporter = LoggedExporter(tmp_path, f"--web.config.file={web_config(tmp_path)}")
    client = trusting(tmp_path / "v1" / "ca.crt")
    try:
        served_serial(exporter, client, serial(tmp_path / "v1" / "server.crt"))
        point(tmp_path, "v2")
        v2 = serial(tmp_path / "v2" / "server.crt")
        served_serial(exporter, client, v2)
        point(tmp_path, "broken")
        # Connections keep getting v2 while the broken file is noticed, and after.
        exporter.until(
            "the broken file logged",
            lambda: fetch(exporter.port, client)[0] == v2 and bool(exporter.matching(BROKEN)),
        )
        logged = time.monotonic()
        while time.monotonic() - logged < 2.5:  # a few check intervals
            assert fetch(exporter.port, client) == (v2, "HTTP/1.1 200 OK")
            time.sleep(0.1)
        [line] = exporter.matching(BROKEN)
        assert "level=error" in line and "tls_server_config.cert_file" in line
        assert "holds no PEM certificate" in line
    finally:
        assert exporter.stop() == 0


def test_sighup_applies_a_new_certificate_and_client_ca_at_once(tmp_path):
    version(tmp_path, "v1")
    version(tmp_path, "v2")  # a new CA too, which signs the new server and client certificates
    point(tmp_path, "v1")
    config = web_config(
        tmp_path, client_auth_type="RequireAndVerifyClientCert", client_ca_file="current/ca.crt"
    )
    exporter = LoggedExporter(tmp_path, f"--web.config.file={config}")
    cas = (tmp_path / "v1" / "ca.crt", tmp_path / "v2" / "ca.crt")
    old_client = trusting(*cas, client=tmp_path / "v1")
    new_client = trusting(*cas, client=tmp_path / "v2")
    try:
        served_serial(exporter, old_client, serial(tmp_path / "v1" / "server.crt"))
        point(tmp_path, "v2")
        # No connection until SIGHUP has done its work: only it can have applied the change.
        seen = len(exporter.lines)
        exporter.proc.send_signal(signal.SIGHUP)
        line = exporter.wait_for_line("re-read (SIGHUP)", after=seen)
        assert "v2/server.crt" not in line and "current/server.crt" in line
        assert fetch(exporter.port, new_client) == (
            serial(tmp_path / "v2" / "server.crt"),
            "HTTP/1.1 200 OK",
        )
        # The old client certificate's CA is no longer trusted: no HTTP answer for it.
        try:
            answer = fetch(exporter.port, old_client)[1]
        except (ssl.SSLError, ConnectionError) as exc:
            answer = repr(exc)
        assert not answer.startswith("HTTP/"), answer
    finally:
        assert exporter.stop() == 0

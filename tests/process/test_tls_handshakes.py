"""Clients that open TCP connections to the TLS port and never start or finish the handshake,
against the real exporter process with real certificates: they count against
--web.max-connections, are evicted first, and are closed after `HANDSHAKE_SECONDS`."""

from __future__ import annotations

import re
import resource
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kube_gpu_exporter.exporter.connection_guard import (
    HANDSHAKE_SECONDS,
    RESERVED_FDS,
    raise_open_file_limit,
)
from tests.conftest import open_fds, wait_for
from tests.support.exporter_process import NotReady, start_exporter
from tests.support.tls_certs import Certificates, make_certificates

# Alone, after the parallel part of `make test`: it times stalled handshakes out on the wall clock.
pytestmark = pytest.mark.serial

# Low enough that stalled handshakes alone could use up the exporter's descriptors, as 1,100 did
# under a 1,024 limit: the cap it derives from this is FILE_LIMIT - RESERVED_FDS.
FILE_LIMIT = 256
CAP = FILE_LIMIT - RESERVED_FDS


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


@pytest.fixture
def tls_exporter(certs, tmp_path) -> Iterator[tuple[subprocess.Popen, int, ssl.SSLContext]]:
    web = tmp_path / "web.yml"
    web.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": str(certs.server.cert),
                    "key_file": str(certs.server.key),
                }
            }
        )
    )
    proc, url = start_exporter(f"--web.config.file={web}", preexec_fn=_limit_files)
    port = int(url.rsplit(":", 1)[1])
    client = ssl.create_default_context(cafile=str(certs.ca.cert))
    try:
        deadline = time.monotonic() + 20
        while "DCGM_FI_DEV_GPU_TEMP{" not in scrape(port, client, timeout=2)[1]:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise NotReady(f"the TLS exporter never served device series: {proc.poll()}")
            time.sleep(0.2)
        yield proc, port, client
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def scrape(port: int, client: ssl.SSLContext, timeout: float = 5.0) -> tuple[int, str]:
    """An HTTPS scrape; (0, why) if it got no answer."""
    try:
        with urllib.request.urlopen(
            f"https://127.0.0.1:{port}/metrics", timeout=timeout, context=client
        ) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except OSError as exc:
        return 0, f"{type(exc).__name__}: {exc}"


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", text, re.M)
    assert found, f"{name} missing from {text[-500:]!r}"
    return float(found.group(1))


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the exporter has closed `sock`, reading past whatever it sent first."""
    sock.settimeout(0.5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
    return True


def test_stalled_handshakes_are_counted_evicted_first_and_timed_out(tls_exporter):
    proc, port, client = tls_exporter
    raise_open_file_limit()
    fds = open_fds(proc.pid)
    stalled: list[socket.socket] = []
    try:
        # More than the exporter has descriptors for: unbounded, accept() failed and every
        # real scrape with it.
        opened = time.monotonic()
        for _ in range(FILE_LIMIT + 50):
            # From 16 loopback addresses: one address may hold only its share of the cap.
            stalled.append(
                socket.create_connection(
                    ("127.0.0.1", port), source_address=(f"127.0.1.{len(stalled) % 16 + 1}", 0)
                )
            )
        # connect() returns once the kernel holds the connection, which can be before the
        # exporter accepts it, so a scrape can be served first: wait for the count, with a
        # deadline. Unbounded, the exporter saw none of them and counted only the scrape.
        last: list[tuple[int, str]] = []

        def counted() -> bool:
            last[:] = [scrape(port, client)]
            status, text = last[0]
            assert status == 200, text[-500:]
            return metric(text, "kube_gpu_exporter_http_connections") >= CAP - 10

        assert wait_for(counted, timeout=HANDSHAKE_SECONDS - 1), last[0][1][-300:]
        status, text = last[0]
        assert metric(text, "kube_gpu_exporter_http_connections") <= CAP
        evicted = metric(text, "kube_gpu_exporter_http_connections_evicted_total")
        assert evicted >= len(stalled) - CAP
        # The oldest went first, and the descriptors stay within the cap.
        assert closed_by_peer(stalled[0])
        assert open_fds(proc.pid) <= fds + CAP
        # The rest are closed by the handshake timeout, not by the 60 s keep-alive timer.
        assert wait_for(lambda: closed_by_peer(stalled[-1]), timeout=HANDSHAKE_SECONDS + 5)
        assert time.monotonic() - opened >= HANDSHAKE_SECONDS - 0.5
        status, text = scrape(port, client)
        assert status == 200 and metric(text, "kube_gpu_exporter_http_connections") == 1
        assert wait_for(lambda: open_fds(proc.pid) <= fds), (fds, open_fds(proc.pid))
    finally:
        for sock in stalled:
            sock.close()


def test_a_handshake_that_started_and_stalled_times_out(tls_exporter, tmp_path: Path):
    """A ClientHello and then nothing: the server has answered, and waits for the client."""
    proc, port, client = tls_exporter
    fds = open_fds(proc.pid)
    raw = socket.create_connection(("127.0.0.1", port))
    hello = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client.wrap_bio(*hello, server_hostname="127.0.0.1")
    try:
        with pytest.raises(ssl.SSLWantReadError):
            tls.do_handshake()
        raw.sendall(hello[1].read())
        started = time.monotonic()
        assert wait_for(lambda: closed_by_peer(raw), timeout=HANDSHAKE_SECONDS + 5)
        assert time.monotonic() - started >= HANDSHAKE_SECONDS - 1
        assert wait_for(lambda: open_fds(proc.pid) <= fds)
        assert scrape(port, client)[0] == 200
    finally:
        raw.close()

"""Clients that send large but legal request heads and never finish them, before anything could
authenticate them, against the real exporter process: what the exporter holds for them is bounded
by `MAX_UNANSWERED_BYTES`, and the memory comes back once they have gone."""

from __future__ import annotations

import contextlib
import re
import socket
import subprocess
from collections.abc import Iterator

import pytest

from kube_gpu_exporter.exporter.connection_guard import MAX_UNANSWERED_BYTES, raise_open_file_limit
from tests.conftest import wait_for
from tests.support.exporter_process import get, scrape_until, start_exporter

HEAD = b"GET /metrics HTTP/1.1\r\nHost: node\r\n"


def headers(count: int, size: int) -> bytes:
    """`count` header lines of `size` bytes each, CRLF included: each within aiohttp's 8 KiB."""
    return b"".join(b"X-%03d: %s\r\n" % (i, b"a" * (size - 9)) for i in range(count))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def metric(base: str, name: str) -> float:
    found = re.search(rf"^{name} (\S+)$", get(f"{base}/metrics")[1], re.M)
    assert found, f"{name} missing"
    return float(found.group(1))


def connections(base: str) -> float:
    return metric(base, "kube_gpu_exporter_http_connections")


@pytest.fixture
def exporter(request) -> Iterator[tuple[subprocess.Popen, str, int]]:
    """The exporter, scraped a few times so its memory has settled; yields its RSS then."""
    raise_open_file_limit()
    proc, base = start_exporter(*getattr(request, "param", ()))
    try:
        scrape_until(base, lambda t: "DCGM_FI_DEV_GPU_TEMP{" in t, what="device series", proc=proc)
        for _ in range(5):
            assert get(f"{base}/metrics")[0] == 200
        yield proc, base, int(base.rsplit(":", 1)[1])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def exchange(port: int, request: bytes) -> bytes:
    """Sends `request` on a new connection and reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


def test_a_head_over_the_limit_gets_431_and_one_within_it_is_served(exporter):
    _, _, port = exporter
    # Unfinished, as a flood's would be: the answer must not wait for the end of the headers.
    over = HEAD + headers(3, 7000)
    assert len(over) > MAX_UNANSWERED_BYTES
    reply = exchange(port, over)
    assert reply.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), reply[:200]
    assert reply.endswith(b"request line and headers are over 16384 bytes\n"), reply[-200:]
    within = HEAD + headers(2, 7000) + b"Connection: close\r\n\r\n"
    assert len(within) < MAX_UNANSWERED_BYTES
    assert exchange(port, within).startswith(b"HTTP/1.1 200 OK\r\n")


def test_a_flood_of_megabyte_heads_never_finished_leaves_memory_flat(exporter):
    proc, base, port = exporter
    baseline = rss_mb(proc.pid)
    # 125 headers of 8,000 bytes: 1 MB a connection, every line legal. Unbounded, 100 of these
    # took the exporter from 66 to 266 MB, and it stayed there after they closed.
    flood = HEAD + headers(125, 8000)
    sockets: list[socket.socket] = []
    peak = baseline
    try:
        for i in range(100):
            sock = socket.create_connection(("127.0.0.1", port))
            sockets.append(sock)
            with contextlib.suppress(OSError):  # cut off by the exporter: the point
                sock.sendall(flood)
            if i % 10 == 9:
                peak = max(peak, rss_mb(proc.pid))
        # Answered after every flood connection was accepted and read, so the peak is in.
        assert get(f"{base}/metrics")[0] == 200
        peak = max(peak, rss_mb(proc.pid))
        assert peak - baseline < 20, f"RSS {baseline:.0f} MB -> {peak:.0f} MB during the flood"
    finally:
        for sock in sockets:
            sock.close()
    assert wait_for(lambda: connections(base) == 1), connections(base)
    assert wait_for(lambda: rss_mb(proc.pid) - baseline < 10), (baseline, rss_mb(proc.pid))


@pytest.mark.parametrize("exporter", [("--web.max-connections=1200",)], indirect=True)
def test_memory_held_by_a_burst_of_connections_is_handed_back(exporter):
    proc, base, port = exporter
    baseline = rss_mb(proc.pid)
    # Within the limit, so each is held until the client goes: the memory is the parser's.
    head = HEAD + headers(2, 7600)
    assert len(head) < MAX_UNANSWERED_BYTES
    sockets: list[socket.socket] = []
    try:
        # From 20 loopback addresses, 50 each: one address may not hold 1,000.
        for i in range(1000):
            source = (f"127.0.1.{i % 20 + 1}", 0)
            sock = socket.create_connection(("127.0.0.1", port), source_address=source)
            sockets.append(sock)
            sock.sendall(head)
        assert wait_for(lambda: connections(base) >= 1000, timeout=10), connections(base)
        held = rss_mb(proc.pid)
        assert held - baseline > 15, f"the burst was not held: {baseline:.0f} -> {held:.0f} MB"
    finally:
        for sock in sockets:
            sock.close()
    assert wait_for(lambda: connections(base) == 1), connections(base)
    # glibc keeps what the burst freed unless told to hand it back: 28 MB of 29 stayed before.
    assert wait_for(lambda: rss_mb(proc.pid) - baseline < 10), (baseline, held, rss_mb(proc.pid))

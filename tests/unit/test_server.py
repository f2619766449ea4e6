"""The HTTP side over real HTTP on loopback: cached bytes, gzip, health and staleness."""

from __future__ import annotations

import asyncio
import gzip
import socket
from collections.abc import Callable
from dataclasses import replace

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.app import thread_problem
from kube_gpu_exporter.exporter.config import WebConfig
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.store import Exposition, ExpositionStore
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.server import (
    READINESS_LOG_KEY,
    accepts_gzip,
    bind_listeners,
    build_app,
    split_listen_address,
)
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from tests.conftest import FAST, LABELS, joined_with, store_for, wait_for
from tests.support.exporter_process import free_port

WEB = WebConfig(stale_after_seconds=15.0, health_max_age_seconds=60.0)


async def client_for(store, web: WebConfig = WEB, problem=lambda: None) -> TestClient:
    client = TestClient(TestServer(build_app(store, web, problem)))
    await client.start_server()
    return client


def current(store: ExpositionStore) -> Exposition:
    """The store's current exposition, once the test knows one was rendered."""
    exposition = store.current
    assert exposition is not None
    return exposition


async def test_metrics_served_plain_and_gzip(sim, make_poller):
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store)
    try:
        plain = await client.get("/metrics", headers={"Accept-Encoding": "identity"})
        assert plain.status == 200
        assert plain.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert "Content-Encoding" not in plain.headers
        text = await plain.text()
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
        raw = await client.get(
            "/metrics", headers={"Accept-Encoding": "gzip"}, auto_decompress=False
        )
        assert raw.headers["Content-Encoding"] == "gzip"
        assert raw.headers["Vary"] == "Accept-Encoding"
        body = gzip.decompress(await raw.read()).decode()
        # Same body; only the per-scrape tail (snapshot age) may differ.
        strip = lambda t: t.split("# HELP kube_gpu_exporter_snapshot_age_seconds")[0]  # noqa: E731
        assert strip(body) == strip(text)
    finally:
        await client.close()


async def test_head_and_method_and_path_errors(sim, make_poller):
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store)
    try:
        assert (await client.head("/metrics")).status == 200
        assert (await client.post("/metrics", data=b"x")).status == 405
        assert (await client.get("/nope")).status == 404
        index = await client.get("/")
        html = await index.text()
        assert index.status == 200 and 'href="/metrics"' in html and "0.1.0" in html
    finally:
        await client.close()


async def test_readyz_waits_for_the_first_snapshot(sim, make_poller):
    store = store_for()
    client = await client_for(store)
    try:
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/metrics")).status == 503
        assert (await client.get("/healthz")).status == 200  # starting is not unhealthy
        store.publish(make_poller(sim).sweep())
        assert (await client.get("/readyz")).status == 200
        assert (await client.get("/metrics")).status == 200
    finally:
        await client.close()


async def test_each_readiness_probe_is_observed_by_the_readiness_log(sim, make_poller):
    store = store_for()
    app = build_app(store, WEB, lambda: None)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        log = app[READINESS_LOG_KEY]
        assert (await client.get("/readyz")).status == 503 and not log.ready
        store.publish(make_poller(sim).sweep())
        assert (await client.get("/readyz")).status == 200 and log.ready
    finally:
        await client.close()


async def test_healthz_fails_when_the_poller_thread_died(sim, make_poller):
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store, problem=lambda: "the nvml-poller thread has stopped")
    try:
        response = await client.get("/healthz")
        assert response.status == 503 and "poller" in await response.text()
    finally:
        await client.close()


async def test_hanging_nvml_call_gives_stale_snapshot_and_unhealthy_healthz(sim):
    """A global NVML call hangs: the last snapshot keeps being served, marked stale, and
    /healthz turns unhealthy after the configured bound. In simulated time: the poller waits
    between sweeps on a ManualClock, and the store reads ages on it."""
    clock = ManualClock()
    store = ExpositionStore(Renderer(LABELS), joined_with(), clock=clock.monotonic)

    def publish(snapshot: NodeSnapshot) -> None:
        # The poller stamps a snapshot on the system's clock (how long NVML took); its age is
        # what this test steps, so it is stamped again on the test's clock as it is published.
        store.publish(replace(snapshot, monotonic_at=clock.monotonic()))

    web = WebConfig(stale_after_seconds=0.5, health_max_age_seconds=1.0)
    # No XID watcher and helper rounds on demand: the poller is the only thread waiting on the
    # clock, so the next wake is its next sweep.
    poller = Poller(
        replace(FAST, interval_seconds=0.1, xid_enabled=False),
        publish,
        sim.source(),
        runner=SteppedHelpers(),
        clock=clock,
    )
    poller.start()
    client = await client_for(store, web, lambda: thread_problem(poller))
    try:
        # The first sweep, and the poller parked until the next.
        await asyncio.to_thread(clock.wait_for_waiters, 1)
        first = current(store).snapshot.sequence
        assert (await client.get("/healthz")).status == 200
        sim.faults.hang("nvmlDeviceGetCount")
        clock.advance_to_next_wake()  # the next sweep starts, and hangs
        assert await asyncio.to_thread(wait_for, lambda: sim.faults.hung_calls == 1)
        assert current(store).snapshot.sequence == first
        assert (await client.get("/healthz")).status == 200  # not past the bound yet
        clock.advance(0.6)
        metrics = await (await client.get("/metrics")).text()
        assert "kube_gpu_exporter_snapshot_stale 1" in metrics  # past 0.5 s
        assert (await client.get("/healthz")).status == 200  # but not past 1 s
        clock.advance(0.6)
        healthz = await client.get("/healthz")
        assert healthz.status == 503
        assert "since the last NVML sweep" in await healthz.text()
        metrics = await (await client.get("/metrics")).text()
        assert "DCGM_FI_DEV_GPU_TEMP{" in metrics  # still serving the last snapshot
        assert "kube_gpu_exporter_snapshot_stale 1" in metrics
        assert current(store).snapshot.sequence == first
        sim.faults.release_all()
        assert await asyncio.to_thread(wait_for, lambda: current(store).snapshot.sequence > first)
        assert (await client.get("/healthz")).status == 200
        assert "kube_gpu_exporter_snapshot_stale 0" in await (await client.get("/metrics")).text()
    finally:
        sim.faults.release_all()
        await client.close()
        poller.stop()


async def test_concurrent_scrapes_all_succeed_with_the_same_body(sim, make_poller):
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store)
    try:

        async def scrape() -> str:
            response = await client.get("/metrics", headers={"Accept-Encoding": "gzip"})
            assert response.status == 200
            text = await response.text()
            return text.split("# HELP kube_gpu_exporter_snapshot_age_seconds")[0]

        bodies = await asyncio.gather(*(scrape() for _ in range(64)))
        assert len(set(bodies)) == 1
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("deflate", False),
        ("", False),
        ("gzip;q=0", False),
        ("*", True),
        ("identity, gzip;q=0.5", True),
    ],
)
def test_accept_encoding_parsing(header, expected):
    assert accepts_gzip(header) is expected


@pytest.mark.parametrize(
    ("address", "expected"),
    [(":9455", (None, 9455)), ("127.0.0.1:80", ("127.0.0.1", 80)), ("[::1]:9455", ("::1", 9455))],
)
def test_listen_address_parsing(address, expected):
    assert split_listen_address(address) == expected


@pytest.mark.parametrize("address", ["9455", "host:", ":0", ":70000", "::1:9455", "a:b"])
def test_bad_listen_addresses(address):
    with pytest.raises(ValueError):
        split_listen_address(address)


def test_binding_a_port_in_use_names_the_address():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(ConfigurationError) as caught:
            bind_listeners(address)
    assert str(caught.value) == f"--web.listen-address {address}: address already in use"


def test_binding_an_address_this_host_lacks_names_it():
    # 192.0.2.0/24 is reserved for documentation: no interface has it.
    with pytest.raises(ConfigurationError) as caught:
        bind_listeners("192.0.2.1:9455")
    assert (
        str(caught.value) == "--web.listen-address 192.0.2.1:9455: cannot assign requested address"
    )


def test_bound_listeners_are_listening():
    port = free_port()
    listeners = bind_listeners(f"127.0.0.1:{port}")
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass  # accepted by the kernel's queue: the socket listens before any loop runs
    finally:
        for sock in listeners:
            sock.close()


async def test_real_http_client_against_served_app(sim, make_poller):
    """aiohttp's own client, as a second independent HTTP peer."""
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store)
    try:
        url = str(client.make_url("/metrics"))
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200
            assert "kube_gpu_exporter_nvml_up 1" in await response.text()
    finally:
        await client.close()


async def test_clients_hanging_up_leave_no_tasks_or_connections(sim, make_poller):
    store = store_for()
    store.publish(make_poller(sim).sweep())
    client = await client_for(store)
    try:
        await client.get("/metrics")  # warm
        tasks = len(asyncio.all_tasks())
        runner = client.server.runner
        assert runner is not None and runner.server is not None
        server = runner.server
        connections = len(server.connections)  # the test client's keep-alive one
        for _ in range(100):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n")
            await reader.read(100)  # part of the response, then gone
            writer.transport.abort()
        for _ in range(100):  # and half a request, then gone
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(b"GET /metr")
            await writer.drain()
            writer.close()
        assert await async_wait_for(lambda: len(server.connections) == connections)
        assert await async_wait_for(lambda: len(asyncio.all_tasks()) <= tasks)
    finally:
        await client.close()


async def async_wait_for(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Whether `predicate` holds within `timeout`, giving the event loop a turn between looks:
    what it waits for (a connection closed, a task ended) is the loop's own work."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0)
    return bool(predicate())

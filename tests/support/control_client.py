"""The simulator's control routes (kube_gpu_exporter/exporter/simulator/control.py) on a real HTTP
server on loopback, and a client for them: how the unit tests inject faults over HTTP."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.simulator.control import add_control_routes
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml


@contextlib.asynccontextmanager
async def control_client(sim: FakeNvml, kubelet_socket: Path) -> AsyncIterator[TestClient]:
    """A client of `sim`'s control routes; `kubelet_socket` is the fake kubelet's (never
    served: the routes only mark its devices)."""
    app = web.Application()
    add_control_routes(app, sim, FakeKubelet(sim, kubelet_socket))
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()

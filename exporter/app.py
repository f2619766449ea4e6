"""Wires the parts together: NVML (real or simulated) -> poller -> exposition store -> HTTP."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace

from exporter.config import Config, ConfigurationError
from exporter.exposition.renderer import Renderer
from exporter.exposition.store import ExpositionStore
from exporter.nvml.binding import check_binding
from exporter.poller import Poller
from exporter.server import build_app, serve

log = logging.getLogger(__name__)


def start_simulator(config: Config):
    """Patch the simulated node into pynvml. Imported lazily: production never loads it."""
    from exporter.simulator.fake_nvml import FakeNvml
    from exporter.simulator.fleet import FleetError, default_fleet, load_fleet

    try:
        fleet = load_fleet(config.fleet_file) if config.fleet_file else default_fleet()
    except FleetError as exc:
        raise ConfigurationError(str(exc)) from None
    log.info(
        "simulating node %s with %d GPUs (driver %s)",
        fleet.node_name,
        len(fleet.gpus),
        fleet.driver_version,
    )
    return FakeNvml(fleet).install()


def _event_loop_runner() -> Callable:
    """uvloop where installed: it roughly halves the per-request cost of the event loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def run(
    config: Config, default_node_name: str, on_listening: Callable[[int], None] | None = None
) -> int:
    simulator = start_simulator(config) if config.simulate else None
    if simulator is None and (problem := check_binding()):
        raise ConfigurationError(problem)
    if not config.labels.node_name:
        node = simulator.fleet.node_name if simulator is not None else default_node_name
        config = replace(config, labels=replace(config.labels, node_name=node))
    store = ExpositionStore(Renderer(config.labels))
    poller = Poller(config.collection, store.publish)
    poller.start()
    app = build_app(store, config.web, lambda: poller.alive)
    try:
        _event_loop_runner()(serve(app, config.web.listen_address, on_listening))
    finally:
        poller.stop()
        if simulator is not None:
            simulator.uninstall()
    return 0

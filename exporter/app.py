"""Wires the parts together:

  NVML (real or simulated) -> poller -> NodeSnapshot --\
  kubelet pod-resources -> PodResourcesWatcher --------+-> ExpositionStore -> HTTP
  Kubernetes API (optional) -> KubernetesWatcher ------/
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import signal
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from exporter.config import Config, ConfigurationError
from exporter.connection_guard import connection_cap, raise_open_file_limit
from exporter.exposition.context import AttributionContext
from exporter.exposition.renderer import Renderer
from exporter.exposition.store import ExpositionStore
from exporter.nvml.binding import check_binding
from exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from exporter.poller import Poller
from exporter.server import build_app, serve
from exporter.webconfig.reload import WebConfigReloader

if TYPE_CHECKING:
    from exporter.kubernetes.watcher import KubernetesWatcher

log = logging.getLogger(__name__)


@contextlib.contextmanager
def simulated_node(config: Config) -> Iterator[tuple[Any, Any, Config]]:
    """Patch the simulated node into pynvml and start its fake kubelet; yields the simulator, the
    kubelet and the config pointed at the fake socket. Imported lazily: production never loads
    it."""
    from exporter.simulator.fake_kubelet import FakeKubelet
    from exporter.simulator.fake_nvml import FakeNvml
    from exporter.simulator.fleet import FleetError, resolve_fleet
    from exporter.simulator.host_tree import HostTree
    from exporter.simulator.processes import ProcessTable

    try:
        fleet = resolve_fleet(config.fleet_file)
    except FleetError as exc:
        raise ConfigurationError(str(exc)) from None
    log.info(
        "simulating node %s with %d GPUs (driver %s)",
        fleet.node_name,
        len(fleet.gpus),
        fleet.driver_version,
    )
    nvml = FakeNvml(fleet).install()
    with tempfile.TemporaryDirectory(prefix="kube-gpu-exporter-") as tmp:
        kubelet = FakeKubelet(nvml, Path(tmp) / "kubelet.sock").start()
        log.info("fake kubelet pod-resources socket at %s", kubelet.socket_path)
        attribution = replace(config.attribution, socket_path=str(kubelet.socket_path))
        collection = config.collection
        if collection.processes_enabled:
            # The pods' processes, and the host's /proc and /var/log as the node would show them.
            nvml.processes = ProcessTable(nvml, kubelet)
            tree = HostTree(nvml.processes, Path(tmp) / "host").refresh()
            collection = replace(
                collection, proc_root=str(tree.proc_root), log_root=str(tree.log_root)
            )
        try:
            yield nvml, kubelet, replace(config, attribution=attribution, collection=collection)
        finally:
            kubelet.stop()
            nvml.uninstall()


def _event_loop_runner() -> Callable:
    """uvloop where installed: it roughly halves the per-request cost of the event loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


def _kubernetes_watcher(config: Config):
    from exporter.kubernetes.watcher import KubernetesWatcher

    def api_client() -> Any:
        import kubernetes

        if config.attribution.kubeconfig:
            kubernetes.config.load_kube_config(config_file=config.attribution.kubeconfig)
        else:
            kubernetes.config.load_incluster_config()
        return kubernetes.client.ApiClient()

    allowlist = config.attribution.pod_label_allowlist
    return KubernetesWatcher(
        api_client,
        config.labels.node_name,
        label_allowlist=re.compile(allowlist) if allowlist else None,
        max_labels_per_pod=config.attribution.max_pod_labels,
        series_labels=config.labels.pod_labels_on_series,
        watch_resource_slices=config.attribution.watch_resource_slices,
    )


def attribution_sources(
    config: Config,
) -> tuple[PodResourcesWatcher | None, KubernetesWatcher | None]:
    """The pod-resources watcher and the Kubernetes watcher `config` asks for, not started."""
    pods = None
    if config.attribution.podresources_enabled:
        pods = PodResourcesWatcher(
            PodResourcesClient(config.attribution.socket_path),
            config.collection.interval_seconds,
            config.attribution.extra_resources,
        )
    kube = _kubernetes_watcher(config) if config.attribution.kubernetes_enabled else None
    return pods, kube


def exposition_store(
    config: Config, pods: PodResourcesWatcher | None, kube: KubernetesWatcher | None
) -> ExpositionStore:
    """A store that joins each published snapshot with the sources' latest data."""

    def context() -> AttributionContext:
        return AttributionContext(
            pods=pods.latest if pods else None,
            pods_status=pods.status if pods else None,
            kube=kube.view() if kube else None,
        )

    return ExpositionStore(Renderer(config.labels), context)


def with_node_name(config: Config, default_node_name: str) -> Config:
    if config.labels.node_name:
        return config
    return replace(config, labels=replace(config.labels, node_name=default_node_name))


def thread_problem(*threads: Poller | PodResourcesWatcher | KubernetesWatcher) -> str | None:
    """Why a supervised thread (the poller, its helpers, the attribution sources) can no longer
    refresh its data, for /healthz; None while every one of them runs or is restarting."""
    return next((why for thread in threads if (why := thread.problem()) is not None), None)


# Each would end the process at once by default, skipping every cleanup (the simulator's socket
# directory stays behind). SIGHUP re-reads --web.config.file, as exporter-toolkit users expect;
# the other two are ignored: nothing here has a use for them, and a stray one (log tools send
# SIGUSR1 to "reopen logs") must not take a node's GPU metrics down.
STRAY_SIGNALS = (signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def ignore_stray_signals() -> None:
    """Until the event loop handles them, and after it is gone."""
    if threading.current_thread() is threading.main_thread():
        for sig in STRAY_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


async def _with_signals(serving: Coroutine[Any, Any, None], reloader: WebConfigReloader | None):
    loop = asyncio.get_running_loop()

    def hangup() -> None:
        if reloader is None:
            log.info("SIGHUP: there is no --web.config.file to re-read")
        else:
            reloader.reload("SIGHUP")

    def ignored(sig: signal.Signals) -> None:
        log.info(
            "ignoring %s: SIGTERM stops the exporter, SIGHUP re-reads its web config", sig.name
        )

    loop.add_signal_handler(signal.SIGHUP, hangup)
    for sig in (signal.SIGUSR1, signal.SIGUSR2):
        loop.add_signal_handler(sig, ignored, sig)
    try:
        await serving
    finally:
        for sig in STRAY_SIGNALS:
            loop.remove_signal_handler(sig)  # puts back SIG_DFL...
        ignore_stray_signals()  # ...so straight back to ignoring them until the process ends


def serve_node(
    config: Config,
    on_listening: Callable[[int], None] | None = None,
    extra_routes: Callable[[web.Application], None] | None = None,
) -> None:
    """Start the collectors for `config`, serve until SIGTERM, then stop them."""
    cap = connection_cap(config.web.max_connections, raise_open_file_limit())
    config = replace(config, web=replace(config.web, max_connections=cap))
    pods, kube = attribution_sources(config)
    store = exposition_store(config, pods, kube)
    poller = Poller(config.collection, store.publish)
    helpers = [h for h in (pods, kube) if h is not None]
    for helper in helpers:
        helper.start()
    poller.start()
    app = build_app(store, config.web, lambda: thread_problem(poller, *helpers))
    if extra_routes:
        extra_routes(app)
    try:
        security = config.web.security
        reloader = WebConfigReloader(security) if security else None
        tls = reloader.ssl_context if reloader else None
        serving = serve(app, config.web.listen_address, on_listening, ssl_context=tls)
        _event_loop_runner()(_with_signals(serving, reloader))
    finally:
        poller.stop()
        for helper in helpers:
            helper.stop(timeout=3.0)


def run(
    config: Config,
    default_node_name: str,
    on_listening: Callable[[int], None] | None = None,
) -> int:
    extra_routes: Callable[[web.Application], None] | None = None
    with contextlib.ExitStack() as stack:
        if config.simulate:
            from exporter.simulator.control import PREFIX, add_control_routes

            nvml, kubelet, config = stack.enter_context(simulated_node(config))
            default_node_name = nvml.fleet.node_name
            extra_routes = functools.partial(add_control_routes, nvml=nvml, kubelet=kubelet)
            log.info("simulator fault injection at %s/gpus (see README)", PREFIX)
        elif problem := check_binding():
            raise ConfigurationError(problem)
        serve_node(with_node_name(config, default_node_name), on_listening, extra_routes)
    return 0

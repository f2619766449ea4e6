"""Wires the parts together on the node a NodeBackend gives (node_backend.py):

  backend's NVML (real or simulated) -> poller -> NodeSnapshot --\
  kubelet pod-resources -> PodResourcesWatcher --------+-> ExpositionStore -> HTTP
  Kubernetes API (optional) -> KubernetesWatcher ------/
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kube_gpu_exporter.exporter.attribution.context import AttributionContext
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.attribution.model import AttributedNode
from kube_gpu_exporter.exporter.attribution.pod_energy import PodEnergyLedger
from kube_gpu_exporter.exporter.background import stop_within
from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.connection_guard import connection_cap, raise_open_file_limit
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.scrape_schedule import ScrapeSchedule
from kube_gpu_exporter.exporter.exposition.store import ExpositionStore
from kube_gpu_exporter.exporter.node_backend import NodeBackend
from kube_gpu_exporter.exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.readiness import Problem, first_sync, node_readiness
from kube_gpu_exporter.exporter.scrape_cadence import helper_cadence
from kube_gpu_exporter.exporter.server import bind_listeners, build_app, serve
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot
from kube_gpu_exporter.exporter.webconfig.reload import WebConfigReloader

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher

log = logging.getLogger(__name__)


def _event_loop_runner() -> Callable:
    """uvloop where installed: it roughly halves the per-request cost of the event loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


class _ClientFactory:
    """The Kubernetes watcher's API client factory, which remembers why it last failed: outside a
    cluster without a kubeconfig, that is the whole reason the pod is not ready."""

    def __init__(self, config: Config) -> None:
        self._kubeconfig = config.attribution.kubeconfig
        self.last_error: str | None = None

    def __call__(self) -> Any:
        import kubernetes

        try:
            if self._kubeconfig:
                kubernetes.config.load_kube_config(config_file=self._kubeconfig)
            else:
                kubernetes.config.load_incluster_config()
        except Exception as exc:
            text = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
            if self._kubeconfig:
                self.last_error = f"cannot load {self._kubeconfig} ({text})"
            else:
                self.last_error = (
                    f"no in-cluster service account ({text}); in a cluster, deploy with "
                    "deploy/overlays/kubernetes-enrichment, which mounts its token; outside one, "
                    "pass --kubernetes.kubeconfig"
                )
            raise
        self.last_error = None
        return kubernetes.client.ApiClient()


def _kubernetes_watcher(config: Config, api_client: _ClientFactory) -> KubernetesWatcher:
    from kube_gpu_exporter.exporter.kubernetes.watcher import KubernetesWatcher

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
    schedule: ScrapeSchedule | None = None,
    client_factory: _ClientFactory | None = None,
) -> tuple[PodResourcesWatcher | None, KubernetesWatcher | None]:
    """The pod-resources watcher and the Kubernetes watcher `config` asks for, not started.
    With the exposition's scrape `schedule`, pod-resources is listed just before scrapes; the
    Kubernetes watcher makes its API client with `client_factory` (a new one when None)."""
    pods = None
    if config.attribution.podresources_enabled:
        interval = config.collection.interval_seconds
        pods = PodResourcesWatcher(
            PodResourcesClient(config.attribution.socket_path),
            interval,
            config.attribution.extra_resources,
            cadence=None
            if schedule is None
            else helper_cadence(interval, schedule.paced_scrape_in),
        )
    kube = None
    if config.attribution.kubernetes_enabled:
        kube = _kubernetes_watcher(config, client_factory or _ClientFactory(config))
    return pods, kube


def renderer_for(config: Config, clock: Callable[[], float] = time.monotonic) -> Renderer:
    """The renderer of `config`: its labels, its --collectors selection and count windows."""
    return Renderer(
        config.labels,
        config.fields,
        xid_window_ms=config.collection.xid_count_window_ms,
        clock_events_window_ms=config.collection.clock_events_count_window_ms,
        clock=clock,
    )


def exposition_store(
    config: Config,
    pods: PodResourcesWatcher | None,
    kube: KubernetesWatcher | None,
    schedule: ScrapeSchedule | None = None,
) -> ExpositionStore:
    """A store that joins each published snapshot with the sources' latest data, and adds the
    per-pod energy counters that the joined snapshots accumulate."""
    # Its sums run from one joined snapshot to the next: one per store, fed in order under the
    # store's render lock (a snapshot rendered by nobody is never joined, so the next joined one
    # takes the increase since the last that was).
    ledger = PodEnergyLedger()

    def attributed(snapshot: NodeSnapshot) -> AttributedNode:
        context = AttributionContext(
            pods=pods.latest if pods else None,
            pods_status=pods.status if pods else None,
            kube=kube.view() if kube else None,
        )
        return ledger.attach(join(snapshot, context, config.labels))

    return ExpositionStore(
        renderer_for(config),
        attributed,
        interval_seconds=config.collection.interval_seconds,
        schedule=schedule,
    )


def kubernetes_readiness(kube: KubernetesWatcher, factory: _ClientFactory) -> Problem:
    """Not ready until the API first answers this node's pod LIST; then ready for good
    (kube_gpu_exporter/exporter/readiness.py says why it latches). `factory` is the watcher's client
    factory, whose last failure is the reason outside a cluster."""

    def why_not() -> str:
        # No failure count: readiness.ReadinessLog logs a reason again whenever it changes.
        why = factory.last_error or "the 'Kubernetes API watch failed' lines say why"
        return f"the Kubernetes API has not answered this node's pod LIST yet: {why}"

    return first_sync(lambda: kube.view().pods_updated_at is not None, why_not)


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
# What the threads get to wind down after SIGTERM, all together: with the 2 s the server gives
# in-flight scrapes before it (server.serve), the process is gone within 5 s (the chart's grace
# period is 10 s).
SHUTDOWN_SECONDS = 2.5


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
    backend: NodeBackend,
    on_listening: Callable[[int], None] | None = None,
    listeners: list[socket.socket] | None = None,
) -> None:
    """Start the collectors on `backend`'s node, serve until SIGTERM, then stop them."""
    config = with_node_name(backend.config, backend.node_name)
    cap = connection_cap(config.web.max_connections, raise_open_file_limit())
    config = replace(config, web=replace(config.web, max_connections=cap))
    # Learnt from the scrapes the server sees; the collectors time their costly work by it.
    schedule = ScrapeSchedule()
    client_factory = _ClientFactory(config)
    pods, kube = attribution_sources(config, schedule, client_factory)
    store = exposition_store(config, pods, kube, schedule)
    poller = Poller(
        config.collection, store.publish, backend.nvml, next_scrape_in=schedule.paced_scrape_in
    )
    helpers = [h for h in (pods, kube) if h is not None]
    for helper in helpers:
        helper.start()
    poller.start()
    readiness = node_readiness(
        lambda: store.latest,
        poller.nvml_problem,
        kubernetes_readiness(kube, client_factory) if kube is not None else None,
        require_gpus=config.web.health_require_gpus,
    )
    app = build_app(store, config.web, lambda: thread_problem(poller, *helpers), readiness)
    if backend.extra_routes:
        backend.extra_routes(app)
    try:
        security = config.web.security
        reloader = WebConfigReloader(security) if security else None
        tls = reloader.ssl_context if reloader else None
        serving = serve(
            app, config.web.listen_address, on_listening, ssl_context=tls, listeners=listeners
        )
        _event_loop_runner()(_with_signals(serving, reloader))
    finally:
        stop_within(SHUTDOWN_SECONDS, [*helpers, poller])


def run(
    backend: AbstractContextManager[NodeBackend],
    listen_address: str,
    on_listening: Callable[[int], None] | None = None,
) -> int:
    """Serve `backend`'s node on `listen_address`: the address is bound before the node starts,
    so that a port in use is one line before anything else logs."""
    listeners = bind_listeners(listen_address)
    with contextlib.ExitStack() as stack:
        for sock in listeners:
            stack.callback(sock.close)
        node = stack.enter_context(backend)
        serve_node(node, on_listening, listeners)
    return 0

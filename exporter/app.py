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
import socket
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
from exporter.exposition.scrape_schedule import ScrapeSchedule
from exporter.exposition.store import ExpositionStore
from exporter.nvml import mig_reader
from exporter.nvml.binding import check_binding
from exporter.podresources.client import PodResourcesClient, PodResourcesWatcher
from exporter.poller import Poller
from exporter.readiness import Problem, first_sync, node_readiness
from exporter.scrape_cadence import helper_cadence
from exporter.server import bind_listeners, build_app, serve
from exporter.webconfig.reload import WebConfigReloader

if TYPE_CHECKING:
    from exporter.kubernetes.watcher import KubernetesWatcher

log = logging.getLogger(__name__)


def simulated_fleet(config: Config) -> Any:
    """The fleet --simulate names; a bad fleet file is a ConfigurationError."""
    from exporter.simulator.fleet import FleetError, resolve_fleet

    try:
        return resolve_fleet(config.fleet_file)
    except FleetError as exc:
        raise ConfigurationError(str(exc)) from None


# Tried after tempfile's own candidates (TMPDIR, /tmp, /var/tmp, ...): Docker, podman and
# Kubernetes mount a writable /dev/shm even under a read-only root filesystem with no /tmp.
SCRATCH_FALLBACKS: tuple[str, ...] = ("/dev/shm",)


def scratch_directory() -> tempfile.TemporaryDirectory[str]:
    """A new private directory for the simulated node's sockets and files, created at once; a
    ConfigurationError (one line) where no candidate is writable."""
    for parent in (None, *SCRATCH_FALLBACKS):
        with contextlib.suppress(OSError):
            return tempfile.TemporaryDirectory(prefix="kube-gpu-exporter-", dir=parent)
    raise ConfigurationError(
        "--simulate needs a writable directory for its fake kubelet's socket, and TMPDIR, /tmp, "
        f"/var/tmp and {', '.join(SCRATCH_FALLBACKS)} are all missing or read-only: "
        "mount an emptyDir or a tmpfs at /tmp"
    )


@contextlib.contextmanager
def simulated_node(config: Config, fleet: Any = None) -> Iterator[tuple[Any, Any, Config]]:
    """Patch the simulated node into pynvml and start its fake kubelet; yields the simulator, the
    kubelet and the config pointed at the fake socket. `fleet` is from simulated_fleet, read
    here when None. Imported lazily: production never loads it."""
    from exporter.simulator.fake_kubelet import FakeKubelet
    from exporter.simulator.fake_nvml import FakeNvml
    from exporter.simulator.host_tree import HostTree
    from exporter.simulator.processes import ProcessTable

    fleet = simulated_fleet(config) if fleet is None else fleet
    # First: without it the simulator cannot start, and a refusal is better said before anything.
    scratch = scratch_directory()
    log.info(
        "simulating node %s with %d GPUs (driver %s, NVML %s)",
        fleet.node_name,
        len(fleet.gpus),
        fleet.driver_version,
        "privileged" if fleet.nvml_privileged else "unprivileged, as the DaemonSet runs",
    )
    # The fleet chose it: the refusal lines a real unprivileged node logs would read as faults.
    unprivileged = (
        None
        if fleet.nvml_privileged
        else "the simulated node is unprivileged on purpose (its fleet sets nvml_privileged: false)"
    )
    nvml = FakeNvml(fleet).install()
    with scratch as tmp, _set_while(mig_reader, "expected_refusal", unprivileged):
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
        config = replace(config, attribution=attribution, collection=collection)
        try:
            with contextlib.ExitStack() as cluster:
                if config.attribution.kubernetes_enabled and not config.attribution.kubeconfig:
                    config = _with_simulated_cluster(cluster, nvml, kubelet, config, Path(tmp))
                yield nvml, kubelet, config
        finally:
            kubelet.stop()
            nvml.uninstall()


@contextlib.contextmanager
def _set_while(owner: Any, name: str, value: Any) -> Iterator[None]:
    """`owner.name` is `value` inside the block, and what it was before again after it."""
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)


def _with_simulated_cluster(
    stack: contextlib.ExitStack, nvml: Any, kubelet: Any, config: Config, directory: Path
) -> Config:
    """Serve the simulated node's pods, node and ResourceSlices from an in-process API until
    `stack` closes, and point `config` at it: without a cluster, --kubernetes would only fail to
    find a service account."""
    from exporter.simulator.cluster_state import TEAM_LABEL, simulated_cluster

    node = config.labels.node_name or nvml.fleet.node_name
    cluster = stack.enter_context(simulated_cluster(nvml, kubelet, node, directory))
    log.info("simulated Kubernetes API at %s (kubeconfig %s)", cluster.api.host, cluster.kubeconfig)
    # Its pods carry a team label; allow-list it unless the user chose their own.
    allowlist = config.attribution.pod_label_allowlist or re.escape(TEAM_LABEL)
    attribution = replace(
        config.attribution, kubeconfig=str(cluster.kubeconfig), pod_label_allowlist=allowlist
    )
    return replace(config, attribution=attribution)


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
    from exporter.kubernetes.watcher import KubernetesWatcher

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
            cadence=None if schedule is None else helper_cadence(interval, schedule.next_scrape_in),
        )
    kube = None
    if config.attribution.kubernetes_enabled:
        kube = _kubernetes_watcher(config, client_factory or _ClientFactory(config))
    return pods, kube


def exposition_store(
    config: Config,
    pods: PodResourcesWatcher | None,
    kube: KubernetesWatcher | None,
    schedule: ScrapeSchedule | None = None,
) -> ExpositionStore:
    """A store that joins each published snapshot with the sources' latest data."""

    def context() -> AttributionContext:
        return AttributionContext(
            pods=pods.latest if pods else None,
            pods_status=pods.status if pods else None,
            kube=kube.view() if kube else None,
        )

    return ExpositionStore(
        Renderer(config.labels),
        context,
        interval_seconds=config.collection.interval_seconds,
        schedule=schedule,
    )


def kubernetes_readiness(kube: KubernetesWatcher, factory: _ClientFactory) -> Problem:
    """Not ready until the API first answers this node's pod LIST; then ready for good
    (exporter/readiness.py says why it latches). `factory` is the watcher's client factory,
    whose last failure is the reason outside a cluster."""

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
    listeners: list[socket.socket] | None = None,
) -> None:
    """Start the collectors for `config`, serve until SIGTERM, then stop them."""
    cap = connection_cap(config.web.max_connections, raise_open_file_limit())
    config = replace(config, web=replace(config.web, max_connections=cap))
    # Learnt from the scrapes the server sees; the collectors time their costly work by it.
    schedule = ScrapeSchedule()
    client_factory = _ClientFactory(config)
    pods, kube = attribution_sources(config, schedule, client_factory)
    store = exposition_store(config, pods, kube, schedule)
    poller = Poller(config.collection, store.publish, next_scrape_in=schedule.next_scrape_in)
    helpers = [h for h in (pods, kube) if h is not None]
    for helper in helpers:
        helper.start()
    poller.start()
    readiness = node_readiness(
        lambda: store.latest,
        poller.nvml_problem,
        kubernetes_readiness(kube, client_factory) if kube is not None else None,
    )
    app = build_app(store, config.web, lambda: thread_problem(poller, *helpers), readiness)
    if extra_routes:
        extra_routes(app)
    try:
        security = config.web.security
        reloader = WebConfigReloader(security) if security else None
        tls = reloader.ssl_context if reloader else None
        serving = serve(
            app, config.web.listen_address, on_listening, ssl_context=tls, listeners=listeners
        )
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
    # Every start-up mistake is one line before anything logs or starts: the fleet file or the
    # NVML binding, then the listen address (a port in use).
    fleet = simulated_fleet(config) if config.simulate else None
    if not config.simulate and (problem := check_binding()):
        raise ConfigurationError(problem)
    listeners = bind_listeners(config.web.listen_address)
    with contextlib.ExitStack() as stack:
        for sock in listeners:
            stack.callback(sock.close)
        if config.simulate:
            from exporter.simulator.control import PREFIX, add_control_routes

            nvml, kubelet, config = stack.enter_context(simulated_node(config, fleet))
            default_node_name = nvml.fleet.node_name
            extra_routes = functools.partial(add_control_routes, nvml=nvml, kubelet=kubelet)
            log.info("simulator fault injection at %s/gpus (docs/simulator.md)", PREFIX)
        node_config = with_node_name(config, default_node_name)
        serve_node(node_config, on_listening, extra_routes, listeners)
    return 0

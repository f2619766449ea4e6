"""The `--simulate` backend: a simulated GPU node, with its fake kubelet, host tree and (with
--kubernetes and no kubeconfig) API server, built from a fleet file."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from pathlib import Path

from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.fields.collectors_file import read_collectors_file
from kube_gpu_exporter.exporter.fields.flags import log_selection
from kube_gpu_exporter.exporter.flags.selection import with_selection
from kube_gpu_exporter.exporter.node_backend import NodeBackend
from kube_gpu_exporter.exporter.simulator.control import PREFIX, add_control_routes
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import (
    FleetError,
    FleetSpec,
    builtin_collectors,
    resolve_fleet,
)
from kube_gpu_exporter.exporter.simulator.host_tree import HostTree
from kube_gpu_exporter.exporter.simulator.processes import ProcessTable

log = logging.getLogger(__name__)


def simulated_fleet(config: Config) -> FleetSpec:
    """The fleet --simulate names; a bad fleet file is a ConfigurationError."""
    try:
        return resolve_fleet(config.fleet_file)
    except FleetError as exc:
        raise ConfigurationError(str(exc)) from None


def with_fleet_collectors(config: Config) -> Config:
    """`config` exporting the fields its built-in fleet ships a collectors CSV for (gb200's
    NVLink, fabric and C2C families), as if --collectors had named it; an explicit --collectors
    wins, and a fleet without a CSV, or a fleet file, changes nothing."""
    if config.fields is not None:
        return config
    path = builtin_collectors(config.fleet_file)
    if path is None:
        return config
    fields = read_collectors_file(path)
    log.info("fleet %s exports the fields of its collectors file %s", config.fleet_file, path)
    log_selection(fields)
    return with_selection(config, fields)


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


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    """A running simulated node: its NVML, its kubelet, and the backend the exporter runs on."""

    nvml: FakeNvml
    kubelet: FakeKubelet
    backend: NodeBackend

    @property
    def config(self) -> Config:
        return self.backend.config


def simulated_backend(config: Config) -> AbstractContextManager[NodeBackend]:
    """The backend for --simulate: reads the fleet at once (a bad one is one line before anything
    starts), starts the node when entered, and adds the fault-injection routes."""
    fleet = simulated_fleet(config)

    @contextlib.contextmanager
    def started() -> Iterator[NodeBackend]:
        with simulated_node(config, fleet) as node:
            routes = functools.partial(add_control_routes, nvml=node.nvml, kubelet=node.kubelet)
            log.info("simulator fault injection at %s/gpus (docs/simulator.md)", PREFIX)
            yield replace(node.backend, extra_routes=routes)

    return started()


@contextlib.contextmanager
def simulated_node(
    config: Config,
    fleet: FleetSpec | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[SimulatedNode]:
    """Start the simulated node `fleet` describes (the one --simulate names when None): its NVML,
    its fake kubelet and host tree, and its API server where --kubernetes has no kubeconfig.
    `clock` drives the simulated GPUs (a test steps its own through simulated minutes)."""
    fleet = simulated_fleet(config) if fleet is None else fleet
    config = with_fleet_collectors(config)
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
    nvml = FakeNvml(fleet, clock)
    with scratch as tmp:
        kubelet = FakeKubelet(nvml, Path(tmp) / "kubelet.sock").start()
        log.info("fake kubelet pod-resources socket at %s", kubelet.socket_path)
        attribution = replace(config.attribution, socket_path=str(kubelet.socket_path))
        collection = config.collection
        if collection.processes_enabled:
            # The pods' processes, and the host's /proc and /var/log as the node would show them.
            processes = ProcessTable(nvml, kubelet)
            nvml.processes = processes
            tree = HostTree(processes, Path(tmp) / "host").refresh()
            collection = replace(
                collection, proc_root=str(tree.proc_root), log_root=str(tree.log_root)
            )
        config = replace(config, attribution=attribution, collection=collection)
        try:
            with contextlib.ExitStack() as cluster:
                if config.attribution.kubernetes_enabled and not config.attribution.kubeconfig:
                    config = _with_simulated_cluster(cluster, nvml, kubelet, config, Path(tmp))
                source = nvml.source(expected_refusal=unprivileged)
                backend = NodeBackend(nvml=source, config=config, node_name=fleet.node_name)
                yield SimulatedNode(nvml, kubelet, backend)
        finally:
            kubelet.stop()
            nvml.close()


def _with_simulated_cluster(
    stack: contextlib.ExitStack,
    nvml: FakeNvml,
    kubelet: FakeKubelet,
    config: Config,
    directory: Path,
) -> Config:
    """Serve the simulated node's pods, node and ResourceSlices from an in-process API until
    `stack` closes, and point `config` at it: without a cluster, --kubernetes would only fail to
    find a service account."""
    from kube_gpu_exporter.exporter.simulator.cluster_state import TEAM_LABEL, simulated_cluster

    node = config.labels.node_name or nvml.fleet.node_name
    cluster = stack.enter_context(simulated_cluster(nvml, kubelet, node, directory))
    log.info("simulated Kubernetes API at %s (kubeconfig %s)", cluster.api.host, cluster.kubeconfig)
    # Its pods carry a team label; allow-list it unless the user chose their own.
    allowlist = config.attribution.pod_label_allowlist or re.escape(TEAM_LABEL)
    attribution = replace(
        config.attribution, kubeconfig=str(cluster.kubeconfig), pod_label_allowlist=allowlist
    )
    return replace(config, attribution=attribution)

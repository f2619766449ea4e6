"""The seam between the exporter and the node it runs on.

Everything that differs between a real GPU node and the simulated one is in a NodeBackend: the
NVML the poller calls, the config as that node runs it (its kubelet socket, its host /proc and
/var/log, its API server), its name, and any routes it adds. `app.run` takes one and never asks
which kind it was given: `real_node.real_backend` builds the production one, and
`simulator.node.simulated_backend` the `--simulate` one. Each builder checks what can be checked
at once, so that a bad fleet file or a wrong NVML binding is one line before anything starts, and
returns a context manager: the backend is entered after the listeners are bound and left after
the server stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from kube_gpu_exporter.exporter.config import Config
    from kube_gpu_exporter.exporter.nvml.source import NvmlSource


@dataclass(frozen=True, slots=True)
class NodeBackend:
    # What the poller calls NVML through (kube_gpu_exporter/exporter/nvml/source.py).
    nvml: NvmlSource
    # The user's config with this node's parts filled in: the kubelet's pod-resources socket, the
    # host's /proc and /var/log, a kubeconfig where the node brings its own API server.
    config: Config
    # The node label's value when neither --node-name nor NODE_NAME gives one.
    node_name: str
    # Routes the node adds to the exporter's web server (the simulator's fault injection).
    extra_routes: Callable[[web.Application], None] | None = None

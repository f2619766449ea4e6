"""The production backend: the host's NVML library through nvidia-ml-py, and the config as the
user gave it."""

from __future__ import annotations

import contextlib
import socket
from contextlib import AbstractContextManager

from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.node_backend import NodeBackend
from kube_gpu_exporter.exporter.nvml.binding import check_binding, real_nvml


def real_backend(config: Config) -> AbstractContextManager[NodeBackend]:
    """This host's GPUs; a ConfigurationError (one line) when `pynvml` is the wrong package."""
    if problem := check_binding():
        raise ConfigurationError(problem)
    return contextlib.nullcontext(
        NodeBackend(nvml=real_nvml(), config=config, node_name=socket.gethostname())
    )

"""Kubernetes label keys as Prometheus label names, in two spellings.

- Our own allocation metric and node info, the kube-state-metrics way: `app.kubernetes.io/name`
  becomes `label_app_kubernetes_io_name`.
- The DCGM series with `--kubernetes.enable-pod-labels`, dcgm-exporter's way: the same
  sanitising without a prefix, `app_kubernetes_io_name`. Without the prefix a key can land on a
  name the series already carry, or on no valid name at all; such keys are left out.
"""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

# Every name a DCGM series can already carry, in any profile and with any host-label or
# driver-label choice, so a pod's label set on the series does not depend on those flags. Any
# DCGM_ name is taken as well: that is how label-type DCGM fields are named.
SERIES_LABEL_NAMES = frozenset(
    {
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "GPU_I_PROFILE",
        "GPU_I_ID",
        "Hostname",
        "hostname",
        "DCGM_FI_DRIVER_VERSION",
        "DCGM_FI_SYSTEM_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
        "pod_uid",
        "vgpu",
        "err_code",
        "err_msg",
        "xid",
        "clock_event",
    }
)


def is_unicode_text(value: str) -> bool:
    """False for a value holding a lone surrogate, which valid JSON can carry ("\\udcff") but no
    UTF-8 exposition can: such a pod label value is left out, not passed on."""
    if value.isascii():
        return True
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def sanitize_label_name(key: str) -> str:
    return "label_" + _INVALID.sub("_", key)


def series_label_name(key: str) -> str:
    """A pod label key as dcgm-exporter writes it on its series (not necessarily valid)."""
    return _INVALID.sub("_", key)


def is_valid_label_name(name: str) -> bool:
    """Prometheus' label name syntax; `__` names are reserved for Prometheus itself."""
    return _LABEL_NAME.fullmatch(name) is not None and not name.startswith("__")


def is_series_label(name: str) -> bool:
    """Whether a DCGM series carries `name` already, from the exporter itself."""
    return name in SERIES_LABEL_NAMES or name.startswith("DCGM_")

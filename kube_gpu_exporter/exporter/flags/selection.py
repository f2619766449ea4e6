"""A --collectors file applied to a Config: the one way a file is applied, whether --collectors
gave it or a simulated fleet ships it (kube_gpu_exporter/exporter/simulator/node.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.fields.nvlink_health_rows import FABRIC_CLUSTER_UUID
from kube_gpu_exporter.exporter.fields.selection import FieldSelection
from kube_gpu_exporter.exporter.fields.table import (
    CLOCK_EVENTS_COUNT,
    DRIVER_VERSION,
    XID_ERRORS_COUNT,
)


def selection_settings(
    fields: FieldSelection | None, xid_window_ms: int, clock_events_window_ms: int
) -> dict[str, Any]:
    """What a --collectors file changes in CollectionConfig; nothing without one."""
    if fields is None:
        return {}
    return {
        # Off by default, so the reader reads them only because the file lists them.
        "extra_fields": frozenset(f.row.name for f in fields.listed if not f.row.default),
        "xid_count_window_ms": xid_window_ms if fields.lists(XID_ERRORS_COUNT) else None,
        "clock_events_count_window_ms": (
            clock_events_window_ms if fields.lists(CLOCK_EVENTS_COUNT) else None
        ),
    }


def with_selection(config: Config, fields: FieldSelection) -> Config:
    """`config` exporting what the collectors file `fields` lists: its off-by-default fields
    read, its count windows kept, and the driver-version label it names, unless
    --driver-version-label chose one. The one way a file is applied, whether --collectors gave
    it or a simulated fleet ships it (kube_gpu_exporter/exporter/simulator/node.py)."""
    flags = config.selection_flags
    collection = replace(
        config.collection,
        **selection_settings(fields, flags.xid_count_window_ms, flags.clock_events_count_window_ms),
    )
    labels = config.labels
    if flags.driver_label is None:
        # dcgm-exporter attaches the label only when its CSV lists the field, named as listed.
        listed = fields.get(DRIVER_VERSION)
        labels = replace(labels, driver_version_label="" if listed is None else listed.name)
    fabric = fields.get(FABRIC_CLUSTER_UUID)
    labels = replace(labels, fabric_cluster_label="" if fabric is None else fabric.name)
    return replace(config, fields=fields, collection=collection, labels=labels)

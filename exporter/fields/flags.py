"""The command line's field flags: --collectors (dcgm-exporter's CSV), the two count windows and
--collector.field-interval, turned into the settings of CollectionConfig and Config.fields."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from exporter.durations import HOUR, WEEK, bounded_duration, format_duration
from exporter.errors import ConfigurationError, quoted, quoted_path
from exporter.fields.collectors_file import read_collectors_file
from exporter.fields.dcgm_catalogue import is_dcgm_field
from exporter.fields.model import Cadence, DcgmField, Gpm
from exporter.fields.nvlink_health_rows import FABRIC_CLUSTER_UUID
from exporter.fields.selection import FieldSelection
from exporter.fields.table import (
    BY_ANY_NAME,
    CLOCK_EVENTS_COUNT,
    CLOCK_EVENTS_TOTAL,
    DRIVER_VERSION,
    FIELDS,
    XID_ERRORS_COUNT,
)

if TYPE_CHECKING:
    from exporter.config import Config

log = logging.getLogger(__name__)
# DCGM_EXP_CLOCK_EVENTS_TOTAL and _COUNT count this field's value once per sweep: read less often,
# a held mask would be counted again and again.
CLOCK_EVENT_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"

# dcgm-exporter's own variables for the flags it shares with us, so that its DaemonSet's settings
# carry over; our KUBE_GPU_EXPORTER_* name wins where both are set.
UPSTREAM_ENV = {
    "--collectors": "DCGM_EXPORTER_COLLECTORS",
    "--xid-count-window-size": "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
    "--clock-events-count-window-size": "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
    "--health.require-gpus": "DCGM_EXPORTER_HEALTH_REQUIRE_GPUS",
}
# dcgm-exporter's default for both count windows: 5 minutes.
DEFAULT_COUNT_WINDOW_MS = 300_000
# The widest count window, a week: an alert on "any XID lately" looks back hours, not months, and
# a bound keeps the window's seconds a float that timers and clock arithmetic can hold.
MAX_COUNT_WINDOW_MS = int(WEEK * 1000)
_WINDOW_RANGE = f"from 1 to {MAX_COUNT_WINDOW_MS} ({format_duration(WEEK)})"
_WINDOW_DIGITS = len(str(MAX_COUNT_WINDOW_MS))
# The widest --collector.field-interval, as for the other read intervals.
MAX_FIELD_INTERVAL_SECONDS = HOUR
_field_interval = bounded_duration(0.0, MAX_FIELD_INTERVAL_SECONDS)
# Its --collector.field-interval is --collector.energy-read-interval: between reads the counter is
# carried forward by board power, which no other field's interval does.
(ENERGY_FIELD,) = (row.name for row in FIELDS if row.cadence is Cadence.ENERGY)


def window_ms(text: str) -> int:
    """A count window: whole milliseconds from 1 to MAX_COUNT_WINDOW_MS, as dcgm-exporter takes
    it (no units). Every refusal states the range."""
    given = text.strip()
    # ASCII digits only (int() also takes "5_000" and other scripts' digits), and no more of them
    # than the bound has, so that int() never sees a number hundreds of digits long.
    digits = given.removeprefix("+").lstrip("0")
    if digits.isascii() and digits.isdigit() and len(digits) <= _WINDOW_DIGITS:
        value = int(digits)
        if 1 <= value <= MAX_COUNT_WINDOW_MS:
            return value
    raise argparse.ArgumentTypeError(
        f"{quoted(given)} is not a whole number of milliseconds {_WINDOW_RANGE}"
    )


def field_intervals(text: str) -> list[tuple[str, float]]:
    """'NAME=SECONDS[,NAME=SECONDS...]' -> (the row's classic name, seconds) pairs."""
    pairs: list[tuple[str, float]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise argparse.ArgumentTypeError(f"{quoted(item.strip())} is not NAME=SECONDS")
        row = BY_ANY_NAME.get(name)
        if row is None:
            if is_dcgm_field(name):
                raise argparse.ArgumentTypeError(
                    f"{name} is a DCGM field this exporter does not read"
                )
            raise argparse.ArgumentTypeError(f"{quoted(name)} is not a DCGM field")
        if not row.reader_reads or row.name == CLOCK_EVENT_REASONS:
            raise argparse.ArgumentTypeError(f"{name} has no read interval: {cadence_of(row)}")
        try:
            seconds = _field_interval(value)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{name}: {exc}") from None
        pairs.append((row.name, seconds))
    if not pairs:
        raise argparse.ArgumentTypeError("expected NAME=SECONDS, e.g. DCGM_FI_DEV_GPU_TEMP=30s")
    return pairs


def cadence_of(row: DcgmField) -> str:
    """What governs when a field the device reader does not read is taken, for refusals."""
    if isinstance(row.source, Gpm):
        return "the GPM sampler takes it every --collector.interval (off: --no-collector.gpm)"
    if row.cadence is Cadence.SAMPLER:
        return "the PCIe sampler takes it every --collector.pcie-interval"
    if row.cadence is Cadence.IDENTITY:
        return "it is read with the GPU's identity, at start-up and when a GPU appears"
    if row.name in (CLOCK_EVENTS_TOTAL, CLOCK_EVENTS_COUNT):
        return f"it counts the sweeps' {CLOCK_EVENT_REASONS}, which is read every sweep"
    if row.name == CLOCK_EVENT_REASONS:
        return "the clock-event counts sample it once a sweep, so it is read every sweep"
    return "it comes from NVML's XID events as they arrive (--collector.xid)"


def read_collectors(path: str | None) -> FieldSelection | None:
    """The --collectors file's selection; None without the flag. ConfigurationError (one line)
    on a bad file."""
    if path is None:
        return None
    if not path.strip():
        raise ConfigurationError("argument --collectors: the path is empty")
    return read_collectors_file(path)


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
    it or a simulated fleet ships it (exporter/simulator/node.py)."""
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


def log_selection(fields: FieldSelection | None) -> None:
    """Name each field the file lists that is not exported, once, at start-up."""
    if fields is None:
        return
    path = quoted_path(fields.path)
    for field in fields.unsupported:
        log.warning("%s: %s is not exported: %s", path, quoted(field.name), field.reason)
    if not fields.listed:
        log.warning("%s lists no field this exporter exports: no DCGM series", path)

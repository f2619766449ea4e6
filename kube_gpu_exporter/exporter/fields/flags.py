"""The values of the field flags: --collectors (dcgm-exporter's CSV), the two count windows and
--collector.field-interval with its cadence classes; kube_gpu_exporter/exporter/flags/selection.py
applies a file's selection to the configuration."""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

from kube_gpu_exporter.exporter.durations import HOUR, WEEK, bounded_duration, format_duration
from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted, quoted_path
from kube_gpu_exporter.exporter.fields.collectors_file import read_collectors_file
from kube_gpu_exporter.exporter.fields.dcgm_catalogue import is_dcgm_field
from kube_gpu_exporter.exporter.fields.model import Cadence, DcgmField, Gpm
from kube_gpu_exporter.exporter.fields.selection import FieldSelection
from kube_gpu_exporter.exporter.fields.table import (
    BY_ANY_NAME,
    CLOCK_EVENTS_COUNT,
    CLOCK_EVENTS_TOTAL,
    FIELDS,
)

log = logging.getLogger(__name__)
# DCGM_EXP_CLOCK_EVENTS_TOTAL and _COUNT count this field's value once per sweep: read less often,
# a held mask would be counted again and again.
CLOCK_EVENT_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"

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
# Its interval is the energy-counter class's: between reads the counter is carried forward by
# board power, which no other field's interval does.
(ENERGY_FIELD,) = (row.name for row in FIELDS if row.cadence is Cadence.ENERGY)


@dataclass(frozen=True, slots=True)
class ClassInterval:
    """A cadence class whose interval --collector.field-interval sets by the class's name, for
    every field of the class that has no interval of its own."""

    name: str
    default: float
    low: float
    meaning: str


# The slow fields may be read every sweep (0s); the PCIe sampler blocks 20 ms a direction per GPU
# each round, so it runs at least a second apart.
CLASS_INTERVALS: tuple[ClassInterval, ...] = (
    ClassInterval(
        "slow-fields",
        10.0,
        0.0,
        "the costly or slowly changing fields (PCIe replays, ECC totals, row remapping, the "
        "NVLink counters, the power limits), read in the sweep before a learnt scrape",
    ),
    ClassInterval(
        "energy-counter",
        60.0,
        0.0,
        "NVML's energy counter, 4 ms of kernel CPU a read on an H200, carried forward by board "
        "power in between; the shortest interval, stretched up to ten times while the carried "
        "estimate's drift allows",
    ),
    ClassInterval("pcie-sampler", 15.0, 1.0, "PCIe throughput, a 20 ms sample per direction"),
)
CLASS_BY_NAME = {c.name: c for c in CLASS_INTERVALS}


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
    """'NAME=SECONDS[,NAME=SECONDS...]' -> (the row's classic name, or a class's, seconds)."""
    pairs: list[tuple[str, float]] = []
    for item in text.split(","):
        if not item.strip():
            continue
        name, equals, value = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise argparse.ArgumentTypeError(f"{quoted(item.strip())} is not NAME=SECONDS")
        if (cadence := CLASS_BY_NAME.get(name)) is not None:
            try:
                pairs.append(
                    (name, bounded_duration(cadence.low, MAX_FIELD_INTERVAL_SECONDS)(value))
                )
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"{name}: {exc}") from None
            continue
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
        return "the PCIe sampler takes it: set pcie-sampler=SECONDS instead"
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


def log_selection(fields: FieldSelection | None) -> None:
    """Name each field the file lists that is not exported, once, at start-up."""
    if fields is None:
        return
    path = quoted_path(fields.path)
    for field in fields.unsupported:
        log.warning("%s: %s is not exported: %s", path, quoted(field.name), field.reason)
    if not fields.listed:
        log.warning("%s lists no field this exporter exports: no DCGM series", path)

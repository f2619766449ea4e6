"""Durations as the command line takes them: '5s', '250ms', '1m30s', or plain seconds."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from kube_gpu_exporter.exporter.errors import quoted

MINUTE = 60.0
HOUR = 3600.0
DAY = 86400.0
WEEK = 7 * DAY

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": MINUTE, "h": HOUR}


def parse_duration(text: str) -> float:
    """'5s', '250ms', '1m30s' or plain seconds ('2.5') -> seconds, always finite; the caller
    bounds it (bounded_duration)."""
    text = text.strip()
    try:
        total = float(text)
    except ValueError:
        pos, total = 0, 0.0
        for match in _DURATION.finditer(text):
            if match.start() != pos:
                break
            total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos != len(text) or not text:
            raise argparse.ArgumentTypeError(
                f"invalid duration {quoted(text)} (use e.g. 5s, 500ms, 1m)"
            ) from None
    # float() reads "inf" and "nan", and rounds "1e400" or hundreds of digits to infinity: no
    # comparison against a bound would catch a NaN later, and infinity overflows timers.
    if not math.isfinite(total):
        raise argparse.ArgumentTypeError(f"duration {quoted(text)} is not a finite number")
    return total


def format_duration(seconds: float) -> str:
    """A bound as a person writes it: 100ms, 10s, 10m, 1h, 24h, 168h."""
    for unit, size in (("h", HOUR), ("m", MINUTE), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    if 0 < seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def bounded_duration(low: float, high: float) -> Callable[[str], float]:
    """An argparse type for a duration from `low` to `high` seconds. Every refusal states the
    range, whatever made it: a value past the bound, a malformed or an endless one."""
    allowed = f"from {format_duration(low)} to {format_duration(high)}"

    def check(text: str) -> float:
        try:
            seconds = parse_duration(text)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentTypeError(f"{exc}; expected a duration {allowed}") from None
        if not low <= seconds <= high:
            raise argparse.ArgumentTypeError(f"{quoted(text.strip())} is out of range ({allowed})")
        return seconds

    return check

"""The Prometheus text format 0.0.4, written by hand.

prometheus_client would append `_total` to counter samples (and its OpenMetrics output requires
it), which would break dcgm-exporter's exact names. Writing the format ourselves also lets us escape
each label set once per entity instead of once per sample.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable

from kube_gpu_exporter.exporter.attribution.model import Labels
from kube_gpu_exporter.exporter.exposition.metric_family import Declared

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


# A lone surrogate cannot be encoded as UTF-8: a file name decoded with surrogateescape, or a
# JSON string such as "\udcff" from an API answer. One in a label value used to fail the whole
# body's encoding, so every scrape. Written as U+FFFD instead, the series stays valid.
_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with any lone surrogate replaced by U+FFFD (ASCII, the usual case, untouched)."""
    return text if text.isascii() else _SURROGATE.sub("\ufffd", text)


def escape_label_value(value: str) -> str:
    return encodable(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return encodable(text).replace("\\", "\\\\").replace("\n", "\\n")


# Label sets escaped and joined, kept from one render to the next: most series keep their labels
# for as long as their pod runs, and escaping them was a sixth of a render. Bounded, so that pods
# coming and going for months cannot grow it; the least recently used go first.
REMEMBERED_LABEL_SETS = 4096


@functools.lru_cache(maxsize=REMEMBERED_LABEL_SETS)
def label_body(labels: Labels) -> str:
    """'a="x",b="y"' (without braces), values escaped."""
    return ",".join(f'{name}="{escape_label_value(value)}"' for name, value in labels)


def count_samples(rows: Iterable[tuple[Labels, int]]) -> list[tuple[str, str]]:
    """FamilyWriter.family's samples for label sets with integer counts."""
    return [(label_body(labels), str(n)) for labels, n in rows]


def format_value(value: float | int | bool, fixed: bool = False) -> str:
    """Integers plainly; floats round-trippable, or with six decimals as dcgm-exporter prints."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if fixed:
        return f"{value:.6f}"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def format_dcgm_value(value: float | int, double: bool) -> str:
    """As dcgm-exporter prints a DCGM field: doubles with six decimals, INT64 fields as integers.
    A float headed for an INT64 field is truncated, as DCGM's own float-to-int64 casts do."""
    # The common cases first, by exact type (a bool is an int too, and goes the long way).
    kind = type(value)
    if kind is float and math.isfinite(value):
        return f"{value:.6f}" if double else str(int(value))
    if kind is int:
        return str(value)
    return format_value(value, fixed=double)


@functools.lru_cache(maxsize=1024)
def family_header(name: str, help_text: str, kind: str) -> str:
    """A family's HELP and TYPE lines, escaped once: the same for every render."""
    return f"# HELP {name} {escape_help(help_text)}\n# TYPE {name} {kind}\n"


class FamilyWriter:
    """Accumulates complete metric families; a family with no samples writes nothing, and one
    whose samples fail to render is left out whole (in `failed`), never half-written."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        # (family name, the exception) for each family left out.
        self.failed: list[tuple[str, Exception]] = []

    def family(self, family: Declared, samples: Iterable[tuple[str, str]]) -> None:
        """samples: (label body without braces, formatted value)."""
        name = family.name
        try:
            lines = [
                f"{name}{{{body}}} {value}\n" if body else f"{name} {value}\n"
                for body, value in samples
            ]
        except Exception as exc:
            self.failed.append((name, exc))
            return
        if not lines:
            return
        self._parts.append(family_header(name, family.help, family.kind))
        self._parts.extend(lines)

    def text(self) -> str:
        return "".join(self._parts)

"""The name and unit a DCGM family has under a dcgm-exporter profile, and exact factors between
units, all derived from `kube_gpu_exporter.exporter.dcgm_compat` (its rename and conversion tables)
and the field table (each family's NVML and classic unit), so the bundle never restates a name, a
unit or a conversion factor.

The bundle is written against the classic names; every query, threshold, panel unit and recorded
series name goes through `spelled()` and the factors below."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from kube_gpu_exporter.exporter.dcgm_compat import MIB, Profile, converter
from kube_gpu_exporter.exporter.fields.table import GPU_FIELDS, PROFILING_FIELDS

# (NVML's unit, classic dcgm-exporter unit) of every DCGM family, from the field table the
# exposition resolves its families from, so the bundle's units are the exporter's by construction.
_CLASSIC_UNITS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {row.name: (row.native_unit, row.unit) for row in (*GPU_FIELDS, *PROFILING_FIELDS)}
)

# A probe value every conversion maps to an exact integer (or an integer-valued float): it is a
# multiple of 2^20 and of 10^3, and small enough for a float to hold exactly after a division.
_PROBE = MIB * 10**9

# Units a panel shows a family in, with Grafana's unit id. Grafana has no MHz, and DCGM's "MB/s"
# is 1000 KiB/s, so those are scaled to a base unit; an energy counter is shown as its rate.
_DISPLAY: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "%": ("%", "percent"),
        "ratio": ("ratio", "percentunit"),
        "MiB": ("B", "bytes"),
        "B": ("B", "bytes"),
        "MHz": ("Hz", "hertz"),
        "Hz": ("Hz", "hertz"),
        "mJ": ("J", "watt"),
        "J": ("J", "watt"),
        "MB/s": ("B/s", "Bps"),
        "B/s": ("B/s", "Bps"),
        "C": ("C", "celsius"),
        "W": ("W", "watt"),
    }
)


def unit_factor(native: str, source: str, target: str) -> Fraction:
    """x in `source` times this is x in `target`; a `native` reading converts to both."""
    if source == target:
        return Fraction(1)
    into_source = Fraction(converter(native, source)(_PROBE))
    into_target = Fraction(converter(native, target)(_PROBE))
    return into_target / into_source


@dataclass(frozen=True, slots=True)
class Spelled:
    """One DCGM family as a profile publishes it."""

    classic: str
    name: str
    unit: str
    native: str

    def factor_to(self, unit: str) -> Fraction:
        return unit_factor(self.native, self.unit, unit)

    @property
    def display(self) -> tuple[Fraction, str]:
        """(factor from the published unit to the panel's unit, Grafana unit id)."""
        shown, grafana = _DISPLAY[self.unit]
        return self.factor_to(shown), grafana


def _classic_units(classic: str) -> tuple[str, str]:
    """(native unit, classic unit); ("", "") for a series that is no DCGM field."""
    return _CLASSIC_UNITS.get(classic, ("", ""))


def spelled(profile: Profile, classic: str) -> Spelled:
    native, classic_unit = _classic_units(classic)
    spelling = profile.spelling(classic)
    if spelling is None:
        return Spelled(classic, classic, classic_unit, native)
    return Spelled(classic, spelling.name, spelling.unit, native)


def classic_to_profile(profile: Profile, classic: str) -> Fraction:
    """A value in the classic unit times this is the value the profile publishes."""
    native, classic_unit = _classic_units(classic)
    return unit_factor(native, classic_unit, spelled(profile, classic).unit)


# `level:metric:operations` recording-rule names carry a family's name in the middle.
_RECORDED = re.compile(r"^(?P<level>[a-z_]+):(?P<metric>[A-Za-z0-9_]+):(?P<ops>[a-z0-9_]+)$")


def metric_of(name: str) -> str:
    """The family a series name is about: itself, or a recorded series' middle part."""
    match = _RECORDED.match(name)
    return match.group("metric") if match else name


def rename(profile: Profile, name: str) -> str:
    """A series or recorded-series name as the profile spells it; other names unchanged."""
    match = _RECORDED.match(name)
    if match is None:
        return profile.name(name)
    return ":".join((match["level"], profile.name(match["metric"]), match["ops"]))


def plain(value: Fraction) -> int | float:
    """A Fraction as JSON writes a number: 100, not 100.0."""
    return value.numerator if value.denominator == 1 else float(value)


def number(value: Fraction) -> str:
    """A factor or threshold as PromQL and YAML print it: 100, 0.01, 1048576."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.15g}"


def scaled(expr: str, factor: Fraction) -> str:
    """`expr` multiplied by `factor`, written as a whole multiplication or division."""
    if factor == 1:
        return expr
    if factor.denominator == 1:
        return f"{expr} * {factor.numerator}"
    if factor.numerator == 1:
        return f"{expr} / {factor.denominator}"
    return f"{expr} * {number(factor)}"

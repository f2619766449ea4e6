"""The bundle's generated files as its generator makes them from the defaults, made once per test
process: several checks compare against them, and making them takes about a second."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from kube_gpu_exporter.bundle.render import all_artifacts, flavour_artifacts


@cache
def generated() -> Mapping[str, str]:
    """Repository-relative path -> content of every generated file of every flavour."""
    return MappingProxyType(all_artifacts())


@cache
def generated_flavour(version: str) -> Mapping[str, str]:
    """One flavour's generated files, at that flavour's paths."""
    return MappingProxyType(flavour_artifacts(version))

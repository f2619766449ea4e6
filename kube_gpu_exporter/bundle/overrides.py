"""A user's overrides file: only the values they change, laid over BundleConfig's defaults, the way
the kubernetes-mixin's `_config+::` is laid over its own.

    thresholds:
      temperature_warning_celsius: 80
    scrape:
      release_label: prometheus
    deployment:
      node_selector: {gpu: "yes"}

Mappings merge key by key (a dashboard uid can be changed alone); lists replace the default whole.
Every refusal is one line naming the file and the key path, so a typo cannot pass silently as a
default that was never overridden.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig, BundleConfigError
from kube_gpu_exporter.bundle.override_checks import CheckFailed, check_combination, check_value
from kube_gpu_exporter.exporter import small_yaml

# An overrides file is a screenful; anything near this size is the wrong file.
MAX_BYTES = 256 * 1024


class OverrideError(ValueError):
    """One line naming the file, the key path and what is wrong."""


class _Refused(ValueError):
    """A problem in the document; the caller prefixes the file's name."""


def load(path: Path, base: BundleConfig = DEFAULT) -> BundleConfig:
    """`base` with the overrides in the YAML file at `path`, or OverrideError."""
    try:
        document = small_yaml.load(small_yaml.read_text(path, MAX_BYTES))
    except small_yaml.YamlRefused as exc:
        raise OverrideError(f"{path}: {exc}") from None
    try:
        return apply(base, document)
    except _Refused as exc:
        raise OverrideError(f"{path}: {exc}") from None


def apply(base: BundleConfig, document: Any) -> BundleConfig:
    """`base` with `document` (parsed YAML; None for an empty file) laid over it."""
    if document is None:
        return base
    if not isinstance(document, dict):
        raise _Refused(f"expected a mapping of keys to override, got {_kind(document)}")
    changes = _changes(base, document, "")
    try:
        # Every top-level change at once, so __post_init__ checks the combination once.
        config = dataclasses.replace(base, **changes)
        check_combination(config)
    except (BundleConfigError, CheckFailed) as exc:
        raise _Refused(str(exc)) from None
    return config


def _changes(current: Any, overrides: dict[Any, Any], prefix: str) -> dict[str, Any]:
    fields = [f.name for f in dataclasses.fields(current) if f.init]
    hints = typing.get_type_hints(type(current))
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        path = f"{prefix}{key}"
        if key not in fields:
            raise _Refused(f"{path}: unknown key; known: {', '.join(fields)}")
        changes[key] = _value(getattr(current, key), hints[key], value, path)
        if not dataclasses.is_dataclass(changes[key]):
            # Each value is judged by what it will be pasted into (override_checks.py).
            try:
                check_value(path, changes[key])
            except CheckFailed as exc:
                raise _Refused(str(exc)) from None
    return changes


def _value(current: Any, hint: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(current) and not isinstance(current, type):
        if not isinstance(value, dict):
            raise _Refused(f"{path}: expected a mapping, got {_kind(value)}")
        return dataclasses.replace(current, **_changes(current, value, path + "."))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        (hint,) = (arg for arg in args if arg is not type(None))
        origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is dict:
        return _mapping(current, args, value, path)
    if origin is tuple:
        return _sequence(args, value, path)
    return _scalar(hint, value, path)


def _mapping(current: dict[str, Any], args: tuple[Any, ...], value: Any, path: str) -> Any:
    if not isinstance(value, dict):
        raise _Refused(f"{path}: expected a mapping, got {_kind(value)}")
    merged = dict(current)
    for key, item in value.items():
        if key not in current:
            raise _Refused(f"{path}.{key}: unknown key; known: {', '.join(current)}")
        merged[key] = _scalar(args[1], item, f"{path}.{key}")
    return merged


def _sequence(args: tuple[Any, ...], value: Any, path: str) -> tuple[Any, ...]:
    (item_hint, _ellipsis) = args
    if typing.get_origin(item_hint) is tuple:
        # Key/value pairs (a nodeSelector) read naturally as a YAML mapping.
        if not isinstance(value, dict):
            raise _Refused(f"{path}: expected a mapping, got {_kind(value)}")
        key_hint, value_hint = typing.get_args(item_hint)
        return tuple(
            (_scalar(key_hint, k, f"{path}.{k}"), _scalar(value_hint, v, f"{path}.{k}"))
            for k, v in value.items()
        )
    if not isinstance(value, list):
        raise _Refused(f"{path}: expected a list, got {_kind(value)}")
    return tuple(_scalar(item_hint, item, f"{path}[{i}]") for i, item in enumerate(value))


def _scalar(hint: Any, value: Any, path: str) -> Any:
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise _Refused(f"{path}: expected true or false, got {_kind(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise _Refused(f"{path}: expected an integer, got {_kind(value)}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise _Refused(f"{path}: expected a finite number, got {small_yaml.shown(value)}")
            return value
        raise _Refused(f"{path}: expected a number, got {_kind(value)}")
    if hint is str:
        if isinstance(value, str):
            return value
        # YAML reads an unquoted true, 1.0 or 2024 as a non-string.
        quote = " (quote it)" if isinstance(value, bool | int | float) else ""
        raise _Refused(f"{path}: expected a string, got {_kind(value)}{quote}")
    raise TypeError(f"{path}: no override rule for {hint!r}")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__

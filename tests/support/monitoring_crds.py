"""prometheus-operator's CRD schemas, as the models of cloudcoil-models-prometheus-operator, and a
strict check of one object against its kind's: no coercion, no unknown or snake_case key, and the
object dumps back unchanged."""

from __future__ import annotations

from typing import Any

import pydantic
from cloudcoil.models.prometheus_operator import v1
from cloudcoil.resources import Resource

MODELS: dict[str, type[Resource]] = {
    "ServiceMonitor": v1.ServiceMonitor,
    "PodMonitor": v1.PodMonitor,
    "PrometheusRule": v1.PrometheusRule,
}


def strictly(model: type[pydantic.BaseModel], data: dict[str, Any]) -> None:
    """Raise pydantic.ValidationError where `data` breaks `model`. On their own the models ignore
    unknown keys, take a field's Python name beside its JSON one, and coerce "true" to true."""
    parsed = model.model_validate(data, strict=True, extra="forbid", by_alias=True, by_name=False)
    # Nothing dropped, defaulted or converted on the way.
    assert parsed.model_dump(mode="json", by_alias=True, exclude_unset=True) == data


def validate(doc: dict[str, Any]) -> None:
    """Raise pydantic.ValidationError where `doc` breaks its kind's CRD schema."""
    strictly(MODELS[doc["kind"]], doc)

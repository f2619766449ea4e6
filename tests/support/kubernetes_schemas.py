"""Objects checked against Kubernetes' own OpenAPI schemas, from kubernetes-validate's files, with
each kind's validator built once per test process: kubernetes_validate.validate() parses the
multi-megabyte definitions file on every call (10 ms an object), and the chart and deploy tests
check hundreds of objects."""

from __future__ import annotations

import re
from functools import cache
from typing import Any

import jsonschema
import kubernetes_validate
from kubernetes_validate import utils
from referencing import Registry, Resource


@cache
def _contents(filename: str, version: str) -> Any:
    return utils.schema_contents(filename, version)


@cache
def _validator(kind: str, api_version: str, version: str, strict: bool) -> Any:
    """The validator kubernetes_validate.validate() builds for this kind and version."""
    wanted = utils.major_minor(version)
    schema_version = [v for v in utils.all_versions() if utils.major_minor(v) <= wanted][-1]
    # rbac.authorization.k8s.io/v1 -> rbac-v1, as the schema files are named.
    group = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    folder = f"kubernetes-json-schema/v{schema_version}-local{'-strict' if strict else ''}"
    schema = _contents(f"{folder}/{kind.lower()}-{group}.json", version)
    definitions = _contents(f"{folder}/_definitions.json", version)
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def validate(doc: dict[str, Any], version: str, strict: bool = True) -> None:
    """Raise kubernetes_validate.ValidationError where `doc` breaks its kind's schema."""
    validator = _validator(doc["kind"], doc["apiVersion"], version, strict)
    try:
        validator.validate(doc)
    except jsonschema.ValidationError as exc:
        raise kubernetes_validate.ValidationError(exc, version=utils.major_minor(version)) from exc

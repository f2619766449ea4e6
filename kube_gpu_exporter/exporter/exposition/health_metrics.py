"""The health verdict's families: our kube_gpu_exporter_gpu_health_reason, on by default, and
dcgm-exporter's DCGM_EXP_GPU_HEALTH_STATUS where a --collectors file lists it."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from kube_gpu_exporter.exporter.attribution.model import Entity, Labels
from kube_gpu_exporter.exporter.exposition import own_families as own
from kube_gpu_exporter.exporter.exposition.metric_family import MetricFamily
from kube_gpu_exporter.exporter.exposition.text_format import FamilyWriter, label_body
from kube_gpu_exporter.exporter.health.reasons import HEALTHY, WATCHES, Reason, worse
from kube_gpu_exporter.exporter.health.verdict import GpuVerdict

Samples = Iterator[tuple[str, str]]


def _reason_labels(reason: Reason) -> Labels:
    return (
        ("reason", reason.name),
        ("severity", reason.severity.value),
        ("action", reason.action.value),
    )


def render_health(
    out: FamilyWriter,
    verdicts: tuple[GpuVerdict, ...],
    entities: tuple[Entity, ...],
    bodies: tuple[list[str], list[str]],
    lost_body: Callable[[GpuVerdict], str],
    status_family: MetricFamily | None,
) -> None:
    """Each entity carries its board's verdict (a MIG instance its parent's); a GPU with no
    entity (lost, or not read) is written on its device labels, so a lost GPU is seen too.
    `bodies`: each entity's labels for our reason family, and its DCGM labels for
    DCGM_EXP_GPU_HEALTH_STATUS."""
    own_bodies, dcgm_bodies = bodies
    if status_family is not None:
        out.family(
            status_family, _status_samples(_rows(verdicts, entities, dcgm_bodies, lost_body))
        )
    out.family(
        own.GPU_HEALTH_REASON, _reason_samples(_rows(verdicts, entities, own_bodies, lost_body))
    )


def _rows(
    verdicts: tuple[GpuVerdict, ...],
    entities: tuple[Entity, ...],
    bodies: list[str],
    lost_body: Callable[[GpuVerdict], str],
) -> list[tuple[str, GpuVerdict]]:
    by_uuid = {v.gpu.identity.uuid: v for v in verdicts}
    rows: list[tuple[str, GpuVerdict]] = []
    for entity, body in zip(entities, bodies, strict=True):
        found = by_uuid.get(entity.gpu.identity.uuid)
        if found is not None:
            rows.append((body, found))
    with_entity = {e.gpu.identity.uuid for e in entities}
    rows += [(lost_body(v), v) for v in verdicts if v.gpu.identity.uuid not in with_entity]
    return rows


def _reason_samples(rows: list[tuple[str, GpuVerdict]]) -> Samples:
    for body, verdict in rows:
        for reason in verdict.reasons:
            yield f"{body},{label_body(_reason_labels(reason))}", "1"


def _status_samples(rows: list[tuple[str, GpuVerdict]]) -> Samples:
    """dcgm-exporter's shape: every watch of every GPU, DCGM_FR_OK and 0 (PASS) where nothing
    holds, else the worst reason filed under it, with DCGM's WARN 10 or FAIL 20."""
    for body, verdict in rows:
        for watch, reason in watch_results(verdict).items():
            labels = (("health_watch", watch), ("health_error_code", reason.code))
            yield f"{body},{label_body(labels)}", str(reason.dcgm_result)


def watch_results(verdict: GpuVerdict) -> dict[str, Reason]:
    """Watch -> the worst reason filed under it, HEALTHY where none is."""
    results = dict.fromkeys(WATCHES, HEALTHY)
    for reason in verdict.reasons:
        if reason is not HEALTHY and (
            results[reason.watch] is HEALTHY or worse(reason, results[reason.watch])
        ):
            results[reason.watch] = reason
    return results

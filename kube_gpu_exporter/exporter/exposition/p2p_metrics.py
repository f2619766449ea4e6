"""dcgm-exporter's DCGM_EXP_P2P_STATUS, where a --collectors file lists it: one series per GPU
and peer, on the GPU's DCGM labels (whole GPUs only: P2P is the board's, and dcgm-exporter
writes it per GPU), with peer_gpu and link_status."""

from __future__ import annotations

from collections.abc import Iterator

from kube_gpu_exporter.exporter.attribution.model import Entity
from kube_gpu_exporter.exporter.exposition.metric_family import MetricFamily
from kube_gpu_exporter.exporter.exposition.text_format import FamilyWriter, label_body
from kube_gpu_exporter.exporter.fields.p2p_status_row import link_status


def render_p2p(
    out: FamilyWriter, family: MetricFamily, entities: tuple[Entity, ...], bodies: list[str]
) -> None:
    out.family(family, _samples(entities, bodies))


def _samples(entities: tuple[Entity, ...], bodies: list[str]) -> Iterator[tuple[str, str]]:
    for entity, body in zip(entities, bodies, strict=True):
        if entity.instance is not None:
            continue
        for peer, code in entity.gpu.p2p_nvlink:
            value, word = link_status(code)
            labels = (("peer_gpu", str(peer)), ("link_status", word))
            yield f"{body},{label_body(labels)}", str(value)

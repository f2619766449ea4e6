"""The per-container energy counters the ledger keeps
(kube_gpu_exporter/exporter/attribution/pod_energy.py)."""

from __future__ import annotations

from collections.abc import Callable

from kube_gpu_exporter.exporter.attribution.model import Labels, ValueRow
from kube_gpu_exporter.exporter.exposition import own_families as own
from kube_gpu_exporter.exporter.exposition.text_format import FamilyWriter, format_value


def render_pod_energy(
    out: FamilyWriter, rows: tuple[ValueRow, ...], label_body: Callable[[Labels], str]
) -> None:
    """`label_body`: the renderer's, which escapes a label set once for as long as it lasts."""
    out.family(
        own.POD_GPU_ENERGY_JOULES_TOTAL,
        [(label_body(labels), format_value(joules)) for labels, joules in rows],
    )

"""Renders an AttributedNode (a NodeSnapshot joined with its pods,
kube_gpu_exporter/exporter/attribution/): the DCGM-compatible families, then the exporter's own
metrics.

The body is rendered once per snapshot on the poller thread. Only the tail, the two lines that
depend on the moment of the scrape (snapshot age and staleness), is rendered per request.
"""

from __future__ import annotations

import logging
import platform
import time
from collections import Counter
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Any

from kube_gpu_exporter import __version__
from kube_gpu_exporter.exporter.attribution.devices import device_labels, host_labels
from kube_gpu_exporter.exporter.attribution.model import AttributedNode, Entity, Labels
from kube_gpu_exporter.exporter.clock_events import CLOCK_EVENTS
from kube_gpu_exporter.exporter.config import LabelConfig
from kube_gpu_exporter.exporter.dcgm_compat import converter
from kube_gpu_exporter.exporter.exposition import own_families as own
from kube_gpu_exporter.exporter.exposition.attribution_metrics import (
    render_allocations,
    render_capacity,
    render_dra_unresolved,
    render_source_health,
)
from kube_gpu_exporter.exporter.exposition.dcgm_families import DcgmFamily, families_for
from kube_gpu_exporter.exporter.exposition.energy_metrics import render_pod_energy
from kube_gpu_exporter.exporter.exposition.health_metrics import render_health
from kube_gpu_exporter.exporter.exposition.metric_family import MetricFamily
from kube_gpu_exporter.exporter.exposition.p2p_metrics import render_p2p
from kube_gpu_exporter.exporter.exposition.process_metrics import (
    log_name_conflict_samples,
    render_pod_usage,
)
from kube_gpu_exporter.exporter.exposition.text_format import (
    FamilyWriter,
    format_dcgm_value,
    format_value,
    label_body,
)
from kube_gpu_exporter.exporter.fields.dcgm_catalogue import GPU_HEALTH_STATUS, P2P_STATUS
from kube_gpu_exporter.exporter.fields.selection import FieldSelection
from kube_gpu_exporter.exporter.health.verdict import GpuVerdict, verdicts
from kube_gpu_exporter.exporter.snapshot import ConnectionCounts
from kube_gpu_exporter.exporter.xid_messages import xid_message

log = logging.getLogger(__name__)


def _binding_version() -> str:
    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "unknown"


# NVML's NVLink data counters are KiB; our own counter is in bytes.
_KIB_TO_BYTES = converter("KiB", "B")

BUILD_LABELS: Labels = (
    ("version", __version__),
    ("python_version", platform.python_version()),
    ("nvml_binding_version", _binding_version()),
)


# Why a family a --collectors file lists has no series on this node.
NOT_SERVED = "no GPU or MIG instance on this node has given a value"
# How long after the first render a listed family may still be waiting for its first value: a
# GPM average needs two samples, the NVLink rate two slow-field reads (at most a minute apart).
UNSERVED_GRACE_SECONDS = 120.0


class Renderer:
    def __init__(
        self,
        labels: LabelConfig,
        fields: FieldSelection | None = None,
        *,
        xid_window_ms: int | None = None,
        clock_events_window_ms: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._labels = labels
        # The windows of DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT, for their
        # window_size_in_ms label; a family listed without its window has no counts to show.
        self._xid_window_ms = xid_window_ms
        self._clock_events_window_ms = clock_events_window_ms
        self._host = host_labels(labels)
        self._fields = fields
        self._dcgm = families_for(labels.dcgm, fields)
        # With a --collectors file: the listed families some entity has served since the first
        # render, and those named in the log as never served.
        self._clock = clock
        self._first_render_at: float | None = None
        self._served: set[str] = set()
        self._unserved_logged: set[str] = set()
        # Part of the body (a family, or a group of them) -> renders that left it out.
        self._render_errors: Counter[str] = Counter()

    @property
    def labels(self) -> LabelConfig:
        return self._labels

    def render_body(self, node: AttributedNode) -> str:
        """The body for `node`. What comes from outside (pod labels, names, API and kubelet
        answers) must not cost the rest: a family whose samples fail is left out, a part that
        fails as a whole is skipped, and so is a part the join could not compute (a failed pod
        join leaves the device series without pods); each is counted in RENDER_ERRORS_TOTAL and
        logged once."""
        for part, error in node.failures:
            self._failed(part, error)
        out = FamilyWriter()
        snapshot, entities = node.snapshot, node.entities
        bodies = [label_body(e.labels) for e in entities]
        readings = [e.readings for e in entities]
        profiling = [e.profiling for e in entities]
        for families, sources in ((self._dcgm.gpu, readings), (self._dcgm.profiling, profiling)):
            for family in families:
                samples = self._dcgm_samples(family, sources, bodies)
                if samples and self._fields is not None:
                    self._served.add(family.name)
                out.family(family, samples)
        parts: list[tuple[str, Callable[[], None]]] = [
            ("xid", lambda: self._xid(out, entities, bodies)),
            ("clock events", lambda: self._clock_events(out, entities, bodies)),
            ("health", lambda: self._health(out, node, bodies)),
            ("p2p", lambda: self._p2p(out, entities, bodies)),
            ("own metrics", lambda: self._self_metrics(out, node)),
            ("capacity", lambda: render_capacity(out, snapshot, node.capacity, self._labels)),
        ]
        allocations, dra_unresolved, usage = node.allocations, node.dra_unresolved, node.pod_usage
        if allocations is not None:
            parts.append(("allocations", lambda: render_allocations(out, allocations)))
        if dra_unresolved is not None:
            parts.append(("dra", lambda: render_dra_unresolved(out, dra_unresolved)))
        if usage is not None:
            parts.append(("pod usage", lambda: render_pod_usage(out, usage)))
        energy = node.pod_energy
        if energy is not None:
            parts.append(("pod energy", lambda: render_pod_energy(out, energy, label_body)))
        parts.append(("sources", lambda: render_source_health(out, node.sources)))
        if self._fields is not None:
            parts.append(("unsupported fields", lambda: self._unsupported(out)))
        for part, render in parts:
            try:
                render()
            except Exception as exc:
                self._failed(part, exc)
        for name, error in out.failed:
            self._failed(name, error)
        if self._render_errors:
            out.family(
                own.RENDER_ERRORS_TOTAL,
                [
                    (label_body((("part", part),)), str(count))
                    for part, count in sorted(self._render_errors.items())
                ],
            )
        return out.text()

    def _failed(self, part: str, exc: Exception) -> None:
        if part not in self._render_errors:
            log.error(
                "rendering %s failed, left out of /metrics until it renders: %s: %s",
                part,
                type(exc).__name__,
                str(exc)[:300],
            )
        self._render_errors[part] += 1

    def _dcgm_samples(
        self, family: DcgmFamily, sources: list[Any], bodies: list[str]
    ) -> list[tuple[str, str]]:
        # The bulk of a body's samples: the lookup and the conversion are spelled out here
        # rather than behind a call per sample, which was a tenth of a render.
        key, convert, double = family.classic, family.convert, family.double
        samples = []
        for source, body in zip(sources, bodies, strict=True):
            if source is None:
                continue
            raw = source.values.get(key)
            if raw is None:
                continue
            # One entity's reading that cannot be rendered costs that series only.
            try:
                samples.append((body, format_dcgm_value(convert(raw), double)))
            except Exception as exc:
                self._failed(family.name, exc)
        return samples

    def _unsupported(self, out: FamilyWriter) -> None:
        """The --collectors file's fields that are not exported: those named at start, and,
        from UNSERVED_GRACE_SECONDS after the first render on, listed families no entity has
        served since then (a field the boards refuse, such as a fan on a passive board)."""
        assert self._fields is not None
        rows = [(f.name, f.reason) for f in self._fields.unsupported]
        now = self._clock()
        if self._first_render_at is None:
            self._first_render_at = now
        if now - self._first_render_at >= UNSERVED_GRACE_SECONDS:
            dcgm = (*self._dcgm.gpu, *self._dcgm.profiling)
            unserved = [f.name for f in dcgm if f.name not in self._served]
            rows += [(name, NOT_SERVED) for name in unserved]
            for name in unserved:
                if name not in self._unserved_logged:
                    self._unserved_logged.add(name)
                    log.warning("%s: %s is not exported: %s", self._fields.path, name, NOT_SERVED)
        out.family(
            own.FIELDS_UNSUPPORTED,
            [(label_body((("field", name), ("reason", reason))), "1") for name, reason in rows],
        )

    def _xid(self, out: FamilyWriter, entities: tuple[Entity, ...], bodies: list[str]) -> None:
        xid, xid_total = self._dcgm.xid, self._dcgm.xid_total
        if xid is not None:
            out.family(
                xid,
                (
                    (
                        body
                        + ","
                        + label_body(
                            (
                                ("err_code", str(e.xid.last_xid)),
                                ("err_msg", xid_message(e.xid.last_xid)),
                            )
                        ),
                        str(e.xid.last_xid),
                    )
                    for e, body in zip(entities, bodies, strict=True)
                ),
            )
        if xid_total is not None:
            out.family(
                xid_total,
                (
                    (f'{body},xid="{code}"', str(count))
                    for e, body in zip(entities, bodies, strict=True)
                    for code, count in e.xid.counts
                ),
            )
        xid_count = self._dcgm.xid_count
        if xid_count is not None and self._xid_window_ms is not None:
            # Each entity as the families above show it: a MIG instance's own and its board's.
            out.family(
                xid_count,
                _window_samples(
                    bodies,
                    [tuple((str(code), n) for code, n in e.xid.window_counts) for e in entities],
                    self._xid_window_ms,
                    "xid",
                ),
            )

    def _clock_events(
        self, out: FamilyWriter, entities: tuple[Entity, ...], bodies: list[str]
    ) -> None:
        # Board-level counts: every MIG instance of a GPU repeats its board's, as for XIDs (and
        # as dcgm-exporter's window counts, which it looks up by GPU).
        if self._dcgm.clock_events_total is not None:
            out.family(
                self._dcgm.clock_events_total,
                (
                    (f"{body},{label_body((('clock_event', name),))}", str(count))
                    for e, body in zip(entities, bodies, strict=True)
                    for name, count in e.gpu.clock_event_counts
                ),
            )
        window_ms = self._clock_events_window_ms
        if self._dcgm.clock_events_count is not None and window_ms is not None:
            out.family(
                self._dcgm.clock_events_count,
                _window_samples(
                    bodies,
                    [e.gpu.clock_event_window_counts for e in entities],
                    window_ms,
                    "clock_event",
                ),
            )

    def _health(self, out: FamilyWriter, node: AttributedNode, bodies: list[str]) -> None:
        status: MetricFamily | None = None
        listed = None if self._fields is None else self._fields.get(GPU_HEALTH_STATUS)
        if listed is not None:
            status = MetricFamily(listed.name, listed.kind, listed.help)

        def lost_body(verdict: GpuVerdict) -> str:
            ident = verdict.gpu.identity
            return label_body((*device_labels(ident, self._labels)[:4], *self._host))

        # Our family keeps the DCGM labels it joins on, less dcgm-exporter's camelCase
        # modelName, so that it stays lint-clean as all our families are; DCGM_EXP_* has them all.
        own_bodies = [
            label_body(tuple(pair for pair in e.labels if pair[0] != "modelName"))
            for e in node.entities
        ]
        render_health(
            out, verdicts(node.snapshot), node.entities, (own_bodies, bodies), lost_body, status
        )

    def _p2p(self, out: FamilyWriter, entities: tuple[Entity, ...], bodies: list[str]) -> None:
        listed = None if self._fields is None else self._fields.get(P2P_STATUS)
        if listed is not None:
            render_p2p(out, MetricFamily(listed.name, listed.kind, listed.help), entities, bodies)

    def _self_metrics(self, out: FamilyWriter, node: AttributedNode) -> None:
        snap = node.snapshot
        out.family(own.BUILD_INFO, [(label_body(BUILD_LABELS + self._host), "1")])
        out.family(own.NVML_UP, [("", format_value(snap.nvml_up))])
        out.family(
            own.COLLECTION_DURATION_SECONDS,
            [("", format_value(snap.sweep_duration_seconds))],
        )
        if snap.last_success_at is not None:
            out.family(
                own.LAST_COLLECTION_SUCCESS_TIMESTAMP_SECONDS,
                [("", format_value(snap.last_success_at))],
            )
        statuses = snap.collectors + node.collectors
        collectors = [(label_body((("collector", c.name),)), c) for c in statuses]
        out.family(
            own.COLLECTOR_SUCCESS,
            [(body, format_value(c.success)) for body, c in collectors],
        )
        out.family(
            own.COLLECTOR_DURATION_SECONDS,
            [(body, format_value(c.duration_seconds)) for body, c in collectors],
        )
        out.family(
            own.NVML_ERRORS_TOTAL,
            [
                (label_body((("function", fn), ("error", err))), str(n))
                for (fn, err), n in snap.nvml_errors
            ],
        )
        out.family(
            own.READINGS_REJECTED_TOTAL,
            [
                (label_body((("UUID", uuid), ("field", name), ("reason", why))), str(n))
                for (uuid, name, why), n in snap.readings_rejected
            ],
        )
        out.family(own.PROCESS_LOG_NAME_CONFLICTS, log_name_conflict_samples(snap))

        devices = [(g, label_body(device_labels(g.identity, self._labels))) for g in snap.gpus]
        out.family(
            own.DEVICE_UP,
            [(body, format_value(g.up and not g.stale)) for g, body in devices],
        )
        out.family(own.DEVICE_STALE, [(body, format_value(g.stale)) for g, body in devices])
        out.family(
            own.DEVICE_INFO,
            [
                (
                    body
                    + ","
                    + label_body(
                        (
                            ("model_name", g.identity.name),
                            ("driver_version", snap.driver_version or ""),
                            ("mig_mode", g.identity.mig_mode),
                        )
                    ),
                    "1",
                )
                for g, body in devices
                if g.identity.uuid
            ],
        )
        out.family(
            own.MIG_INSTANCE_INFO,
            [
                (
                    body
                    + ","
                    + label_body(
                        (
                            ("GPU_I_ID", str(inst.gpu_instance_id)),
                            ("GPU_I_PROFILE", inst.profile),
                            ("compute_instance_id", str(inst.compute_instance_id)),
                            ("mig_uuid", inst.uuid),
                        )
                    ),
                    "1",
                )
                for g, body in devices
                if g.up
                for inst in g.mig_instances
            ],
        )
        out.family(
            own.NVLINK_DATA_BYTES_TOTAL,
            [
                (
                    f'{body},direction="{direction}"',
                    format_value(_KIB_TO_BYTES(kib)),
                )
                for g, body in devices
                if g.up and g.readings is not None
                for direction, kib in (
                    ("tx", g.readings.nvlink_tx_kib),
                    ("rx", g.readings.nvlink_rx_kib),
                )
                if kib is not None
            ],
        )
        out.family(
            own.NVLINK_DOMAIN_INFO,
            [
                (
                    body
                    + ","
                    + label_body(
                        (
                            ("cluster_uuid", domain.cluster_uuid),
                            ("clique_id", str(domain.clique_id)),
                        )
                    ),
                    "1",
                )
                for g, body in devices
                if g.up
                and g.readings is not None
                and (domain := g.readings.fabric_domain) is not None
            ],
        )
        out.family(
            own.CLOCK_EVENT_ACTIVE,
            [
                (
                    f'{body},clock_event="{name}"',
                    "1" if g.readings.clock_event_reasons & bit else "0",
                )
                for g, body in devices
                if g.up and g.readings is not None and g.readings.clock_event_reasons is not None
                for bit, name in CLOCK_EVENTS
            ],
        )

    @staticmethod
    def render_tail(
        age_seconds: float,
        stale: bool,
        render_seconds: float,
        connections: ConnectionCounts | None = None,
    ) -> str:
        out = FamilyWriter()
        out.family(own.SNAPSHOT_AGE_SECONDS, [("", format_value(round(age_seconds, 3)))])
        out.family(own.SNAPSHOT_STALE, [("", format_value(stale))])
        out.family(own.RENDER_DURATION_SECONDS, [("", format_value(render_seconds))])
        if connections is not None:
            out.family(own.HTTP_CONNECTIONS, [("", format_value(connections.open))])
            out.family(
                own.HTTP_CONNECTIONS_EVICTED_TOTAL,
                [("", format_value(connections.evicted))],
            )
        return out.text()


def _window_samples(
    bodies: list[str], counts: list[tuple[tuple[str, int], ...]], window_ms: int, label: str
) -> Iterator[tuple[str, str]]:
    """dcgm-exporter's windowed counts: per entity, one series per value seen in the window, or a
    single 0 without the value label when nothing was."""
    window = label_body((("window_size_in_ms", str(window_ms)),))
    for body, entity_counts in zip(bodies, counts, strict=True):
        if not entity_counts:
            yield f"{body},{window}", "0"
        for value, n in entity_counts:
            yield f"{body},{window},{label_body(((label, value),))}", str(n)

"""PromQL building blocks that take their selectors, label names and DCGM metric spellings from
the bundle config, so no query in the bundle spells a job name, a label name or a profile's
metric name itself: queries name the classic family and the builder writes the profile's."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dcgm_units import (
    Spelled,
    number,
    rename,
    scaled,
    spelled,
    unit_factor,
)
from kube_gpu_exporter.exporter.dcgm_compat import Profile

UTILIZATION = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"


def _matchers(base: str, extra: tuple[str, ...]) -> str:
    return "{" + ", ".join((base, *extra)) + "}"


@dataclass(frozen=True, slots=True)
class QueryBuilder:
    """Builds selectors, aggregation clauses and common expressions from one config's label
    names and matchers. `dashboard=True` adds the Grafana variable filters."""

    config: BundleConfig
    dashboard: bool = False

    # ---- label names ----
    @property
    def cluster(self) -> str:
        return self.config.labels.cluster

    @property
    def host(self) -> str:
        return self.config.host_label

    @property
    def node(self) -> str:
        return self.config.labels.node

    @property
    def pod(self) -> str:
        return self.config.labels.pod

    @property
    def namespace(self) -> str:
        return self.config.labels.namespace

    def by(self, *labels: str) -> str:
        """`by (cluster, ...)`: every aggregation keeps the cluster, for multi-cluster setups."""
        return "by (" + ", ".join((self.cluster, *labels)) + ")"

    def on(self, *labels: str) -> str:
        return "on (" + ", ".join((self.cluster, *labels)) + ")"

    @property
    def gpu_key(self) -> tuple[str, ...]:
        return (self.host, "gpu", "UUID")

    # ---- the profile's names and units ----
    @property
    def profile(self) -> Profile:
        return self.config.profile

    def name(self, metric: str) -> str:
        """A classic DCGM family name, or a recorded name carrying one, as the profile spells it."""
        return rename(self.profile, metric)

    def spelled(self, metric: str) -> Spelled:
        return spelled(self.profile, metric)

    @property
    def utilization_unit(self) -> str:
        """The unit GPU utilization, and every recorded series derived from it, is in."""
        return self.spelled(UTILIZATION).unit

    def utilization(self, percent: float) -> Fraction:
        """A utilization given in percent, in the profile's utilization unit (1 % -> 0.01)."""
        return Fraction(str(percent)) * unit_factor("%", "%", self.utilization_unit)

    def display(self, metric: str, expr: str | None = None) -> tuple[str, str]:
        """(`expr`, by default the metric's selector, scaled to the unit a panel shows; that
        unit's Grafana id)."""
        factor, unit = self.spelled(metric).display
        return scaled(expr if expr is not None else self.device(metric), factor), unit

    # ---- selectors ----
    def _cluster_filter(self) -> tuple[str, ...]:
        return (f'{self.cluster}=~"$cluster"',) if self.dashboard else ()

    def exporter(self, metric: str, *extra: str) -> str:
        """A series of this exporter; in dashboards also filtered by the cluster variable."""
        base = self.config.selectors.exporter
        return self.name(metric) + _matchers(base, (*self._cluster_filter(), *extra))

    def ksm(self, metric: str, *extra: str) -> str:
        base = self.config.selectors.kube_state_metrics
        return metric + _matchers(base, (*self._cluster_filter(), *extra))

    def device(self, metric: str, *extra: str) -> str:
        """An exporter series filtered by the node and GPU variables on the device dashboard."""
        filters = (f'{self.host}=~"$node"', 'gpu=~"$gpu"') if self.dashboard else ()
        return self.exporter(metric, *filters, *extra)

    def on_nodes(self, metric: str, *extra: str) -> str:
        """An exporter series filtered by the node variable."""
        filters = (f'{self.host}=~"$node"',) if self.dashboard else ()
        return self.exporter(metric, *filters, *extra)

    def recorded(self, metric: str, *extra: str) -> str:
        """A recording-rule series: already aggregated, so it carries no job, only the cluster."""
        return self.name(metric) + "{" + ", ".join((*self._cluster_filter(), *extra)) + "}"

    def busy(self, *extra: str, over: str | None = None, fn: str = "max_over_time") -> str:
        """How busy each device held by a pod is, in the profile's utilization unit: NVML
        utilization on whole GPUs and, where NVML has none (MIG instances), GPM's engine activity
        (Hopper and newer), a ratio scaled to that unit. With `over`, each side becomes
        `fn(...[over])`, which a subquery would cost more."""
        held = (f'{self.pod}!=""', *extra)
        util = self.exporter(UTILIZATION, *held)
        gpm = self.exporter(ENGINE_ACTIVE, 'GPU_I_ID!=""', *held)
        if over is not None:
            util, gpm = f"{fn}({util}[{over}])", f"{fn}({gpm}[{over}])"
        factor = unit_factor("%", self.spelled(ENGINE_ACTIVE).unit, self.utilization_unit)
        if factor != 1:
            gpm = f"{number(factor)} * {gpm}"
        return f"({util} or {gpm})"

    def as_node(self, expr: str) -> str:
        """Copies the exporter's host label into `node`, the name kube-state-metrics joins on."""
        if self.host == self.node:
            return expr
        return f'label_replace({expr}, "{self.node}", "$1", "{self.host}", "(.+)")'

    @property
    def rate_interval(self) -> str:
        return "$__rate_interval" if self.dashboard else self.config.dashboards.rate_interval


def regex_of(values: tuple[object, ...]) -> str:
    return "|".join(str(v) for v in values)

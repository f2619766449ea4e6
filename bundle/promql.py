"""PromQL building blocks that take their selectors and label names from the bundle config, so
no query in the bundle spells a job name or a label name itself."""

from __future__ import annotations

from dataclasses import dataclass

from bundle.config import BundleConfig


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
        return self.config.labels.hostname

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

    # ---- selectors ----
    def _cluster_filter(self) -> tuple[str, ...]:
        return (f'{self.cluster}=~"$cluster"',) if self.dashboard else ()

    def exporter(self, metric: str, *extra: str) -> str:
        """A series of this exporter; in dashboards also filtered by the cluster variable."""
        base = self.config.selectors.exporter
        return metric + _matchers(base, (*self._cluster_filter(), *extra))

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
        return metric + "{" + ", ".join((*self._cluster_filter(), *extra)) + "}"

    def busy_percent(self, *extra: str, over: str | None = None, fn: str = "max_over_time") -> str:
        """How busy each device held by a pod is, in percent: NVML utilization on whole GPUs and,
        where NVML has none (MIG instances), GPM's engine activity x 100 (Hopper and newer).
        With `over`, each side becomes `fn(...[over])`, which a subquery would cost more."""
        held = (f'{self.pod}!=""', *extra)
        util = self.exporter("DCGM_FI_DEV_GPU_UTIL", *held)
        gpm = self.exporter("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 'GPU_I_ID!=""', *held)
        if over is not None:
            util, gpm = f"{fn}({util}[{over}])", f"{fn}({gpm}[{over}])"
        return f"({util} or 100 * {gpm})"

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

"""Template variables. Every panel takes its data source from `datasource`; `cluster` supports
multi-cluster Prometheus (Thanos, Mimir), and node, GPU and namespace narrow the view."""

from __future__ import annotations

from grafanalib import core as g

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dashboards.panels import DATASOURCE
from kube_gpu_exporter.bundle.promql import QueryBuilder

ON_TIME_RANGE_CHANGE = 2
HIDE_VARIABLE = 2


def datasource(config: BundleConfig) -> g.Template:
    return g.Template(
        name="datasource",
        label="Data source",
        query="prometheus",
        type="datasource",
        default=config.dashboards.datasource_name,
        regex=config.dashboards.datasource_regex,
        refresh=ON_TIME_RANGE_CHANGE,
    )


def _query(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = True,
    include_all: bool = True,
    hide: int = 0,
) -> g.Template:
    return g.Template(
        name=name,
        label=label,
        query=query,
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=include_all,
        allValue=".+" if include_all else None,
        default="All" if include_all else None,
        refresh=ON_TIME_RANGE_CHANGE,
        sort=3,  # numerical ascending, so GPU 10 follows GPU 9
        hide=hide,
    )


def cluster(config: BundleConfig) -> g.Template:
    q = QueryBuilder(config)
    template = _query(
        "cluster",
        "Cluster",
        f"label_values({q.exporter('up')}, {q.cluster})",
        multi=False,
        hide=0 if config.show_multi_cluster else HIDE_VARIABLE,
    )
    # A single-cluster Prometheus has no cluster label at all: "All" must match the empty value.
    template.allValue = ".*"
    return template


def node(config: BundleConfig, *, multi: bool = True) -> g.Template:
    q = QueryBuilder(config, dashboard=True)
    return _query(
        "node",
        "Node",
        f"label_values({q.exporter('kube_gpu_exporter_node_physical_gpus')}, {q.host})",
        multi=multi,
        include_all=multi,
    )


def gpu(config: BundleConfig) -> g.Template:
    q = QueryBuilder(config, dashboard=True)
    return _query(
        "gpu",
        "GPU",
        f"label_values({q.on_nodes('kube_gpu_exporter_device_info')}, gpu)",
    )


def namespace(config: BundleConfig) -> g.Template:
    q = QueryBuilder(config, dashboard=True)
    return _query(
        "namespace",
        "Namespace",
        f"label_values({q.exporter('kube_gpu_exporter_pod_device_allocation')}, {q.namespace})",
    )

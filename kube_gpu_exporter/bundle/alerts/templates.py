"""Description fragments shared by the alerts, as Prometheus alert templates (Go text/template).

Device alerts are raised once per GPU, not once per pod, so an alert keeps its identity when the
pod on the GPU changes. The pods are named in the description instead, through a template query
of the exporter's allocation metric at evaluation time.
"""

from __future__ import annotations

from kube_gpu_exporter.bundle.config import BundleConfig


def label(name: str) -> str:
    return "{{ $labels." + name + " }}"


def in_cluster(config: BundleConfig) -> str:
    """' in cluster X' when the bundle is set up for several clusters, else nothing."""
    if not config.show_multi_cluster:
        return ""
    return " in cluster " + label(config.labels.cluster)


def gpu(config: BundleConfig, instance: bool = False) -> str:
    """'GPU 3 (GPU-uuid) on node n1', plus the MIG instance when the series has one."""
    text = f"GPU {label('gpu')} ({label('UUID')})"
    if instance:
        text += (
            "{{ with $labels.GPU_I_ID }} MIG instance {{ . }}"
            "{{ with $labels.GPU_I_PROFILE }} ({{ . }}){{ end }}{{ end }}"
        )
    return text + f" on node {label(config.host_label)}" + in_cluster(config)


def _this_gpu(config: BundleConfig) -> tuple[list[str], list[str]]:
    """Matchers for the alert's own GPU in a template's live query, with the printf arguments
    that fill them from the alert's labels."""
    labels = config.labels
    matchers = [
        config.selectors.exporter,
        f"{labels.cluster}=%q",
        f"{config.host_label}=%q",
        "UUID=%q",
    ]
    args = [f"$labels.{labels.cluster}", f"$labels.{config.host_label}", "$labels.UUID"]
    return matchers, args


def holders(config: BundleConfig, instance: bool = False) -> str:
    """', used by ns/pod ns/pod' or ', not allocated to any pod', from a live query."""
    labels = config.labels
    matchers, args = _this_gpu(config)
    if instance:
        matchers.append("GPU_I_ID=%q")
        args.append("$labels.GPU_I_ID")
    query = (
        f"count by ({labels.namespace}, {labels.pod}) "
        f"(kube_gpu_exporter_pod_device_allocation{{{', '.join(matchers)}}})"
    )
    # A query result comes back in no fixed order; sort it (stable sorts, namespace major) so the
    # description does not change from one evaluation to the next.
    ordered = f'| sortByLabel "{labels.pod}" | sortByLabel "{labels.namespace}"'
    return (
        "{{ with query (printf `" + query + "` " + " ".join(args) + ") " + ordered + " }}, used by"
        "{{ range . }} {{ .Labels." + labels.namespace + " }}/{{ .Labels." + labels.pod + " }}"
        "{{ end }}{{ else }}, not allocated to any pod{{ end }}"
    )


def exporter_target(config: BundleConfig) -> str:
    """The exporter instance, with its node when the scrape config adds the `node` label."""
    node = config.labels.node
    return (
        f"kube-gpu-exporter {label('instance')}"
        "{{ with $labels." + node + " }} on node {{ . }}{{ end }}" + in_cluster(config)
    )


def health_reasons(config: BundleConfig, metric: str) -> str:
    """' Health reasons: xid_79 (drain), row_remap_pending (reset).' for the GPU of the alert,
    from a live query of the exporter's health verdict (`metric`): every reason asking for more
    than nothing, with the action it asks for, so the stronger alert names the weaker reasons too.
    MIG instances repeat their GPU's reasons; the `max by` lists each once. Nothing when the query
    finds none (the verdict cleared between the alert's evaluation and its template's)."""
    matchers, args = _this_gpu(config)
    matchers.append('action!="none"')
    query = f"max by (reason, action) ({metric}{{{', '.join(matchers)}}})"
    return (
        "{{ with query (printf `" + query + "` " + " ".join(args) + ') | sortByLabel "reason" }}'
        " Health reasons:{{ range $i, $r := . }}{{ if $i }},{{ end }} {{ $r.Labels.reason }}"
        " ({{ $r.Labels.action }}){{ end }}.{{ end }}"
    )

"""Description fragments shared by the alerts, as Prometheus alert templates (Go text/template).

Device alerts are raised once per GPU, not once per pod, so an alert keeps its identity when the
pod on the GPU changes. The pods are named in the description instead, through a template query
of the exporter's allocation metric at evaluation time.
"""

from __future__ import annotations

from bundle.config import BundleConfig


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


def holders(config: BundleConfig, instance: bool = False) -> str:
    """', used by ns/pod ns/pod' or ', not allocated to any pod', from a live query."""
    labels = config.labels
    matchers = [
        config.selectors.exporter,
        f"{labels.cluster}=%q",
        f"{config.host_label}=%q",
        "UUID=%q",
    ]
    args = [f"$labels.{labels.cluster}", f"$labels.{config.host_label}", "$labels.UUID"]
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

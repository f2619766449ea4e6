"""Kubernetes manifests in deploy/, from the bundle config: a kustomize base that needs no RBAC,
an overlay that turns Kubernetes API enrichment on, and a component for a runtimeClassName.

    deploy/base/                              namespace, ServiceAccount, DaemonSet, Service,
                                              ServiceMonitor, PrometheusRule, dashboard ConfigMaps
    deploy/overlays/kubernetes-enrichment/    + ClusterRole (pods get/list/watch, nodes get,
                                              resourceslices get/list/watch)
    deploy/components/nvidia-runtime-class/   runtimeClassName for clusters without a default
                                              NVIDIA runtime
    deploy/components/process-accounting/     hostPID, the host's /var/log read-only, and
                                              --collector.processes: per-pod use of shared GPUs

Why each security setting is what it is: docs/deploy.md, 'What each permission is for'.
"""

from __future__ import annotations

from typing import Any

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.yaml_output import dump

NAME = "kube-gpu-exporter"
POD_RESOURCES_DIR = "/var/lib/kubelet/pod-resources"
SOURCE = "kube_gpu_exporter/bundle/deploy_manifests.py"
ENRICHMENT_ROLE = f"{NAME}-kubernetes-enrichment"
# What kube-prometheus-stack's Grafana sidecar looks for on a dashboard ConfigMap (its defaults:
# `grafana.sidecar.dashboards.label` and, when set, `folderAnnotation`).
DASHBOARD_LABEL = ("grafana_dashboard", "1")
FOLDER_ANNOTATION = "grafana_folder"


def _labels(config: BundleConfig) -> dict[str, str]:
    return {config.scrape.app_label: config.scrape.app_name}


def _metadata(config: BundleConfig, name: str = NAME, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": config.scrape.namespace, "labels": _labels(config), **extra}


def namespace(config: BundleConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": config.scrape.namespace,
            # The pod mounts a hostPath and may run as root (docs/deploy.md): that is the
            # privileged Pod Security level, so say so rather than fail admission silently.
            "labels": {"pod-security.kubernetes.io/enforce": "privileged"},
        },
    }


def service_account(config: BundleConfig) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(config),
        # No API access at all unless the enrichment overlay turns it on.
        "automountServiceAccountToken": False,
    }


def _container(config: BundleConfig) -> dict[str, Any]:
    d, s = config.deployment, config.scrape
    return {
        "name": NAME,
        "image": f"{d.image}:{d.tag}",
        "imagePullPolicy": "IfNotPresent",
        "args": [f"--web.listen-address=:{s.port}"],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            # The NVIDIA container runtime mounts every GPU and libnvidia-ml into the container.
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            # NVML is in the `utility` capability; nothing else (no CUDA, no video) is needed.
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
        ],
        "ports": [{"name": s.port_name, "containerPort": s.port, "protocol": "TCP"}],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": s.port_name},
            "initialDelaySeconds": 10,
            "periodSeconds": 10,
            # A 1 s timeout killed dcgm-exporter under GPU load; the exporter answers from memory
            # in well under that, but a busy node can stall any process for a moment.
            "timeoutSeconds": 5,
            "failureThreshold": 3,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": s.port_name},
            "periodSeconds": 5,
            "timeoutSeconds": 5,
        },
        "resources": {
            "requests": {"cpu": d.cpu_request, "memory": d.memory_request},
            "limits": {"cpu": d.cpu_limit, "memory": d.memory_limit},
        },
        "securityContext": {
            # root only for connect() on the kubelet's root-owned socket; nothing else.
            "runAsUser": 0,
            "runAsNonRoot": False,
            "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "pod-resources", "mountPath": POD_RESOURCES_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def daemon_set(config: BundleConfig) -> dict[str, Any]:
    d = config.deployment
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _metadata(config),
        "spec": {
            "selector": {"matchLabels": _labels(config)},
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": d.max_unavailable},
            },
            "template": {
                "metadata": {"labels": _labels(config)},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": False,
                    "priorityClassName": d.priority_class,
                    "nodeSelector": dict(d.node_selector),
                    "tolerations": [
                        {"key": key, "operator": "Exists", "effect": "NoSchedule"}
                        for key in d.toleration_keys
                    ],
                    # The exporter exits within 5 s of SIGTERM.
                    "terminationGracePeriodSeconds": 10,
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [_container(config)],
                    "volumes": [
                        {
                            # The directory, not the socket: the kubelet recreates the socket
                            # on restart, and a file mount would keep the dead inode.
                            "name": "pod-resources",
                            "hostPath": {"path": POD_RESOURCES_DIR, "type": "Directory"},
                        },
                        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                    ],
                },
            },
        },
    }


def service(config: BundleConfig) -> dict[str, Any]:
    s = config.scrape
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(config),
        "spec": {
            # Headless: Prometheus scrapes each pod; nothing should load-balance across nodes.
            "clusterIP": "None",
            "selector": _labels(config),
            "ports": [
                {"name": s.port_name, "port": s.port, "targetPort": s.port_name, "protocol": "TCP"}
            ],
        },
    }


def dashboard_config_maps(config: BundleConfig, dashboards: dict[str, str]) -> list[dict]:
    """One ConfigMap per provisioned dashboard, labelled for the kube-prometheus-stack sidecar."""
    maps = []
    for path, content in sorted(dashboards.items()):
        if not path.startswith("dashboards/provisioned/"):
            continue
        file_name = path.rsplit("/", 1)[1]
        maps.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": _metadata(
                    config,
                    f"{NAME}-dashboard-{file_name.removesuffix('.json')}",
                    annotations={FOLDER_ANNOTATION: config.deployment.grafana_folder},
                )
                | {"labels": {**_labels(config), DASHBOARD_LABEL[0]: DASHBOARD_LABEL[1]}},
                "data": {file_name: content},
            }
        )
    return maps


def enrichment_rbac(config: BundleConfig) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": ENRICHMENT_ROLE, "labels": _labels(config)},
            "rules": [
                # Pod labels and owners: one list, then a watch, filtered to this node's pods.
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                # This node's labels (instance type, pool): one get per refresh.
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                # The DRA driver's ResourceSlices of this node (a list, then a watch, filtered
                # by node name): which GPUs DRA offers, and the UUIDs behind device names.
                {
                    "apiGroups": ["resource.k8s.io"],
                    "resources": ["resourceslices"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": ENRICHMENT_ROLE, "labels": _labels(config)},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": ENRICHMENT_ROLE,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": NAME, "namespace": config.scrape.namespace}
            ],
        },
    ]


def enrichment_patch() -> list[dict[str, Any]]:
    """A JSON 6902 patch of the DaemonSet: mount the token and pass --kubernetes."""
    spec = "/spec/template/spec"
    return [
        {"op": "replace", "path": f"{spec}/automountServiceAccountToken", "value": True},
        {
            "op": "add",
            "path": f"{spec}/containers/0/env/-",
            "value": {"name": "KUBE_GPU_EXPORTER_KUBERNETES", "value": "true"},
        },
    ]


def runtime_class_patch(config: BundleConfig) -> list[dict[str, Any]]:
    return [
        {
            "op": "add",
            "path": "/spec/template/spec/runtimeClassName",
            "value": config.deployment.runtime_class,
        }
    ]


# Process accounting (docs/process-accounting.md, 'Deploying process accounting') maps the PIDs
# NVML reports, which are the host's, to containers through /proc/<pid>/cgroup, and names the
# containers from the kubelet's log files. That needs two things the base refuses, so they live
# in an opt-in component:
# - hostPID: the pod sees every process of the node. The exporter runs as root (uid 0, for the
#   kubelet's socket) with every capability dropped. That keeps it from tracing other processes
#   or reading their memory, environment or root file system (the kernel wants the caller's
#   capabilities to cover the target's), but not from signalling another uid-0 process, which
#   the kernel allows on the uid alone: the kubelet and the container runtime included, unless
#   an AppArmor profile (the runtime's default one) confines signals to other containers. Every
#   process's command line becomes readable too. The exporter does neither; a compromised one
#   could.
# - the host's /var/log, read-only, at the same path (the default --processes.log-root): the
#   exporter lists the names under /var/log/containers and /var/log/pods and reads no file, but
#   the mount exposes every container's logs and the node's own logs to the pod.
PROCESS_LOG_DIR = "/var/log"
PROCESS_LOG_VOLUME = "host-var-log"


def process_accounting_patch() -> list[dict[str, Any]]:
    """A JSON 6902 patch of the DaemonSet: host PID namespace, /var/log read-only, the flag."""
    spec = "/spec/template/spec"
    return [
        {"op": "add", "path": f"{spec}/hostPID", "value": True},
        {
            "op": "add",
            "path": f"{spec}/volumes/-",
            "value": {
                "name": PROCESS_LOG_VOLUME,
                "hostPath": {"path": PROCESS_LOG_DIR, "type": "Directory"},
            },
        },
        {
            "op": "add",
            "path": f"{spec}/containers/0/volumeMounts/-",
            "value": {
                "name": PROCESS_LOG_VOLUME,
                "mountPath": PROCESS_LOG_DIR,
                "readOnly": True,
            },
        },
        {"op": "add", "path": f"{spec}/containers/0/args/-", "value": "--collector.processes"},
    ]


def _documents(*docs: dict[str, Any]) -> str:
    return "".join(
        dump(doc, SOURCE) if i == 0 else "---\n" + dump(doc, SOURCE).split("\n", 1)[1]
        for i, doc in enumerate(docs)
    )


def _target() -> dict[str, str]:
    return {"group": "apps", "version": "v1", "kind": "DaemonSet", "name": NAME}


def manifest_files(
    config: BundleConfig,
    prometheus_rule: dict[str, Any],
    service_monitor: dict[str, Any],
    dashboards: dict[str, str],
) -> dict[str, str]:
    d = config.deployment
    base = {
        "namespace.yaml": _documents(namespace(config)),
        "serviceaccount.yaml": _documents(service_account(config)),
        "daemonset.yaml": _documents(daemon_set(config)),
        "service.yaml": _documents(service(config)),
        "servicemonitor.yaml": _documents(service_monitor),
        "prometheusrule.yaml": _documents(prometheus_rule),
        "dashboards.yaml": _documents(*dashboard_config_maps(config, dashboards)),
    }
    files = {f"deploy/base/{name}": text for name, text in base.items()}
    files["deploy/base/kustomization.yaml"] = dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": list(base),
            "images": [{"name": d.image, "newTag": d.tag}],
        },
        SOURCE,
    )
    overlay = "deploy/overlays/kubernetes-enrichment"
    files[f"{overlay}/rbac.yaml"] = _documents(*enrichment_rbac(config))
    files[f"{overlay}/enable-kubernetes.yaml"] = dump(enrichment_patch(), SOURCE)
    files[f"{overlay}/kustomization.yaml"] = dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": ["../../base", "rbac.yaml"],
            "patches": [{"path": "enable-kubernetes.yaml", "target": _target()}],
        },
        SOURCE,
    )
    component = "deploy/components/nvidia-runtime-class"
    files[f"{component}/runtime-class.yaml"] = dump(runtime_class_patch(config), SOURCE)
    files[f"{component}/kustomization.yaml"] = dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1alpha1",
            "kind": "Component",
            "patches": [{"path": "runtime-class.yaml", "target": _target()}],
        },
        SOURCE,
    )
    component = "deploy/components/process-accounting"
    files[f"{component}/process-accounting.yaml"] = dump(process_accounting_patch(), SOURCE)
    files[f"{component}/kustomization.yaml"] = dump(
        {
            "apiVersion": "kustomize.config.k8s.io/v1alpha1",
            "kind": "Component",
            "patches": [{"path": "process-accounting.yaml", "target": _target()}],
        },
        SOURCE,
    )
    return files

"""The Helm chart in deploy/helm/kube-gpu-exporter: its generated parts, its values tables, and
packaging (`make chart`).

`make bundle` writes what the bundle config decides, so the chart and the kustomize manifests of
kube_gpu_exporter/bundle/deploy_manifests.py cannot drift apart:

    Chart.yaml                    name, version and appVersion (the exporter's version)
    values.yaml                   every default, with the comments the values tables are made of
    values.schema.json            the type and form of every value (names, tags, labels, the
                                  exporter flags extraArgs takes), enforced by `helm install`
    templates/_generated.tpl      what is not a value: the fixed environment, the pod-resources
                                  mount, the enrichment ClusterRole's rules, process accounting's
                                  volume, the bundle's relabelings, the profiles the chart carries
    files/prometheus-rules/       one PrometheusRule spec per flavour (alerts/prometheusrule.yaml)
    files/dashboards/             the provisioned dashboards per flavour (dashboards/provisioned/)

The templates, NOTES.txt, .helmignore and ci/ are written by hand; tests/unit/test_helm_chart.py
renders them with Helm's own engine (the helm-python-sdk test dependency) and holds the default
render to deploy/base. The README's and docs/helm.md's values tables are made from values.yaml's
`# --` comments (values_table) and checked like the generated files.

    python -m kube_gpu_exporter.bundle.helm_chart package [--out dist]
    # lint --strict, then write dist/<name>-<v>.tgz
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube_gpu_exporter import __version__
from kube_gpu_exporter.bundle import deploy_manifests
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.flavours import fitting_flavour
from kube_gpu_exporter.bundle.scrape_configs import _operator_relabelings
from kube_gpu_exporter.bundle.source_root import ROOT
from kube_gpu_exporter.bundle.yaml_output import HEADER, dump
from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_VERSION, DcgmVersion
from kube_gpu_exporter.exporter.flags.model import ENV_PREFIX, env_name
from kube_gpu_exporter.exporter.flags.parser import build_parser
from kube_gpu_exporter.exporter.flags.table import DRIVER_LABELS

CHART = "kube-gpu-exporter"
CHART_DIR = f"deploy/helm/{CHART}"
SOURCE = "kube_gpu_exporter/bundle/helm_chart.py"
# Where a value's description lives; its default comes from kube_gpu_exporter/bundle/config.py.
ORIGIN = (
    "kube_gpu_exporter/bundle/config.py (defaults) or "
    "kube_gpu_exporter/bundle/helm_chart.py (descriptions)"
)
VALUES = f"{CHART_DIR}/values.yaml"
# The generated parts, besides files/, relative to the chart.
GENERATED_TOP = ("Chart.yaml", "values.yaml", "values.schema.json", "templates/_generated.tpl")
GENERATED_DIRS = ("files",)
# values.yaml's comments wrap here, as the repository's code does.
WIDTH = 100


def flavour_dir(version: str) -> str:
    """A flavour's name inside the chart: the `--compat.dcgm-exporter` value it is made for."""
    return f"dcgm-{version}"


# ---- values.yaml: one declaration makes the file, its comments and its schema ----


@dataclass(frozen=True, slots=True)
class Value:
    """One key of values.yaml. `doc` becomes its `# --` comment (what the values tables show);
    `note`, comment lines above it that the tables leave out; `schema`, its JSON schema, inferred
    from the default where not given. A Value with `children` is a group of keys."""

    key: str
    doc: str
    default: Any = None
    children: tuple[Value, ...] = ()
    schema: Mapping[str, Any] | None = None
    note: str = ""


# ---- what Kubernetes and image registries accept, as the schema's patterns ----
#
# The templates quote every value they splice, so a value cannot add a key to an object however
# it is written; these patterns refuse at `helm install` what the API server or the kubelet would
# refuse later, one object or one pull at a time. Helm checks them with Go's RE2 and editors with
# ECMA-262 regexes: only syntax both read (\xNN escapes, no \p{..}, no lookaround), and `$`, which
# in both matches at the very end only, never before a final newline.

# C0 and C1 control characters, DEL, and the Unicode line and paragraph separators, which YAML 1.1
# readers (PyYAML among them) take for line breaks. The last two are the characters themselves:
# RE2 and ECMA-262 spell an escape for them differently.
NO_CONTROL = r"[^\x00-\x1f\x7f-\x9f" + "\u2028\u2029]"
# RFC 1123 labels: namespaces, and the objects' names the chart builds (it cuts them at 63).
DNS_LABEL = "[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
# RFC 1035 labels: Service names, which must also begin with a letter.
DNS_1035_LABEL = "[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?"
# RFC 1123 subdomains: the names of Secrets, ServiceAccounts, PriorityClasses and RuntimeClasses;
# at most 253 characters, which maxLength says.
DNS_SUBDOMAIN = rf"{DNS_LABEL}(?:\.{DNS_LABEL})*"
# A label value, and the name part of a label or annotation key.
QUALIFIED_NAME = "[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
# A label or annotation key: an optional DNS-subdomain prefix and a slash, then the name; the
# pattern holds the name to 63 characters, maxLength the prefix to about 253.
LABEL_KEY = f"(?:{DNS_SUBDOMAIN}/)?{QUALIFIED_NAME}"
KEY_LENGTH = 253 + 1 + 63
# The reference grammar of distribution/reference without tag or digest (the chart appends the
# tag): an optional registry host[:port]/, then lowercase path components.
_PATH_COMPONENT = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_HOST_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
IMAGE_REPOSITORY = (
    rf"(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*(?::[0-9]+)?/)?"
    f"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
)
# Docker's tag grammar.
IMAGE_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
# A sha256 content digest, as registries and the kubelet name images by.
IMAGE_DIGEST = "sha256:[a-f0-9]{64}"
# Kubernetes' quantity grammar (resource.Quantity): 20m, 1.5Gi, 1e3; a number, then a binary
# suffix, a decimal one or an exponent.
_NUMBER = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
QUANTITY_TEXT = rf"{_NUMBER}(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
# A key of a Secret's data.
SECRET_DATA_KEY = "[-._a-zA-Z0-9]+"
# An environment variable's name as Kubernetes takes it since 1.34 (and earlier with the
# RelaxedEnvironmentVariableValidation gate): printable ASCII but `=`; a space is printable but
# no shell could name it.
ENV_NAME = "[!-<>-~]+"
# A Service's clusterIP: `None` (headless), or an IPv4 or IPv6 address from the cluster's range.
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_IPV4 = rf"(?:{_OCTET}\.){{3}}{_OCTET}"
_IPV6 = "[0-9a-fA-F]{0,4}(?::[0-9a-fA-F]{0,4}){2,7}"
CLUSTER_IP = f"None|{_IPV4}|{_IPV6}"
# An API group and version, as a custom resource's apiVersion: monitoring.coreos.com/v1.
API_VERSION = rf"{DNS_SUBDOMAIN}/v[1-9][0-9]*(?:(?:alpha|beta)[1-9][0-9]*)?"
# Text of several lines: what NO_CONTROL takes, and tabs and line ends (a CSV file).
LINES = r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f" + "\u2028\u2029]"


def _matching(pattern: str, *, empty: bool = False, max_length: int = 0) -> dict[str, Any]:
    """A string schema for `pattern`, whole; `empty`: the empty string too (the value's default,
    where empty means "the chart decides")."""
    body = f"(?:{pattern})?" if empty else f"(?:{pattern})"
    found: dict[str, Any] = {"type": "string", "pattern": f"^{body}$"}
    if max_length:
        found["maxLength"] = max_length
    return found


TEXT = _matching(f"{NO_CONTROL}*")


def _keyed(value: Mapping[str, Any]) -> dict[str, Any]:
    """A map of label or annotation keys to `value`. The key's form is a patternProperties
    pattern, not propertyNames, because Helm's message for an unknown property names both the map
    and the key, and for a propertyNames failure neither the map nor where it is."""
    return {
        "type": "object",
        "patternProperties": {f"^(?:{LABEL_KEY})$": value},
        "additionalProperties": False,
        "propertyNames": {"maxLength": KEY_LENGTH},
    }


LABELS = _keyed(_matching(QUALIFIED_NAME, empty=True))
ANNOTATIONS = _keyed(TEXT)
OBJECTS = {"type": "array", "items": {"type": "object"}}
DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"}
QUANTITY = {"anyOf": [_matching(QUANTITY_TEXT), {"type": "number"}]}
SECRET_NAME = _matching(DNS_SUBDOMAIN, empty=True, max_length=253)
# prometheus-operator's SecretKeySelector, as basicAuth's username and password take it.
SECRET_KEY = {
    "type": "object",
    "required": ["name", "key"],
    "properties": {
        "name": _matching(DNS_SUBDOMAIN, max_length=253),
        "key": _matching(SECRET_DATA_KEY, max_length=253),
    },
}
BASIC_AUTH = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"username": SECRET_KEY, "password": SECRET_KEY},
}
# A Kubernetes LabelSelector, as a NetworkPolicy peer's selectors take it.
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": LABELS,
        "matchExpressions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "operator"],
                "additionalProperties": False,
                "properties": {
                    "key": _matching(LABEL_KEY, max_length=KEY_LENGTH),
                    "operator": {"enum": ["In", "NotIn", "Exists", "DoesNotExist"]},
                    "values": {
                        "type": "array",
                        "items": _matching(QUALIFIED_NAME, empty=True),
                    },
                },
            },
        },
    },
}
# Kubernetes objects the chart writes by toYaml where they go (volumes, mounts, containers): each
# needs its name, which the API server would ask for one pod at a time.
NAMED_OBJECTS = {"type": "array", "items": {"type": "object", "required": ["name"]}}
MOUNTS = {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}}

# What the exporter reads from --web.config.file (docs/configuration.md); it refuses other keys at
# start, and a plain-text password too: the schema says so at install time instead.
WEB_CONFIG = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "tls_server_config": {"type": "object"},
        "http_server_config": {"type": "object"},
        "basic_auth_users": {
            "type": "object",
            "additionalProperties": {"type": "string", "pattern": r"^\$2[abxy]?\$"},
        },
    },
}


# ---- extraArgs: the exporter's own flags, read off its parser ----

# Flags extraArgs does not take. Each is set by a chart value together with what it needs (the
# port the Service and the probes use, a mounted file, RBAC, hostPID), points at a path or a name
# the chart's own mounts and environment decide, or keeps the exporter from serving this node's
# GPUs: given by hand, each would leave the pods restarting or the chart's objects disagreeing with
# the exporter. Keyed by the option's first long form; its `--no-` form and short alias go too.
# A subcommand (`hash-password`) is no option at all, and begins with no `--`.
NOT_IN_EXTRA_ARGS: dict[str, str] = {
    "--help": "prints the usage and exits, so every pod restarts for ever",
    "--config.file": "names a file the chart does not mount: chart values and extraArgs set the "
    "same flags",
    "--version": "prints the version and exits, so every pod restarts for ever",
    "--simulate": "serves a simulated node's made-up GPUs instead of the node's own",
    "--web.listen-address": "`port` sets it, and the container port, the Service and the probes",
    "--web.telemetry-path": "the ServiceMonitor, the PodMonitor and the notes use /metrics",
    "--web.config.file": "`webConfig` sets it and mounts the file",
    "--compat.dcgm-exporter": "`compat.dcgmExporter` sets it, and picks the rules' and the "
    "dashboards' flavour with it",
    "--driver-version-label": "`compat.driverVersionLabel` sets it",
    "--node-name": "the chart sets NODE_NAME to each pod's own node: one name would label every "
    "node's GPUs alike",
    "--kubernetes": "`kubernetesEnrichment.enabled` sets it, with the token and the ClusterRole it "
    "needs",
    "--kubernetes.kubeconfig": "names a file the chart does not mount: enrichment uses the pod's "
    "token",
    "--kubernetes.pod-label-allowlist": "`kubernetesEnrichment.podLabelAllowlist` sets it",
    "--kubernetes.resource-slices": "`kubernetesEnrichment.resourceSlices` sets it, with the grant "
    "it needs",
    "--collector.processes": "`processAccounting.enabled` sets it, with hostPID and the host's "
    "/var/log",
    "--processes.proc-root": "with hostPID the pod's /proc is the host's, where the default looks",
    "--processes.log-root": "`processAccounting.enabled` mounts the host's /var/log where the "
    "default looks",
    "--podresources.socket": "the chart mounts the kubelet's pod-resources directory (under "
    "`kubeletPath` on the host) where the default looks",
    "--collectors": "`collectors.csv` or `collectors.existingConfigMap` sets it and mounts the "
    "file",
}


@dataclass(frozen=True, slots=True)
class ExtraArgs:
    """The flags extraArgs takes, as the exporter's parser declares them: `switches` alone
    (`--collector.pcie`, `--no-collector.pcie`), `free` as `--flag=value` with any value the
    exporter then checks, and `choices` as `--flag=` one of the values argparse allows."""

    switches: tuple[str, ...]
    free: tuple[str, ...]
    choices: tuple[tuple[str, tuple[str, ...]], ...]

    def flags(self) -> tuple[str, ...]:
        return (*self.switches, *self.free, *(flag for flag, _ in self.choices))


def extra_args(
    parser: argparse.ArgumentParser | None = None,
    excluded: Mapping[str, str] = NOT_IN_EXTRA_ARGS,
) -> ExtraArgs:
    """The flags of `parser` (the exporter's) that extraArgs takes: every long option but the
    `excluded` ones. A flag with another arity (several values, or an optional one) stops the
    generator, so that someone decides how extraArgs should take it."""
    parser = build_parser() if parser is None else parser
    switches: list[str] = []
    free: list[str] = []
    choices: list[tuple[str, tuple[str, ...]]] = []
    seen: set[str] = set()
    for action in parser._actions:
        longs = [option for option in action.option_strings if option.startswith("--")]
        if not longs:
            continue
        seen.add(longs[0])
        if longs[0] in excluded:
            continue
        if action.nargs == 0:
            switches += longs
        elif action.nargs is None and action.choices is not None:
            allowed = tuple(str(choice) for choice in action.choices)
            choices += [(flag, allowed) for flag in longs]
        elif action.nargs is None:
            free += longs
        else:
            raise ValueError(
                f"{longs[0]} takes nargs={action.nargs!r}, which one extraArgs item cannot hold: "
                "give it a form in kube_gpu_exporter/bundle/helm_chart.py "
                "or leave it out (NOT_IN_EXTRA_ARGS)"
            )
    if stale := sorted(set(excluded) - seen):
        raise ValueError(f"NOT_IN_EXTRA_ARGS names flags the exporter does not have: {stale}")
    return ExtraArgs(tuple(switches), tuple(free), tuple(choices))


def _literal(text: str) -> str:
    """`text` as a regex matching itself, in syntax RE2 and ECMA-262 both read: re.escape also
    escapes `-` and `=`, which ECMA-262's unicode mode refuses outside a class."""
    return re.sub(r"([\\^$.|?*+()\[\]{}/])", r"\\\1", text)


def _any_of(words: Iterable[str]) -> str:
    return "|".join(_literal(word) for word in words)


def extra_args_schema(found: ExtraArgs) -> dict[str, Any]:
    """One item, one argument: a switch alone, or `--flag=value` with a value of no control
    character (a newline in it is still one argument, but no flag wants one), or one of the
    values the flag chooses from."""
    forms: list[dict[str, Any]] = [{"enum": list(found.switches)}]
    if found.free:
        forms.append({"pattern": f"^(?:{_any_of(found.free)})={NO_CONTROL}*$"})
    if found.choices:
        chosen = "|".join(
            f"{_literal(flag)}=(?:{_any_of(allowed)})" for flag, allowed in found.choices
        )
        forms.append({"pattern": f"^(?:{chosen})$"})
    excluded = ", ".join(NOT_IN_EXTRA_ARGS)
    return {
        "$comment": "Generated from kube_gpu_exporter/exporter/flags/table.py's rows by "
        "kube_gpu_exporter/bundle/helm_chart.py "
        f"(extra_args); left out, as chart values or mounts decide them: {excluded}.",
        "type": "array",
        "items": {"type": "string", "anyOf": forms},
    }


def extra_env_schema(found: ExtraArgs) -> dict[str, Any]:
    """An EnvVar; one named `KUBE_GPU_EXPORTER_<FLAG>` sets a flag, so it must be a flag's that
    extraArgs takes: a misspelt one would be ignored without a word, and an excluded one would
    undo what the chart set."""
    known = sorted({env_name(flag) for flag in found.flags() if not flag.startswith("--no-")})
    return {
        "type": "array",
        "items": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {
                    "type": "string",
                    "pattern": f"^{ENV_NAME}$",
                    "anyOf": [{"not": {"pattern": f"^{ENV_PREFIX}"}}, {"enum": known}],
                },
                "value": {"type": "string"},
                "valueFrom": {"type": "object"},
            },
        },
    }


def _monitor(kind: str, what: str, config: BundleConfig) -> tuple[Value, ...]:
    s = config.scrape
    return (
        Value("enabled", f"Create the {kind} (needs prometheus-operator's CRDs).", False),
        Value(
            "apiVersion",
            f"The {kind}'s apiVersion, for an operator that serves the CRD under another group "
            "or version.",
            "monitoring.coreos.com/v1",
            schema=_matching(API_VERSION, max_length=KEY_LENGTH),
        ),
        Value(
            "additionalLabels",
            "Labels on it that Prometheus selects it by: kube-prometheus-stack selects "
            "`release: <its release name>`.",
            {"release": s.release_label},
            schema=LABELS,
        ),
        Value("interval", "How often Prometheus scrapes each pod.", s.interval, schema=DURATION),
        Value("scrapeTimeout", "Scrape timeout.", s.timeout, schema=DURATION),
        Value(
            "honorLabels",
            "Keep the exporter's `pod`, `namespace` and `container` labels (the GPU's workload) "
            "over the target's; false: Prometheus renames them `exported_*`, which the "
            "dashboards and alerts do not select.",
            True,
        ),
        Value(
            "relabelings",
            f"Relabelings after the bundle's, which drop the target labels the operator adds to "
            f"{what}, copy the pod's node to `{config.labels.node}` and set "
            f"`job={s.job_name}`, the job the dashboards and alerts select.",
            [],
            schema=OBJECTS,
        ),
        Value("metricRelabelings", "Relabelings of the scraped series.", [], schema=OBJECTS),
        Value(
            "tlsConfig",
            "How Prometheus checks the exporter's certificate with `webConfig.tls` "
            "(prometheus-operator's `tlsConfig`, e.g. `insecureSkipVerify: true`); empty with "
            "`webConfig.selfSignedCert`: the generated certificate, from its Secret.",
            {},
            schema={"type": "object"},
        ),
        Value(
            "basicAuth",
            "With `webConfig.basicAuth`: `username` and `password`, each `{name, key}` of a "
            "Secret in the release's namespace.",
            {},
            schema=BASIC_AUTH,
        ),
    )


PROCESS_ACCOUNTING_NOTE = """\
Off by default, because of what it costs (docs/process-accounting.md, 'Deploying process
accounting'). hostPID: the pod shares the node's PID namespace. The exporter runs as uid 0 with
every capability dropped, which keeps it from tracing other processes or reading their memory,
environment or root file system, but not from signalling another uid-0 process (the kubelet and
the container runtime included, unless an AppArmor profile confines signals), and every
process's command line becomes readable. The host's /var/log, read-only: the exporter lists the
names under /var/log/containers and /var/log/pods and reads no file, but the mount exposes every
container's logs and the node's own logs to the pod. The exporter does neither; a compromised
one could."""

AUTOMOUNT_NOTE = """\
false suits admission policies that refuse pods with an automounted token, and containers added
by initContainers: with kubernetesEnrichment the chart then mounts a projected token (an hour's,
renewed by the kubelet, as automounting does) in the exporter's container alone."""


# The kubelet's pod-resources directory, under its root directory (`kubeletPath`).
POD_RESOURCES_DIR = "/pod-resources"
# Where the pod finds the collectors CSV (`--collectors`).
COLLECTORS_DIR = "/etc/kube-gpu-exporter/collectors"
COLLECTORS_FILE = "collectors.csv"


def _pod_resources_volume(pod: Mapping[str, Any]) -> dict[str, Any]:
    """deploy/base's hostPath volume of the kubelet's pod-resources directory."""
    [found] = [
        volume
        for volume in pod["volumes"]
        if volume.get("hostPath", {}).get("path", "").endswith(POD_RESOURCES_DIR)
    ]
    return dict(found)


def values_spec(config: BundleConfig) -> tuple[Value, ...]:
    """values.yaml's keys, defaults taken from the DaemonSet deploy/base has."""
    d, s = config.deployment, config.scrape
    ds = deploy_manifests.daemon_set(config)
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    versions = [v.value for v in DcgmVersion]
    flags = extra_args()
    pod_resources = _pod_resources_volume(pod)["hostPath"]["path"]
    return (
        Value(
            "image",
            "The exporter's image. The default names no registry: build the image and push it "
            "(README, 'Deploy on Kubernetes'), then set `image.repository`.",
            children=(
                Value(
                    "repository",
                    "Repository, with your registry in front: `<registry>/kube-gpu-exporter`.",
                    d.image,
                    schema=_matching(IMAGE_REPOSITORY, max_length=255),
                ),
                Value(
                    "tag",
                    "Tag; empty: the chart's appVersion, the exporter's version.",
                    "" if d.tag == __version__ else d.tag,
                    schema=_matching(IMAGE_TAG, empty=True),
                ),
                Value(
                    "digest",
                    "A digest, `sha256:<64 hex>`; set, the image is `repository@digest` and the "
                    "tag is not used.",
                    "",
                    schema=_matching(IMAGE_DIGEST, empty=True),
                ),
                Value(
                    "pullPolicy",
                    "When the kubelet pulls it.",
                    container["imagePullPolicy"],
                    schema={"enum": ["Always", "IfNotPresent", "Never"]},
                ),
            ),
        ),
        Value(
            "imagePullSecrets",
            "Secrets to pull the image with: `[{name: <secret>}]`.",
            [],
            schema={
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {"name": _matching(DNS_SUBDOMAIN, max_length=253)},
                },
            },
        ),
        Value(
            "nameOverride",
            "Replaces the chart's name in object names and labels.",
            "",
            # The objects' names end in it, and the name label holds it.
            schema=_matching(DNS_LABEL, empty=True),
        ),
        Value(
            "fullnameOverride",
            "Replaces the objects' name, which is the release name followed by the chart's "
            "unless the release name holds it.",
            "",
            # It names the Service too, whose name must begin with a letter.
            schema=_matching(DNS_1035_LABEL, empty=True),
        ),
        Value(
            "namespaceOverride",
            "The namespace of every namespaced object the chart makes, for a parent chart that "
            "installs it elsewhere; empty: the release's.",
            "",
            schema=_matching(DNS_LABEL, empty=True),
        ),
        Value(
            "serviceAccount",
            "The pods' ServiceAccount. Its token is mounted only with kubernetesEnrichment.",
            children=(
                Value("create", "Create it.", True),
                Value(
                    "name",
                    "Its name; empty: the objects' name (or `default` without `create`).",
                    "",
                    schema=SECRET_NAME,
                ),
                Value("annotations", "Annotations on it.", {}, schema=ANNOTATIONS),
            ),
        ),
        Value(
            "automountServiceAccountToken",
            "true: with kubernetesEnrichment the kubelet mounts the API token in every "
            "container (without enrichment none is mounted: the exporter reads no API); false: "
            "never, and enrichment's token is projected into the exporter's container alone.",
            True,
            note=AUTOMOUNT_NOTE,
        ),
        Value(
            "port",
            "Port the exporter listens on (`--web.listen-address`), the container's and the "
            "Service's; it leaves dcgm-exporter's 9400 free.",
            s.port,
            schema={"type": "integer", "minimum": 1, "maximum": 65535},
        ),
        Value(
            "kubeletPath",
            "The kubelet's root directory on the host (its `--root-dir`), whose pod-resources "
            "directory the pod mounts: `/var/snap/microk8s/common/var/lib/kubelet` on "
            "microk8s. Not the pod-resources directory itself, as dcgm-exporter's value is.",
            pod_resources.removesuffix(POD_RESOURCES_DIR),
            schema={
                **_matching(f"/{NO_CONTROL}*", max_length=4096),
                # dcgm-exporter's chart takes the pod-resources directory here: refused, where
                # the pod would wait for a directory that is not there.
                "not": {"pattern": f"{POD_RESOURCES_DIR}/?$"},
            },
        ),
        Value(
            "resources",
            "Requests and limits, sized from measurements (docs/deploy.md, 'What each "
            "permission is for').",
            container["resources"],
            schema={
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "requests": {"type": "object", "additionalProperties": QUANTITY},
                    "limits": {"type": "object", "additionalProperties": QUANTITY},
                    "claims": OBJECTS,
                },
            },
        ),
        Value(
            "nodeSelector",
            "Nodes to run on: the GPU Operator's label of every NVIDIA GPU node, DRA-only nodes "
            "included (docs/dra.md, 'Deploying on DRA nodes').",
            pod["nodeSelector"],
            schema=LABELS,
        ),
        Value(
            "tolerations",
            "Taints to tolerate; GPU node pools commonly carry `nvidia.com/gpu`.",
            pod["tolerations"],
            schema=OBJECTS,
        ),
        Value("affinity", "Pod affinity rules, beyond what nodeSelector says.", {}),
        Value(
            "priorityClassName",
            "Full GPU nodes still schedule the exporter, and evict it last. Empty: none.",
            pod["priorityClassName"],
            schema=SECRET_NAME,
        ),
        Value(
            "runtimeClassName",
            f"`{d.runtime_class}` where the NVIDIA runtime is not containerd's default; empty: "
            "the node's default runtime.",
            "",
            schema=SECRET_NAME,
        ),
        Value(
            "hostNetwork",
            "Run in the node's network namespace, with `dnsPolicy: ClusterFirstWithHostNet`, "
            "for scrapers that reach node addresses only; the port is then taken on the node, "
            "and a NetworkPolicy no longer applies.",
            False,
        ),
        Value(
            "updateStrategy",
            "How a rollout replaces pods: a share of the nodes at a time.",
            ds["spec"]["updateStrategy"],
            schema={
                "type": "object",
                "properties": {
                    "type": {"enum": ["RollingUpdate", "OnDelete"]},
                    "rollingUpdate": {"type": "object"},
                },
            },
        ),
        Value("daemonSetAnnotations", "Annotations on the DaemonSet.", {}, schema=ANNOTATIONS),
        Value("podAnnotations", "Annotations on the pods.", {}, schema=ANNOTATIONS),
        Value("podLabels", "More labels on the pods.", {}, schema=LABELS),
        Value(
            "terminationGracePeriodSeconds",
            "The exporter exits within 5 s of SIGTERM.",
            pod["terminationGracePeriodSeconds"],
            schema={"type": "integer", "minimum": 0},
        ),
        Value(
            "podSecurityContext",
            "The pods' security context: the RuntimeDefault seccomp profile.",
            pod["securityContext"],
        ),
        Value(
            "securityContext",
            "The container's: uid 0 only to connect to the kubelet's root-owned pod-resources "
            "socket, no capabilities, a read-only root, no privilege escalation.",
            container["securityContext"],
        ),
        Value(
            "livenessProbe",
            "`/healthz`: fails only where a restart helps, a hung NVML call or a thread that "
            "gave up (docs/health.md).",
            container["livenessProbe"],
        ),
        Value(
            "readinessProbe",
            "`/readyz`: ready once NVML answers and, with kubernetesEnrichment, the API has "
            "listed this node's pods once (docs/health.md).",
            container["readinessProbe"],
        ),
        Value(
            "extraArgs",
            "More exporter flags, after the chart's (docs/configuration.md): `--flag=value` or "
            "a switch alone, one per item; the schema takes the exporter's flags only, less "
            "those a value sets (docs/helm.md).",
            [],
            schema=extra_args_schema(flags),
        ),
        Value(
            "extraEnv",
            "More environment variables; `KUBE_GPU_EXPORTER_<FLAG>` sets a flag extraArgs takes.",
            [],
            schema=extra_env_schema(flags),
        ),
        Value(
            "initContainers",
            "Containers to run before the exporter (Kubernetes `Container`s); they get no API "
            "token with `automountServiceAccountToken: false`.",
            [],
            schema=NAMED_OBJECTS,
        ),
        Value(
            "extraVolumes",
            "More volumes in the pod (Kubernetes `Volume`s), for extraVolumeMounts and "
            "initContainers.",
            [],
            schema=NAMED_OBJECTS,
        ),
        Value(
            "extraVolumeMounts",
            "More mounts in the exporter's container (`VolumeMount`s: `name`, `mountPath`).",
            [],
            schema=MOUNTS,
        ),
        Value(
            "collectors",
            "The fields to export, as a dcgm-exporter counters CSV (docs/fields.md, 'Choosing "
            f"fields with a dcgm-exporter CSV'): mounted at {COLLECTORS_DIR} and passed as "
            "`--collectors`. Neither set: the exporter's default fields.",
            children=(
                Value(
                    "csv",
                    "The CSV itself, which the chart puts in a ConfigMap; a change rolls the pods.",
                    "",
                    schema=_matching(f"{LINES}*"),
                ),
                Value(
                    "existingConfigMap",
                    "Or a ConfigMap of yours that holds it (the GPU Operator's, say); editing it "
                    "takes a restart of the pods.",
                    "",
                    schema=SECRET_NAME,
                ),
                Value(
                    "key",
                    "The CSV's key in the ConfigMap (the GPU Operator's: `dcgm-metrics.csv`).",
                    COLLECTORS_FILE,
                    schema=_matching(SECRET_DATA_KEY, max_length=253),
                ),
            ),
        ),
        Value(
            "compat",
            "The dcgm-exporter release to imitate (README, 'Migrating from dcgm-exporter').",
            children=(
                Value(
                    "dcgmExporter",
                    f"`--compat.dcgm-exporter`: {', '.join(versions)}; empty: the exporter's "
                    f"default, {DEFAULT_VERSION.value}. It also picks the flavour of the rules "
                    "and dashboards.",
                    "" if config.dcgm_version == DEFAULT_VERSION.value else config.dcgm_version,
                    schema={"enum": ["", *versions]},
                ),
                Value(
                    "driverVersionLabel",
                    "`--driver-version-label`: `none` to replace dcgm-exporter's own chart up "
                    "to 4.8.2; empty: the profile's.",
                    "",
                    schema={"enum": ["", *DRIVER_LABELS]},
                ),
            ),
        ),
        Value(
            "kubernetesEnrichment",
            "Pod UIDs, owners and labels, and node labels, from the API server "
            "(`--kubernetes`): mounts the token and adds a read-only ClusterRole.",
            children=(
                Value("enabled", "Turn it on.", False),
                Value(
                    "resourceSlices",
                    "Also watch this node's DRA ResourceSlices, and grant get, list and watch "
                    "on them; false: `--no-kubernetes.resource-slices` and no such grant.",
                    True,
                ),
                Value(
                    "podLabelAllowlist",
                    "`--kubernetes.pod-label-allowlist`: a regex of pod label keys to export.",
                    "",
                    schema=TEXT,
                ),
            ),
        ),
        Value(
            "processAccounting",
            "Per-pod use of shared GPUs (`--collector.processes`): adds `hostPID` and the "
            "host's /var/log, read-only; off for what they expose (docs/process-accounting.md).",
            note=PROCESS_ACCOUNTING_NOTE,
            children=(Value("enabled", "Turn it on.", False),),
        ),
        Value(
            "webConfig",
            "TLS and basic auth: `--web.config.file`, in the exporter-toolkit format "
            "(docs/configuration.md).",
            children=(
                Value("enabled", "Turn it on.", False),
                Value(
                    "existingSecret",
                    "A Secret with the file under the key `web-config.yml`; empty: the chart "
                    "makes one from `config`.",
                    "",
                    schema=SECRET_NAME,
                ),
                Value(
                    "config",
                    "The file, when the chart makes the Secret. `basic_auth_users` take bcrypt "
                    "hashes (`kube-gpu-exporter hash-password`).",
                    {},
                    schema=WEB_CONFIG,
                ),
                Value(
                    "tlsSecret",
                    "A `kubernetes.io/tls` Secret placed beside the file: `cert_file: tls.crt`, "
                    "`key_file: tls.key`, `client_ca_file: ca.crt`.",
                    "",
                    schema=SECRET_NAME,
                ),
                Value(
                    "selfSignedCert",
                    "Instead of tlsSecret: a self-signed certificate the chart generates at "
                    "install, for `<fullname>.<namespace>.svc`, in the Secret `<fullname>-tls`; "
                    "the file made from `config` serves it, and the monitors check it.",
                    children=(
                        Value(
                            "enabled",
                            "Generate it. Upgrades keep it (a lookup of the Secret); `helm "
                            "template` and `--dry-run` cannot look it up and make a new one.",
                            False,
                        ),
                        Value(
                            "validityDays",
                            "Days it is valid; an upgrade after that keeps the expired one: "
                            "delete the Secret first.",
                            365,
                            schema={"type": "integer", "minimum": 1, "maximum": 36500},
                        ),
                    ),
                ),
                Value(
                    "tls",
                    "The file serves HTTPS: probes and monitors use HTTPS.",
                    True,
                ),
                Value(
                    "basicAuth",
                    "The file asks for a password: probes send probeAuthorization, or without it "
                    "only open the TCP port.",
                    False,
                ),
                Value(
                    "clientCertificates",
                    "The file requires client certificates, which probes lack: they only open "
                    "the TCP port.",
                    False,
                ),
                Value(
                    "probeAuthorization",
                    "The probes' Authorization header, `Basic <base64 of user:password>`; "
                    "readable by anyone who can read the DaemonSet.",
                    "",
                    schema=TEXT,
                ),
            ),
        ),
        Value(
            "service",
            "A headless Service over the pods: Prometheus scrapes each pod, never a balanced "
            "address.",
            children=(
                Value("enabled", "Create it (the ServiceMonitor needs it).", True),
                Value(
                    "type",
                    "`NodePort` or `LoadBalancer` for a scraper outside the cluster; the "
                    "ServiceMonitor still scrapes each pod.",
                    "ClusterIP",
                    schema={"enum": ["ClusterIP", "NodePort", "LoadBalancer"]},
                ),
                Value(
                    "clusterIP",
                    "`None` (headless) or an address of the cluster's range; empty: headless "
                    "for a ClusterIP Service, one allocated otherwise.",
                    "",
                    schema=_matching(CLUSTER_IP, empty=True),
                ),
                Value(
                    "internalTrafficPolicy",
                    "`Local`: in-cluster clients reach the pod of their own node only.",
                    "Cluster",
                    schema={"enum": ["Cluster", "Local"]},
                ),
                Value("annotations", "Annotations on it.", {}, schema=ANNOTATIONS),
            ),
        ),
        Value(
            "serviceMonitor",
            "A prometheus-operator ServiceMonitor over the Service.",
            children=_monitor("ServiceMonitor", "service targets", config),
        ),
        Value(
            "podMonitor",
            "A PodMonitor instead of the ServiceMonitor: turn on one of the two.",
            children=_monitor("PodMonitor", "pod targets", config),
        ),
        Value(
            "networkPolicy",
            "A NetworkPolicy that admits connections to the exporter's port only from the "
            "scrapers: pods matching scraperPodSelector in namespaces matching "
            "scraperNamespaceSelector (the defaults: kube-prometheus-stack's Prometheus in "
            "`monitoring`). The pods' own node (probes) is always admitted.",
            children=(
                Value("enabled", "Create it (needs a network plugin that enforces it).", False),
                Value(
                    "scraperNamespaceSelector",
                    "The scrapers' namespaces, a LabelSelector; `matchLabels: null` (Helm "
                    "merges a map of yours into the default's): every namespace.",
                    {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                    schema=LABEL_SELECTOR,
                ),
                Value(
                    "scraperPodSelector",
                    "The scrapers' pods in them, a LabelSelector; `matchLabels: null`: every pod.",
                    {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
                    schema=LABEL_SELECTOR,
                ),
            ),
        ),
        Value(
            "prometheusRule",
            "The bundle's recording rules and alerts (alerts/), of the flavour "
            "compat.dcgmExporter picks.",
            children=(
                Value("enabled", "Create the PrometheusRule.", False),
                Value(
                    "additionalLabels",
                    "Labels Prometheus selects rules by.",
                    {"release": s.release_label},
                    schema=LABELS,
                ),
            ),
        ),
        Value(
            "dashboards",
            "The bundle's Grafana dashboards as ConfigMaps for Grafana's sidecar, of the "
            "flavour compat.dcgmExporter picks.",
            children=(
                Value("enabled", "Create them.", False),
                Value(
                    "namespace",
                    "Their namespace; empty: the release's. The sidecar reads its own unless "
                    "`searchNamespace: ALL`.",
                    "",
                    schema=_matching(DNS_LABEL, empty=True),
                ),
                Value(
                    "label",
                    "The label the sidecar looks for (`grafana.sidecar.dashboards.label`).",
                    deploy_manifests.DASHBOARD_LABEL[0],
                    schema=_matching(LABEL_KEY, max_length=KEY_LENGTH),
                ),
                Value(
                    "labelValue",
                    "Its value.",
                    deploy_manifests.DASHBOARD_LABEL[1],
                    schema=_matching(QUALIFIED_NAME, empty=True),
                ),
                Value(
                    "folderAnnotation",
                    "The sidecar's `folderAnnotation`; empty: no folder.",
                    deploy_manifests.FOLDER_ANNOTATION,
                    schema=_matching(LABEL_KEY, empty=True, max_length=KEY_LENGTH),
                ),
                Value("folder", "The Grafana folder.", d.grafana_folder, schema=TEXT),
                Value("annotations", "More annotations on them.", {}, schema=ANNOTATIONS),
            ),
        ),
    )


def _comment(text: str, indent: int, first: str = "") -> list[str]:
    pad = " " * indent
    lines = textwrap.wrap(
        first + " ".join(text.split()),
        width=WIDTH - indent - 2,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return [f"{pad}# {line}" for line in lines]


def _scalar(value: Any) -> str:
    if value == "":
        return '""'
    text = yaml.safe_dump(value, default_flow_style=True, width=1000)
    return text.removesuffix("\n...\n").rstrip("\n")


def _value_lines(value: Value, indent: int) -> list[str]:
    pad = " " * indent
    lines = _comment(value.note, indent) if value.note else []
    lines += _comment(value.doc, indent, "-- ")
    if value.children:
        lines.append(f"{pad}{value.key}:")
        for child in value.children:
            lines += _value_lines(child, indent + 2)
        return lines
    default = value.default
    if isinstance(default, dict | list) and default:
        block = yaml.safe_dump(default, default_flow_style=False, sort_keys=False, width=WIDTH)
        lines.append(f"{pad}{value.key}:")
        lines += [f"{pad}  {line}" for line in block.splitlines()]
    else:
        lines.append(f"{pad}{value.key}: {_scalar(default)}")
    return lines


def values_yaml(config: BundleConfig) -> str:
    lines = [HEADER.format(source=SOURCE, origin=ORIGIN).rstrip("\n")]
    lines += _comment(
        "Every value, its default and what it does; `# --` comments are what the README's and "
        "docs/helm.md's values tables show. values.schema.json holds their types.",
        0,
    )
    for value in values_spec(config):
        lines += ["", *_value_lines(value, 0)]
    return "\n".join(lines) + "\n"


def _schema(value: Value) -> dict[str, Any]:
    if value.children:
        found: dict[str, Any] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {child.key: _schema(child) for child in value.children},
        }
    elif value.schema is not None:
        found = dict(value.schema)
    else:
        kinds = {bool: "boolean", int: "integer", str: "string", list: "array", dict: "object"}
        found = {"type": kinds[type(value.default)]}
    return {"description": " ".join(value.doc.split()), **found}


def values_schema(config: BundleConfig) -> str:
    spec = values_spec(config)
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": HEADER.format(source=SOURCE, origin=ORIGIN).removeprefix("# ").strip(),
        "type": "object",
        "additionalProperties": False,
        "properties": {
            **{value.key: _schema(value) for value in spec},
            # What a parent chart passes to every subchart.
            "global": {"type": "object"},
        },
    }
    return json.dumps(schema, indent=2) + "\n"


# ---- Chart.yaml, the generated template, the flavours' files ----


def chart_yaml() -> str:
    return dump(
        {
            "apiVersion": "v2",
            "name": CHART,
            "description": "NVIDIA GPU exporter for Kubernetes with dcgm-exporter-compatible "
            "metrics and pod attribution, with its alerts and Grafana dashboards.",
            "type": "application",
            "version": __version__,
            "appVersion": __version__,
            "keywords": ["nvidia", "gpu", "dcgm-exporter", "prometheus", "monitoring"],
        },
        SOURCE,
    )


def _define(name: str, body: Any) -> str:
    text = body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False, width=WIDTH)
    return f'{{{{- define "{CHART}.bundle.{name}" -}}}}\n{text.rstrip()}\n{{{{- end }}}}\n'


def _patch_value(patch: list[dict[str, Any]], path_end: str) -> Any:
    [value] = [op["value"] for op in patch if op["path"].endswith(path_end)]
    return value


def generated_tpl(config: BundleConfig, versions: list[str]) -> str:
    container = deploy_manifests._container(config)
    pod = deploy_manifests.daemon_set(config)["spec"]["template"]["spec"]
    [role, _] = deploy_manifests.enrichment_rbac(config)
    dra = [r for r in role["rules"] if "resource.k8s.io" in r["apiGroups"]]
    accounting = deploy_manifests.process_accounting_patch()
    [enrichment_env] = [
        op["value"] for op in deploy_manifests.enrichment_patch() if op["path"].endswith("env/-")
    ]
    header = (
        HEADER.format(source=SOURCE, origin="kube_gpu_exporter/bundle/config.py")
        .removeprefix("# ")
        .strip()
    )
    parts = [
        f"{{{{/* {header} */}}}}\n",
        _define("portName", config.scrape.port_name),
        # What the exporter runs as without --compat.dcgm-exporter, and the flavours this chart
        # carries rules and dashboards for.
        _define("defaultDcgmVersion", DEFAULT_VERSION.value),
        _define("flavours", ", ".join(versions)),
        # Each profile's flavour among those carried: a profile that serves the same scrape as a
        # carried one (4.8.4 as 4.8.3) takes its rules and dashboards.
        _define(
            "flavourOf", {v.value: fitting_flavour(v.value, versions) or "" for v in DcgmVersion}
        ),
        _define("env", container["env"]),
        _define("volumeMounts", container["volumeMounts"]),
        _define("volumes", pod["volumes"]),
        # The volume whose host path follows `kubeletPath`, and its directory under it.
        _define("podResourcesVolume", _pod_resources_volume(pod)["name"]),
        _define("podResourcesDir", POD_RESOURCES_DIR),
        # Where the pod finds the collectors CSV, and its name there.
        _define("collectorsDir", COLLECTORS_DIR),
        _define("collectorsFileName", COLLECTORS_FILE),
        _define("enrichmentEnv", [enrichment_env]),
        _define("enrichmentRules", [r for r in role["rules"] if r not in dra]),
        _define("resourceSliceRules", dra),
        _define("processAccountingVolumes", [_patch_value(accounting, "/volumes/-")]),
        _define("processAccountingMounts", [_patch_value(accounting, "/volumeMounts/-")]),
        _define("processAccountingArgs", [_patch_value(accounting, "/args/-")]),
        _define("relabelings", _operator_relabelings(config)),
    ]
    return "\n".join(parts)


def chart_files(
    config: BundleConfig,
    rules: Mapping[str, dict[str, Any]],
    dashboards: Mapping[str, Mapping[str, str]],
) -> dict[str, str]:
    """The chart's generated files, repository-relative. `rules`: each flavour's PrometheusRule
    (kube_gpu_exporter/bundle/alerts/rules_file.py); `dashboards`: each flavour's dashboard files
    (kube_gpu_exporter/bundle/dashboards/render.py), both keyed by the `--compat.dcgm-exporter`
    value the flavour is made for."""
    versions = list(rules)
    files = {
        "Chart.yaml": chart_yaml(),
        "values.yaml": values_yaml(config),
        "values.schema.json": values_schema(config),
        "templates/_generated.tpl": generated_tpl(config, versions),
    }
    for version, rule in rules.items():
        files[f"files/prometheus-rules/{flavour_dir(version)}.yaml"] = dump(
            rule["spec"], "kube_gpu_exporter/bundle/alerts/rules_file.py"
        )
    for version, made in dashboards.items():
        for path, content in sorted(made.items()):
            if path.startswith("dashboards/provisioned/"):
                name = path.rsplit("/", 1)[1]
                files[f"files/dashboards/{flavour_dir(version)}/{name}"] = content
    return {f"{CHART_DIR}/{path}": content for path, content in files.items()}


def is_generated(path: str) -> bool:
    """Whether a repository-relative path inside the chart is one `make bundle` writes."""
    if not path.startswith(CHART_DIR + "/"):
        return False
    inside = path.removeprefix(CHART_DIR + "/")
    return inside in GENERATED_TOP or inside.startswith(tuple(d + "/" for d in GENERATED_DIRS))


def hand_written(root: Path) -> dict[str, str]:
    """The chart's hand-written files under `root` (templates, NOTES.txt, ci/, .helmignore),
    repository-relative; empty where `root` has no chart (an installed wheel)."""
    chart = root / CHART_DIR
    if not chart.is_dir():
        return {}
    files = {}
    for path in sorted(chart.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not is_generated(relative) and "__pycache__" not in relative:
            files[relative] = path.read_text()
    return files


# ---- the values tables of the README and docs/helm.md ----


@dataclass(frozen=True, slots=True)
class Row:
    path: str
    description: str
    default: Any
    group: bool


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.\-/]+):(?: +(?P<rest>.*))?$")


def value_rows(text: str) -> list[Row]:
    """Every key of a values.yaml that a `# --` comment describes, in order: its dotted path,
    the description (the `# --` line and the comment lines after it, up to the key), its
    default, and whether it is a group of described keys."""
    loaded = yaml.safe_load(text)
    found: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    comment: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            comment.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if match is None:
            comment = []
            continue
        indent = len(match.group("indent"))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match.group("key")))
        starts = [i for i, c in enumerate(comment) if c.startswith("-- ")]
        if starts:
            words = [comment[starts[-1]].removeprefix("-- "), *comment[starts[-1] + 1 :]]
            found.append((".".join(k for _, k in stack), " ".join(words)))
        comment = []
    paths = [path for path, _ in found]
    rows = []
    for path, description in found:
        value: Any = loaded
        for part in path.split("."):
            value = value[part]
        group = any(p.startswith(path + ".") for p in paths)
        rows.append(Row(path, description, value, group))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _default(value: Any) -> str:
    return "`" + _cell(json.dumps(value, separators=(",", ":"), ensure_ascii=False)) + "`"


# The README's table stays readable: a longer default (a probe, a security context) is left to
# docs/helm.md's.
SHORT_DEFAULT = 48
# Kubernetes and Helm settings the chart passes through as they are, empty or off by default: the
# README's table names them in one row, and docs/helm.md's describes each. The README stays short
# (tests/unit/test_readme_figures.py) as the chart gains dcgm-exporter's pod-spec values.
README_IN_ONE_ROW = (
    "imagePullSecrets",
    "nameOverride",
    "fullnameOverride",
    "namespaceOverride",
    "affinity",
    "hostNetwork",
    "daemonSetAnnotations",
    "podAnnotations",
    "podLabels",
    "initContainers",
    "extraVolumes",
    "extraVolumeMounts",
)


def values_table(text: str, *, top_level: bool) -> str:
    """A Markdown table of a values.yaml's described keys: every one (docs/helm.md), or the
    top-level ones (the README), where a group shows whether it is on by default, a long
    default is left to the full table, and the pass-through settings share one row."""
    rows = value_rows(text)
    lines = ["| Value | Default | What it does |", "|---|---|---|"]
    if top_level:
        known = {row.path for row in rows}
        if missing := [path for path in README_IN_ONE_ROW if path not in known]:
            raise ValueError(f"README_IN_ONE_ROW names no top-level value: {missing}")
    for row in rows:
        if top_level and ("." in row.path or row.path in README_IN_ONE_ROW):
            continue
        if row.group:
            enabled = row.default.get("enabled") if isinstance(row.default, dict) else None
            default = "" if enabled is None else f"`enabled: {json.dumps(enabled)}`"
        else:
            default = _default(row.default)
            if top_level and len(default) > SHORT_DEFAULT:
                default = "see docs/helm.md"
        lines.append(f"| `{row.path}` | {default} | {_cell(row.description)} |")
    if top_level:
        names = ", ".join(f"`{path}`" for path in README_IN_ONE_ROW)
        lines.append(
            f"| {names} | empty, off | Passed to the pod and the objects as Kubernetes and Helm "
            "take them (docs/helm.md has each). |"
        )
    return "\n".join(lines) + "\n"


# Where the tables go, between these markers, and which rows each shows.
TABLES = {"README.md": True, "docs/helm.md": False}
BEGIN = (
    "<!-- values table: generated by `make bundle` from "
    f"{VALUES}'s `# --` comments; do not edit -->\n"
)
END = "<!-- end of values table -->\n"


def with_table(document: str, values_text: str, *, top_level: bool) -> str | None:
    """`document` with the table between its markers made from `values_text`; None without
    the markers."""
    start, end = document.find(BEGIN), document.find(END)
    if start < 0 or end < start:
        return None
    table = values_table(values_text, top_level=top_level)
    return document[: start + len(BEGIN)] + table + document[end:]


def stale_tables(root: Path, values_text: str) -> list[str]:
    """The pages under `root` whose values table is missing or differs from `values_text`'s."""
    stale = []
    for page, top_level in TABLES.items():
        path = root / page
        text = path.read_text() if path.is_file() else ""
        if with_table(text, values_text, top_level=top_level) != text:
            stale.append(page)
    return stale


def write_tables(root: Path, values_text: str) -> None:
    for page, top_level in TABLES.items():
        path = root / page
        if not path.is_file():
            continue
        made = with_table(path.read_text(), values_text, top_level=top_level)
        if made is not None:
            path.write_text(made)


# ---- make chart ----


def lint_problems(chart: Path, values: dict[str, Any] | None = None) -> list[str]:
    """`helm lint --strict` with Helm's own engine, with `values` over the chart's: every
    warning and error, one line each (an info, such as "icon is recommended", is none)."""
    import helm_python

    report = helm_python.lint(chart, values, strict=True)
    problems = [
        f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2
    ] + list(report.get("errors") or [])
    return problems


def package(chart: Path, out: Path) -> Path:
    """The chart as `out/<name>-<version>.tgz`, as `helm package` writes it (Helm's own code)."""
    import helm_python

    out.mkdir(parents=True, exist_ok=True)
    return Path(helm_python.package(chart, destination=out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kube_gpu_exporter.bundle.helm_chart", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    pack = sub.add_parser("package", help="lint --strict, then package the chart")
    pack.add_argument("--out", type=Path, default=Path("dist"), help="folder for the .tgz")
    pack.add_argument("--chart", type=Path, default=ROOT / CHART_DIR)
    args = parser.parse_args(argv)
    try:
        import helm_python  # noqa: F401
    except ImportError:
        print(
            "chart: helm-python-sdk is missing: `pip install -e '.[test]'` (make chart does)",
            file=sys.stderr,
        )
        return 2
    problems = lint_problems(args.chart)
    for problem in problems:
        print(f"chart: lint: {problem}", file=sys.stderr)
    if problems:
        return 1
    print(f"chart: {package(args.chart, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

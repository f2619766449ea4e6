"""Helm values that cannot inject (resilience round 4, issue 42).

Every value the chart's templates splice is quoted or written by toYaml, so that whatever a value
holds it adds no key to any object and no argument to the exporter; values.schema.json refuses,
with Helm's message naming the value, what Kubernetes or a registry would refuse later; extraArgs
takes the exporter's own flags only, read by kube_gpu_exporter/bundle/helm_chart.py off the parser
that kube_gpu_exporter/exporter/flags/table.py makes.

Each attack is rendered twice, with Helm's own engine: with the chart's schema, as `helm install`
checks it, and with a copy of the chart that has none, as `helm install --skip-schema-validation`
renders it, so that the quoting is proven on its own and not only behind the schema.
"""

from __future__ import annotations

import argparse
import base64
import copy
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from functools import cache, lru_cache
from typing import Any

import helm_python
import pytest
import yaml

from kube_gpu_exporter.bundle import helm_chart
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.exporter.flags.model import env_name
from kube_gpu_exporter.exporter.flags.parser import UsageError, build_parser
from kube_gpu_exporter.exporter.flags.settings import parse_config
from tests.support import kubernetes_schemas
from tests.unit.test_helm_chart import (
    CHART,
    CRD_KINDS,
    NAMESPACE,
    RELEASE,
    ROOT,
    VERSIONS,
    chart,
    container,
    objects,
    one,
    pod_spec,
    render,
)

NODE = {"NODE_NAME": "gpu-node-1"}
LISTEN = f"--web.listen-address=:{DEFAULT.scrape.port}"


@pytest.fixture(scope="module")
def unchecked(tmp_path_factory: pytest.TempPathFactory) -> helm_python.Chart:
    """The chart without values.schema.json: what `--skip-schema-validation` renders."""
    copied = tmp_path_factory.mktemp("unchecked") / helm_chart.CHART
    shutil.copytree(CHART, copied)
    (copied / "values.schema.json").unlink()
    return helm_python.Chart.load(copied)


def rendered(of: helm_python.Chart, values: dict[str, Any]) -> dict[str, str]:
    return of.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)


def refusal(values: dict[str, Any]) -> str:
    """Helm's message refusing `values`; fails the test where the schema takes them."""
    with pytest.raises(helm_python.HelmValuesError) as refused:
        render(values)
    message = str(refused.value)
    assert "values don't meet the specifications of the schema(s)" in message
    return message


# ---- the findings, one by one ----

# A newline, then keys at the pod spec's indentation: what the review rendered into the DaemonSet.
POD_SPEC_ATTACK = "x\n      hostPID: true\n      hostNetwork: true"
NAMES = [
    ({"priorityClassName": POD_SPEC_ATTACK}, "/priorityClassName"),
    ({"runtimeClassName": POD_SPEC_ATTACK}, "/runtimeClassName"),
    (
        {"webConfig": {"enabled": True, "existingSecret": "mine", "tlsSecret": POD_SPEC_ATTACK}},
        "/webConfig/tlsSecret",
    ),
]
NAME_IDS = ["priorityClassName", "runtimeClassName", "tlsSecret"]


def with_value(values: dict[str, Any], pointer: str, value: Any) -> dict[str, Any]:
    """`values` with the value at a JSON pointer of plain keys replaced."""
    changed = copy.deepcopy(values)
    *parents, last = pointer.strip("/").split("/")
    node = changed
    for key in parents:
        node = node[key]
    node[last] = value
    return changed


@pytest.mark.parametrize(("values", "pointer"), NAMES, ids=NAME_IDS)
def test_a_name_with_a_newline_is_refused_by_the_schema(values, pointer):
    message = refusal(values)
    assert f"at '{pointer}': 'x\\n      hostPID: true\\n      hostNetwork: true'" in message


@pytest.mark.parametrize(("values", "pointer"), NAMES, ids=NAME_IDS)
def test_without_the_schema_a_name_adds_no_key_to_the_pod_spec(unchecked, values, pointer):
    spec = pod_spec(objects(rendered(unchecked, values)))
    # The same values with a name Kubernetes takes: the keys the chart writes for them.
    written = pod_spec(objects(rendered(unchecked, with_value(values, pointer, "nvidia"))))
    assert set(spec) == set(written)
    assert "hostPID" not in spec and "hostNetwork" not in spec
    # The container, its arguments included, is the plain render's.
    assert spec["containers"] == written["containers"]
    if pointer == "/webConfig/tlsSecret":
        [volume] = [v for v in spec["volumes"] if v["name"] == "web-config"]
        assert volume["projected"]["sources"][1] == {"secret": {"name": POD_SPEC_ATTACK}}
    else:
        assert spec[pointer.strip("/")] == POD_SPEC_ATTACK


# A newline, then another item at the argument list's indentation.
ARGUMENT_ATTACK = "^team$\n        - --simulate"


def test_a_newline_in_the_pod_label_allow_list_is_refused_by_the_schema():
    values = {"kubernetesEnrichment": {"enabled": True, "podLabelAllowlist": ARGUMENT_ATTACK}}
    message = refusal(values)
    assert "at '/kubernetesEnrichment/podLabelAllowlist': '^team$\\n        - --simulate'" in (
        message
    )


def test_without_the_schema_the_pod_label_allow_list_is_one_argument(unchecked):
    values = {"kubernetesEnrichment": {"enabled": True, "podLabelAllowlist": ARGUMENT_ATTACK}}
    [found] = pod_spec(objects(rendered(unchecked, values)))["containers"]
    assert found["args"] == [LISTEN, f"--kubernetes.pod-label-allowlist={ARGUMENT_ATTACK}"]


def test_a_newline_in_an_extra_argument_is_refused_and_stays_one_argument_without_the_schema(
    unchecked,
):
    attack = "--log.format=json\n- --simulate"
    assert "at '/extraArgs/0'" in refusal({"extraArgs": [attack]})
    [found] = pod_spec(objects(rendered(unchecked, {"extraArgs": [attack]})))["containers"]
    assert found["args"] == [LISTEN, attack]


# Values Helm rendered and Kubernetes or the registry refused, one object or one pull at a time;
# and beside the review's three, a case for the rule each value follows.
REFUSED = [
    ({"image": {"tag": "1.0 evil"}}, "/image/tag", "1.0 evil"),
    ({"fullnameOverride": "Bad_Name!"}, "/fullnameOverride", "Bad_Name!"),
    ({"nameOverride": "UPPER.case"}, "/nameOverride", "UPPER.case"),
    # The Service takes the full name, and a Service's name must begin with a letter.
    ({"fullnameOverride": "9gpu"}, "/fullnameOverride", "9gpu"),
    ({"fullnameOverride": "g" * 64}, "/fullnameOverride", "g" * 64),
    # The objects' names end in it: a label, no dots.
    ({"nameOverride": "gpu.exporter"}, "/nameOverride", "gpu.exporter"),
    ({"image": {"tag": "v" * 129}}, "/image/tag", "v" * 129),
    ({"image": {"tag": ".hidden"}}, "/image/tag", ".hidden"),
    (
        {"image": {"repository": "registry.example/GPU-exporter"}},
        "/image/repository",
        "registry.example/GPU-exporter",
    ),
    # The tag has its own value: a repository holding one would make `repo:v1:<tag>`.
    (
        {"image": {"repository": "kube-gpu-exporter:v1"}},
        "/image/repository",
        "kube-gpu-exporter:v1",
    ),
    ({"serviceAccount": {"name": "Exporter"}}, "/serviceAccount/name", "Exporter"),
    ({"priorityClassName": "-critical"}, "/priorityClassName", "-critical"),
    ({"runtimeClassName": "nvidia_runtime"}, "/runtimeClassName", "nvidia_runtime"),
    ({"webConfig": {"existingSecret": "web config"}}, "/webConfig/existingSecret", "web config"),
    ({"imagePullSecrets": [{"name": "Pull"}]}, "/imagePullSecrets/0/name", "Pull"),
    # A LocalObjectReference: Kubernetes refuses anything but the name.
    (
        {"imagePullSecrets": [{"name": "pull", "namespace": "other"}]},
        "/imagePullSecrets/0",
        "namespace",
    ),
    # A namespace is a label: no dots, where a Secret's name may have them.
    ({"dashboards": {"namespace": "grafana.monitoring"}}, "/dashboards/namespace", "grafana."),
    ({"dashboards": {"label": "grafana dashboard"}}, "/dashboards/label", "grafana dashboard"),
    ({"dashboards": {"labelValue": "-1"}}, "/dashboards/labelValue", "-1"),
    ({"podLabels": {"team": "gpu platform"}}, "/podLabels/team", "gpu platform"),
    ({"podLabels": {"bad key!": "x"}}, "/podLabels", "bad key!"),
    ({"nodeSelector": {"gpu": "a" * 64}}, "/nodeSelector/gpu", "a" * 64),
    ({"podAnnotations": {"note": "two\nlines"}}, "/podAnnotations/note", "two\\nlines"),
    (
        {"serviceMonitor": {"additionalLabels": {"release": "kube prometheus"}}},
        "/serviceMonitor/additionalLabels/release",
        "kube prometheus",
    ),
    ({"resources": {"limits": {"memory": "256 MiB"}}}, "/resources/limits/memory", "256 MiB"),
    (
        {"webConfig": {"probeAuthorization": "Basic eDp5\r\nX-Injected: 1"}},
        "/webConfig/probeAuthorization",
        "Basic eDp5\\r\\nX-Injected: 1",
    ),
    (
        {"serviceMonitor": {"basicAuth": {"username": {"name": "Scrape", "key": "user"}}}},
        "/serviceMonitor/basicAuth/username/name",
        "Scrape",
    ),
]


@pytest.mark.parametrize(("values", "pointer", "shown"), REFUSED, ids=lambda v: str(v)[:40])
def test_the_schema_refuses_what_kubernetes_would_naming_the_value(values, pointer, shown):
    message = refusal(values)
    assert f"at '{pointer}'" in message and shown in message


# Their neighbours Kubernetes takes: each rule is no narrower than Kubernetes'.
ACCEPTED: list[dict[str, Any]] = [
    {
        "image": {"repository": "registry.example:5000/gpu/kube-gpu-exporter", "tag": "v1.2_rc-1"},
        "fullnameOverride": "gpu-exporter",
        "nameOverride": "9gpu",
        "serviceAccount": {"name": "gpu.exporter"},
        "priorityClassName": "gpu.critical",
        "runtimeClassName": "nvidia",
        "imagePullSecrets": [{"name": "registry.pull-1"}],
        "podLabels": {"app.kubernetes.io/part-of": "gpu_monitoring.v1", "empty": ""},
        "podAnnotations": {"example.com/note": "free text: 'quotes', \"more\", {braces} # ok"},
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "resources": {"requests": {"cpu": "250m", "memory": "1e8"}, "limits": {"cpu": 2}},
    },
    {
        "image": {"repository": "localhost/kube_gpu-exporter", "tag": "t" * 128},
        "fullnameOverride": "g" * 63,
        "webConfig": {"enabled": True, "existingSecret": "web.config-1", "tlsSecret": "tls"},
        "dashboards": {
            "enabled": True,
            "namespace": "grafana",
            "label": "example.com/dashboard",
            "labelValue": "",
            "folderAnnotation": "",
            "folder": "GPU fleet: H200 ≥ 8",
        },
        "podMonitor": {"enabled": True},
        "service": {"enabled": False},
    },
]


@pytest.mark.parametrize("values", ACCEPTED, ids=["names", "long-names"])
def test_values_kubernetes_takes_render_objects_its_schemas_accept(values):
    docs = objects(render(values))
    for doc in docs:
        if doc["kind"] not in CRD_KINDS:
            kubernetes_schemas.validate(doc, VERSIONS[0], strict=True)
    spec = pod_spec(docs)
    assert spec["containers"][0]["image"] == "{repository}:{tag}".format(**values["image"])
    assert one(docs, "DaemonSet")["metadata"]["name"] == values["fullnameOverride"]


# ---- extraArgs: the exporter's flags, as its parser declares them ----


@pytest.mark.parametrize(
    "arg",
    [
        "--collector.intervall=1s",
        # A flag that takes a value, without one, or apart from it.
        "--collector.interval",
        "--collector.interval 1s",
        # A switch given a value.
        "--no-collector.pcie=true",
        "--collector.pcie=false",
        # A value argparse's choices do not hold.
        "--log.format=jsonn",
        "--log.level=INFO",
        # Short aliases and no dashes.
        "-x5",
        "collector.interval=1s",
        # Left out: see test_every_flag_left_out_is_refused_in_every_form.
        "--simulate",
        "--help",
        "--web.listen-address=:9400",
        "--no-collector.processes",
        "hash-password",
    ],
)
def test_extra_args_refuses_what_the_exporter_would_stop_on(arg):
    message = refusal({"extraArgs": ["--log.format=json", arg]})
    assert "at '/extraArgs/1'" in message and f"'{arg}'" in message
    assert "/extraArgs/0" not in message


# Real flags of each form: a duration, a switch and its --no- form, a choice, a repeatable
# NAME=SECONDS, an empty value (no extra resources), a free number.
TAKEN = [
    "--collector.interval=1s",
    "--no-collector.pcie",
    "--collector.gpm",
    "--log.format=json",
    "--log.level=debug",
    "--host-label=Hostname",
    "--attribution.shared-devices=per-pod",
    "--collector.field-interval=DCGM_FI_DEV_GPU_TEMP=30s",
    "--podresources.extra-resources=",
    "--web.max-connections=256",
    "--no-kubernetes.enable-pod-uid",
]


def test_extra_args_takes_the_exporters_flags_and_the_exporter_parses_them():
    found = container({"extraArgs": TAKEN})
    assert found["args"] == [LISTEN, *TAKEN]
    config = parse_config(found["args"], environ=NODE)
    assert config.collection.interval_seconds == 1.0 and config.collection.pcie_enabled is False
    assert config.log_format == "json" and config.labels.shared_device_series == "per-pod"


def accepts(values: dict[str, Any]) -> bool:
    try:
        chart().validate_schema(values)
    except helm_python.HelmValuesError:
        return False
    return True


def refused_items(args: list[str]) -> set[int]:
    """The positions of `args`, given as extraArgs at once, that the schema refuses: Helm names
    every item it refuses in one message, and a call into its engine costs milliseconds, so one
    call judges them all (the walk below has some 300 to judge)."""
    try:
        chart().validate_schema({"extraArgs": args})
    except helm_python.HelmValuesError as refused:
        message = str(refused)
        found = {i for i in range(len(args)) if f"at '/extraArgs/{i}'" in message}
        assert found, message  # refused, so for some item
        return found
    return set()


def test_every_flag_of_the_parser_is_taken_in_its_own_form_only():
    """Walks the exporter's parser itself: every long option the chart does not leave out is
    taken as argparse takes it (a switch alone, `--flag=value`, `--flag=<choice>`) and in no
    other form, and a misspelling of it is refused."""
    parser = build_parser()
    every = {o for action in parser._actions for o in action.option_strings if o[:2] == "--"}
    good: list[str] = []
    bad: list[str] = []
    checked = 0
    for action in parser._actions:
        longs = [option for option in action.option_strings if option.startswith("--")]
        if not longs or longs[0] in helm_chart.NOT_IN_EXTRA_ARGS:
            continue
        for flag in longs:
            if action.nargs == 0:
                good += [flag]
                bad += [f"{flag}=1", f"{flag}="]
            elif action.choices is not None:
                good += [f"{flag}={choice}" for choice in action.choices]
                bad += [flag, f"{flag}={next(iter(action.choices))}x", f"{flag}="]
            else:
                good += [f"{flag}=1", f"{flag}="]
                bad += [flag, f"{flag}=1\n", f"{flag}=\x00"]
            for typo in (flag + "x", flag[:-1], flag.replace(".", "-", 1)):
                if typo not in every:
                    bad += [typo, f"{typo}=1"]
            checked += 1
    assert checked >= 30
    assert [good[i] for i in sorted(refused_items(good))] == []
    refused = refused_items(bad)
    assert [arg for i, arg in enumerate(bad) if i not in refused] == []
    # The batch judges each item as alone: a sample, one at a time, agrees.
    for arg in good[::25]:
        assert accepts({"extraArgs": [arg]}), arg
    for arg in bad[::25]:
        assert not accepts({"extraArgs": [arg]}), arg


@pytest.mark.parametrize("flag", sorted(helm_chart.NOT_IN_EXTRA_ARGS))
def test_every_flag_left_out_is_refused_in_every_form(flag):
    parser = build_parser()
    [action] = [a for a in parser._actions if flag in a.option_strings]
    for option in action.option_strings:
        for arg in (option, f"{option}=1", f"{option}=json"):
            assert not accepts({"extraArgs": [arg]}), arg
    # Where an operator looks for why: the page says it.
    assert f"`{flag}`" in (ROOT / "docs" / "helm.md").read_text()


def test_the_allowed_flags_come_from_the_parser_not_a_list():
    """A flag added to the exporter reaches the schema at the next `make bundle`; one that needs
    several values stops the generator; an exclusion naming no flag does too."""
    parser = build_parser()
    parser.add_argument("--collector.new-interval", dest="new_interval")
    parser.add_argument("--collector.new", dest="new", action=argparse.BooleanOptionalAction)
    parser.add_argument("--collector.new-mode", dest="new_mode", choices=["a", "b"])
    found = helm_chart.extra_args(parser)
    assert "--collector.new-interval" in found.free
    assert {"--collector.new", "--no-collector.new"} <= set(found.switches)
    assert ("--collector.new-mode", ("a", "b")) in found.choices
    assert helm_chart.extra_args() != found
    assert helm_chart.extra_args() == helm_chart.extra_args(build_parser())
    parser.add_argument("--collector.many", dest="many", nargs="+")
    with pytest.raises(ValueError, match=r"--collector\.many takes nargs='\+'"):
        helm_chart.extra_args(parser)
    with pytest.raises(ValueError, match="--gone"):
        helm_chart.extra_args(build_parser(), {**helm_chart.NOT_IN_EXTRA_ARGS, "--gone": "why"})
    # The committed schema is the generator's.
    committed = chart().schema
    assert committed is not None
    made = helm_chart.extra_args_schema(helm_chart.extra_args())
    assert committed["properties"]["extraArgs"]["items"] == made["items"]


# The switches the exporter takes only with --kubernetes
# (kube_gpu_exporter/exporter/flags/settings.py, parse_config).
NEEDS_ENRICHMENT = ("--kubernetes.enable-pod-uid", "--kubernetes.enable-pod-labels")


@pytest.mark.parametrize("flag", NEEDS_ENRICHMENT)
def test_a_switch_that_needs_enrichment_is_refused_without_it(flag):
    with pytest.raises(UsageError, match="needs --kubernetes"):
        parse_config([LISTEN, flag], environ=NODE)
    with pytest.raises(helm_python.HelmRenderError) as refused:
        render({"extraArgs": [flag]})
    assert f"extraArgs: {flag} without kubernetesEnrichment.enabled" in str(refused.value)
    found = container({"extraArgs": [flag], "kubernetesEnrichment": {"enabled": True}})
    assert found["args"][-1] == flag
    # Its --no- form after it undoes it, as in argparse.
    undone = [flag, f"--no-{flag[2:]}"]
    assert container({"extraArgs": undone})["args"] == [LISTEN, *undone]


def test_every_other_switch_starts_the_exporter_the_default_chart_makes():
    """No switch extraArgs takes leaves the default chart's pods exiting with status 2, but
    those the template refuses without enrichment."""
    found = helm_chart.extra_args()
    for switch in found.switches:
        if switch in NEEDS_ENRICHMENT:
            continue
        args = [LISTEN, switch]
        assert container({"extraArgs": [switch]})["args"] == args
        parse_config(args, environ=NODE)


@pytest.mark.parametrize(
    ("name", "taken"),
    [
        ("KUBE_GPU_EXPORTER_LOG_LEVEL", True),
        ("KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL", True),
        ("HTTPS_PROXY", True),
        ("my.var-1", True),
        ("KUBE_GPU_EXPORTER_COLLECTOR_INTERVALL", False),
        # What extraArgs leaves out, extraEnv does too.
        ("KUBE_GPU_EXPORTER_SIMULATE", False),
        ("KUBE_GPU_EXPORTER_WEB_LISTEN_ADDRESS", False),
        ("KUBE_GPU_EXPORTER_KUBERNETES", False),
        # The exporter reads a switch's variable under its name alone, true or false.
        ("KUBE_GPU_EXPORTER_NO_COLLECTOR_PCIE", False),
        ("A=B", False),
        ("", False),
        ("A B", False),
        ("A\nB", False),
    ],
)
def test_extra_env_takes_the_variables_of_the_flags_extra_args_takes(name, taken):
    assert accepts({"extraEnv": [{"name": name, "value": "1"}]}) is taken
    if taken and name.startswith("KUBE_GPU_EXPORTER_"):
        flags = {env_name(flag): flag for flag in helm_chart.extra_args().flags()}
        assert name in flags


def test_extra_env_items_are_env_vars():
    assert accepts({"extraEnv": [{"name": "A", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]})
    assert not accepts({"extraEnv": [{"name": "A", "valuefrom": {}}]})
    assert not accepts({"extraEnv": [{"name": "A", "value": 1}]})


# ---- every string value: refused, or inert ----

# Each breaks out of an unquoted splice differently: newlines at the depth of a document, the pod
# spec and the argument list, and a new document; a flow mapping; YAML's indicators on one line.
# Each under 63 characters, so that names the chart cuts at 63 still hold it whole.
HOSTILE = (
    "x\nhostPID: true\n      hostNetwork: true\n---\nkind: Secret",
    "x\n        - --simulate\n  - --help\n'y': \"z\"",
    "{hostPID: true, hostNetwork: true}",
    "a: 'b' \"c\" [d] #e &f *g !h |i >j %k @l `m",
)
# Every option on, and every string value one the schema takes, so that each string below is one
# the templates use.
RELABELINGS = {
    "relabelings": [{"targetLabel": "cluster", "replacement": "east"}],
    "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "DCGM_.*", "action": "drop"}],
    "tlsConfig": {"insecureSkipVerify": True, "serverName": "exporter"},
    "basicAuth": {
        "username": {"name": "scrape", "key": "username"},
        "password": {"name": "scrape", "key": "password"},
    },
}
EVERYTHING: dict[str, Any] = {
    "image": {"repository": "registry.example/gpu/kube-gpu-exporter", "tag": "v1"},
    "imagePullSecrets": [{"name": "pull-secret"}],
    "nameOverride": "gpu",
    "fullnameOverride": "gpu-exporter",
    "namespaceOverride": "gpu-system",
    "serviceAccount": {"name": "gpu-exporter-sa", "annotations": {"example.com/role": "reader"}},
    "automountServiceAccountToken": False,
    "kubeletPath": "/var/snap/microk8s/common/var/lib/kubelet",
    "runtimeClassName": "nvidia",
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "arch", "operator": "In", "values": ["x"]}]}
                ]
            }
        }
    },
    "daemonSetAnnotations": {"example.com/rollout": "gpu"},
    "podAnnotations": {"example.com/team": "gpu"},
    "podLabels": {"tier": "monitoring"},
    "extraArgs": ["--log.format=json"],
    "extraEnv": [{"name": "KUBE_GPU_EXPORTER_LOG_LEVEL", "value": "debug"}],
    "initContainers": [{"name": "wait", "image": "registry.example/busybox:1", "args": ["true"]}],
    "extraVolumes": [{"name": "extra", "emptyDir": {"medium": "Memory"}}],
    "extraVolumeMounts": [{"name": "extra", "mountPath": "/extra", "readOnly": True}],
    "collectors": {"csv": "DCGM_FI_DEV_GPU_TEMP, gauge, Temperature (C).\n", "key": "gpu.csv"},
    "compat": {"dcgmExporter": "4.9", "driverVersionLabel": "none"},
    "kubernetesEnrichment": {"enabled": True, "podLabelAllowlist": "^team$"},
    "processAccounting": {"enabled": True},
    "webConfig": {
        "enabled": True,
        "selfSignedCert": {"enabled": True},
        "basicAuth": True,
        "probeAuthorization": "Basic eDp5",
        "config": {
            "tls_server_config": {"min_version": "TLS12"},
            "basic_auth_users": {"prometheus": "$2b$10$" + "x" * 53},
        },
    },
    "service": {
        "type": "NodePort",
        "clusterIP": "10.96.0.50",
        "internalTrafficPolicy": "Local",
        "annotations": {"example.com/owner": "gpu"},
    },
    "serviceMonitor": {"enabled": True, **RELABELINGS},
    "networkPolicy": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "dashboards": {"enabled": True, "namespace": "grafana", "annotations": {"example.com/a": "b"}},
}
# What EVERYTHING cannot hold beside what it has: the PodMonitor instead of the ServiceMonitor,
# a Secret of the admin's own instead of the one the chart makes, a TLS Secret instead of the
# generated certificate, a ConfigMap of collectors instead of the CSV, a digest instead of the tag.
OTHERWISE: dict[str, Any] = {
    **EVERYTHING,
    "image": {**EVERYTHING["image"], "digest": "sha256:" + "0" * 64},
    "serviceMonitor": {"enabled": False},
    "podMonitor": {"enabled": True, **RELABELINGS},
    "webConfig": {
        **EVERYTHING["webConfig"],
        "existingSecret": "my-web-config",
        "tlsSecret": "exporter-tls",
        "selfSignedCert": {"enabled": False},
    },
    "collectors": {"existingConfigMap": "gpu-collectors", "key": "gpu.csv"},
}
ON_OTHERWISE = {
    ("webConfig", "existingSecret"),
    ("webConfig", "tlsSecret"),
    ("collectors", "existingConfigMap"),
    ("image", "digest"),
}


def on_otherwise(path: tuple[str | int, ...]) -> bool:
    return path[0] == "podMonitor" or path in ON_OTHERWISE


def leaves(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path of every string in a values tree, list items included."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield from leaves(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from leaves(value, (*path, index))
    elif isinstance(node, str):
        yield path


def maps(node: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path of every mapping below the top of a values tree."""
    if isinstance(node, dict):
        if path:
            yield path
        for key, value in node.items():
            yield from maps(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from maps(value, (*path, index))


def merged(values: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = chart().merge_values(values)
    return found


def value_at(values: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        values = values[part]
    return values


def pointer(path: tuple[str | int, ...]) -> str:
    """RFC 6901, as Helm's messages write it."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def opened(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` with a Secret's data decoded and parsed: the web config file is YAML too."""
    if doc.get("kind") != "Secret":
        return doc
    data = {k: yaml.safe_load(base64.b64decode(v)) for k, v in doc.get("data", {}).items()}
    return {**doc, "data": data}


def shape(node: Any, rename: Mapping[str, str], path: tuple[Any, ...] = ()) -> Iterator[Any]:
    """Every path to a scalar (with its type) or an empty collection: what a value that adds a
    key, an item, a document, or turns a string into a mapping changes. `rename`: keys the value
    under test makes, named as the baseline names them."""
    if isinstance(node, dict):
        if not node:
            yield (*path, "{}")
        for key, value in node.items():
            yield from shape(value, rename, (*path, rename.get(key, key)))
    elif isinstance(node, list):
        if not node:
            yield (*path, "[]")
        for index, value in enumerate(node):
            yield from shape(value, rename, (*path, index))
    else:
        yield (*path, type(node).__name__)


# libyaml's parser where PyYAML has it: a render with the dashboards is 200 KB of YAML, and the
# walk below parses about a thousand.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@lru_cache(maxsize=512)
def _objects(text: str) -> tuple[dict[str, Any], ...]:
    """The objects of one template's output. Cached: a hostile value changes one or two
    templates of a render, and the others come out as in the baseline, so the property tests
    parse only what changed (they render some 1,400 times). Callers only read them."""
    return tuple(opened(doc) for doc in yaml.load_all(text, Loader=LOADER) if doc)


def parsed(made: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """Every object of a render, with the template that made it, a Secret's data opened."""
    return [
        (path, doc)
        for path, text in sorted(made.items())
        if not path.endswith("NOTES.txt")
        for doc in _objects(text)
    ]


Layout = list[tuple[str, frozenset[Any]]]


def layout(docs: list[tuple[str, dict[str, Any]]], rename: Mapping[str, str]) -> Layout:
    return [(path, frozenset(shape(doc, rename))) for path, doc in docs]


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)
    elif isinstance(node, str):
        yield node


def notes_of(made: dict[str, str]) -> str:
    [text] = [t for path, t in made.items() if path.endswith("NOTES.txt")]
    return text


# The only `fail` a string can reach without the schema: a profile the chart has no flavour of.
FAILS_WITHOUT_SCHEMA = {("compat", "dcgmExporter")}

STRING_CASES = [
    ("OTHERWISE" if on_otherwise(path) else "EVERYTHING", path)
    for baseline in (EVERYTHING, OTHERWISE)
    for path in leaves(merged(baseline))
    if (baseline is OTHERWISE) == on_otherwise(path)
]
KEY_CASES = [path for path in maps(merged(EVERYTHING))]


@pytest.fixture(scope="module")
def baselines() -> dict[str, dict[str, Any]]:
    return {"EVERYTHING": merged(EVERYTHING), "OTHERWISE": merged(OTHERWISE)}


@pytest.fixture(scope="module")
def plain(
    unchecked: helm_python.Chart, baselines: dict[str, dict[str, Any]]
) -> dict[tuple[bool, str], tuple[Layout, str]]:
    """Each baseline's layout and notes, with the schema (True) and without."""
    found = {}
    for checked, of in ((True, chart()), (False, unchecked)):
        for name, values in baselines.items():
            made = rendered(of, values)
            found[checked, name] = (layout(parsed(made), {}), notes_of(made))
    return found


def test_the_walk_reaches_every_string_value_of_values_yaml():
    """Every string of values.yaml's defaults is among the cases, and every described value that
    holds a string in the baselines; the baselines are objects Kubernetes takes."""
    reached = {path for _, path in STRING_CASES}
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(leaves(defaults)) <= reached
    spec_strings = {
        tuple(row.path.split("."))
        for row in helm_chart.value_rows((CHART / "values.yaml").read_text())
        if isinstance(value_at(merged(EVERYTHING), tuple(row.path.split("."))), str)
    }
    assert spec_strings <= reached and len(spec_strings) >= 20
    for baseline in (EVERYTHING, OTHERWISE):
        for doc in objects(render(baseline)):
            if doc["kind"] not in CRD_KINDS:
                kubernetes_schemas.validate(doc, VERSIONS[0], strict=True)


MADE = "<a key the value makes>"


def keys_of(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from keys_of(value)
    elif isinstance(node, list):
        for value in node:
            yield from keys_of(value)


class _Sweep:
    """Renders with the schema (True) and without, each made once."""

    def __init__(self, unchecked: helm_python.Chart, baselines: dict[str, dict[str, Any]]) -> None:
        self._charts = {True: chart(), False: unchecked}
        self._baselines = baselines
        self._cache: dict[tuple[Any, ...], Any] = {}

    def _once(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _render(self, checked: bool, values: dict[str, Any]) -> dict[str, str] | Exception:
        try:
            return rendered(self._charts[checked], values)
        except (helm_python.HelmValuesError, helm_python.HelmRenderError) as failed:
            return failed

    def _layout(self, checked: bool, values: dict[str, Any], rename: Mapping[str, str]) -> Any:
        """The render's layout; its refusal's message (with the schema) or None when there is
        no layout to compare: a failed render, or one that is not even YAML."""
        made = self._render(checked, values)
        if isinstance(made, helm_python.HelmValuesError) and checked:
            return str(made)
        if isinstance(made, Exception):
            return None
        try:
            return layout(parsed(made), rename), made
        except yaml.YAMLError:
            return None


class StringSweep(_Sweep):
    """Each hostile string at every string path of a baseline at once, and one path at a time
    only where that says something went wrong: a render costs 15-20 ms in Helm's engine, and
    one per path and string came to some 630 of them.

    Together the renders say what one render per path would: without the schema, a render with
    the string everywhere that keeps the baseline's layout keeps it for each path (a template
    cannot be made inert by a second hostile value); with the schema, Helm lists every value it
    refuses, so one refusal names each path it refuses, and only the paths it takes are rendered
    alone, for their notes. Which string reached which template is shown by one more render,
    a marker of its own at each path."""

    def __init__(
        self,
        unchecked: helm_python.Chart,
        baselines: dict[str, dict[str, Any]],
        plain: dict[tuple[bool, str], tuple[Layout, str]],
    ) -> None:
        super().__init__(unchecked, baselines)
        self._plain = plain

    def _paths(self, baseline: str) -> list[tuple[str | int, ...]]:
        return [p for b, p in STRING_CASES if b == baseline and p not in FAILS_WITHOUT_SCHEMA]

    def _everywhere(
        self, baseline: str, value: Any, paths: list[tuple[str | int, ...]] | None = None
    ) -> dict[str, Any]:
        values = copy.deepcopy(self._baselines[baseline])
        for path in self._paths(baseline) if paths is None else paths:
            value_at(values, path[:-1])[path[-1]] = value(path) if callable(value) else value
        return values

    def _made_keys(self, baseline: str, paths: list[tuple[str | int, ...]]) -> dict[str, str]:
        """The baseline's values at `paths` that its templates turn into keys
        (dashboards.label), named alike so that a hostile string standing there compares
        equal: the paths whose marker stands as a key in the marker render."""
        keys = self._marked(baseline)[1]
        return {
            value_at(self._baselines[baseline], path): MADE
            for path in paths
            if marker(path) in keys
        }

    def _inert(
        self, baseline: str, hostile: str, checked: bool, paths: list[tuple[str | int, ...]]
    ) -> bool | str:
        """Whether the string at each of `paths` at once renders the baseline's layout (and,
        with the schema, no line of its own in the notes); the refusal's message instead when
        the schema refuses."""
        values = self._everywhere(baseline, hostile, paths)
        found = self._layout(checked, values, {hostile: MADE})
        if found is None or isinstance(found, str):
            return found or False
        shape, made = found
        expected = layout(
            parsed(rendered(self._charts[checked], self._baselines[baseline])),
            self._made_keys(baseline, paths),
        )
        if shape != expected:
            return False
        return not checked or (
            notes_of(made).count("\n") == self._plain[checked, baseline][1].count("\n")
        )

    def settles(
        self, baseline: str, hostile: str, checked: bool, path: tuple[str | int, ...]
    ) -> bool:
        """Whether the renders with `hostile` at every path settle `path`: refused naming it,
        or taken and inert. With the schema, a refusal names the paths it refuses, and the
        paths it takes are rendered together once more, on their own."""

        def judge() -> tuple[bool | str, bool]:
            paths = self._paths(baseline)
            first = self._inert(baseline, hostile, checked, paths)
            if not isinstance(first, str):
                return first, False
            taken = [p for p in paths if f"at '{pointer(p)}'" not in first]
            return first, bool(taken) and self._inert(baseline, hostile, checked, taken) is True

        everywhere, taken_inert = self._once(("all", baseline, hostile, checked), judge)
        if everywhere is True:
            return True
        if isinstance(everywhere, str):
            return f"at '{pointer(path)}'" in everywhere or taken_inert
        return False

    def _marked(self, baseline: str) -> tuple[set[str], set[str]]:
        """The strings and the keys of the objects rendered with a marker of its own at each
        path."""

        def render() -> tuple[set[str], set[str]]:
            values = self._everywhere(baseline, lambda path: marker(path))
            docs = [d for _, d in parsed(rendered(self._charts[False], values))]
            return set(strings(docs)), set(keys_of(docs))

        found: tuple[set[str], set[str]] = self._once(("markers", baseline), render)
        return found

    def markers(self, baseline: str) -> set[str]:
        return self._marked(baseline)[0]


def marker(path: tuple[str | int, ...]) -> str:
    """A plain word of its own for each string path: it reads the same in any template."""
    return f"marker{[p for _, p in STRING_CASES].index(path)}x"


@pytest.fixture(scope="module")
def sweep(
    unchecked: helm_python.Chart,
    baselines: dict[str, dict[str, Any]],
    plain: dict[tuple[bool, str], tuple[Layout, str]],
) -> StringSweep:
    return StringSweep(unchecked, baselines, plain)


@pytest.mark.parametrize(("baseline", "path"), STRING_CASES, ids=lambda v: str(v))
def test_a_hostile_string_anywhere_is_refused_or_inert(
    unchecked, baselines, plain, sweep, baseline, path
):
    base = baselines[baseline]
    was = value_at(base, path)
    if path not in FAILS_WITHOUT_SCHEMA:
        # The value reaches the templates: otherwise nothing below would mean anything.
        shown = sweep.markers(baseline)
        assert any(marker(path) in text for text in shown), "unused"
    for checked, of in ((True, chart()), (False, unchecked)):
        expected, expected_notes = plain[checked, baseline]
        for hostile in HOSTILE:
            if path not in FAILS_WITHOUT_SCHEMA and sweep.settles(baseline, hostile, checked, path):
                continue
            # This path alone, as the verdict above could not settle it.
            values = copy.deepcopy(base)
            value_at(values, path[:-1])[path[-1]] = hostile
            try:
                made = rendered(of, values)
            except helm_python.HelmValuesError as refused:
                assert checked, "only the schema refuses values"
                assert f"at '{pointer(path)}'" in str(refused), hostile
                continue
            except helm_python.HelmRenderError:
                assert path in FAILS_WITHOUT_SCHEMA, (path, hostile)
                continue
            docs = parsed(made)
            # A key the value makes (dashboards.label) is named as the baseline names it.
            assert layout(docs, {hostile: was}) == expected, (checked, hostile)
            assert any(hostile in text for text in strings([d for _, d in docs])), "unused"
            if checked:
                # Whatever the schema takes prints no line of its own in the notes either.
                assert notes_of(made).count("\n") == expected_notes.count("\n")


BENIGN_KEY = "example.com/added"


class KeySweep(_Sweep):
    """A key added to every map of the EVERYTHING baseline at once, for the benign key and each
    hostile one, as StringSweep does for strings: without the schema, the hostile keys keep the
    layout the benign ones make; with it, one refusal names every map that refuses the key, and
    the maps that take it get it together once more, beside the benign key in the same maps."""

    def _everywhere(self, key: str, paths: tuple[tuple[str | int, ...], ...]) -> dict[str, Any]:
        values = copy.deepcopy(self._baselines["EVERYTHING"])
        # Deepest first: a key added to a map must not stand in the way of a map below it.
        for path in sorted(paths, key=len, reverse=True):
            value_at(values, path)[key] = "v"
        return values

    def verdict(
        self, key: str, checked: bool, paths: tuple[tuple[str | int, ...], ...] = ()
    ) -> Any:
        """The layout with `key` in every map of `paths` (all of them when empty), renamed to
        the benign key; the refusal's message; or None."""
        paths = paths or tuple(KEY_CASES)
        return self._once(
            ("keys", key, checked, paths),
            lambda: self._layout(checked, self._everywhere(key, paths), {key: BENIGN_KEY}),
        )

    def _same(self, hostile: str, checked: bool, paths: tuple[tuple[str | int, ...], ...]) -> Any:
        found, benign = (
            self.verdict(hostile, checked, paths),
            self.verdict(BENIGN_KEY, checked, paths),
        )
        if isinstance(found, str):
            return found
        return isinstance(found, tuple) and isinstance(benign, tuple) and found[0] == benign[0]

    def settles(self, path: tuple[str | int, ...], hostile: str, checked: bool) -> bool:
        """Whether the renders with `hostile` in every map settle this one: refused naming the
        map (or the key in it), or taken and inert, as the benign key is. Helm's message may
        leave out what a map's parent already failed on, so the maps it did not name are tried
        again, on their own, until it names no more."""

        def judge() -> frozenset[tuple[str | int, ...]]:
            taken: tuple[tuple[str | int, ...], ...] = tuple(KEY_CASES)
            refused: set[tuple[str | int, ...]] = set()
            while taken:
                verdict = self._same(hostile, checked, taken)
                if verdict is True:
                    return frozenset(refused | set(taken))
                if not isinstance(verdict, str):
                    break
                named = {p for p in taken if refuses(verdict, p, hostile)}
                if not named:
                    break
                refused |= named
                taken = tuple(p for p in taken if p not in named)
            return frozenset(refused)

        settled: frozenset[tuple[str | int, ...]] = self._once(("settled", hostile, checked), judge)
        return path in settled


_NAMED = re.compile(r"at '(.*?)': ")


@cache
def _everything() -> dict[str, Any]:
    return merged(EVERYTHING)


def refuses(message: str, path: tuple[str | int, ...], key: str) -> bool:
    """Whether Helm's refusal names the map at `path`, or a key of it that is not one of the
    baseline's (`key`, as Helm escapes it in its message)."""
    own = pointer(path)
    known = value_at(_everything(), path)
    for named in _NAMED.findall(message):
        if named == own:
            return True
        rest = named.removeprefix(own + "/")
        if rest != named and "/" not in rest and rest not in {pointer((k,))[1:] for k in known}:
            return True
    return False


@pytest.fixture(scope="module")
def key_sweep(unchecked: helm_python.Chart, baselines: dict[str, dict[str, Any]]) -> KeySweep:
    return KeySweep(unchecked, baselines)


@pytest.mark.parametrize("path", KEY_CASES, ids=lambda v: str(v))
def test_a_hostile_key_anywhere_is_refused_or_inert(unchecked, baselines, key_sweep, path):
    base = baselines["EVERYTHING"]
    benign = BENIGN_KEY
    for checked, of in ((True, chart()), (False, unchecked)):
        expected: Layout | None = None
        settled_in_bulk: dict[str, bool] = {}
        for hostile in HOSTILE:
            settled_in_bulk[hostile] = key_sweep.settles(path, hostile, checked)
        if all(settled_in_bulk.values()):
            continue
        with_benign = copy.deepcopy(base)
        value_at(with_benign, path)[benign] = "v"
        try:
            expected = layout(parsed(rendered(of, with_benign)), {})
        except helm_python.HelmValuesError as refused:
            # A closed object refuses any key it does not know, the hostile ones too; a map of
            # patterned values refuses "v".
            assert checked and f"at '{pointer(path)}" in str(refused)
            expected = None
        for hostile in HOSTILE:
            if settled_in_bulk[hostile]:
                continue
            values = copy.deepcopy(base)
            value_at(values, path)[hostile] = "v"
            try:
                made = rendered(of, values)
            except helm_python.HelmValuesError as refused:
                assert checked, "only the schema refuses values"
                assert f"at '{pointer(path)}" in str(refused), hostile
                continue
            assert expected is not None, "the schema took a hostile key and refused a plain one"
            assert layout(parsed(made), {hostile: benign}) == expected, (checked, hostile)

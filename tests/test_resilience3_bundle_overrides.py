"""Override values judged by what they are pasted into (bundle/override_checks.py): each bad one
is one line naming the key and the value, with exit 2 and nothing written. For those that go into
PromQL, real promtool shows why: rendered anyway, each is a rule file Prometheus refuses, or, for
a quote in a regex, a query promtool accepts that is no longer the one meant."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundle import overrides
from bundle.config import DEFAULT, BundleConfig
from bundle.render import artifacts, main
from tests.test_rules_promtool import promtool

RULE_FILES = ("alerts/prometheus_alerts.yaml", "alerts/prometheus_rules.yaml")
INJECTION = 'nvidia_com_gpu"} or vector(1) or up{x="'


def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """The one line `python -m bundle.render --config` prints for the overrides `text`."""
    config = tmp_path / "my.yaml"
    config.write_text(text)
    out = tmp_path / "out"
    code = main(["--config", str(config), "--out", str(out)])
    err = capsys.readouterr().err
    assert (code, err.count("\n")) == (2, 1), err
    assert not out.exists()
    return err.rstrip("\n")


def yaml_of(path: str, value: Any) -> str:
    *sections, key = path.split(".")
    document: Any = {key: value}
    for section in reversed(sections):
        document = {section: document}
    return yaml.safe_dump(document)


def forced(path: str, value: Any) -> BundleConfig:
    """DEFAULT with `value` at `path`, past every check (BundleConfig's own included): what the
    checks keep from being rendered."""
    section, key = path.split(".")
    part = dataclasses.replace(getattr(DEFAULT, section))
    object.__setattr__(part, key, value)  # frozen: only a test may do this
    config = dataclasses.replace(DEFAULT)
    object.__setattr__(config, section, part)
    return config


def check_rules(tmp_path: Path, config: BundleConfig) -> subprocess.CompletedProcess[str]:
    files = artifacts(config)
    paths = []
    for name in RULE_FILES:
        path = tmp_path / Path(name).name
        path.write_text(files[name])
        paths.append(str(path))
    return subprocess.run(
        [promtool(), "check", "rules", *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


PROMQL = [
    ("labels.pod", "exported-pod", "is not a Prometheus label name"),
    ("labels.cluster", "1cluster", "is not a Prometheus label name"),
    ("selectors.exporter", 'job="gpus",', "ends with a comma"),
    ("selectors.exporter", 'job="gpus" env="prod"', "needs a comma between two matchers"),
    ("selectors.exporter", "job=gpus", "is not label matchers"),
    ("selectors.exporter", "job=`gpus`", "must not hold ` or %"),
    ("selectors.exporter", 'job="gpu\\-exporter"', "\\- is not an escape PromQL knows"),
    ("selectors.kube_state_metrics", 'job=~"(?=ksm)"', "which Prometheus' RE2 regexes do not"),
    ("resources.gpu_ksm_regex", "nvidia_com_gpu(?!_shared).*", "RE2 regexes do not support"),
    ("resources.gpu_ksm_regex", "nvidia_com_(gpu", "is not a regular expression"),
    ("resources.gpu_ksm_regex", "nvidia\\.com", "must not hold a quote, a backslash"),
    ("thresholds.idle_window", "1m1h", "is not a duration such as 15m"),
    ("thresholds.gpu_missing_lookback", "300y", "is not between 1s and 1y"),
    ("thresholds.xid_window", "0s", "is not between 1s and 1y"),
    ("dashboards.device_history_window", "5 m", "is not a duration such as 15m"),
]


@pytest.mark.parametrize(("path", "value", "problem"), PROMQL)
def test_a_value_promql_cannot_take_is_one_line_and_promtool_agrees(
    tmp_path, capsys, path, value, problem
):
    line = refusal(tmp_path, capsys, yaml_of(path, value))
    assert line.startswith(f"bundle: {tmp_path / 'my.yaml'}: {path}: {value!r} "), line
    assert problem in line, line
    # Rendered anyway, Prometheus would refuse the rules at load time.
    checked = check_rules(tmp_path, forced(path, value))
    assert checked.returncode != 0 and "FAILED" in checked.stderr, checked.stdout


def test_a_quote_in_a_regex_cannot_inject_promql(tmp_path, capsys):
    line = refusal(tmp_path, capsys, yaml_of("resources.gpu_ksm_regex", INJECTION))
    assert "resources.gpu_ksm_regex: " in line and "must not hold a quote" in line
    # What it was refused for: rendered anyway, promtool takes it, and the pending-GPU rule
    # ends its string early and ORs in a constant, so the series exists whatever is pending.
    forced_config = forced("resources.gpu_ksm_regex", INJECTION)
    assert check_rules(tmp_path, forced_config).returncode == 0
    groups = yaml.safe_load(artifacts(forced_config)["alerts/prometheus_rules.yaml"])["groups"]
    exprs = [rule["expr"] for group in groups for rule in group["rules"]]
    assert any('resource=~"nvidia_com_gpu"} or vector(1) or up{x=""}' in e for e in exprs)


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("runbook_url_pattern", "https://runbooks.example/%s%s", "needs exactly one %s"),
        ("runbook_url_pattern", "https://runbooks.example/gpu", "needs exactly one %s"),
        ("runbook_url_pattern", "https://runbooks.example/a%20b#%s", "has '%2': write a literal"),
        ("runbook_url_pattern", "https://runbooks.example/%d", "has '%d'"),
        ("labels.namespace", "__name__", "is not a label name to use: '__' names are"),
        # promtool cannot see this one: printf in the alert descriptions' template query would
        # garble the query when the alert fires.
        ("selectors.exporter", 'job=~"gpus.*%"', "must not hold ` or %"),
        ("scrape.interval", "10m", "is not between 1s and 5m"),
        ("scrape.timeout", "30s", "is longer than scrape.interval '15s'"),
        ("scrape.port", 0, "is not a port from 1 to 65535"),
        ("scrape.port_name", "http-metrics-port", "is not a port name"),
        ("scrape.namespace", "GPU_Monitoring", "is not a Kubernetes name"),
        ("scrape.release_label", "kube prometheus", "is not a Kubernetes label value"),
        ("deployment.memory_request", "80 MB", "is not a Kubernetes quantity"),
        ("deployment.max_unavailable", "1", "is not a percentage such as 10%"),
        ("deployment.priority_class", "System-Node-Critical", "is not a Kubernetes name"),
        ("deployment.tag", "v1 beta", "is not an image tag"),
        ("thresholds.xid_critical_codes", [0, 79], "must list XID codes"),
    ],
)
def test_every_other_bad_value_is_one_line_naming_key_and_value(
    tmp_path, capsys, path, value, problem
):
    line = refusal(tmp_path, capsys, yaml_of(path, value))
    shown = repr(tuple(value)) if isinstance(value, list) else repr(value)
    assert f": {path}: {shown} {problem}" in line, line


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (
            "deployment:\n  node_selector: {'gpu pool': 'yes'}\n",
            "deployment.node_selector.gpu pool: 'gpu pool' is not a Kubernetes label key",
        ),
        (
            "deployment:\n  toleration_keys: [nvidia.com/gpu, 'nvidia.com/gpu ']\n",
            "deployment.toleration_keys[1]: 'nvidia.com/gpu ' is not a Kubernetes label key",
        ),
        (
            "dashboards:\n  uids: {gpu-devices: 'gpu devices'}\n",
            "dashboards.uids.gpu-devices: 'gpu devices' is not a Grafana uid",
        ),
    ],
)
def test_a_bad_item_is_named_by_its_own_key(tmp_path, capsys, text, named):
    assert named in refusal(tmp_path, capsys, text)


def test_a_long_bad_value_is_cut_to_60_characters(tmp_path, capsys):
    value = '"' + "x" * 500
    line = refusal(tmp_path, capsys, yaml_of("resources.gpu_ksm_regex", value))
    assert repr(value)[:57] + "..." in line and "x" * 60 not in line


def test_values_at_the_limits_are_taken_and_promtool_accepts_the_rules(tmp_path):
    config = overrides.apply(
        DEFAULT,
        {
            # A brace inside a regex is PromQL; only braces around the matchers are refused.
            "selectors": {"exporter": "job=~'gpu-exporter-[0-9]{1,2}' , env!=\"dev\""},
            "labels": {"cluster": "_cluster", "pod": "exported_pod"},
            "resources": {"gpu_ksm_regex": "nvidia_com_gpu.*|nvidia_com_mig_[0-9]g.*"},
            "thresholds": {"gpu_missing_lookback": "1y", "latched_for": "0s", "idle_for": "1h30m"},
            "scrape": {"interval": "5m", "timeout": "5m"},
            "runbook_url_pattern": "https://runbooks.example/100%%/#%s",
        },
    )
    checked = check_rules(tmp_path, config)
    assert checked.returncode == 0, checked.stderr
    assert "https://runbooks.example/100%/#gputemperaturehigh" in artifacts(config)[RULE_FILES[0]]

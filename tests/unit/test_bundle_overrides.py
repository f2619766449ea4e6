"""A user's overrides file laid over the bundle's defaults
(`python -m kube_gpu_exporter.bundle.render --config my.yaml --out DIR`): overrides reach the rules
and dashboards, mistakes are one line naming the key, and every value is judged by what it is pasted
into (kube_gpu_exporter/bundle/override_checks.py), the committed tree is never touched, and the
wheel carries the generator (tests/process/test_bundle_overrides.py, with promtool's view of each
refused value)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.bundle import overrides
from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.render import ROOT, artifacts, main

ALERTS = "alerts/prometheus_alerts.yaml"
RULE_CR = "alerts/prometheusrule.yaml"
DEVICES = "dashboards/provisioned/gpu-devices.json"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my.yaml"
    path.write_text(text)
    return path


def _alert(files: dict[str, str], name: str) -> dict[str, object]:
    groups = yaml.safe_load(files[ALERTS])["groups"]
    return next(rule for group in groups for rule in group["rules"] if rule.get("alert") == name)


def _threshold_steps(dashboard: str) -> set[float]:
    values: set[float] = set()
    for panel in json.loads(dashboard)["panels"]:
        steps = panel.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
        values.update(s["value"] for s in steps.get("steps", []) if s.get("value") is not None)
    return values


def test_an_override_changes_rules_and_dashboards(tmp_path: Path) -> None:
    config = overrides.load(
        _write(
            tmp_path,
            "thresholds:\n  temperature_warning_celsius: 81\n"
            "scrape:\n  release_label: my-prometheus\n",
        )
    )
    default, changed = artifacts(DEFAULT), artifacts(config)

    assert "> 85" in str(_alert(default, "GPUTemperatureHigh")["expr"])
    assert "> 81" in str(_alert(changed, "GPUTemperatureHigh")["expr"])
    assert 81 in _threshold_steps(changed[DEVICES])
    assert 81 not in _threshold_steps(default[DEVICES])
    labels = yaml.safe_load(changed[RULE_CR])["metadata"]["labels"]
    assert labels["release"] == "my-prometheus"


def test_mappings_merge_key_by_key_and_pairs_read_as_a_mapping(tmp_path: Path) -> None:
    config = overrides.load(
        _write(
            tmp_path,
            "dashboards:\n  uids: {gpu-devices: my-devices}\n"
            "deployment:\n  node_selector: {pool: gpu}\n"
            "resources:\n  pod_sizes: [1, 3]\n",
        )
    )
    assert config.dashboards.uids == {
        "gpu-cluster-capacity": DEFAULT.dashboards.uids["gpu-cluster-capacity"],
        "gpu-devices": "my-devices",
    }
    assert config.deployment.node_selector == (("pool", "gpu"),)
    assert config.resources.pod_sizes == (1, 3)
    # Untouched sections are the defaults themselves.
    assert config.thresholds == DEFAULT.thresholds


def test_an_empty_file_is_the_defaults(tmp_path: Path) -> None:
    assert overrides.load(_write(tmp_path, "# nothing changed yet\n")) == DEFAULT


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "thresholds:\n  gpu_temp_warning: 80\n",
            "my.yaml: thresholds.gpu_temp_warning: unknown key; known: exporter_down_for,",
        ),
        ("scrap:\n  job_name: x\n", "my.yaml: scrap: unknown key; known: dcgm_version,"),
        (
            "thresholds:\n  temperature_warning_celsius: hot\n",
            "my.yaml: thresholds.temperature_warning_celsius: expected a number, got a string",
        ),
        (
            "thresholds:\n  idle_for: soon\n",
            "my.yaml: thresholds.idle_for: 'soon' is not a duration such as 15m",
        ),
        (
            "deployment:\n  node_selector: {pool: true}\n",
            "my.yaml: deployment.node_selector.pool: expected a string, got a boolean (quote it)",
        ),
        (
            "resources:\n  pod_sizes: [1, two]\n",
            "my.yaml: resources.pod_sizes[1]: expected an integer, got a string",
        ),
        (
            "dashboards:\n  uids: {gpu-overview: x}\n",
            "my.yaml: dashboards.uids.gpu-overview: unknown key; known: gpu-cluster-capacity,",
        ),
        ("scrape: 5\n", "my.yaml: scrape: expected a mapping, got a number"),
        ("- thresholds\n", "my.yaml: expected a mapping of keys to override, got a list"),
        (
            "selectors:\n  exporter: '{job=\"x\"}'\n",
            "my.yaml: selectors.exporter: '{job=\"x\"}' must be matchers without braces",
        ),
        # BundleConfig.__post_init__'s own checks, which name their key.
        ("dcgm_version: '9.9'\n", "my.yaml: dcgm_version '9.9' is not one of"),
        # The safe loader's refusals.
        ("scrape: {port: 1}\nscrape: {port: 2}\n", "my.yaml: duplicate key 'scrape' at line 2"),
    ],
)
def test_mistakes_are_one_line_naming_the_key_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    out = tmp_path / "out"

    code = main(["--config", str(_write(tmp_path, text)), "--out", str(out)])

    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert message in err
    assert not out.exists()


def test_out_writes_there_and_leaves_the_committed_tree_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    committed = (ROOT / ALERTS).read_text()
    config = _write(tmp_path, "thresholds:\n  temperature_warning_celsius: 79\n")
    out = tmp_path / "out"

    assert main(["--config", str(config), "--out", str(out)]) == 0

    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    # The whole bundle but the promtool tests, which a changed threshold would fail.
    assert set(artifacts(DEFAULT)) < written
    assert "alerts/runbook.md" in written and "alerts/dcgm-4.9/prometheus_alerts.yaml" in written
    assert not any("/tests/" in path for path in written)
    assert "> 79" in (out / ALERTS).read_text()
    assert (ROOT / ALERTS).read_text() == committed
    assert "wrote" in capsys.readouterr().err


def test_rendering_without_a_config_equals_the_committed_files(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path)]) == 0

    for path in artifacts(DEFAULT):
        assert (tmp_path / path).read_text() == (ROOT / path).read_text(), path


@pytest.mark.parametrize(
    "argv",
    [["--config", "my.yaml"], ["--check", "--out", "x"], ["--check", "--config", "my.yaml"]],
)
def test_option_mistakes_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    assert "error: --c" in capsys.readouterr().err


def test_an_out_path_that_is_a_file_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")

    assert main(["--out", str(taken)]) == 2
    assert capsys.readouterr().err == f"bundle: --out {taken}: exists and is not a directory\n"


BUILD_INPUTS = (
    "pyproject.toml",
    "README.md",
    "kube_gpu_exporter",
    "alerts",
    "dashboards",
    "deploy",
)


# ---- Values judged by what they are pasted into (kube_gpu_exporter/bundle/override_checks.py) ----


def refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """The one line `python -m kube_gpu_exporter.bundle.render --config` prints for the overrides
    `text`."""
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

"""A user's overrides file laid over the bundle's defaults: the cases that start a process or need
a system package's binary; the others are in tests/unit/test_bundle_overrides.py."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.bundle import overrides
from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.bundle.render import ROOT, artifacts
from tests.unit.test_bundle_overrides import ALERTS, BUILD_INPUTS, _write, refusal, yaml_of
from tests.unit.test_rules_promtool import promtool


def test_the_wheel_ships_a_working_generator(tmp_path: Path) -> None:
    # Built from a copy, so the build's own files (build/, *.egg-info) stay out of the checkout.
    source = tmp_path / "source"
    source.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in BUILD_INPUTS:
        origin = ROOT / name
        if origin.is_dir():
            shutil.copytree(origin, source / name, ignore=skip)
        else:
            shutil.copy2(origin, source / name)
    for licence in ROOT.glob("LICEN[SC]E*"):
        shutil.copy2(licence, source / licence.name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip, str(source), "-w", str(wheels)],
        check=True,
        timeout=300,
    )
    (wheel,) = wheels.glob("*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
        metadata = next(archive.read(n) for n in names if n.endswith(".dist-info/METADATA"))
    for module in (
        "kube_gpu_exporter/bundle/render.py",
        "kube_gpu_exporter/bundle/overrides.py",
        "kube_gpu_exporter/bundle/alerts/rules_file.py",
    ):
        assert module in names
    assert "kube_gpu_exporter/bundle/dashboards/render.py" in names
    # One top-level package: nothing with a generic name (exporter, bundle, alerts) lands in
    # site-packages beside other distributions' packages.
    assert {n.split("/")[0] for n in names} == {
        "kube_gpu_exporter",
        wheel.name.split("-py3")[0] + ".dist-info",
    }
    assert "kube_gpu_exporter/bundle/sources/alerts/runbook.md" in names
    assert (
        "kube_gpu_exporter/bundle/sources/deploy/helm/kube-gpu-exporter/templates/NOTES.txt"
        in names
    )
    assert b"Provides-Extra: bundle" in metadata
    assert b'grafanalib==0.7.1; extra == "bundle"' in metadata

    # Run from the unpacked wheel, away from the checkout, as an installed user would.
    config = _write(tmp_path, "thresholds:\n  temperature_warning_celsius: 78\n")
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-c", "import kube_gpu_exporter; print(kube_gpu_exporter.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.startswith(str(site))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "kube_gpu_exporter.bundle.render",
            "--config",
            str(config),
            "--out",
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        check=True,
        timeout=120,
    )
    assert "> 78" in (out / ALERTS).read_text()
    # The runbook and the promtool tests are read from the wheel, not from a checkout.
    assert "## GPULost" in (out / "alerts/runbook.md").read_text()
    assert (out / "alerts/dcgm-4.9/runbook.md").is_file()
    refused = subprocess.run(
        [sys.executable, "-m", "kube_gpu_exporter.bundle.render"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "outside a source checkout, give --out DIR" in refused.stderr


# ---- Values PromQL cannot take: promtool shows why they are refused ----

RULE_FILES = ("alerts/prometheus_alerts.yaml", "alerts/prometheus_rules.yaml")
INJECTION = 'nvidia_com_gpu"} or vector(1) or up{x="'


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

"""A user's overrides file laid over the bundle's defaults
(`python -m bundle.render --config my.yaml --out DIR`): overrides reach the rules and dashboards,
mistakes are one line naming the key, the committed tree is never touched, and the wheel carries
the generator."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from bundle import overrides
from bundle.config import DEFAULT
from bundle.render import ROOT, artifacts, main

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


BUILD_INPUTS = ("pyproject.toml", "README.md", "exporter", "bundle", "alerts", "dashboards")


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
    for module in ("bundle/render.py", "bundle/overrides.py", "alerts/rules_file.py"):
        assert module in names
    assert "dashboards/render.py" in names
    assert b"Provides-Extra: bundle" in metadata
    assert b'grafanalib==0.7.1; extra == "bundle"' in metadata

    # Run from the unpacked wheel, away from the checkout, as an installed user would.
    config = _write(tmp_path, "thresholds:\n  temperature_warning_celsius: 78\n")
    out = tmp_path / "out"
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable, "-c", "import bundle; print(bundle.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.startswith(str(site))
    subprocess.run(
        [sys.executable, "-m", "bundle.render", "--config", str(config), "--out", str(out)],
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
        [sys.executable, "-m", "bundle.render"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode == 2
    assert "outside a source checkout, give --out DIR" in refused.stderr

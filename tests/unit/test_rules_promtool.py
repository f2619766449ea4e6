"""promtool on the generated rule files of every flavour: they load (`check rules`), their unit
tests pass (`test rules`), and those unit tests cover every alert and recording rule. The default
flavour's tests in alerts/tests/ are written by hand; another flavour's are translated from them
(kube_gpu_exporter/bundle/flavour_translate.py) into its own tests folder."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from tests.support.generated_bundle import generated

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = tuple(FLAVOURS)
PATHS = {version: flavour_paths(version) for version in VERSIONS}
RULE_FILES = {
    version: (ROOT / PATHS[version].alerts, ROOT / PATHS[version].rules) for version in VERSIONS
}
TEST_FILES = {version: sorted((ROOT / PATHS[version].tests).glob("*.yaml")) for version in VERSIONS}
ALL_TEST_FILES = [(version, path) for version in VERSIONS for path in TEST_FILES[version]]
REQUIRED_ANNOTATIONS = {"summary", "description", "runbook_url"}


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not on PATH: install Debian's `prometheus` package "
            "(`make system-deps`) to check and unit-test the alert and recording rules",
            pytrace=False,
        )
    return path


def run_promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def rules_of(path: Path) -> list[dict[str, Any]]:
    return [rule for group in load(path)["groups"] for rule in group["rules"]]


def unit_tests(version: str, rule_file: Path) -> list[dict[str, Any]]:
    """Every test group, of every test file of the flavour, that loads `rule_file`."""
    tests = []
    for path in TEST_FILES[version]:
        document = load(path)
        loaded = {(path.parent / f).resolve() for f in document.get("rule_files", [])}
        if rule_file.resolve() in loaded:
            tests.extend(document.get("tests", []))
    return tests


def test_every_generated_rules_file_is_checked_and_unit_tested():
    """The plain rules files the bundle generates are exactly the ones this module runs promtool
    on, and each flavour's unit tests load both of its own: a new rules file or flavour cannot
    ship untested."""
    rules_files = {
        ROOT / path
        for path, text in generated().items()
        if path.startswith("alerts/")
        and path.endswith(".yaml")
        and "groups" in yaml.safe_load(text)
    }
    assert rules_files == {path for files in RULE_FILES.values() for path in files}
    for version in VERSIONS:
        assert TEST_FILES[version], f"flavour {version} has no promtool tests"
        loaded = {
            (path.parent / f).resolve()
            for path in TEST_FILES[version]
            for f in load(path)["rule_files"]
        }
        assert loaded == {path.resolve() for path in RULE_FILES[version]}, version


# ---- promtool ----


# ---- structure of the unit tests ----


@pytest.mark.parametrize(
    ("version", "path"), ALL_TEST_FILES, ids=lambda v: v if isinstance(v, str) else v.name
)
def test_unit_tests_load_the_generated_files(version, path):
    document = load(path)
    assert document.get("evaluation_interval") == "1m", path.name
    files = [(path.parent / f).resolve() for f in document.get("rule_files", [])]
    assert files, f"{path.name} loads no rule file"
    for file in files:
        assert file in {p.resolve() for p in RULE_FILES[version]}, (
            f"{path.name} must test its flavour's generated rule files, not {file}"
        )


@pytest.mark.parametrize("version", VERSIONS)
def test_every_alert_has_a_firing_case_with_full_annotations(version):
    """One firing case per alert rule; an alert defined at two severities needs both."""
    alerts_file = RULE_FILES[version][0]
    fired: set[tuple[str, str]] = set()
    for test in unit_tests(version, alerts_file):
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                if REQUIRED_ANNOTATIONS.issubset(alert.get("exp_annotations") or {}):
                    severity = (alert.get("exp_labels") or {}).get("severity", "")
                    fired.add((case["alertname"], severity))
    rules = {(r["alert"], r["labels"]["severity"]) for r in rules_of(alerts_file) if "alert" in r}
    missing = sorted(rules - fired)
    assert not missing, (
        "alerts without a firing test asserting severity, summary, description and "
        f"runbook_url: {missing}"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_every_alert_has_quiet_cases(version):
    """At least two entries expecting no alert: before `for` has elapsed, and healthy data."""
    alerts_file = RULE_FILES[version][0]
    quiet: dict[str, int] = {}
    for test in unit_tests(version, alerts_file):
        for case in test.get("alert_rule_test", []):
            if not case.get("exp_alerts"):
                quiet[case["alertname"]] = quiet.get(case["alertname"], 0) + 1
    names = sorted({r["alert"] for r in rules_of(alerts_file) if "alert" in r})
    short = {name: quiet.get(name, 0) for name in names if quiet.get(name, 0) < 2}
    assert not short, f"alerts with fewer than two no-alert test entries: {short}"


@pytest.mark.parametrize("version", VERSIONS)
def test_unit_tests_only_name_existing_alerts(version):
    alerts_file = RULE_FILES[version][0]
    names = {r["alert"] for r in rules_of(alerts_file) if "alert" in r}
    tested = {
        case["alertname"]
        for test in unit_tests(version, alerts_file)
        for case in test.get("alert_rule_test", [])
    }
    assert tested <= names, f"tests for alerts that do not exist: {sorted(tested - names)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_every_recording_rule_has_an_expression_test(version):
    rules_file = RULE_FILES[version][1]
    tests = [
        case
        for test in unit_tests(version, rules_file)
        for case in test.get("promql_expr_test", [])
    ]
    for rule in rules_of(rules_file):
        name = rule["record"]
        token = re.compile(rf"(?<![\w:]){re.escape(name)}(?![\w:])")
        cases = [case for case in tests if token.search(case["expr"])]
        assert cases, f"recording rule {name} has no promql_expr_test"
        # Rules sharing a name (one per gpus_per_pod) must each show up in an expected sample.
        for label, value in (rule.get("labels") or {}).items():
            wanted = f'{label}="{value}"'
            assert any(
                wanted in sample["labels"]
                for case in cases
                for sample in case.get("exp_samples") or []
            ), f"no promql_expr_test expects {name}{{{wanted}}}"


def test_unit_tests_match_resources_as_the_generated_queries_do():
    """Expressions the unit tests copy from the dashboards (whole GPUs, MIG devices of both
    allocation paths) use the config's matchers, so the tests check the queries that ship."""
    config = FLAVOURS[VERSIONS[0]].resources
    allowed = {config.whole_gpu_regex, config.mig_regex, config.gpu_ksm_regex}
    used = {
        match.group(1)
        for path in TEST_FILES[VERSIONS[0]]
        for test in load(path).get("tests", [])
        for case in test.get("promql_expr_test", [])
        for match in re.finditer(r'\bresource=~"([^"]*)"', case["expr"])
    }
    assert used, "no unit test checks a dashboard's resource matcher"
    assert used <= allowed, sorted(used - allowed)

"""promtool on the generated rule files: they load (`check rules`), their unit tests in
alerts/tests/ pass (`test rules`), and those unit tests cover every alert and recording rule."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bundle import render as bundle_render

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ROOT / "alerts" / "prometheus_alerts.yaml"
RULES = ROOT / "alerts" / "prometheus_rules.yaml"
TESTS_DIR = ROOT / "alerts" / "tests"
TEST_FILES = sorted(TESTS_DIR.glob("*.yaml"))
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


def unit_tests(rule_file: Path) -> list[dict[str, Any]]:
    """Every test group, of every test file, that loads `rule_file`."""
    tests = []
    for path in TEST_FILES:
        document = load(path)
        loaded = {(path.parent / f).resolve() for f in document.get("rule_files", [])}
        if rule_file.resolve() in loaded:
            tests.extend(document.get("tests", []))
    return tests


def test_every_generated_rules_file_is_checked_and_unit_tested():
    """The plain rules files the bundle generates are exactly the two this module runs promtool
    on, and the unit tests load each of them: a new rules file cannot ship untested."""
    generated = {
        ROOT / path
        for path, text in bundle_render.artifacts().items()
        if path.startswith("alerts/") and "groups" in yaml.safe_load(text)
    }
    assert generated == {ALERTS, RULES}
    loaded = {(path.parent / f).resolve() for path in TEST_FILES for f in load(path)["rule_files"]}
    assert loaded == {ALERTS.resolve(), RULES.resolve()}


# ---- promtool ----


@pytest.mark.parametrize("path", [ALERTS, RULES], ids=lambda p: p.name)
def test_promtool_check_rules(path):
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, (
        f"promtool check rules {path.name} failed:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_promtool_test_rules(path):
    result = run_promtool("test", "rules", path.name, cwd=path.parent)
    assert result.returncode == 0, (
        f"promtool test rules {path.relative_to(ROOT)} failed:\n{result.stdout}{result.stderr}"
    )


# ---- structure of the unit tests ----


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda p: p.name)
def test_unit_tests_load_the_generated_files(path):
    document = load(path)
    assert document.get("evaluation_interval") == "1m", path.name
    files = [(path.parent / f).resolve() for f in document.get("rule_files", [])]
    assert files, f"{path.name} loads no rule file"
    for file in files:
        assert file in (ALERTS.resolve(), RULES.resolve()), (
            f"{path.name} must test the generated rule files, not {file}"
        )


def test_every_alert_has_a_firing_case_with_full_annotations():
    """One firing case per alert rule; an alert defined at two severities needs both."""
    fired: set[tuple[str, str]] = set()
    for test in unit_tests(ALERTS):
        for case in test.get("alert_rule_test", []):
            for alert in case.get("exp_alerts") or []:
                if REQUIRED_ANNOTATIONS.issubset(alert.get("exp_annotations") or {}):
                    severity = (alert.get("exp_labels") or {}).get("severity", "")
                    fired.add((case["alertname"], severity))
    rules = {(r["alert"], r["labels"]["severity"]) for r in rules_of(ALERTS) if "alert" in r}
    missing = sorted(rules - fired)
    assert not missing, (
        "alerts without a firing test asserting severity, summary, description and "
        f"runbook_url: {missing}"
    )


def test_every_alert_has_quiet_cases():
    """At least two entries expecting no alert: before `for` has elapsed, and healthy data."""
    quiet: dict[str, int] = {}
    for test in unit_tests(ALERTS):
        for case in test.get("alert_rule_test", []):
            if not case.get("exp_alerts"):
                quiet[case["alertname"]] = quiet.get(case["alertname"], 0) + 1
    names = sorted({r["alert"] for r in rules_of(ALERTS) if "alert" in r})
    short = {name: quiet.get(name, 0) for name in names if quiet.get(name, 0) < 2}
    assert not short, f"alerts with fewer than two no-alert test entries: {short}"


def test_unit_tests_only_name_existing_alerts():
    names = {r["alert"] for r in rules_of(ALERTS) if "alert" in r}
    tested = {
        case["alertname"] for test in unit_tests(ALERTS) for case in test.get("alert_rule_test", [])
    }
    assert tested <= names, f"tests for alerts that do not exist: {sorted(tested - names)}"


def test_every_recording_rule_has_an_expression_test():
    tests = [case for test in unit_tests(RULES) for case in test.get("promql_expr_test", [])]
    for rule in rules_of(RULES):
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

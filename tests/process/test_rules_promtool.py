"""promtool on the generated rule files of every flavour: they load (`check rules`), their unit:
the cases that start a process or need a system package's binary; the others are in
tests/unit/test_rules_promtool.py."""

from __future__ import annotations

import pytest

from tests.unit.test_rules_promtool import (
    PATHS,
    ROOT,
    RULE_FILES,
    TEST_FILES,
    VERSIONS,
    run_promtool,
)


@pytest.mark.parametrize(
    "path",
    [p for files in RULE_FILES.values() for p in files],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_promtool_check_rules(path):
    result = run_promtool("check", "rules", str(path))
    assert result.returncode == 0, (
        f"promtool check rules {path.name} failed:\n{result.stdout}{result.stderr}"
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_promtool_test_rules(version):
    """One promtool run per flavour over all its test files."""
    files = [path.name for path in TEST_FILES[version]]
    result = run_promtool("test", "rules", *files, cwd=ROOT / PATHS[version].tests)
    assert result.returncode == 0, (
        f"promtool test rules in {PATHS[version].tests} failed:\n{result.stdout}{result.stderr}"
    )
    assert result.stdout.count("SUCCESS") == len(files), result.stdout

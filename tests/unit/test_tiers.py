"""The test tiers: a test's tier is the folder it stands in, the unit tier starts no process, and
no unit test sleeps on the wall clock to wait for a timer."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from tests.support.tiers import TESTS, TIERS, refuse_processes_in_unit_tests, tier_of

REPO = TESTS.parent


def test_every_collected_test_has_exactly_the_tier_of_its_folder(request):
    for item in request.session.items:
        tiers = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
        assert tiers == [tier_of(Path(str(item.path)))], (item.nodeid, tiers)


def test_a_test_file_outside_the_tier_folders_is_refused():
    assert tier_of(TESTS / "process" / "test_x.py") == "process"
    assert tier_of(TESTS / "e2e" / "test_x.py") == "e2e"
    with pytest.raises(pytest.UsageError, match="stands in no tier's folder"):
        tier_of(TESTS / "test_x.py")
    with pytest.raises(pytest.UsageError, match="stands in no tier's folder"):
        tier_of(TESTS / "golden" / "test_x.py")


def test_a_unit_test_that_starts_a_process_fails_naming_it():
    # _execute_child is private to CPython, so typeshed leaves it out.
    before = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    marks = {"unit": pytest.mark.unit.mark}
    node = SimpleNamespace(nodeid="t::x", get_closest_marker=marks.get)
    guard = refuse_processes_in_unit_tests(cast(pytest.FixtureRequest, SimpleNamespace(node=node)))
    next(guard)
    # Swallowed by the test, the attempt is still reported when the test ends.
    with pytest.raises(RuntimeError, match="may not start a process"):
        subprocess.run(["echo", "hi"], check=False)
    with pytest.raises(pytest.fail.Exception, match=r"t::x is a unit test but started .*echo"):
        next(guard)
    assert subprocess.Popen._execute_child is before  # type: ignore[attr-defined]


def test_the_exporter_package_starts_no_process():
    starters = re.compile(
        r"\b(subprocess|multiprocessing|create_subprocess_\w+|shutil\.which"
        r"|os\.(fork|system|popen|posix_spawnp?))\b"
    )
    found = [
        f"{path.relative_to(REPO)}: {match.group()}"
        for path in sorted((REPO / "kube_gpu_exporter" / "exporter").rglob("*.py"))
        for match in [starters.search(path.read_text())]
        if match
    ]
    assert found == []


def wall_clock_sleeps(source: str) -> list[int]:
    """Lines calling time.sleep or asyncio.sleep (or a bare sleep imported from either) with a
    literal above zero: a test waiting for a timer on the wall clock."""
    tree = ast.parse(source)
    sleepers = {"time.sleep", "asyncio.sleep"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("time", "asyncio"):
            sleepers |= {
                alias.asname or alias.name for alias in node.names if alias.name == "sleep"
            }
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in sleepers
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, int | float)
            and node.args[0].value > 0
        ):
            found.append(node.lineno)
    return found


def test_the_sleep_check_finds_what_it_should():
    assert wall_clock_sleeps("import time\ntime.sleep(0.5)\n") == [2]
    assert wall_clock_sleeps("import asyncio\nasync def f():\n    await asyncio.sleep(2)\n") == [3]
    assert wall_clock_sleeps("from time import sleep\nsleep(1)\n") == [2]
    assert wall_clock_sleeps("import time\ntime.sleep(0)\ntime.sleep(step)\n") == []


def test_no_unit_test_sleeps_on_the_wall_clock():
    """Unit tests drive timers in simulated time
    (kube_gpu_exporter/exporter/simulator/stepped_time.py's ManualClock); waiting for a condition
    with a deadline (conftest.wait_for) is no timer."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((TESTS / "unit").rglob("*.py"))
        for line in wall_clock_sleeps(path.read_text())
    ]
    assert found == []

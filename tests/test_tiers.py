"""The test tiers: how a test is found to start a process, and the unit tier's guard."""

from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace
from typing import cast

import pytest

from tests.tiers import REPO, TIERS, ProcessFinder, refuse_processes_in_unit_tests

# These tests name process starters as data for the finder, which reading alone would take for
# starting them; the guard below proves that none does.
pytestmark = pytest.mark.unit


def pure(x: int) -> int:
    return x + 1


def spawns() -> None:
    subprocess.run(["true"], check=True)


def looks_up_a_binary() -> str | None:
    return shutil.which("promtool")


def through_a_helper() -> None:
    pure(1)
    spawns()


def ping() -> None:
    pong()


def pong() -> None:
    ping()


class Server:
    def start(self) -> None:
        through_a_helper()


def builds_a_server() -> Server:
    return Server()


def test_process_starters_are_found_through_helpers_and_classes():
    finder = ProcessFinder()
    assert finder.why(spawns) == "spawns -> subprocess"
    assert finder.why(looks_up_a_binary) == "looks_up_a_binary -> which"
    assert finder.why(through_a_helper) == "through_a_helper -> spawns -> subprocess"
    assert finder.why(builds_a_server) == (
        "builds_a_server -> Server.start -> through_a_helper -> spawns -> subprocess"
    )


def test_code_that_starts_nothing_is_unit_even_through_a_cycle():
    finder = ProcessFinder()
    assert finder.why(pure) is None
    assert finder.why(ping) is None


def test_every_collected_test_has_exactly_one_tier(request):
    for item in request.session.items:
        tiers = [mark.name for mark in item.iter_markers() if mark.name in TIERS]
        assert len(tiers) == 1, (item.nodeid, tiers)


def test_this_file_is_unit_and_the_real_cli_process_is_not(request):
    by_id = {item.nodeid: item for item in request.session.items}
    assert by_id[request.node.nodeid].get_closest_marker("unit")
    process_case = "tests/test_cli.py::test_the_process_prints_its_version"
    if process_case in by_id:
        assert by_id[process_case].get_closest_marker("process")


def unit_test_node(name: str) -> SimpleNamespace:
    marks = {"unit": pytest.mark.unit.mark}
    return SimpleNamespace(nodeid=name, get_closest_marker=marks.get)


def test_a_unit_test_that_starts_a_process_fails_naming_it():
    # _execute_child is private to CPython, so typeshed leaves it out.
    before = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    request = cast(pytest.FixtureRequest, SimpleNamespace(node=unit_test_node("t::x")))
    guard = refuse_processes_in_unit_tests(request)
    next(guard)
    # Swallowed by the test, the attempt is still reported when the test ends.
    with pytest.raises(RuntimeError, match="may not start a process"):
        subprocess.run(["echo", "hi"], check=False)
    with pytest.raises(pytest.fail.Exception, match=r"t::x is tiered unit but started .*echo"):
        next(guard)
    assert subprocess.Popen._execute_child is before  # type: ignore[attr-defined]


def test_the_exporter_package_starts_no_process():
    """The reading does not follow the exporter's own code, on the strength of this."""
    starters = re.compile(
        r"\b(subprocess|multiprocessing|create_subprocess_\w+|shutil\.which"
        r"|os\.(fork|system|popen|posix_spawnp?))\b"
    )
    found = [
        f"{path.relative_to(REPO)}: {match.group()}"
        for path in sorted((REPO / "exporter").rglob("*.py"))
        for match in [starters.search(path.read_text())]
        if match
    ]
    assert found == []

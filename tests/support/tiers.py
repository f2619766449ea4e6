"""Test tiers, one folder each, so that a test's tier is where it stands:

- `tests/unit`: in-process code and loopback servers only, in simulated time where a timer is
  involved (no test there sleeps to wait for one: tests/unit/test_tiers.py checks). `make check`
  runs this tier.
- `tests/process`: a test that starts a child process or needs a binary from a system package.
- `tests/e2e`: a real Prometheus, Alertmanager and VictoriaMetrics stack.
- `tests/bench`: a benchmark's machinery, reduced for CI.

Each test gets its folder's marker, so `-m unit` and the like still select a tier. A unit test
that starts a process anyway fails, naming the command: without that, `make check` would quietly
come to need a binary or a server.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

TIERS = ("unit", "process", "e2e", "bench")
TESTS = Path(__file__).resolve().parents[1]


def tier_of(path: Path) -> str:
    """The tier of a test file: the folder it stands in under tests/."""
    relative = path.resolve().relative_to(TESTS)
    tier = relative.parts[0] if len(relative.parts) > 1 else ""
    if tier not in TIERS:
        raise pytest.UsageError(
            f"{path} stands in no tier's folder: put it under tests/{{{','.join(TIERS)}}}/"
        )
    return tier


def assign_tiers(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(Path(str(item.path)))))


def refuse_processes_in_unit_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Make a unit test that starts a process fail, naming the command."""
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    started: list[str] = []

    def refuse(self: subprocess.Popen, args: object, *rest: object, **kwargs: object) -> None:
        started.append(repr(args))
        raise RuntimeError(f"a unit test may not start a process: {args!r}")

    # Patched below Popen so asyncio's subprocesses are caught too; the test's own exception
    # handling cannot hide the attempt, since it is reported after the test.
    # _execute_child is private to CPython, so typeshed leaves it out.
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]
    subprocess.Popen._execute_child = refuse  # type: ignore[attr-defined]
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute_child  # type: ignore[attr-defined]
    if started:
        pytest.fail(
            f"{request.node.nodeid} is a unit test but started {', '.join(started)}: "
            "move it to tests/process/",
            pytrace=False,
        )

"""Test tiers, decided at collection so nobody has to remember a marker.

- `e2e`: everything under tests/e2e (a real Prometheus, Alertmanager, VictoriaMetrics stack).
- `bench`: a benchmark file's tests that run the benchmark machinery (they start processes).
- `process`: a test that starts a child process or looks a binary up on PATH, itself or through
  any fixture or repository helper it uses.
- `unit`: the rest: in-process code and loopback servers only. `make check` runs this tier.

`process` is found by reading code, not by running it: the test function and every fixture it
needs are parsed, each name resolved in the function's globals, and functions and classes from
this repository's test and tooling packages followed to any depth. Reaching `subprocess`,
`multiprocessing`, an asyncio subprocess or `shutil.which` makes a test `process`. The exporter
package is not followed: it never starts processes, and following it would read most of it for
every test. A test the reading cannot judge takes an explicit `@pytest.mark.process`; the unit
tier's runtime guard (in conftest.py) fails any unit test that starts a process anyway.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

import pytest

TIERS = ("unit", "process", "e2e", "bench")
REPO = Path(__file__).resolve().parent.parent
E2E_DIR = REPO / "tests" / "e2e"
# Their process-starting tests measure throughput or hold a load for minutes.
BENCH_FILES = frozenset({"test_exporter_benchmark.py", "test_cluster_benchmark.py", "test_soak.py"})
# Packages whose code is followed from a test; see the module docstring for why not `exporter`.
FOLLOWED = ("tests", "bundle", "benchmarks")
PROCESS_MODULES = ("subprocess", "multiprocessing", "asyncio.subprocess")
_STARTERS: tuple[Any, ...] = (
    asyncio.create_subprocess_exec,
    asyncio.create_subprocess_shell,
    shutil.which,
    os.system,
    os.popen,
    os.fork,
    os.posix_spawn,
    os.posix_spawnp,
)


def _starts_process_itself(obj: Any) -> bool:
    if isinstance(obj, ModuleType):
        return obj.__name__ in PROCESS_MODULES or obj.__name__.startswith("multiprocessing.")
    if any(obj is starter for starter in _STARTERS):
        return True
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and (
        module in PROCESS_MODULES or module.startswith("multiprocessing.")
    )


def _followed(obj: Any) -> bool:
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.split(".")[0] in FOLLOWED and module != __name__


def _functions_of(obj: Any) -> Iterable[FunctionType]:
    """The plain functions behind a function or a class (methods, properties, static and class
    methods), including those of its bases from the followed packages."""
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if isinstance(obj, FunctionType):
        yield obj
    elif inspect.isclass(obj):
        for cls in obj.__mro__:
            if not _followed(cls):
                continue
            for member in vars(cls).values():
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, FunctionType):
                    yield member


def _referenced(function: FunctionType) -> Iterable[Any]:
    """Every global object the function's source names, with each attribute path resolved as far
    as it goes (`subprocess.run` yields the module, then the function)."""
    try:
        source = textwrap.dedent(inspect.getsource(function))
    except (OSError, TypeError):
        return
    namespace = function.__globals__
    for node in ast.walk(ast.parse(source)):
        path: list[str] = []
        while isinstance(node, ast.Attribute):
            path.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in namespace:
            continue
        obj = namespace[node.id]
        yield obj
        for attribute in reversed(path):
            try:
                obj = getattr(obj, attribute)
            except Exception:
                break
            yield obj


class ProcessFinder:
    """Answers "does running this start a process?", remembering every function it has read."""

    def __init__(self) -> None:
        # Per function: None when it starts nothing, else the call path to what starts one.
        self._known: dict[FunctionType, str | None] = {}

    def why(self, obj: Any) -> str | None:
        """How `obj` reaches a process (`test -> helper -> subprocess.Popen`), or None."""
        for function in _functions_of(obj):
            if reason := self._reason(function):
                return reason
        return None

    def _reason(self, function: FunctionType) -> str | None:
        if function in self._known:
            return self._known[function]
        # A cycle reads as "starts nothing" until the outer call has the answer.
        self._known[function] = None
        reason = None
        for obj in _referenced(function):
            if _starts_process_itself(obj):
                reason = _name(obj)
            elif _followed(obj) and obj is not function and (inner := self.why(obj)):
                reason = inner
            if reason:
                reason = f"{function.__qualname__} -> {reason}"
                break
        self._known[function] = reason
        return reason


def _name(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None) or repr(obj)


def _fixture_functions(item: pytest.Item) -> Iterable[Callable[..., Any]]:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return
    # Only pytest.Function declares fixturenames; an item with _fixtureinfo has them.
    for name in item.fixturenames:  # type: ignore[attr-defined]
        definitions = info.name2fixturedefs.get(name)
        if definitions:
            # The last definition is the one closest to the test, the one it gets.
            yield definitions[-1].func


def explicit_tiers(item: pytest.Item) -> set[str]:
    return {mark.name for mark in item.iter_markers() if mark.name in TIERS}


def tier_of(item: pytest.Item, finder: ProcessFinder) -> tuple[str, str | None]:
    """The item's tier, and why it is not `unit`."""
    path = Path(str(item.path))
    if path.is_relative_to(E2E_DIR):
        return "e2e", "under tests/e2e"
    function = getattr(item, "function", None)
    for needed in [function, *_fixture_functions(item)]:
        if needed is not None and _followed(needed) and (reason := finder.why(needed)):
            return ("bench" if path.name in BENCH_FILES else "process"), reason
    return "unit", None


def assign_tiers(items: list[pytest.Item]) -> None:
    """Give every collected test exactly one tier; an explicit tier marker wins."""
    finder = ProcessFinder()
    for item in items:
        explicit = explicit_tiers(item)
        if len(explicit) > 1:
            raise pytest.UsageError(f"{item.nodeid} has several tiers: {sorted(explicit)}")
        if not explicit:
            tier, reason = tier_of(item, finder)
            item.add_marker(getattr(pytest.mark, tier)(because=reason))


def refuse_processes_in_unit_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Make a unit test that starts a process fail, naming the command: the reading above missed
    it, and without this `make check` would quietly come to need a binary or a server."""
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
            f"{request.node.nodeid} is tiered unit but started {', '.join(started)}: "
            "mark it @pytest.mark.process",
            pytrace=False,
        )


class _Report:
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        counts: dict[str, int] = {}
        for item in session.items:
            mark = next(m for m in item.iter_markers() if m.name in TIERS)
            counts[mark.name] = counts.get(mark.name, 0) + 1
            because = mark.kwargs.get("because") or "explicit mark"
            print(
                f"{mark.name:8} {item.nodeid}" + ("" if mark.name == "unit" else f"  ({because})")
            )
        print(", ".join(f"{counts.get(tier, 0)} {tier}" for tier in TIERS))


if __name__ == "__main__":
    # Every test's tier and, for the others than unit, the call path that put it there.
    raise SystemExit(pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider"], [_Report()]))

"""The soak benchmark, reduced for CI: the same code as `make soak`, fewer sweeps.

The full run (100,000 sweeps) holds RSS growth under 5 MB, about 50 bytes a sweep, which a run
this short cannot resolve from allocator noise. The reduced run keeps every other limit as is and
caps RSS growth at 3 MB over its ~2,000 measured sweeps: anything retained per sweep of a
kilobyte or more (a snapshot, a rendered body, a connection's buffers) breaks it, while the
~1 MB the allocator still settles by after a short warm-up does not.
"""

from __future__ import annotations

import pytest

from benchmarks.soak import (
    FD_TOLERANCE,
    MB,
    THREAD_TOLERANCE,
    Result,
    Sample,
    Tally,
    table,
)

# The reduced soak's bound on RSS growth after warm-up. Measured on 2026-12-01 on the 2-core VM:
# 2.5 to 3.1 MB over 2,800 sweeps with 8 fault cycles, the same before and after that day's
# changes; 3 MB failed one CI run in three. A leak of a few kilobytes a sweep still goes past it.
CI_RSS_LIMIT = 4 * MB


def _result(**end: int) -> Result:
    warm = Sample(at=10.0, sweeps=2_000, rss=100 * MB, threads=30, fds=20, tasks=5)
    values = {"rss": warm.rss, "threads": 30, "fds": 20, "tasks": 5, **end}
    return Result(
        sweeps=100_000,
        seconds=1_000.0,
        warmup_sweeps=2_000,
        interval=0.005,
        scrapers=4,
        tally=Tally(scrapes=1_000),
        warm=warm,
        end=Sample(at=1_000.0, sweeps=100_000, **values),
        rss_max=values["rss"],
        threads_max=values["threads"],
        fds_max=values["fds"],
        fault_cycles=10,
    )


def test_limits_pass_within_tolerance():
    result = _result(
        rss=100 * MB + 5 * MB - 1, threads=30 + THREAD_TOLERANCE, fds=20 + FD_TOLERANCE
    )
    assert result.problems() == []
    assert "Result: PASS" in table(result)


@pytest.mark.parametrize(
    ("end", "message"),
    [
        ({"rss": 105 * MB}, "RSS grew 5.00 MB"),
        ({"threads": 30 + THREAD_TOLERANCE + 1}, "threads went from 30"),
        ({"fds": 20 + FD_TOLERANCE + 1}, "fds went from 20"),
        ({"tasks": 9}, "tasks went from 5 to 9"),
    ],
)
def test_each_limit_fails_the_soak(end, message):
    result = _result(**end)
    assert any(message in problem for problem in result.problems()), result.problems()
    assert "Result: FAIL" in table(result)


def test_a_failed_scrape_fails_the_soak():
    result = _result()
    result.tally.fail("scraper 1: status 503")
    assert result.problems() == ["1 scrapes failed"]
    assert "- scraper 1: status 503" in table(result)

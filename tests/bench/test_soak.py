"""The soak benchmark, reduced for CI: the same code as `make soak`, fewer sweeps: the benchmark's
own run; the others are in tests/unit/test_soak.py."""

from __future__ import annotations

import pytest

from benchmarks.soak import (
    soak,
    table,
)
from tests.unit.test_soak import CI_RSS_LIMIT


@pytest.mark.timeout(150)
def test_reduced_soak_holds_memory_threads_and_fds_flat():
    result = soak(2_800, scrapers=4, warmup=800, timeout=120, rss_limit=CI_RSS_LIMIT)
    report = table(result)
    assert result.problems() == [], report
    # Measured over at least this many sweeps, not a warm-up that swallowed the run.
    assert result.end.sweeps - result.warm.sweeps >= 1_500, report
    # The scrapers and the faults really ran the whole time.
    assert result.tally.scrapes >= result.seconds * result.scrapers * 5, report
    assert result.tally.faults >= 11 * 5, report
    assert result.tally.failed == result.tally.faults_failed == 0, report
    assert "Result: PASS" in report

"""The shared retry delay: doubles, caps, jitters, and resets on success."""

import random

import pytest

from kube_gpu_exporter.exporter.backoff import Backoff


def test_doubles_up_to_the_cap_and_resets():
    backoff = Backoff(1.0, 8.0, jitter=0.0)
    assert [backoff.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.succeeded()
    assert backoff.failed() == 1.0


def test_jitter_stays_within_bounds_and_varies():
    # Drawn from a seeded generator, so that the same delays come every run.
    draw = random.Random(47).uniform
    delays = [Backoff(10.0, 60.0, jitter=0.2, uniform=draw).failed() for _ in range(200)]
    assert all(8.0 <= d <= 12.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100
    # The jitter's extremes are the bounds themselves, and they apply to the capped delay.
    assert Backoff(10.0, 60.0, uniform=lambda low, high: low).failed() == pytest.approx(8.0)
    capped = Backoff(10.0, 60.0, failures=5, uniform=lambda low, high: high)
    assert capped.failed() == pytest.approx(72.0)

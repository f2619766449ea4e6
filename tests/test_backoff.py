"""The shared retry delay: doubles, caps, jitters, and resets on success."""

from exporter.backoff import Backoff


def test_doubles_up_to_the_cap_and_resets():
    backoff = Backoff(1.0, 8.0, jitter=0.0)
    assert [backoff.failed() for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    backoff.succeeded()
    assert backoff.failed() == 1.0


def test_jitter_stays_within_bounds_and_varies():
    delays = [Backoff(10.0, 60.0, jitter=0.2).failed() for _ in range(200)]
    assert all(8.0 <= d <= 12.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100

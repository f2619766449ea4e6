"""Helper rounds on demand, for callers that step the simulated clock themselves.

A poller's helpers normally sample on threads of their own, on the real clock. A test or a
benchmark that moves the simulator's clock by hand (the golden scrape, the cluster history) wants
each round to happen at a simulated instant it chose: it hands the poller a SteppedHelpers and
calls `run_once()` between sweeps.
"""

from __future__ import annotations

from exporter.nvml.helper import ThreadedHelpers


class SteppedHelpers(ThreadedHelpers):
    """A poller's HelperRunner that starts only the helpers whose work is a blocking wait (XID
    events cannot be one round on the caller's thread) and runs the others when told."""

    def start(self) -> None:
        for helper in self._helpers:
            if helper.needs_thread:
                helper.start()

    def run_once(self) -> None:
        """One round of every helper now, on this thread; the poller's next sweep reports them."""
        for helper in self._helpers:
            helper.run_once()

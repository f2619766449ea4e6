"""A supervised daemon thread with a stop event: the shape shared by the poller, its helper threads,
the pod-resources watcher and the Kubernetes watches.

Daemon, because a thread stuck inside a hung NVML call must never keep the process from exiting.

Supervised, because a thread that dies quietly leaves its last data on display as if it were
fresh. Each subclass implements its loop in `_run` and handles the errors it expects there; an
exception that escapes the loop is a bug or an input nobody foresaw. The supervisor logs it once
with its traceback, marks the thread unhealthy (every status the thread feeds reads failure until
the loop reports a healthy round again with `_progressed()`), and re-enters the loop after an
exponential backoff. A thread that crashes `max_consecutive_crashes` times without a healthy
round in between, or whose restart preparation itself raises, gives up: `problem()` then says
so, and /healthz fails, so the kubelet restarts the pod instead of it serving frozen data.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Protocol

from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock

log = logging.getLogger(__name__)


def _describe(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # an exception whose __str__ raises must not take its supervisor down
        text = "<unprintable>"
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


class Stoppable(Protocol):
    def stop(self, timeout: float = ...) -> None: ...


def stop_within(seconds: float, parts: Sequence[Stoppable]) -> None:
    """Stop every part within `seconds` all told: each is asked to stop first, so that all of
    them wind down at once, then each is waited for with what is left. A thread still stuck
    when the time is up (a read nothing could wake) is a daemon, left behind rather than
    holding up the exit."""
    for part in parts:
        if isinstance(part, BackgroundThread):
            part.request_stop()
    deadline = time.monotonic() + seconds
    for part in parts:
        part.stop(max(0.0, deadline - time.monotonic()))


class BackgroundThread:
    thread_name = "background"
    # With the 1 s initial backoff doubling to 30 s, five crashes in a row span about 15 s.
    max_consecutive_crashes = 5
    restart_initial_seconds = 1.0
    restart_max_seconds = 30.0

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        # What the loop's waits and timings read: the system's, or a test's ManualClock.
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Crashes since the last healthy round; the supervisor gives up at the maximum.
        self.consecutive_crashes = 0
        self.restarts = 0
        self.last_crash: str | None = None
        # Why the thread gave up for good; None while it runs or restarts.
        self.gave_up: str | None = None
        self._logged_crashes: set[str] = set()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._supervise, name=self.thread_name, daemon=True
            )
            self._thread.start()

    def request_stop(self) -> None:
        """Ask the loop to end, without waiting for it: whatever it waits on is woken."""
        self._stop.set()

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self.request_stop()
        self.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def thread_healthy(self) -> bool:
        """False from a crash until the restarted loop reports a healthy round, and for good
        once the thread has given up. A thread never started is healthy: its owner steps it."""
        return self.consecutive_crashes == 0 and self.gave_up is None

    def problem(self) -> str | None:
        """Why this thread can no longer refresh its data, for /healthz; None while it can."""
        if self.gave_up is not None:
            return self.gave_up
        if self._thread is not None and not self._thread.is_alive() and not self._stop.is_set():
            return f"the {self.thread_name} thread has stopped"
        return None

    def _run(self) -> None:
        raise NotImplementedError

    def _progressed(self) -> None:
        """Called by the loop after each healthy round: ends a crash streak."""
        if self.consecutive_crashes:
            log.info(
                "%s thread healthy again after %d restart(s)",
                self.thread_name,
                self.consecutive_crashes,
            )
            self.consecutive_crashes = 0
            self._logged_crashes.clear()

    def _on_crash(self) -> None:
        """Drop whatever state the crashed loop may have left half-updated, before a restart.
        Raising here means the thread cannot be restarted: it gives up."""

    def _supervise(self) -> None:
        while not self._stop.is_set():
            try:
                self._run()
            except Exception as exc:
                if self._stop.is_set():
                    return  # stop() closed something under the loop
                if not self._crashed(exc):
                    return
            else:
                return

    def _crashed(self, exc: Exception) -> bool:
        """Record a crash; returns whether the loop should be re-entered."""
        self.consecutive_crashes += 1
        description = _describe(exc)
        self.last_crash = description
        if self.consecutive_crashes >= self.max_consecutive_crashes:
            self._give_up(
                f"the {self.thread_name} thread crashed {self.consecutive_crashes} times in a "
                f"row without a healthy round; last: {description}",
                exc,
            )
            return False
        # Read at each crash, so an owner (or a test) may tune the class defaults per instance.
        backoff = Backoff(self.restart_initial_seconds, self.restart_max_seconds)
        backoff.failures = self.consecutive_crashes - 1
        delay = backoff.failed()
        # Once per distinct failure in a streak: a loop crashing every few seconds on the same
        # input must not flood the log with the same traceback.
        if description not in self._logged_crashes:
            self._logged_crashes.add(description)
            log.error(
                "%s thread crashed; restarting it in %.1fs",
                self.thread_name,
                delay,
                exc_info=exc,
            )
        else:
            log.debug("%s thread crashed again (%s)", self.thread_name, description)
        try:
            self._on_crash()
        except Exception as hook_exc:
            self._give_up(
                f"the {self.thread_name} thread crashed ({description}) and could not be "
                f"restarted: {_describe(hook_exc)}",
                hook_exc,
                cleanup=False,
            )
            return False
        self._clock.wait(self._stop, delay)
        self.restarts += 1
        return True

    def _give_up(self, why: str, exc: BaseException, *, cleanup: bool = True) -> None:
        self.gave_up = why
        # The traceback only if this streak has not shown it already.
        seen = _describe(exc) in self._logged_crashes
        log.error("%s; giving up on it, /healthz now fails", why, exc_info=None if seen else exc)
        if cleanup:
            try:
                self._on_crash()
            except Exception:
                log.debug("cleanup after giving up on %s failed", self.thread_name, exc_info=True)


class PeriodicSampler(BackgroundThread):
    """A helper thread that runs `sample_once()` every interval and reports, node_exporter-style,
    whether its last round succeeded and how long it took.

    A round still running past its limit is overdue, and counts as failed until it ends: the
    thread is alive and healthy, but stuck (a read that never returns), so its last data would
    otherwise be shown as fresh for as long as it stays stuck. The limit is
    `overdue_after_intervals` intervals, so that the data is never older than the snapshot's own
    staleness limit (3 intervals) while reported good, and at least `overdue_floor_seconds`, so
    that a short interval does not call a round slow that merely met a busy driver (the same
    10 s as a GPU read's default deadline)."""

    overdue_after_intervals = 2.0
    overdue_floor_seconds = 10.0

    def __init__(self, interval_seconds: float, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock)
        self._interval = interval_seconds
        self._wake = threading.Event()
        self.last_success = True
        self.last_duration_seconds = 0.0
        self.rounds = 0  # completed by the thread; a test or an owner may wait on it
        # Monotonic start of the thread's round in progress; None between rounds.
        self._round_started_at: float | None = None
        # The start of the overdue round already logged, so that it is logged once.
        self._overdue_logged: float | None = None

    @property
    def interval_seconds(self) -> float:
        return self._interval

    @property
    def overdue_limit_seconds(self) -> float:
        return max(self.overdue_after_intervals * self._interval, self.overdue_floor_seconds)

    def overdue_seconds(self) -> float | None:
        """How long the round in progress has run, when that is past its limit; else None."""
        started = self._round_started_at
        if started is None:
            return None
        running = self._clock.monotonic() - started
        return running if running > self.overdue_limit_seconds else None

    @property
    def round_succeeded(self) -> bool:
        """The last round's outcome, and never success while the thread is crashed or gone, or
        while a round is overdue (logged once per such round)."""
        overdue = self.overdue_seconds()
        if overdue is not None and self._overdue_logged != self._round_started_at:
            self._overdue_logged = self._round_started_at
            log.warning(
                "%s: a round has run for %.1fs, past its %.1fs limit; its collector reads "
                "failed until the round ends",
                self.thread_name,
                overdue,
                self.overdue_limit_seconds,
            )
        return self.last_success and self.thread_healthy and overdue is None

    @property
    def reported_duration_seconds(self) -> float:
        """The last round's duration, or, while a round is overdue, how long it has run."""
        overdue = self.overdue_seconds()
        return self.last_duration_seconds if overdue is None else overdue

    def wake(self) -> None:
        """Run the next round now instead of at the end of the interval; the interval restarts
        from that round."""
        self._wake.set()

    def request_stop(self) -> None:
        super().request_stop()
        self._wake.set()  # the loop waits on the wake event, not on the stop event

    def _run(self) -> None:
        clock = self._clock
        while not self._stop.is_set():
            started = clock.monotonic()
            # Cleared before the round: a wake() that lands during it asks for one more.
            self._wake.clear()
            self._round_started_at = started
            try:
                self.sample_once()
            finally:
                self._round_started_at = None
            self.last_duration_seconds = clock.monotonic() - started
            if self._overdue_logged == started:
                log.info(
                    "%s: the overdue round ended after %.1fs",
                    self.thread_name,
                    self.last_duration_seconds,
                )
            self.rounds += 1
            self._progressed()
            clock.wait(self._wake, self._next_round_in())

    def _next_round_in(self) -> float:
        """Seconds from the end of a round to the next: what is left of the interval, or longer
        for a sampler that knows its next round would have nothing to do before then."""
        return self._interval - self.last_duration_seconds

    def _on_crash(self) -> None:
        self.last_success = False

    def sample_once(self) -> None:
        raise NotImplementedError

"""How the watches read the API server's answers, over real HTTP from the fake API and through the
real `kubernetes` client's configuration. A hostile or broken server costs one failed round,
logged on one line, with memory bounded and collector_success{collector="kubernetes"} 0 while
the view cannot be trusted; everything else keeps being served:

- every answer is read within a byte limit and a deadline (issue 42): an error answer with a
  huge or trickled body, headers or a LIST trickled a byte at a time, an event line that never
  ends; a stuck answer is abandoned and retried, and a view not refreshed for longer than a
  healthy watch goes reads unsynced;
- 410 Gone to every watch, watches ended at once, a LIST too large to parse and JSON nested past
  Python's recursion limit back off with jitter, or are refused with one line.

Before: a pods LIST answered 500 with a 1 GiB body was read whole (4.18 GB of RSS; 256 MiB took
1.05 GB), and a watch answered 500 with a body trickled a byte every 2 s was never retried
(340 s and counting), with collector_success 1 throughout and SIGTERM taking 9.5 s.

The watchers run on a ManualClock: each backoff is read off the clock (`parked`) and passed
with `advance`. The deadlines on the sockets stay real, and are cut to fractions of a second.
The cases that start an exporter process are in tests/process/test_kubernetes_answers.py."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest

from kube_gpu_exporter.exporter.kubernetes.answer_deadlines import HEADERS_SECONDS
from kube_gpu_exporter.exporter.kubernetes.api_requests import MAX_ERROR_BYTES
from kube_gpu_exporter.exporter.kubernetes.watcher import HEALTHY_ROUND_SECONDS
from tests.conftest import wait_for
from tests.support.clock_steps import at_least_parked, within_jitter
from tests.support.fake_kube_api import SLICES, ErrorAnswer, FakeKubeApi
from tests.support.kubernetes import GIB, MIB, NODE, SOCKET_BUFFERS, kube_status, make_watcher

DEEP = 100_000
HELD_OPEN = 300  # watch_timeout_seconds: the server holds each watch open, as in production
# The production backoff of a failed round: 0.5 s doubling to 30 s.
BACKOFF_STEPS = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0)


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi(NODE)
    fake.put_pod(fake.pod("ml", "trainer-0"))
    fake.start()
    yield fake
    fake.stop()


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


# ---- byte limits and deadlines ----


def test_a_huge_error_body_is_read_only_as_far_as_its_status_message(api, clock):
    api.error_answers[("pods", False)] = ErrorAnswer(500, declared=GIB, sent=GIB)
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        for attempt in range(3):
            # The pods LIST fails, and its watch backs off before the next.
            [wait] = at_least_parked(clock)
            assert len(api.error_sent["pods"]) == attempt + 1
            assert watcher.view().watch_errors == attempt + 1
            assert not watcher.view().pods_synced
            clock.advance(wait)
    finally:
        watcher.stop()
    # What the server got out before the client hung up: the prefix it reads, and what the
    # kernel's socket buffers took, never the gibibyte. (A fourth LIST may have begun since.)
    finished = api.error_sent["pods"][:3]
    assert all(n <= MAX_ERROR_BYTES + SOCKET_BUFFERS for n in finished), finished


def test_a_trickled_error_body_on_the_watch_is_abandoned_and_the_watch_retried(api, clock):
    api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, trickle_seconds=0.02)
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, error_body_seconds=0.3
    )
    watcher.start()
    try:
        # The body comes a byte every 0.02 s, each within any read timeout; it is given up
        # after error_body_seconds, where the watch used to hang for its 300 s + 15 s.
        [wait] = at_least_parked(clock)
        [watched] = api.requests_of("pods", watch=True)
        assert time.monotonic() - watched >= 0.3
        # Between a failure and the next LIST the view cannot be trusted, and reads so.
        assert not kube_status(watcher)
        clock.advance(wait)
        # Retried after the backoff, from a LIST.
        assert wait_for(lambda: len(api.error_sent.get("pods", [])) == 2)
        assert len(api.requests_of("pods", watch=False)) == 2
        # Stopped while the second trickle is being read.
        started = time.monotonic()
        watcher.stop(timeout=5.0)
        assert time.monotonic() - started < 5.0
        assert not watcher.alive
    finally:
        watcher.stop(timeout=5.0)


def test_a_trickled_list_is_abandoned_at_the_list_timeout(api, clock):
    api.list_bodies["pods"] = b'{"kind":"PodList","items":[]}'
    api.list_trickle_seconds = 0.05  # each byte within the read timeout; the body in 1.5 s
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, list_timeout_seconds=0.3
    )
    watcher.start()
    try:
        [wait] = at_least_parked(clock)
        [listed] = api.requests_of("pods", watch=False)
        assert time.monotonic() - listed >= 0.3
        view = watcher.view()
        assert view.watch_errors == 1 and not view.pods_synced
        clock.advance(wait)
        # Listed again after the backoff.
        assert wait_for(lambda: len(api.requests_of("pods", watch=False)) == 2)
    finally:
        watcher.stop()


def test_headers_trickled_a_byte_at_a_time_are_abandoned_at_their_deadline(api, clock):
    """http.client reads a header line of up to 64 KiB, each byte within the socket's read
    timeout: only a deadline over the whole of the headers ends a trickle."""
    api.header_trickle = {"pods"}
    api.header_trickle_seconds = 0.02
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, headers_seconds=0.3
    )
    started = time.monotonic()  # the headers' deadline runs from the request, sent after this
    watcher.start()
    try:
        [wait] = at_least_parked(clock)
        assert time.monotonic() - started >= 0.3
        view = watcher.view()
        assert view.watch_errors == 1 and not view.pods_synced
        # One request per failed round: urllib3 is not left to retry it at once (3 times),
        # which would hold every round for four deadlines.
        assert len(api.requests_of("pods", watch=False)) == 1
        clock.advance(wait)
        assert wait_for(lambda: len(api.requests_of("pods", watch=False)) == 2)
    finally:
        watcher.stop()


def test_a_view_not_refreshed_for_longer_than_a_healthy_watch_goes_reads_unsynced(api, clock):
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().pods_synced and watcher.view().node_synced)
        # A healthy watch is refreshed at least this often: the server ends it within its
        # timeout, the stall grace abandons it past that, and the next is answered within the
        # headers' deadline. Time passes as if every read since had been stuck.
        clock.advance(HELD_OPEN + 15 + HEADERS_SECONDS)
        assert watcher.view().pods_synced and kube_status(watcher)
        clock.advance(1)
        assert not watcher.view().pods_synced
        assert not kube_status(watcher)
    finally:
        watcher.stop()


def test_a_watch_trickling_an_endless_line_is_abandoned_at_its_deadline(api, clock):
    api.endless_watches = {"pods"}
    api.endless_trickle = True  # one byte each 0.1 s: every socket read succeeds
    # A watch must end within its timeout plus the stall grace; with timeoutSeconds=0 the
    # deadline is the grace alone (the node's watches, ended at once, park in their backoff).
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=0, stall_grace_seconds=0.3)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().watch_errors == 1)
        [watched] = api.requests_of("pods", watch=True)
        assert time.monotonic() - watched >= 0.3
        assert ("ml", "trainer-0") in watcher.view().pods
        assert len(api.endless_sent["pods"]) == 1
    finally:
        watcher.stop(timeout=3)


# ---- backoff ----


def test_410_to_every_watch_backs_off_with_jitter_and_reads_unsynced(api, clock):
    api.gone_always = {"pods"}
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, max_backoff_seconds=30
    )
    watcher.start()
    waits: list[float] = []
    try:
        for round_ in range(len(BACKOFF_STEPS)):
            [wait] = at_least_parked(clock)
            waits.append(wait)
            # One LIST and one watch per round: before, about 114 requests a second.
            assert len(api.requests_of("pods", watch=False)) == round_ + 1
            assert len(api.requests_of("pods", watch=True)) == round_ + 1
            # Every 410 leaves the view unsynced until the next list, which the backoff delays;
            # the pods listed stay.
            assert not kube_status(watcher)
            assert ("ml", "trainer-0") in watcher.view().pods
            assert watcher.view().relists == round_ + 1
            clock.advance(wait)
    finally:
        watcher.stop(timeout=3)
    assert all(map(within_jitter, waits, BACKOFF_STEPS)), waits
    # Jittered: the waits are not all the same fraction of their nominal length.
    assert len({round(w / n, 9) for w, n in zip(waits, BACKOFF_STEPS, strict=True)}) > 1, waits


def test_the_backoff_starts_over_after_a_healthy_round(api, clock):
    api.gone_always = {"pods"}
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, max_backoff_seconds=30
    )
    watcher.start()
    try:
        waits: list[float] = []
        for nominal in BACKOFF_STEPS[:4]:
            if waits:
                clock.advance(waits[-1])
            waits.append(at_least_parked(clock)[0])
            assert within_jitter(waits[-1], nominal), (waits, nominal)
        assert len(api.requests_of("pods", watch=False)) == 4
        # The fifth round lists, and its watch holds.
        api.gone_always = set()
        clock.advance(waits[-1])
        assert wait_for(lambda: watcher.view().pods_synced)
        # The watch is held open past a healthy round's length, then ended; the next one is
        # answered 410 Gone (the node's too).
        clock.advance(HEALTHY_ROUND_SECONDS + 1)
        api.expire_history()
        waits = at_least_parked(clock, 2)
        # The first step of the backoff again (0.4 to 0.6 s), not the fifth (6.4 to 9.6 s).
        assert all(within_jitter(wait, BACKOFF_STEPS[0]) for wait in waits), waits
    finally:
        watcher.stop(timeout=3)


def test_watches_ended_at_once_are_opened_again_with_backoff(api, clock):
    api.watch_lines["pods"] = []  # every watch answered, and ended, with nothing in it
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, max_backoff_seconds=30
    )
    watcher.start()
    try:
        # Watches at 0, 0.5, 1.5 and 3.5 s, give or take the jitter: before, several hundred
        # in those 4 s.
        for round_, nominal in enumerate(BACKOFF_STEPS[:4]):
            [wait] = at_least_parked(clock)
            assert within_jitter(wait, nominal), (wait, nominal)
            assert len(api.requests_of("pods", watch=True)) == round_ + 1
            # Nothing failed: the view is what the list gave, and nothing was missed since.
            assert watcher.view().pods_synced and watcher.view().watch_errors == 0
            clock.advance(wait)
    finally:
        watcher.stop(timeout=3)
    assert len(api.requests_of("pods", watch=False)) == 1


# ---- answers too large or too deep to parse ----


def test_a_list_declaring_too_many_bytes_is_refused_unread(api, clock, caplog):
    api.list_chunked = False
    # A good answer, but padded past the limit: read whole, it would have been taken.
    listing = {"metadata": {"resourceVersion": "1"}, "items": [api.node_object()]}
    api.list_bodies["nodes"] = json.dumps(listing).encode().ljust(5 * MIB)
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        at_least_parked(clock)  # the node's watch, backing off
        assert wait_for(lambda: watcher.view().pods_synced)
        view = watcher.view()
        assert view.watch_errors == 1 and not view.node_synced and not kube_status(watcher)
    finally:
        watcher.stop(timeout=3)
    said = [r.getMessage() for r in caplog.records if "node LIST" in r.getMessage()]
    assert said and f"is {5 * MIB} bytes, over its 4 MiB limit" in said[0], said


def test_a_list_nested_past_the_recursion_limit_is_a_bad_answer(api, clock, caplog):
    caplog.set_level(logging.WARNING)
    api.list_bodies["pods"] = (
        b'{"metadata":{"resourceVersion":"5"},"items":[' + deep_json(DEEP) + b"]}"
    )
    watcher = make_watcher(api.host, clock=clock, watch_timeout_seconds=HELD_OPEN)
    watcher.start()
    try:
        # Twice, a backoff apart: a failed round each time, not a crashed thread.
        [wait] = at_least_parked(clock)
        clock.advance(wait)
        at_least_parked(clock)
        assert watcher.view().watch_errors == 2
        assert watcher.consecutive_crashes == 0 and watcher.problem() is None
        assert not watcher.view().pods_synced and not kube_status(watcher)
        # The node's watch is untouched.
        assert wait_for(lambda: watcher.view().node_synced)
    finally:
        watcher.stop(timeout=3)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, failures  # one line, no traceback of a crashed thread
    assert "nested deeper than Python parses" in failures[0] and "\n" not in failures[0]


def test_a_watch_event_nested_past_the_recursion_limit_is_a_bad_answer(api, clock, caplog):
    caplog.set_level(logging.WARNING)
    event = b'{"type":"ADDED","object":{"metadata":{"name":"x"},"spec":' + deep_json(DEEP) + b"}}"
    api.watch_lines[SLICES] = [event + b"\n"]
    watcher = make_watcher(
        api.host, clock=clock, watch_timeout_seconds=HELD_OPEN, watch_resource_slices=True
    )
    watcher.start()
    try:
        [wait] = at_least_parked(clock)
        # Unsynced from the failure until the next list.
        assert not kube_status(watcher)
        clock.advance(wait)
        at_least_parked(clock)
        assert watcher.view().watch_errors == 2
        slices = watcher._slice_watch
        assert slices is not None and slices.consecutive_crashes == 0
        assert watcher.problem() is None
        assert not kube_status(watcher)
        # The pods' and the node's watches are untouched.
        assert wait_for(lambda: watcher.view().pods_synced and watcher.view().node_synced)
    finally:
        watcher.stop(timeout=3)
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, failures
    assert "an event of the ResourceSlice watch is JSON nested deeper" in failures[0]

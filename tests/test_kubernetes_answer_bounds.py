"""Error answers, trickles and stalls from the API server, over real HTTP from the fake API through
the real `kubernetes` client's configuration (issue 42): every answer is read within a byte limit
and a deadline, a stuck one is abandoned and retried, collector_success reads 0 while the view
is not refreshed, and SIGTERM ends the exporter within 5 s whatever its watches are stuck in.

Before: a pods LIST answered 500 with a 1 GiB body was read whole (4.18 GB of RSS; 256 MiB took
1.05 GB), and a watch answered 500 with a body trickled a byte every 2 s was never retried
(340 s and counting), with collector_success 1 throughout and SIGTERM taking 9.5 s."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator

import pytest

from exporter.kubernetes import answer_deadlines
from exporter.kubernetes.api_requests import MAX_ERROR_BYTES
from tests.conftest import wait_for
from tests.fake_kube_api import ErrorAnswer, FakeKubeApi
from tests.test_kubernetes_enrichment import NODE, make_watcher
from tests.test_process import scrape_until, start_exporter
from tests.test_resilience3_kubernetes import (
    RSS_BOUND_MB,
    SOCKET_BUFFERS,
    cluster,
    exporter_flags,
    kube_status,
    kube_success,
    peak_rss_mb,
)

GIB = 1 << 30


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi(NODE)
    fake.put_pod(fake.pod("ml", "trainer-0"))
    fake.start()
    yield fake
    fake.stop()


def test_a_huge_error_body_is_read_only_as_far_as_its_status_message(api: FakeKubeApi) -> None:
    api.error_answers[("pods", False)] = ErrorAnswer(500, declared=GIB, sent=GIB)
    watcher = make_watcher(api.host)
    watcher.start()
    try:
        assert wait_for(lambda: len(api.error_sent.get("pods", [])) >= 3, timeout=20)
        assert not watcher.view().pods_synced
        assert watcher.view().watch_errors >= 2
    finally:
        watcher.stop()
    # What the server got out before the client hung up: the prefix it reads, and what the
    # kernel's socket buffers took, never the gibibyte.
    finished = api.error_sent["pods"][:-1]
    assert finished and all(n <= MAX_ERROR_BYTES + SOCKET_BUFFERS for n in finished), finished


def test_a_trickled_error_body_on_the_watch_is_abandoned_and_the_watch_retried(
    api: FakeKubeApi,
) -> None:
    api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, trickle_seconds=0.2)
    watcher = make_watcher(api.host, watch_timeout_seconds=300)
    watcher.start()
    try:
        # Each watch's error body is given up after ERROR_BODY_SECONDS (5 s), so the watch is
        # retried (after a LIST) three times in well under the 300 s + 15 s it used to hang.
        assert wait_for(lambda: len(api.requests_of("pods", watch=True)) >= 3, timeout=25)
        # Between a failure and the next LIST the view cannot be trusted, and reads so.
        assert wait_for(lambda: not kube_status(watcher), timeout=10)
        started = time.monotonic()
    finally:
        watcher.stop(timeout=5.0)
    assert time.monotonic() - started < 5.0
    assert not watcher.alive


def test_a_trickled_list_is_abandoned_at_the_list_timeout(api: FakeKubeApi) -> None:
    api.list_bodies["pods"] = b'{"kind":"PodList","items":[]}'
    api.list_trickle_seconds = 0.5
    watcher = make_watcher(api.host, list_timeout_seconds=2.0)
    watcher.start()
    try:
        assert wait_for(lambda: len(api.requests_of("pods", watch=False)) >= 3, timeout=20)
        assert not watcher.view().pods_synced
        assert watcher.view().watch_errors >= 2
    finally:
        watcher.stop()


def test_headers_trickled_a_byte_at_a_time_are_abandoned_at_their_deadline(
    api: FakeKubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    """http.client reads a header line of up to 64 KiB, each byte within the socket's read
    timeout: only a deadline over the whole of the headers ends a trickle."""
    monkeypatch.setattr(answer_deadlines, "HEADERS_SECONDS", 1.5)
    api.header_trickle = {"pods"}
    watcher = make_watcher(api.host)
    watcher.start()
    try:
        assert wait_for(lambda: len(api.requests_of("pods", watch=False)) >= 3, timeout=20)
        view = watcher.view()
        assert view.watch_errors >= 2 and not view.pods_synced
        # One request per failed round: urllib3 is not left to retry each at once (3 times),
        # which would hold every round for four deadlines.
        assert len(api.requests_of("pods", watch=False)) <= view.watch_errors + 1
    finally:
        watcher.stop()


def test_a_view_not_refreshed_for_longer_than_a_healthy_watch_goes_reads_unsynced(
    api: FakeKubeApi,
) -> None:
    watcher = make_watcher(api.host, watch_timeout_seconds=300)
    watcher.start()
    try:
        assert wait_for(lambda: watcher.view().pods_synced, timeout=10)
        # As if every read since had been stuck past every deadline.
        watcher._refreshed["pods_synced"] -= 300 + 15 + answer_deadlines.HEADERS_SECONDS + 1
        assert not watcher.view().pods_synced
        assert not kube_status(watcher)
    finally:
        watcher.stop()


# ---- the exporter as a process ----


def _trickled_watch_errors(api: FakeKubeApi) -> None:
    api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, trickle_seconds=2.0)


def _trickled_headers(api: FakeKubeApi) -> None:
    api.header_trickle = {"pods", "nodes"}


def _trickled_list(api: FakeKubeApi) -> None:
    api.list_bodies["pods"] = b'{"kind":"PodList","items":[]}'
    api.list_trickle_seconds = 2.0


def _quiet_watch(api: FakeKubeApi) -> None:
    """Nothing hostile: a watch held open with nothing to say."""


@pytest.mark.parametrize(
    "stuck",
    [_quiet_watch, _trickled_watch_errors, _trickled_headers, _trickled_list],
    ids=["quiet-watch", "trickled-watch-error", "trickled-headers", "trickled-list"],
)
def test_sigterm_ends_the_exporter_within_5s_whatever_its_watches_are_stuck_in(
    tmp_path, stuck
) -> None:
    api = cluster()
    stuck(api)
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        scrape_until(base, lambda t: "DCGM_FI_DEV_GPU_TEMP{" in t, proc=proc)
        if stuck is not _quiet_watch:
            assert wait_for(lambda: sum(api.in_progress.values()) > 0, timeout=20)
        else:
            assert wait_for(lambda: api.requests_of("pods", watch=True), timeout=20)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=15)
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        api.stop()
    assert proc.returncode == 0, stderr[-2000:]
    assert took < 5.0, (took, stderr[-2000:])


def test_a_gibibyte_error_body_keeps_the_exporter_within_50_mb_of_normal(tmp_path) -> None:
    api = cluster()
    api.start()
    proc, base = start_exporter(*exporter_flags(api, tmp_path))
    try:
        scrape_until(base, lambda t: kube_success(t) == 1, proc=proc, what="a synced view")
        normal = peak_rss_mb(proc.pid)
        # Every LIST and every watch of the pods answered 500 with a 1 GiB body from now on;
        # the open watch is made to fail by a 410, so that the pods are listed again.
        api.error_answers[("pods", False)] = ErrorAnswer(500, declared=GIB, sent=GIB)
        api.error_answers[("pods", True)] = ErrorAnswer(500, declared=GIB, sent=GIB)
        api.expire_history()
        assert wait_for(lambda: len(api.error_sent.get("pods", [])) >= 4, timeout=30)
        text = scrape_until(base, lambda t: kube_success(t) == 0, proc=proc, what="unsynced")
        assert "DCGM_FI_DEV_GPU_TEMP{" in text
        peak = peak_rss_mb(proc.pid)
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
        api.stop()
    assert peak - normal < 50, (normal, peak)
    assert peak < RSS_BOUND_MB
    failures = [line for line in stderr.splitlines() if "HTTP 500" in line]
    assert failures and all("etcd is on fire" in line for line in failures), stderr[-2000:]

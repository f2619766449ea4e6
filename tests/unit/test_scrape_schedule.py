"""A snapshot is rendered when a scrape is due before the next one, and on demand otherwise."""

from __future__ import annotations

import asyncio

import pytest

from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.scrape_schedule import (
    MAX_SCRAPERS,
    UNLEARNT_FORGET_SECONDS,
    ScrapeSchedule,
)
from kube_gpu_exporter.exporter.exposition.store import ExpositionStore
from kube_gpu_exporter.exporter.server import PERIODIC_SCRAPER_HEADER
from tests.conftest import LABELS, joined_with
from tests.unit.test_server import client_for, current


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def learnt(clock: Clock, period: float, address: str = "10.0.0.1", times: int = 3):
    schedule = ScrapeSchedule(clock)
    for _ in range(times):
        schedule.scraped(address)
        clock.now += period
    clock.now -= period  # back to the last scrape
    return schedule


def test_nothing_is_due_before_the_first_scrape_and_everything_until_a_period_is_known():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    assert not schedule.due_within(1.0)
    schedule.scraped("10.0.0.1")
    clock.now += 10
    assert schedule.due_within(1.0)  # one scrape: it may come back any time


def test_a_scrape_is_due_only_near_its_period():
    clock = Clock()
    schedule = learnt(clock, 15.0)
    clock.now += 1.0
    assert not schedule.due_within(1.5)
    clock.now += 12.0  # 13 s after the last scrape, the next in 2 s
    assert not schedule.due_within(1.5)
    clock.now += 0.6
    assert schedule.due_within(1.5)
    clock.now += 5.0  # overdue: due until it comes or is forgotten
    assert schedule.due_within(1.5)


def test_scrapers_behind_one_address_count_at_their_shortest_gap():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    for gap in (5.0, 10.0, 5.0, 10.0):
        schedule.scraped("127.0.0.1")
        clock.now += gap
    schedule.scraped("127.0.0.1")
    clock.now += 1.0
    assert not schedule.due_within(1.5)
    clock.now += 2.6
    assert schedule.due_within(1.5)


def test_the_earliest_of_several_scrapers_decides():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    start = clock.now
    visits = [(t, "10.0.0.1") for t in (0, 30, 60)] + [(t, "10.0.0.2") for t in (5, 25, 45, 65)]
    for at, address in sorted(visits):
        clock.now = start + at
        schedule.scraped(address)
    clock.now = start + 66  # next: 10.0.0.1 at 90, 10.0.0.2 at 85
    assert not schedule.due_within(1.5)
    clock.now = start + 83.6
    assert schedule.due_within(1.5)


def test_a_scraper_that_stopped_is_forgotten():
    clock = Clock()
    schedule = learnt(clock, 15.0)
    clock.now += 29.0
    assert schedule.due_within(1.5)  # overdue: it may come any moment
    clock.now += 2.0
    assert not schedule.due_within(1.5)  # two periods without it: gone
    schedule.scraped("10.0.0.9")
    assert schedule.due_within(1.5)
    assert list(schedule._addresses.scrapers) == ["10.0.0.9"]


def test_a_burst_that_stops_is_forgotten_within_two_of_its_gaps():
    clock = Clock()
    schedule = learnt(clock, 1.0, times=10)
    assert schedule.next_scrape_in() == 1.0
    clock.now += 2.1
    assert schedule.next_scrape_in() is None


def test_a_scraper_seen_once_is_kept_until_a_slow_one_would_be_back():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    schedule.scraped("10.0.0.1", "10.0.0.1 40000")
    clock.now += 120.0
    assert schedule.next_scrape_in() == 0.0  # not learnt yet: any time
    schedule.scraped("10.0.0.1", "10.0.0.1 40000")
    clock.now += 1.0
    assert schedule.next_scrape_in() == 119.0
    assert schedule.paced_scrape_in() == 119.0
    clock.now += UNLEARNT_FORGET_SECONDS + 200.0
    assert schedule.next_scrape_in() is None


def ha_pair(clock: Clock, period: float = 15.0, rounds: int = 3) -> ScrapeSchedule:
    """Two scrape loops behind one address, half a period apart, each on its own connection."""
    schedule = ScrapeSchedule(clock)
    for _ in range(rounds):
        schedule.scraped("10.0.0.1", "10.0.0.1 40001")
        clock.now += period / 2
        schedule.scraped("10.0.0.1", "10.0.0.1 40002")
        clock.now += period / 2
    return schedule


def test_an_ha_pair_renders_for_each_server_and_paces_work_to_one():
    clock = Clock()
    schedule = ha_pair(clock)
    # Now the first server is due; the second is 7.5 s after it.
    assert schedule.next_scrape_in() == 0.0
    assert schedule.paced_scrape_in() == 0.0
    schedule.scraped("10.0.0.1", "10.0.0.1 40001")
    clock.now += 1.0
    assert schedule.next_scrape_in() == 6.5  # the second server: rendered for
    assert schedule.paced_scrape_in() == 14.0  # the first server paces the costly work
    clock.now += 6.5
    schedule.scraped("10.0.0.1", "10.0.0.1 40002")
    assert schedule.paced_scrape_in() == 7.5


def test_a_pair_on_one_host_off_the_half_is_rendered_for_at_its_own_times():
    """3.8 s apart in a 15 s interval: by address alone a scraper every 3.8 s, overdue (and so
    every snapshot rendered) for the 7.4 s until the next real scrape."""
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    for _ in range(3):
        schedule.scraped("10.0.0.1", "10.0.0.1 40001")
        clock.now += 3.8
        schedule.scraped("10.0.0.1", "10.0.0.1 40002")
        clock.now += 11.2
    clock.now -= 11.2  # just after the second server's scrape
    clock.now += 4.0
    assert schedule.next_scrape_in() == pytest.approx(7.2)  # the first server's, not overdue
    assert not schedule.due_within(1.05)
    clock.now += 6.5
    assert schedule.due_within(1.05)


def test_connections_seen_once_leave_the_addresses_to_predict():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    for port in range(3):  # a scraper that opens a new connection for every scrape
        schedule.scraped("10.0.0.2", f"10.0.0.2 {50000 + port}")
        clock.now += 10.0
    clock.now -= 6.0
    assert schedule.next_scrape_in() == pytest.approx(6.0)  # its address' period


def test_when_the_pacer_stops_the_other_server_takes_over():
    clock = Clock()
    schedule = ha_pair(clock)
    for _ in range(3):  # only the second server from now on
        clock.now += 7.5
        schedule.scraped("10.0.0.1", "10.0.0.1 40002")
        clock.now += 7.5
    clock.now += 1.0
    assert schedule.paced_scrape_in() == 6.5


def test_the_fastest_scraper_paces_the_work():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    start = clock.now
    visits = [(t, "10.0.0.1 1") for t in (0, 60, 120)] + [
        (t, "10.0.0.2 1") for t in (10, 25, 40, 55)
    ]
    for at, connection in sorted(visits):
        clock.now = start + at
        schedule.scraped(connection.split()[0], connection)
    clock.now = start + 56
    assert schedule.paced_scrape_in() == 14.0


def test_without_kept_connections_work_follows_the_addresses():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    for port in range(3):  # a new connection every scrape: no connection has a period
        schedule.scraped("10.0.0.1", f"10.0.0.1 {50000 + port}")
        clock.now += 15.0
    clock.now -= 14.0
    assert schedule.paced_scrape_in() == schedule.next_scrape_in() == 14.0


def test_too_many_addresses_render_every_snapshot():
    clock = Clock()
    schedule = ScrapeSchedule(clock)
    for round_ in range(3):
        for i in range(MAX_SCRAPERS):
            schedule.scraped(f"10.0.{i}.1")
        clock.now += 60.0 if round_ < 2 else 1.0
    assert schedule.due_within(1.5)


def test_store_keeps_an_unread_snapshot_unrendered_and_renders_it_when_asked(sim, make_poller):
    clock = Clock()
    store = ExpositionStore(
        Renderer(LABELS), joined_with(), interval_seconds=1.0, schedule=learnt(clock, 15.0)
    )
    poller = make_poller(sim)
    first = poller.sweep()
    clock.now += 1.0
    store.publish(first)
    assert store.latest is first and store.current is None and not store.rendered
    exposition = store.render_latest()
    assert exposition is not None and exposition.snapshot is first and store.rendered
    assert exposition is current(store)
    assert store.render_latest() is exposition  # once per snapshot
    clock.now += 13.0
    second = poller.sweep()
    store.publish(second)  # the scrape is due before the next snapshot
    assert store.rendered and current(store).snapshot is second


def test_a_snapshot_the_next_one_replaces_before_the_scrape_is_not_rendered(sim, make_poller):
    # An HA pair behind one address, every 7.5 s, and a 5 s poll: the snapshot published 5.1 s
    # before a scrape is replaced 5 s later, 0.1 s before it, and only that one is rendered. A
    # scrape predicted within the slack of the next snapshot's time is rendered for.
    clock = Clock()
    store = ExpositionStore(
        Renderer(LABELS), joined_with(), interval_seconds=5.0, schedule=learnt(clock, 7.5)
    )
    poller = make_poller(sim)
    clock.now += 2.4  # the next scrape in 5.1 s
    early = poller.sweep()
    store.publish(early)
    assert store.latest is early and store.current is None
    clock.now += 5.0  # in 0.1 s
    on_time = poller.sweep()
    store.publish(on_time)
    assert store.rendered and current(store).snapshot is on_time
    clock.now += 0.1
    store.schedule.scraped("10.0.0.1")
    clock.now += 7.5 - 5.02  # the next in 5.02 s: a sweep late by 20 ms would miss it
    within_slack = poller.sweep()
    store.publish(within_slack)
    assert store.rendered and current(store).snapshot is within_slack


async def test_a_scrape_always_gets_the_newest_snapshot(sim, make_poller):
    clock = Clock()
    store = ExpositionStore(
        Renderer(LABELS), joined_with(), interval_seconds=1.0, schedule=learnt(clock, 15.0)
    )
    poller = make_poller(sim)
    client = await client_for(store)
    try:
        assert (await client.get("/readyz")).status == 503
        for _ in range(3):
            clock.now += 1.0
            store.publish(await asyncio.to_thread(poller.sweep))
            assert not store.rendered
            assert (await client.get("/readyz")).status == 200
            assert (await client.get("/healthz")).status == 200
        response = await client.get("/metrics")
        assert response.status == 200
        assert "DCGM_FI_DEV_GPU_TEMP{" in await response.text()
        assert store.rendered and current(store).snapshot.sequence == 3
    finally:
        await client.close()


async def test_before_the_first_snapshot_metrics_and_readyz_answer_503():
    store = ExpositionStore(Renderer(LABELS), joined_with(), interval_seconds=1.0)
    client = await client_for(store)
    try:
        response = await client.get("/metrics")
        assert response.status == 503
        assert await response.text() == "no NVML snapshot collected yet\n"
        assert (await client.get("/readyz")).status == 503
        # Not scrapes to learn from: a client retrying every 0.2 s has no period.
        assert not store.schedule._addresses.scrapers
    finally:
        await client.close()


def test_escaped_label_sets_are_remembered_within_a_bound():
    from kube_gpu_exporter.exporter.exposition import text_format

    labels = (("pod", 'a"b'), ("namespace", "x\\y"))
    first = text_format.label_body(labels)
    assert first == 'pod="a\\"b",namespace="x\\\\y"'
    assert text_format.label_body(tuple(labels)) is first
    for i in range(text_format.REMEMBERED_LABEL_SETS + 10):
        text_format.label_body((("pod", f"p{i}"),))
    info = text_format.label_body.cache_info()
    assert info.currsize <= text_format.REMEMBERED_LABEL_SETS == info.maxsize


async def test_only_requests_naming_a_scrape_timeout_teach_the_schedule(sim, make_poller):
    store = ExpositionStore(Renderer(LABELS), joined_with(), interval_seconds=1.0)
    poller = make_poller(sim)
    client = await client_for(store)
    try:
        store.publish(await asyncio.to_thread(poller.sweep))
        for _ in range(3):  # curl by hand: served, not learnt
            assert (await client.get("/metrics")).status == 200
        assert not store.schedule._addresses.scrapers
        assert store.schedule.next_scrape_in() is None
        for _ in range(2):  # Prometheus, over one kept-alive connection
            response = await client.get("/metrics", headers={PERIODIC_SCRAPER_HEADER: "10"})
            assert response.status == 200
        assert list(store.schedule._addresses.scrapers) == ["127.0.0.1"]
        (connection,) = store.schedule._connections.scrapers
        assert connection.startswith("127.0.0.1 ")
        assert store.schedule._connections.scrapers[connection].period() is not None
    finally:
        await client.close()

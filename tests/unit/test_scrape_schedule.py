"""A snapshot is rendered when a scrape is due before the next one, and on demand otherwise."""

from __future__ import annotations

import asyncio

from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.exposition.scrape_schedule import MAX_SCRAPERS, ScrapeSchedule
from kube_gpu_exporter.exporter.exposition.store import ExpositionStore
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
    clock.now += 44.0
    assert schedule.due_within(1.5)  # overdue: it may come any moment
    clock.now += 2.0
    assert not schedule.due_within(1.5)  # three periods without it: gone
    schedule.scraped("10.0.0.9")
    assert schedule.due_within(1.5)
    assert list(schedule._scrapers) == ["10.0.0.9"]


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
    store.publish(second)  # the scrape is due within 1.5 intervals
    assert store.rendered and current(store).snapshot is second


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
        assert not store.schedule._scrapers
    finally:
        await client.close()


def test_escaped_label_sets_are_remembered_within_a_bound():
    from kube_gpu_exporter.exporter.exposition import renderer as renderer_module

    renderer = Renderer(LABELS)
    labels = (("pod", 'a"b'), ("namespace", "x\\y"))
    first = renderer._label_body(labels)
    assert first == 'pod="a\\"b",namespace="x\\\\y"'
    assert renderer._label_body(tuple(labels)) is first
    for i in range(renderer_module._REMEMBERED_LABEL_SETS + 10):
        renderer._label_body((("pod", f"p{i}"),))
    assert len(renderer._bodies) <= renderer_module._REMEMBERED_LABEL_SETS

"""dcgm-exporter's windowed counts, DCGM_EXP_XID_ERRORS_COUNT and DCGM_EXP_CLOCK_EVENTS_COUNT: per
entity, the events of the last window per XID code / clock event reason, labelled with the window;
one 0 series per entity that had none; no event history at all unless the window is configured."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from kube_gpu_exporter.exporter.app import exposition_store
from kube_gpu_exporter.exporter.attribution.context import NO_CONTEXT
from kube_gpu_exporter.exporter.attribution.join import join
from kube_gpu_exporter.exporter.config import Config, WebConfig
from kube_gpu_exporter.exporter.exposition.renderer import Renderer
from kube_gpu_exporter.exporter.fields.flags import MAX_COUNT_WINDOW_MS
from kube_gpu_exporter.exporter.fields.selection import FieldSelection, ListedField
from kube_gpu_exporter.exporter.fields.table import BY_NAME
from kube_gpu_exporter.exporter.nvml import event_windows
from kube_gpu_exporter.exporter.nvml.clock_event_counts import ClockEventCounts
from kube_gpu_exporter.exporter.nvml.event_windows import MAX_RUNS, RUN_SLICES, EventWindow
from kube_gpu_exporter.exporter.nvml.helper_registry import HelperInputs
from kube_gpu_exporter.exporter.nvml.xid_watcher import (
    MAX_DISTINCT_CODES,
    UNKNOWN_XID,
    XidBook,
    XidWatcher,
)
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.sim_gpu import (
    GPU_IDLE,
    HW_THERMAL_SLOWDOWN,
    SW_THERMAL_SLOWDOWN,
)
from kube_gpu_exporter.exporter.simulator.stepped_time import ManualClock, SteppedHelpers
from kube_gpu_exporter.exporter.snapshot import NodeSnapshot, XidRecord
from tests.conftest import FAST, LABELS, quiet, start_xid_watch, wait_for
from tests.support.stepped_node import poller_on, start_xid_watch_on

XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
CLOCK_COUNT = "DCGM_EXP_CLOCK_EVENTS_COUNT"
WINDOW = "window_size_in_ms"
NO_HELPERS = replace(FAST, xid_enabled=False, gpm_enabled=False)
IDLE_GPU = 5  # the default node's idle GPU
MIG_GPU = 6  # GPU instances 7, 8, 4 and 2
ENTITIES = 6 + 4 + 3  # six whole GPUs and the instances of the two MIG-enabled ones


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def listing(*names: str) -> FieldSelection:
    return FieldSelection(
        path="t.csv",
        listed=tuple(
            ListedField(row=BY_NAME[name], name=name, kind="gauge", help="h") for name in names
        ),
    )


BOTH = listing(XID_COUNT, CLOCK_COUNT)

_SAMPLE = re.compile(r"^(?P<name>\w+)\{(?P<labels>.*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def series(text: str, name: str) -> list[tuple[dict[str, str], str]]:
    found = []
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match and match["name"] == name:
            found.append((dict(_LABEL.findall(match["labels"])), match["value"]))
    return found


def of_entity(
    rows: list[tuple[dict[str, str], str]], gpu: int, gi: int | None = None
) -> list[tuple[dict[str, str], str]]:
    return [
        (labels, value)
        for labels, value in rows
        if labels["gpu"] == str(gpu) and labels.get("GPU_I_ID") == (None if gi is None else str(gi))
    ]


def scrape(
    snapshot: NodeSnapshot,
    selection: FieldSelection | None = BOTH,
    xid_window_ms: int | None = 300000,
    clock_events_window_ms: int | None = 300000,
) -> str:
    renderer = Renderer(
        LABELS,
        selection,
        xid_window_ms=xid_window_ms,
        clock_events_window_ms=clock_events_window_ms,
    )
    return renderer.render_body(join(snapshot, NO_CONTEXT, LABELS))


def with_gpu(snapshot: NodeSnapshot, index: int, **changes: object) -> NodeSnapshot:
    gpus = list(snapshot.gpus)
    gpus[index] = replace(gpus[index], **changes)  # type: ignore[arg-type]
    return replace(snapshot, gpus=tuple(gpus))


@pytest.fixture
def swept(sim: FakeNvml, make_poller: Callable[..., Poller]) -> NodeSnapshot:
    """One sweep of the default node without windows: nothing in any window."""
    return make_poller(sim, NO_HELPERS).sweep()


# ---- the window ----


def test_an_event_counts_until_it_is_exactly_one_window_old() -> None:
    clock = Clock()
    window: EventWindow[str] = EventWindow(1000, clock)
    window.add("gpu", 79)
    clock.now += 0.5
    window.add("gpu", 48)
    window.add("gpu", 79)
    assert window.counts("gpu") == ((48, 1), (79, 2))
    clock.now += 0.499  # the first 79 is 999 ms old: just inside
    assert window.counts("gpu") == ((48, 1), (79, 2))
    clock.now += 0.001  # now exactly 1000 ms old: outside, as if dcgm-exporter asked since then
    assert window.counts("gpu") == ((48, 1), (79, 1))
    clock.now += 0.5
    assert window.counts("gpu") == ()
    assert window.runs("gpu") == 0  # a quiet key is forgotten, not kept empty


def test_the_widest_window_the_command_line_takes_counts_and_forgets() -> None:
    # The bound is where --xid-count-window-size stops: a window this wide must still be a float
    # the clock arithmetic can hold, and forget an event exactly when it is that old.
    clock = Clock(now=3e6)  # a host up for a month; whole seconds keep the sums exact
    book = XidBook(MAX_COUNT_WINDOW_MS, clock)
    book.record("GPU-a", None, 79)
    clock.now += MAX_COUNT_WINDOW_MS / 1000 - 1
    board = book.gpu_record("GPU-a")
    assert board is not None and board.window_counts == ((79, 1),)
    clock.now += 1
    board = book.gpu_record("GPU-a")
    assert board is not None and board.window_counts == ()
    assert board.counts == ((79, 1),)


def test_the_xid_book_windows_each_entity_and_keeps_its_totals() -> None:
    clock = Clock()
    book = XidBook(60_000, clock)
    book.record("GPU-a", None, 79)
    book.record("GPU-a", 3, 31)
    clock.now += 59.999
    book.record("GPU-a", None, 79)
    board = book.gpu_record("GPU-a")
    assert board is not None and board.window_counts == ((79, 2),)
    assert dict(book.instance_records("GPU-a"))[3].window_counts == ((31, 1),)
    clock.now += 0.001
    board = book.gpu_record("GPU-a")
    assert board is not None and board.window_counts == ((79, 1),)
    assert board.counts == ((79, 2),)  # the total since start is not windowed
    assert dict(book.instance_records("GPU-a"))[3].window_counts == ()


def test_one_codes_storm_is_counted_in_few_runs() -> None:
    clock = Clock()
    window: EventWindow[str] = EventWindow(10_000, clock)
    times = []
    for _ in range(100_000):  # 0.3 ms apart: 30 s, three windows long
        window.add("gpu", 13)
        times.append(clock.now)
        clock.now += 0.0003
    assert window.runs("gpu") <= RUN_SLICES + 1
    inside = sum(1 for t in times if t > clock.now - 10.0)
    per_slice = 10.0 / RUN_SLICES / 0.0003 + 1
    # Runs leave with their first event: at most one slice's events early, never late.
    (counted,) = window.counts("gpu")
    assert counted[0] == 13 and inside - per_slice <= counted[1] <= inside


def test_a_storm_of_many_codes_is_capped_at_max_runs_keeping_the_newest() -> None:
    clock = Clock()
    window: EventWindow[str] = EventWindow(300_000, clock)
    for code in range(10 * MAX_RUNS):
        window.add("gpu", code)
    assert window.runs("gpu") == MAX_RUNS
    counts = window.counts("gpu")
    assert [code for code, _ in counts] == list(range(9 * MAX_RUNS, 10 * MAX_RUNS))
    assert all(n == 1 for _, n in counts)


def test_the_xid_books_window_folds_codes_as_its_totals_do() -> None:
    book = XidBook(300_000, Clock())
    for i in range(20_000):
        book.record("GPU-a", None, i % 5000)
    record = book.gpu_record("GPU-a")
    assert record is not None
    assert record.window_counts == record.counts  # nothing expired: the window is the total
    assert len(record.window_counts) == MAX_DISTINCT_CODES
    assert dict(record.window_counts)[UNKNOWN_XID] > 0


def test_clock_event_window_counts_each_reason_of_each_sweeps_mask() -> None:
    clock = Clock()
    counts = ClockEventCounts(2000, clock)
    counts.record("gpu", GPU_IDLE | SW_THERMAL_SLOWDOWN)
    clock.now += 1.0
    counts.record("gpu", SW_THERMAL_SLOWDOWN)
    counts.record("gpu", 0)  # a sweep with no reason counts for none
    counts.record("gpu", None)  # nor does one without a mask
    assert counts.window_counts("gpu") == (("gpu_idle", 1), ("sw_thermal", 2))
    clock.now += 1.0
    assert counts.window_counts("gpu") == (("sw_thermal", 1),)
    assert dict(counts.counts("gpu"))["sw_thermal"] == 2  # the totals are not windowed
    counts.retain([])
    assert counts.window_counts("gpu") == ()


def test_no_history_is_kept_without_a_window(
    sim: FakeNvml, make_poller: Callable[..., Poller], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: object) -> None:
        raise AssertionError("an event window was used though no window is configured")

    monkeypatch.setattr(event_windows.EventWindow, "__init__", refuse)
    monkeypatch.setattr(event_windows.EventWindow, "add", refuse)
    poller = make_poller(sim)  # FAST: XIDs watched, no window
    start_xid_watch(sim, poller)
    sim.inject_xid(1, 79)
    assert wait_for(lambda: poller.sweep().gpus[1].xid.counts == ((79, 1),))
    snap = poller.sweep()
    assert snap.gpus[IDLE_GPU].clock_event_counts  # the totals still count
    assert all(g.clock_event_window_counts == () for g in snap.gpus)
    assert all(g.xid.window_counts == () for g in snap.gpus)
    # Listed without a window (no --xid-count-window-size reached the renderer): no family.
    text = scrape(snap, xid_window_ms=None, clock_events_window_ms=None)
    assert not series(text, XID_COUNT) and not series(text, CLOCK_COUNT)


# ---- the exposition ----


def test_per_code_and_per_reason_series_and_one_zero_series_elsewhere(
    swept: NodeSnapshot,
) -> None:
    snap = with_gpu(swept, 1, xid=XidRecord(79, 3, ((48, 1), (79, 2)), ((48, 1), (79, 2))))
    snap = with_gpu(snap, IDLE_GPU, clock_event_window_counts=(("gpu_idle", 3),))
    text = scrape(snap, xid_window_ms=60000, clock_events_window_ms=120000)

    xids = series(text, XID_COUNT)
    assert sorted((labels["xid"], value) for labels, value in of_entity(xids, 1)) == [
        ("48", "1"),
        ("79", "2"),
    ]
    assert all(labels[WINDOW] == "60000" for labels, _ in xids)
    zero = of_entity(xids, 0)
    assert len(zero) == 1 and zero[0][1] == "0" and "xid" not in zero[0][0]
    assert len(xids) == ENTITIES + 1  # GPU 1 has two codes, every other entity its 0

    clocks = series(text, CLOCK_COUNT)
    assert [(labels["clock_event"], value) for labels, value in of_entity(clocks, IDLE_GPU)] == [
        ("gpu_idle", "3")
    ]
    assert all(labels[WINDOW] == "120000" for labels, _ in clocks)
    assert len(clocks) == ENTITIES
    assert all(value == "0" and "clock_event" not in labels for labels, value in clocks[:5])
    # The labels dcgm-exporter adds come after the entity's, as in the other event families.
    line = next(x for x in text.splitlines() if x.startswith(XID_COUNT + "{") and 'xid="79"' in x)
    assert line.endswith(f'{WINDOW}="60000",xid="79"}} 2')


def test_mig_instances_count_their_own_xids_and_their_boards_clock_events(
    swept: NodeSnapshot,
) -> None:
    board = XidRecord(13, 1, ((13, 5),), ((13, 1),))
    instance = XidRecord(31, 2, ((31, 2),), ((31, 2),))
    snap = with_gpu(
        swept,
        MIG_GPU,
        xid=board,
        instance_xids=((8, instance),),
        clock_event_window_counts=(("power_cap", 4),),
    )
    text = scrape(snap)
    xids = series(text, XID_COUNT)
    assert not of_entity(xids, MIG_GPU)  # no whole-GPU series on a MIG-enabled GPU
    # Instance 8's own XIDs and its board's unattributed one, as DCGM_FI_DEV_XID_ERRORS shows.
    assert sorted((x["xid"], v) for x, v in of_entity(xids, MIG_GPU, 8)) == [
        ("13", "1"),
        ("31", "2"),
    ]
    for gi in (7, 4, 2):
        assert [(x["xid"], v) for x, v in of_entity(xids, MIG_GPU, gi)] == [("13", "1")]
    totals = series(text, "DCGM_EXP_XID_ERRORS_TOTAL")
    assert not totals  # not listed: only the count families are
    clocks = series(text, CLOCK_COUNT)
    for gi in (7, 8, 4, 2):
        assert [(x["clock_event"], v) for x, v in of_entity(clocks, MIG_GPU, gi)] == [
            ("power_cap", "4")
        ]
    assert [v for _, v in of_entity(clocks, 7, 3)] == ["0"]


def test_each_family_is_written_only_when_listed(swept: NodeSnapshot) -> None:
    only_xids = scrape(swept, listing(XID_COUNT))
    assert len(series(only_xids, XID_COUNT)) == ENTITIES
    assert not series(only_xids, CLOCK_COUNT)
    default = scrape(swept, None)
    assert XID_COUNT not in default and CLOCK_COUNT not in default
    assert "DCGM_FI_DEV_XID_ERRORS{" in default


# ---- the simulated node ----


def _config(collection_changes: dict[str, int]) -> Config:
    return Config(
        collection=replace(FAST, **collection_changes),  # type: ignore[arg-type]
        labels=LABELS,
        web=WebConfig(),
        fields=BOTH,
    )


@pytest.fixture
def stepped_node() -> Iterator[tuple[FakeNvml, Clock]]:
    clock = Clock(5000.0)
    with FakeNvml(quiet(default_fleet()), clock=clock) as sim:
        yield sim, clock


def test_xids_leave_the_count_when_simulated_time_passes_the_window(
    stepped_node: tuple[FakeNvml, Clock],
) -> None:
    sim, clock = stepped_node
    config = _config({"xid_count_window_ms": 60_000, "gpm_enabled": False})
    store = exposition_store(config, None, None)

    def helpers(inputs: HelperInputs) -> tuple[XidWatcher]:
        # The book reads the simulator's clock, so the test moves the window's time by hand.
        book = XidBook(config.collection.xid_count_window_ms, clock)
        return (XidWatcher(inputs.source, inputs.tally, inputs.on_mig_change, book=book),)

    stepped = SteppedHelpers()
    poller = Poller(config.collection, store.publish, sim.source(), helpers=helpers, runner=stepped)

    def scraped() -> str:
        store.publish(poller.sweep())
        exposition = store.render_latest()
        assert exposition is not None
        return exposition.body.decode()

    def codes(text: str, gpu: int, gi: int | None = None) -> dict[str, str]:
        rows = of_entity(series(text, XID_COUNT), gpu, gi)
        return {labels.get("xid", ""): value for labels, value in rows}

    try:
        start_xid_watch(sim, poller)
        sim.inject_xid(1, 79)
        sim.inject_xid(1, 79)
        # The watcher stamps an event when it takes it: the clock moves only once it has.
        assert wait_for(lambda: codes(scraped(), 1) == {"79": "2"})
        clock.now += 30.0
        sim.inject_xid(1, 48)
        sim.inject_xid(MIG_GPU, 31, gpu_instance_id=8)
        assert wait_for(lambda: codes(scraped(), MIG_GPU, 8) == {"31": "1"})
        text = scraped()
        assert codes(text, 1) == {"79": "2", "48": "1"}
        assert codes(text, 0) == {"": "0"}

        clock.now += 30.0  # the two 79s are now a window old
        text = scraped()
        assert codes(text, 1) == {"48": "1"}
        assert codes(text, MIG_GPU, 8) == {"31": "1"}

        clock.now += 30.0
        text = scraped()
        assert codes(text, 1) == {"": "0"}  # back to the one zero series
        assert codes(text, MIG_GPU, 8) == {"": "0"}
        assert len(series(text, XID_COUNT)) == ENTITIES
    finally:
        poller.stop()


def test_the_configured_windows_reach_the_snapshot_through_the_poller(sim: FakeNvml) -> None:
    window_ms = 1500
    config = _config({"xid_count_window_ms": window_ms, "clock_events_count_window_ms": window_ms})
    store = exposition_store(config, None, None)
    # Both windows read the poller's clock, which only this test moves.
    clock = ManualClock()
    with poller_on(clock, sim, config.collection, store.publish) as poller:
        start_xid_watch_on(clock, sim, poller)
        sim.inject_xid(2, 94)
        assert wait_for(lambda: poller.sweep().gpus[2].xid.window_counts == ((94, 1),))

        sim.set_temperature_offset(1, 60.0)  # far past the slowdown temperatures
        hot = [poller.sweep() for _ in range(2)]
        for snap in hot:
            readings = snap.gpus[1].readings
            assert (
                readings is not None and (readings.clock_event_reasons or 0) & HW_THERMAL_SLOWDOWN
            )
        assert dict(hot[-1].gpus[1].clock_event_window_counts)["hw_thermal"] == 2
        assert dict(hot[-1].gpus[IDLE_GPU].clock_event_window_counts)["gpu_idle"] >= 2
        assert hot[-1].gpus[0].clock_event_window_counts == ()
        store.publish(hot[-1])
        exposition = store.render_latest()
        assert exposition is not None
        text = exposition.body.decode()
        assert [(x.get("clock_event"), v) for x, v in of_entity(series(text, CLOCK_COUNT), 1)] == [
            ("sw_thermal", "2"),
            ("hw_thermal", "2"),
        ]
        assert {x[WINDOW] for x, _ in series(text, XID_COUNT)} == {str(window_ms)}

        sim.set_temperature_offset(1, 0.0)
        clock.advance(window_ms / 1000 + 0.05)
        cooled = poller.sweep()
        assert cooled.gpus[1].clock_event_window_counts == ()
        assert cooled.gpus[2].xid.window_counts == ()
        assert cooled.gpus[2].xid.counts == ((94, 1),)
        assert dict(cooled.gpus[IDLE_GPU].clock_event_window_counts) == {"gpu_idle": 1}

"""Page retirement (DCGM_FI_DEV_RETIRED_SBE/_DBE/_PENDING, fields 390-392): boards before Ampere
retire pages, the T4 model among them; Ampere and newer remap rows and answer NOT_SUPPORTED, so
the default H100 node has no series and no NVML errors for them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.fields.collectors_file import parse_collectors
from kube_gpu_exporter.exporter.fields.model import Cadence, FieldValue
from kube_gpu_exporter.exporter.fields.table import BY_ANY_NAME, BY_NAME
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet, parse_fleet
from tests.conftest import quiet
from tests.support.rendered_node import RenderedNode

SBE, DBE, PENDING = (f"DCGM_FI_DEV_RETIRED_{word}" for word in ("SBE", "DBE", "PENDING"))
RETIRED = (SBE, DBE, PENDING)
T4_FLEET = "gpus:\n  - {model: T4, count: 2}\n"


def test_the_rows_are_field_values_read_with_the_slow_fields() -> None:
    expected = {SBE: (390, 29, "counter"), DBE: (391, 30, "counter"), PENDING: (392, 31, "gauge")}
    for name, (field_id, nvml_id, kind) in expected.items():
        row = BY_NAME[name]
        assert (row.field_id, row.kind, row.unit, row.default) == (field_id, kind, "count", True)
        assert isinstance(row.source, FieldValue) and row.source.nvml_field_id == nvml_id
        assert row.cadence is Cadence.SLOW
    # DCGM 4.6's names for the same ids are their 4.9 spelling.
    assert BY_ANY_NAME["DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL"] is BY_NAME[SBE]
    assert BY_ANY_NAME["DCGM_FI_DEV_PAGE_RETIRED_PENDING"] is BY_NAME[PENDING]


class Node:
    def __init__(self, fleet: Any) -> None:
        self.sim = FakeNvml(quiet(fleet))
        self.sim.api.nvmlInit()
        self.tally = ErrorTally()
        self.reader = DeviceReader(GuardedNvml(self.tally, self.sim.api), threading.Lock())

    def read(self, index: int = 0) -> dict[str, Any]:
        handle = self.sim.api.nvmlDeviceGetHandleByIndex(index)
        readings = self.reader.read_board(self.reader.read_identity(index, handle), handle)
        return {k: v for k, v in readings.values.items() if k in RETIRED}


@pytest.fixture
def t4() -> Iterator[Node]:
    node = Node(parse_fleet(T4_FLEET, "test"))
    yield node
    node.sim.close()


def test_a_t4_reports_its_retired_pages(t4: Node) -> None:
    assert t4.read() == {SBE: 0, DBE: 0, PENDING: 0}
    first = t4.sim.retire_page(0, "dbe")
    t4.sim.retire_page(0, "sbe")
    t4.sim.retire_page(0, "sbe")
    assert t4.read() == {SBE: 2, DBE: 1, PENDING: 1}
    assert t4.read(1) == {SBE: 0, DBE: 0, PENDING: 0}
    # The getters DCGM reads give the same: the pages (pending ones included), then the flag.
    api = t4.sim.api
    handle = api.nvmlDeviceGetHandleByIndex(0)
    cause = pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    assert api.nvmlDeviceGetRetiredPages(handle, cause) == [first]
    multiple_sbe = pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS
    assert len(api.nvmlDeviceGetRetiredPages(handle, multiple_sbe)) == 2
    assert api.nvmlDeviceGetRetiredPagesPendingStatus(handle) == pynvml.NVML_FEATURE_ENABLED


def test_a_reset_applies_the_pending_retirement(t4: Node) -> None:
    t4.sim.retire_page(0, "dbe")
    t4.sim.reset_gpu(0)
    assert t4.read() == {SBE: 0, DBE: 1, PENDING: 0}


def test_a_double_bit_error_retires_a_page_before_ampere(t4: Node) -> None:
    t4.sim.inject_ecc_error(0, double_bit=True)
    assert t4.read() == {SBE: 0, DBE: 1, PENDING: 1}


def test_retire_page_refuses_unknown_causes_and_boards_that_remap_rows(t4: Node) -> None:
    with pytest.raises(ValueError, match="unknown page retirement cause"):
        t4.sim.retire_page(0, "tbe")
    h100 = FakeNvml(quiet(default_fleet()))
    try:
        with pytest.raises(ValueError, match="remaps rows"):
            h100.retire_page(0, "dbe")
    finally:
        h100.close()


def test_an_h100_answers_not_supported_and_counts_no_error() -> None:
    node = Node(default_fleet())
    try:
        for _ in range(2):
            assert node.read() == {}
        assert node.tally.snapshot() == ()
        handle = node.sim.api.nvmlDeviceGetHandleByIndex(0)
        with pytest.raises(pynvml.NVMLError_NotSupported):
            node.sim.api.nvmlDeviceGetRetiredPagesPendingStatus(handle)
    finally:
        node.sim.close()


@pytest.fixture
def scrape(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """The body the exporter serves for a fleet (and a --collectors file), after two sweeps."""
    made: list[RenderedNode] = []

    def run(
        fleet: Any, csv: str | None = None, act: Callable[[FakeNvml], Any] | None = None
    ) -> str:
        node = RenderedNode(tmp_path, csv, fleet)
        made.append(node)
        node.step()
        if act is not None:
            act(node.sim)
        return node.step()

    yield run
    for node in made:
        node.close()


def _samples(body: str, name: str) -> list[str]:
    return [line for line in body.splitlines() if line.startswith(name + "{")]


def test_a_t4_node_serves_the_families_by_default(scrape: Callable[..., str]) -> None:
    body = scrape(parse_fleet(T4_FLEET, "test"), act=lambda sim: sim.retire_page(1, "dbe"))
    assert "# TYPE DCGM_FI_DEV_RETIRED_DBE counter" in body
    assert "# TYPE DCGM_FI_DEV_RETIRED_PENDING gauge" in body
    dbe = _samples(body, DBE)
    assert len(dbe) == 2
    assert [line.rsplit(" ", 1)[1] for line in dbe] == ["0", "1"]
    assert len(_samples(body, SBE)) == len(_samples(body, PENDING)) == 2


def test_the_default_node_has_no_retired_page_series(scrape: Callable[..., str]) -> None:
    body = scrape(default_fleet())
    assert "DCGM_FI_DEV_RETIRED" not in body
    assert "nvml_errors_total{" not in body


def test_a_collectors_file_listing_them_exports_them(scrape: Callable[..., str]) -> None:
    csv = (
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
        "DCGM_FI_DEV_RETIRED_SBE, counter, Pages retired after single-bit errors.\n"
        "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL, counter, By its DCGM 4.6 name.\n"
        "DCGM_FI_DEV_RETIRED_PENDING, counter, Pages waiting to be retired.\n"
        "DCGM_FI_DEV_POWER_VIOLATION, counter, Throttled by power (ns).\n"
    )
    selection = parse_collectors(csv, "fields.csv")
    assert selection.unsupported == ()
    assert [f.row.name for f in selection.listed] == [
        "DCGM_FI_DEV_GPU_TEMP",
        SBE,
        DBE,
        PENDING,
        "DCGM_FI_DEV_POWER_VIOLATION",
    ]
    body = scrape(parse_fleet(T4_FLEET, "test"), csv)
    assert "# HELP DCGM_FI_DEV_RETIRED_SBE Pages retired after single-bit errors." in body
    # The file's type wins, as dcgm-exporter's does.
    assert "# TYPE DCGM_FI_DEV_RETIRED_PENDING counter" in body
    assert len(_samples(body, "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL")) == 2
    assert len(_samples(body, "DCGM_FI_DEV_POWER_VIOLATION")) == 2
    assert "fields_unsupported{" not in body

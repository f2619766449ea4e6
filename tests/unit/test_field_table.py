"""The DCGM field table drives the reader, the simulator and the exposition: a field is a row, a
model line and these tests. The expectations here are written out, not read back from the table."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from kube_gpu_exporter.exporter.exposition.renderer import NOT_SERVED
from kube_gpu_exporter.exporter.fields import dcgm_catalogue
from kube_gpu_exporter.exporter.fields.model import FieldValue, Getter
from kube_gpu_exporter.exporter.fields.table import FIELDS, GPU_FIELDS
from kube_gpu_exporter.exporter.nvml.device_reader import DeviceReader
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.scrape_cadence import ScrapeCadence
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
from kube_gpu_exporter.exporter.simulator.nvml.field_models import BY_FIELD_ID, MODELS
from kube_gpu_exporter.exporter.simulator.nvml.nvlink_fields import FIELD_IDS as HEALTH_FIELD_IDS
from kube_gpu_exporter.exporter.snapshot import ACCESSOR_ROWS, GpuReadings
from tests.conftest import quiet
from tests.support.rendered_node import RenderedNode

FAN = "DCGM_FI_DEV_FAN_SPEED"

# DCGM's field ids (dcgm_fields.h), written out.
IDS = {
    "DCGM_FI_DEV_SM_CLOCK": 100,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 112,
    "DCGM_FI_DEV_GPU_TEMP": 150,
    "DCGM_FI_DEV_POWER_USAGE": 155,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 156,
    "DCGM_FI_DEV_FAN_SPEED": 191,
    "DCGM_FI_DEV_GPU_UTIL": 203,
    "DCGM_FI_DEV_XID_ERRORS": 230,
    "DCGM_FI_DEV_FB_USED": 252,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 395,
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 449,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 1004,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 1014,
}


def test_rows_carry_dcgm_field_ids() -> None:
    by_name = {row.name: row.field_id for row in FIELDS}
    assert {name: by_name[name] for name in IDS} == IDS
    # And every row DCGM's own header names agrees with it.
    for row in FIELDS:
        if row.field_id:
            assert dcgm_catalogue.field_id(row.name) == row.field_id, row.name


def test_the_simulator_answers_every_field_the_reader_asks_for() -> None:
    """A getter row's call is a stand-in of the simulator (a model line or a hand-written call),
    and a field-value row's id has a model: no row silently reads NOT_SUPPORTED from a call the
    simulator never modelled. The NVLink error, C2C and recovery-action fields are modelled
    apart (simulator/nvml/nvlink_fields.py): their answer depends on the scopeId (the link) and
    the driver, which a field model is not given."""
    for row in GPU_FIELDS:
        if isinstance(row.source, Getter):
            for function in row.source.functions:
                assert getattr(getattr(FakeNvml, function, None), "_nvml", None), function
        if isinstance(row.source, FieldValue):
            field_id = row.source.nvml_field_id
            assert field_id in BY_FIELD_ID or field_id in HEALTH_FIELD_IDS, row.name
            # Not both: one model per field.
            assert not (field_id in BY_FIELD_ID and field_id in HEALTH_FIELD_IDS), row.name
    assert FAN in MODELS


@pytest.fixture
def sim() -> Iterator[FakeNvml]:
    sim = FakeNvml(quiet(default_fleet()))
    sim.api.nvmlInit()
    yield sim
    sim.close()


def _reader(sim: FakeNvml, **kwargs: Any) -> DeviceReader:
    return DeviceReader(GuardedNvml(ErrorTally(), sim.api), threading.Lock(), None, **kwargs)


def _read(reader: DeviceReader, sim: FakeNvml) -> GpuReadings:
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    return reader.read_board(reader.read_identity(0, handle), handle)


def test_an_off_by_default_field_is_read_only_when_listed(sim: FakeNvml) -> None:
    _read(_reader(sim), sim)
    assert sim.calls["nvmlDeviceGetFanSpeed"] == 0
    readings = _read(_reader(sim, extra_fields={FAN}), sim)
    assert sim.calls["nvmlDeviceGetFanSpeed"] == 1
    # Passively cooled: NOT_SUPPORTED, so no value.
    assert FAN not in readings.values


def test_a_fan_speed_the_board_reports_reaches_the_readings(sim: FakeNvml) -> None:
    sim.api.nvmlDeviceGetFanSpeed = lambda handle: 42
    readings = _read(_reader(sim, extra_fields={FAN}), sim)
    assert readings.values[FAN] == 42


def test_readings_hold_every_value_under_its_row_name(sim: FakeNvml) -> None:
    readings = _read(_reader(sim), sim)
    names = {row.name for row in FIELDS}
    assert readings.values.keys() <= names
    # A row only the exposition reads has no accessor, and is there all the same.
    assert readings.values["DCGM_FI_DEV_MEM_CLOCK"] > 0
    # The accessors read rows of the table, under their classic names.
    assert set(ACCESSOR_ROWS) <= names


def test_readings_are_built_and_changed_by_row_name_with_none_as_no_value() -> None:
    temp, used, power = "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE"
    readings = GpuReadings.of({temp: 40, used: None}, DCGM_FI_DEV_POWER_USAGE=300_000)
    assert dict(readings.values) == {temp: 40, power: 300_000}
    assert readings.power_mw == 300_000 and readings.fb_used_bytes is None
    changed = readings.with_values({temp: None, used: 1 << 30})
    assert dict(changed.values) == {power: 300_000, used: 1 << 30}
    assert changed.fb_used_bytes == 1 << 30
    assert readings.values[temp] == 40  # the original stands
    with pytest.raises(TypeError):
        readings.values[temp] = 41  # type: ignore[index]


CSV = """# our own file
DCGM_FI_DEV_GPU_TEMP, counter, Temperature as the file says.
DCGM_FI_DEV_SM_CLOCK_HERTZ, gauge, SM clock in hertz.
DCGM_FI_DEV_FAN_SPEED, gauge, Fan.
DCGM_FI_DEV_PSTATE, gauge, Performance state.
"""


@pytest.fixture
def polled(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """The body the exporter serves for a --collectors file, built as the command line and the
    app build it, after three sweeps 61 s apart (GPM and the NVLink rate need two reads; a
    listed family is judged unserved two minutes after the first render)."""
    made: list[RenderedNode] = []

    def poll(fan: int | None, csv: str = CSV, sweeps: int = 3) -> str:
        node = RenderedNode(tmp_path, csv)
        made.append(node)
        if fan is not None:
            node.sim.api.nvmlDeviceGetFanSpeed = lambda handle: fan
        return [node.step() for _ in range(sweeps)][-1]

    yield poll
    for node in made:
        node.close()


def _families(body: str) -> set[str]:
    return {line.split()[2] for line in body.splitlines() if line.startswith("# TYPE DCGM_")}


def test_a_collectors_file_selects_families_with_its_own_type_help_and_spelling(
    polled: Callable[..., str],
) -> None:
    body = polled(fan=42)
    assert _families(body) == {
        "DCGM_FI_DEV_GPU_TEMP",
        "DCGM_FI_DEV_SM_CLOCK_HERTZ",
        "DCGM_FI_DEV_FAN_SPEED",
    }
    assert "# TYPE DCGM_FI_DEV_GPU_TEMP counter" in body
    assert "# HELP DCGM_FI_DEV_GPU_TEMP Temperature as the file says." in body
    fan = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_FAN_SPEED{")]
    assert fan and all(line.endswith(" 42") for line in fan)
    # A 4.9 name brings its base unit: MHz becomes Hz.
    clocks = [
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith("DCGM_FI_DEV_SM_CLOCK_HERTZ{")
    ]
    assert clocks and all(value >= 100e6 and value % 1_000_000 == 0 for value in clocks)
    unsupported = [line for line in body.splitlines() if "fields_unsupported{" in line]
    assert unsupported == [
        'kube_gpu_exporter_fields_unsupported{field="DCGM_FI_DEV_PSTATE",'
        'reason="a DCGM-only field: NVML has no source for it here"} 1'
    ]


def test_a_listed_field_no_gpu_serves_is_counted_and_logged_once(
    polled: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        body = polled(fan=None, sweeps=4)
    assert "DCGM_FI_DEV_FAN_SPEED{" not in body
    assert f'kube_gpu_exporter_fields_unsupported{{field="{FAN}",reason="{NOT_SERVED}"}} 1' in body
    logged = [r.getMessage() for r in caplog.records if FAN in r.getMessage()]
    assert len(logged) == 1
    assert logged[0].endswith(f"fields.csv: {FAN} is not exported: {NOT_SERVED}")


def test_a_field_is_not_called_unserved_before_two_minutes(polled: Callable[..., str]) -> None:
    """GPM and the NVLink rate need two reads: the first renders wait before judging."""
    assert NOT_SERVED not in polled(fan=None, sweeps=2)


def test_a_served_field_is_not_called_unsupported(polled: Callable[..., str]) -> None:
    assert NOT_SERVED not in polled(fan=35)


# ---- Read cadence per field ----


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_field_with_its_own_interval_is_read_that_often_and_stands_between(
    sim: FakeNvml,
) -> None:
    clock = Clock()
    own = ScrapeCadence(30.0, 1.0, clock=clock)
    reader = _reader(sim, field_cadences={"DCGM_FI_DEV_GPU_TEMP": own})
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    identity = reader.read_identity(0, handle)
    temperatures = []
    for _ in range(61):
        readings = reader.read_board(identity, handle)
        temperatures.append(readings.values.get("DCGM_FI_DEV_GPU_TEMP"))
        clock.now += 1.0
    # Read at 0, 30 and 60 s; its neighbours in the sweep every time.
    assert sim.calls["nvmlDeviceGetTemperature"] == 3
    assert sim.calls["nvmlDeviceGetClockInfo"] == 2 * 61
    assert None not in temperatures
    assert len(set(temperatures[1:30])) == 1


def test_a_slow_field_set_to_zero_is_read_every_sweep(sim: FakeNvml) -> None:
    clock = Clock()
    slow = ScrapeCadence(10.0, 1.0, clock=clock)
    requests: list[list[Any]] = []
    batch = sim.api.nvmlDeviceGetFieldValues

    def recorded(handle: Any, fields: list[Any]) -> Any:
        requests.append(list(fields))
        return batch(handle, fields)

    sim.api.nvmlDeviceGetFieldValues = recorded
    reader = DeviceReader(
        GuardedNvml(ErrorTally(), sim.api),
        threading.Lock(),
        slow,
        field_cadences={"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": None},
    )
    handle = sim.api.nvmlDeviceGetHandleByIndex(0)
    identity = reader.read_identity(0, handle)
    for _ in range(5):
        reader.read_board(identity, handle)
        clock.now += 1.0
    batches = [r for r in requests if r != [pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT]]
    assert len(batches) == 5
    assert all(pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL in r for r in batches)
    # The other slow fields keep their cadence: in the first sweep only.
    assert [pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL in r for r in batches] == [True] + [False] * 4


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm-exporter"


def _listed_names(text: str) -> list[str]:
    return [
        line.split(",")[0].strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


@pytest.mark.parametrize("file", ["default-counters.csv", "dcp-metrics-included.csv"])
@pytest.mark.parametrize("uncomment", [False, True])
def test_every_field_of_upstreams_files_is_served_or_named_on_the_simulated_node(
    polled: Callable[..., str], file: str, uncomment: bool
) -> None:
    """Each line of dcgm-exporter's own files (and each line its users uncomment) ends as series
    on the default simulated node (eight H100s, MIG on two), as the driver-version label, or in
    kube_gpu_exporter_fields_unsupported with its reason."""
    text = (FIXTURES / file).read_text()
    if uncomment:
        text = "\n".join(
            line.lstrip("# ") if line.startswith("# DCGM_") else line for line in text.splitlines()
        )
    body = polled(fan=None, csv=text)
    written = {line.split("{")[0] for line in body.splitlines() if line.startswith("DCGM_")}
    unsupported = {
        line.split('field="')[1].split('"')[0]
        for line in body.splitlines()
        if line.startswith("kube_gpu_exporter_fields_unsupported{")
    }
    for name in _listed_names(text):
        if name == "DCGM_FI_DRIVER_VERSION":
            assert 'DCGM_FI_DRIVER_VERSION="' in body
            continue
        assert (name in written) != (name in unsupported), name
    # Every field upstream's default file leaves uncommented is served here.
    if not uncomment:
        assert unsupported == set()

"""The docs' field tables are the field table's: the committed pages hold exactly what
kube_gpu_exporter/exporter/docs_table.py renders now, and a few rows, written out here rather than
derived, say what the table says of them."""

from __future__ import annotations

from pathlib import Path

from kube_gpu_exporter.exporter import docs_table
from kube_gpu_exporter.exporter.fields.table import FIELDS

REPO = Path(__file__).resolve().parents[2]


def _block(page: str, what: str) -> str:
    """The text between a block's markers in a committed page."""
    [block] = [b for b in docs_table.BLOCKS if b.page == page and b.what == what]
    text = (REPO / page).read_text()
    assert text.count(block.begin) == 1, f"{page}: no single '{block.begin.strip()}' marker"
    assert text.count(block.end) == 1, f"{page}: no single '{block.end.strip()}' marker"
    return text.split(block.begin, 1)[1].split(block.end, 1)[0]


def _rows(table: str) -> dict[str, list[str]]:
    """The table's rows by their first cell, its backquotes removed."""
    lines = [line for line in table.splitlines() if line.startswith("|")][2:]
    cells = [[c.strip() for c in line.strip().strip("|").split(" | ")] for line in lines]
    return {row[0].strip("`"): row for row in cells}


def test_the_committed_pages_hold_the_freshly_rendered_tables() -> None:
    assert docs_table.stale_pages(REPO) == [], "run `make bundle` and commit the docs"
    assert _block("docs/fields.md", "field table") == docs_table.fields_table()
    assert (
        _block("docs/dcgm-exporter-compatibility.md", "4.9 renames table")
        == docs_table.renames_table()
    )


def test_a_page_without_its_markers_or_with_an_edited_row_is_stale(tmp_path: Path) -> None:
    for page in docs_table.pages():
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((REPO / page).read_text())
    assert docs_table.stale_pages(tmp_path) == []
    fields = tmp_path / "docs/fields.md"
    fields.write_text(fields.read_text().replace("| 150 |", "| 151 |", 1))
    renames = tmp_path / "docs/dcgm-exporter-compatibility.md"
    block = docs_table.BLOCKS[1]
    renames.write_text(renames.read_text().replace(block.end, ""))
    assert docs_table.stale_pages(tmp_path) == [
        "docs/dcgm-exporter-compatibility.md",
        "docs/fields.md",
    ]
    # Writing puts the edited table back, and leaves a page without its markers alone.
    docs_table.write_pages(tmp_path)
    assert fields.read_text() == (REPO / "docs/fields.md").read_text()
    assert block.end not in renames.read_text()


def test_every_row_of_the_field_table_has_one_line() -> None:
    rows = _rows(docs_table.fields_table())
    assert list(rows) == [row.name for row in FIELDS]
    assert all(len(cells) == 9 for cells in rows.values())


# Written out from the field table's meaning, not computed from it.
COLUMNS = ("name", "field", "source", "unit", "native", "type", "scope", "read", "default")


def _field(name: str) -> dict[str, str]:
    return dict(zip(COLUMNS, _rows(docs_table.fields_table())[name], strict=True))


def test_the_gpu_temperature_line() -> None:
    row = _field("DCGM_FI_DEV_GPU_TEMP")
    assert row["field"] == "150"
    assert "nvmlDeviceGetTemperature" in row["source"]
    assert (row["unit"], row["native"]) == ("C", "C")
    assert row["type"] == "gauge"
    assert row["read"] == "every sweep"
    assert row["default"] == "on"


def test_fan_speed_is_off_by_default() -> None:
    row = _field("DCGM_FI_DEV_FAN_SPEED")
    assert row["field"] == "191"
    assert "nvmlDeviceGetFanSpeed" in row["source"]
    assert row["default"] == "off"


def test_units_types_and_cadences_of_a_few_rows() -> None:
    power = _field("DCGM_FI_DEV_POWER_USAGE")
    assert (power["unit"], power["native"]) == ("W", "mW")
    assert "NVML_FI_DEV_POWER_AVERAGE" in power["source"]
    fb_used = _field("DCGM_FI_DEV_FB_USED")
    assert (fb_used["unit"], fb_used["native"], fb_used["scope"]) == (
        "MiB",
        "B",
        "GPU and MIG instance",
    )
    # The memory getter names one NVML function twice; the docs say it once.
    assert fb_used["source"].count("nvmlDeviceGetMemoryInfo") == 1
    assert _field("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")["read"] == "energy counter"
    assert _field("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")["type"] == "counter"
    assert _field("DCGM_FI_DEV_POWER_MGMT_LIMIT")["read"] == "slow fields"
    assert _field("DCGM_FI_PROF_SM_ACTIVE")["source"] == "GPM `NVML_GPM_METRIC_SM_UTIL`"
    assert _field("DCGM_EXP_XID_ERRORS_COUNT")["field"] == "-"
    assert _field("DCGM_EXP_XID_ERRORS_COUNT")["default"] == "off"
    assert _field("DCGM_FI_DRIVER_VERSION")["type"] == "label"


def test_the_nvlink_type_names_each_profile() -> None:
    row = _field("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")
    assert row["type"] == "counter (4.8.2) / gauge (4.8.3+)"
    assert (row["unit"], row["native"]) == ("MB/s", "KiB/s")


def test_the_4_9_spellings() -> None:
    table = docs_table.renames_table()
    rows = _rows(table)
    assert rows["DCGM_FI_DEV_SM_CLOCK"] == [
        "`DCGM_FI_DEV_SM_CLOCK`",
        "`DCGM_FI_DEV_SM_CLOCK_HERTZ`",
        "MHz → Hz",
        "SM clock frequency (in Hz).",
        "go-dcgm field",
    ]
    assert rows["DCGM_FI_DEV_GPU_TEMP"][1:3] == ["`DCGM_FI_DEV_GPU_TEMP_CELSIUS`", "C"]
    assert rows["DCGM_FI_DEV_GPU_TEMP"][4] == "DCGM alias"
    assert rows["DCGM_FI_DEV_GPU_UTIL"][2] == "% → ratio"
    assert rows["DCGM_FI_DEV_GPU_UTIL"][4] == "DCGM 4.7 docs, unconfirmed"
    # Families that keep their classic spelling under 4.9 have no line.
    assert "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL" not in rows
    assert "DCGM_FI_PROF_PCIE_TX_BYTES" not in rows
    # The profile does not rename an off-by-default row or the driver label: they follow the
    # table, in words.
    assert "DCGM_FI_DEV_FAN_SPEED" not in rows
    assert "DCGM_FI_DRIVER_VERSION" not in rows
    assert "`DCGM_FI_DEV_FAN_SPEED`, off by default, is `DCGM_FI_DEV_FAN_SPEED_RATIO`" in table
    assert "names `DCGM_FI_SYSTEM_DRIVER_VERSION`" in table


def test_make_bundle_checks_and_writes_the_pages() -> None:
    # The hook lives in kube_gpu_exporter/bundle/render.py: its drift check and its writer both call
    # these.
    source = (REPO / "kube_gpu_exporter/bundle/render.py").read_text()
    assert "docs_table.stale_pages(root)" in source
    assert "docs_table.write_pages(ROOT)" in source

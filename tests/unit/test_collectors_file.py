"""dcgm-exporter collectors files (--collectors): DCGM's field catalogue, the CSV as dcgm-exporter
reads it, which fields are exported and which are reported unsupported, and one-line refusals.

The expected splits below are written out by hand from upstream's files, not computed from the
field table, so that a row added to or dropped from the table shows up here.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.fields import dcgm_catalogue
from kube_gpu_exporter.exporter.fields.collectors_file import (
    DEFAULT_REASON,
    DRIVER_AS_VALUE_REASON,
    LABEL_REASON,
    parse_collectors,
    read_collectors_file,
)
from kube_gpu_exporter.exporter.fields.selection import FieldSelection
from kube_gpu_exporter.exporter.fields.table import BY_NAME
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "dcgm-exporter"
UPSTREAM_FILES = ("default-counters.csv", "dcp-metrics-included.csv")

# The uncommented field lines of both of upstream's 4.8.x files: all of them are exported.
UPSTREAM_LISTED = [
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge"),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge"),
    ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    ("DCGM_FI_DRIVER_VERSION", "label"),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
]

# The commented-out field lines users uncomment: exported with the line's type, or unsupported
# with a reason containing the given words.
EXPORTED = "exported"
COMMENTED_OUT: dict[str, tuple[str, str]] = {
    "DCGM_FI_PROF_PCIE_TX_BYTES": (EXPORTED, "counter"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (EXPORTED, "counter"),
    "DCGM_FI_DEV_POWER_VIOLATION": (EXPORTED, "counter"),
    "DCGM_FI_DEV_THERMAL_VIOLATION": (EXPORTED, "counter"),
    "DCGM_FI_DEV_SYNC_BOOST_VIOLATION": (EXPORTED, "counter"),
    "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION": (EXPORTED, "counter"),
    "DCGM_FI_DEV_LOW_UTIL_VIOLATION": (EXPORTED, "counter"),
    "DCGM_FI_DEV_RELIABILITY_VIOLATION": (EXPORTED, "counter"),
    "DCGM_EXP_CLOCK_EVENTS_COUNT": (EXPORTED, "counter"),
    "DCGM_EXP_XID_ERRORS_COUNT": (EXPORTED, "counter"),
    "DCGM_EXP_GPU_HEALTH_STATUS": (EXPORTED, "counter"),
    "DCGM_EXP_P2P_STATUS": (EXPORTED, "counter"),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_RETIRED_SBE": (EXPORTED, "counter"),
    "DCGM_FI_DEV_RETIRED_DBE": (EXPORTED, "counter"),
    "DCGM_FI_DEV_RETIRED_PENDING": (EXPORTED, "counter"),
    # The NVLink error totals are read (off by default, as upstream leaves them commented out);
    # the per-link bandwidth is not.
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": (EXPORTED, "counter"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_L0": ("unsupported", "NVLink"),
    "DCGM_FI_NVML_VERSION": ("unsupported", "label fields"),
    "DCGM_FI_DEV_BRAND": ("unsupported", "label fields"),
    "DCGM_FI_DEV_SERIAL": ("unsupported", "label fields"),
    "DCGM_FI_DEV_OEM_INFOROM_VER": ("unsupported", "label fields"),
    "DCGM_FI_DEV_ECC_INFOROM_VER": ("unsupported", "label fields"),
    "DCGM_FI_DEV_POWER_INFOROM_VER": ("unsupported", "label fields"),
    "DCGM_FI_DEV_INFOROM_IMAGE_VER": ("unsupported", "label fields"),
    "DCGM_FI_DEV_VBIOS_VERSION": ("unsupported", "label fields"),
    "DCGM_FI_PROF_SM_ACTIVE": (EXPORTED, "gauge"),
    "DCGM_FI_PROF_SM_OCCUPANCY": (EXPORTED, "gauge"),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": (EXPORTED, "gauge"),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": (EXPORTED, "gauge"),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": (EXPORTED, "gauge"),
}
# dcp-metrics-included.csv lacks the DCGM_EXP_* section.
EXPORTER_SECTION = {
    "DCGM_EXP_CLOCK_EVENTS_COUNT",
    "DCGM_EXP_XID_ERRORS_COUNT",
    "DCGM_EXP_GPU_HEALTH_STATUS",
    "DCGM_EXP_P2P_STATUS",
}
_COMMENTED_FIELD = re.compile(r"^# ((?:DCGM_FI|DCGM_EXP)_\w+\s*,.*)$")


def _commented_out(file: str) -> list[str]:
    text = (FIXTURES / file).read_text()
    return [m.group(1) for line in text.splitlines() if (m := _COMMENTED_FIELD.match(line))]


def _parse(text: str) -> FieldSelection:
    return parse_collectors(text, "fields.csv")


def _refusal(text: str) -> str:
    with pytest.raises(ConfigurationError) as caught:
        _parse(text)
    message = str(caught.value)
    assert len(message.splitlines()) == 1, message
    return message


# The catalogue of DCGM's field names.


@pytest.mark.parametrize(
    ("name", "number"),
    [
        ("DCGM_FI_DEV_GPU_TEMP", 150),
        # A deprecated alias resolves to its field's id.
        ("DCGM_FI_DEV_XID_ERROR", 230),
        ("DCGM_FI_DRIVER_VERSION", 1),
        ("DCGM_FI_SYSTEM_DRIVER_VERSION", 1),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 1004),
        ("DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX", 780),
        ("DCGM_FI_DEV_COUNT", 4),
        # 4.6.1's own base-unit field: a different id from the classic field it renames.
        ("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1603),
        # A 4.9 spelling from DCGM 4.7's documentation, known through the field table.
        ("DCGM_FI_DEV_FB_USED_BYTES", 252),
        # dcgm-exporter 1.x's names, which go-dcgm still resolves.
        ("dcgm_gpu_temp", 150),
    ],
)
def test_the_catalogue_knows_dcgm_fields_and_their_ids(name, number):
    assert dcgm_catalogue.is_dcgm_field(name)
    assert dcgm_catalogue.field_id(name) == number


@pytest.mark.parametrize(
    "name",
    [
        "DCGM_FI_MAX_FIELDS",
        "DCGM_FI_FIRST_NVSWITCH_FIELD_ID",
        "DCGM_FI_LAST_VGPU_FIELD_ID",
        "DCGM_FI_DEV_FIRST_CONNECTX_FIELD_ID",
        "DCGM_FI_INTERNAL_FIELDS_0_START",
        "DCGM_FI_UNKNOWN",
        "DCGM_FI_DEV_GPU_TMP",
        "dcgm_fi_dev_gpu_temp",
        "",
    ],
)
def test_the_catalogue_leaves_out_what_is_no_field(name):
    assert not dcgm_catalogue.is_dcgm_field(name)
    assert dcgm_catalogue.field_id(name) is None


@pytest.mark.parametrize("name", sorted(dcgm_catalogue.EXPORTER_FAMILIES))
def test_exporter_families_are_known_without_an_id(name):
    assert dcgm_catalogue.is_dcgm_field(name)
    assert dcgm_catalogue.field_id(name) is None


def test_the_catalogue_holds_the_whole_header():
    upper = [n for n in dcgm_catalogue._ids() if not dcgm_catalogue.is_legacy_name(n)]
    # go-dcgm 4.6.1's header has 1,026 `#define DCGM_FI_*`; 13 are bounds, counts or field 0.
    assert len(upper) == 1013
    assert dcgm_catalogue.names_of(230) == ("DCGM_FI_DEV_XID_ERROR", "DCGM_FI_DEV_XID_ERRORS")


def test_every_table_name_is_a_dcgm_field():
    for row in BY_NAME.values():
        for name in row.names():
            assert dcgm_catalogue.is_dcgm_field(name), name


def test_the_data_file_is_in_the_wheel():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["kube_gpu_exporter.exporter.fields"]
    assert dcgm_catalogue.DATA_FILE.name in patterns
    assert dcgm_catalogue.DATA_FILE.parent == REPO / "kube_gpu_exporter" / "exporter" / "fields"


# Upstream's own files.


@pytest.mark.parametrize("file", UPSTREAM_FILES)
def test_upstream_files_are_exported_whole(file):
    selection = read_collectors_file(str(FIXTURES / file))
    assert [(f.name, f.kind) for f in selection.listed] == UPSTREAM_LISTED
    assert selection.unsupported == ()
    assert selection.path == str(FIXTURES / file)
    # The file's HELP, not the table's.
    temp = selection.get("DCGM_FI_DEV_GPU_TEMP")
    assert temp is not None and temp.help == "GPU die temperature (degrees C)."


@pytest.mark.parametrize("file", UPSTREAM_FILES)
def test_every_commented_out_line_is_exported_or_explained(file):
    lines = _commented_out(file)
    expected = {
        name: outcome
        for name, outcome in COMMENTED_OUT.items()
        if file == "default-counters.csv" or name not in EXPORTER_SECTION
    }
    assert sorted(line.split(",")[0].strip() for line in lines) == sorted(expected)
    for line in lines:
        selection = _parse(line + "\n")
        name = line.split(",")[0].strip()
        outcome, detail = expected[name]
        if outcome == EXPORTED:
            assert [(f.name, f.kind) for f in selection.listed] == [(name, detail)]
            assert selection.unsupported == ()
        else:
            assert selection.listed == ()
            [unsupported] = selection.unsupported
            assert unsupported.name == name
            assert detail in unsupported.reason
            assert "\n" not in unsupported.reason


def test_uncommenting_everything_keeps_the_first_line_of_a_field():
    text = (FIXTURES / "default-counters.csv").read_text()
    uncommented = "\n".join(
        m.group(1) if (m := _COMMENTED_FIELD.match(line)) else line for line in text.splitlines()
    )
    selection = _parse(uncommented)
    # The PCIe profiling fields appear commented out as counters before their gauge lines.
    tx = selection.get("DCGM_FI_PROF_PCIE_TX_BYTES")
    assert tx is not None and tx.kind == "counter"
    exported = {name for name, (outcome, _) in COMMENTED_OUT.items() if outcome == EXPORTED}
    assert {f.name for f in selection.listed} == {n for n, _ in UPSTREAM_LISTED} | exported
    assert {u.name for u in selection.unsupported} == set(COMMENTED_OUT) - exported


# The format.


def test_spaces_around_commas_and_commas_in_the_help():
    selection = _parse("  DCGM_FI_DEV_DEC_UTIL ,   gauge ,  Decoder use, in percent, sampled  \n")
    [field] = selection.listed
    assert (field.name, field.kind, field.help) == (
        "DCGM_FI_DEV_DEC_UTIL",
        "gauge",
        "Decoder use, in percent, sampled",
    )


def test_a_quoted_help_loses_its_quotes():
    [field] = _parse('DCGM_FI_DEV_GPU_TEMP, gauge, "Die temperature, in ""C"""\n').listed
    assert field.help == 'Die temperature, in "C"'


def test_crlf_a_byte_order_mark_and_indented_comments():
    text = (
        "\ufeffDCGM_FI_DEV_GPU_TEMP, gauge, t\r\n"
        "   # a comment\r\n"
        "\r\n"
        "DCGM_FI_DEV_FB_USED, gauge, u\r\n"
    )
    selection = _parse(text)
    assert [(f.name, f.help) for f in selection.listed] == [
        ("DCGM_FI_DEV_GPU_TEMP", "t"),
        ("DCGM_FI_DEV_FB_USED", "u"),
    ]


def test_the_files_type_wins_over_the_tables():
    [field] = _parse("DCGM_FI_DEV_GPU_TEMP, counter, my help\n").listed
    assert field.row.kind == "gauge"
    assert (field.kind, field.help) == ("counter", "my help")


def test_a_49_name_selects_its_row_in_base_units():
    [field] = _parse("DCGM_FI_DEV_FB_USED_BYTES, gauge, used\n").listed
    assert field.row is BY_NAME["DCGM_FI_DEV_FB_USED"]
    assert field.name == "DCGM_FI_DEV_FB_USED_BYTES"
    assert field.base_units


def test_a_field_listed_twice_keeps_its_first_line():
    selection = _parse(
        "DCGM_FI_DEV_GPU_TEMP, gauge, first\n"
        "DCGM_FI_DEV_GPU_TEMP, counter, second\n"
        "DCGM_FI_DEV_FB_USED_BYTES, gauge, by its 4.9 name\n"
        "DCGM_FI_DEV_FB_USED, counter, by its classic name\n"
        "DCGM_FI_DEV_PSTATE, counter, a\n"
        "DCGM_FI_DEV_PSTATE, counter, b\n"
    )
    assert [(f.name, f.kind, f.help) for f in selection.listed] == [
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "first"),
        ("DCGM_FI_DEV_FB_USED_BYTES", "gauge", "by its 4.9 name"),
    ]
    assert [u.name for u in selection.unsupported] == ["DCGM_FI_DEV_PSTATE"]


@pytest.mark.parametrize("text", ["", "\n\n", "# only comments\n\n# and more\n"])
def test_an_empty_file_selects_nothing(text):
    selection = _parse(text)
    assert (selection.listed, selection.unsupported) == ((), ())


# Labels and the driver version.


def test_the_driver_version_as_a_label():
    [field] = _parse("DCGM_FI_DRIVER_VERSION, label, Driver Version\n").listed
    assert (field.name, field.kind) == ("DCGM_FI_DRIVER_VERSION", "label")
    [field] = _parse("DCGM_FI_SYSTEM_DRIVER_VERSION, label, Driver Version\n").listed
    assert field.row.name == "DCGM_FI_DRIVER_VERSION"
    assert field.name == "DCGM_FI_SYSTEM_DRIVER_VERSION"


def test_the_driver_version_as_a_value_is_unsupported():
    selection = _parse("DCGM_FI_DRIVER_VERSION, gauge, Driver Version\n")
    assert selection.listed == ()
    assert [(u.name, u.reason) for u in selection.unsupported] == [
        ("DCGM_FI_DRIVER_VERSION", DRIVER_AS_VALUE_REASON)
    ]


@pytest.mark.parametrize("name", ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SERIAL", "DCGM_FI_DEV_UUID"])
def test_other_label_fields_are_unsupported(name):
    selection = _parse(f"{name}, label, x\n")
    assert selection.listed == ()
    assert [(u.name, u.reason) for u in selection.unsupported] == [(name, LABEL_REASON)]


# Reasons for DCGM fields without a source here.


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("DCGM_FI_DEV_NVSWITCH_LINK_THROUGHPUT_TX", "NVSwitch module"),
        ("DCGM_FI_PROF_PIPE_INT_ACTIVE", "no NVML GPM metric"),
        ("DCGM_FI_PROF_NVDEC0_ACTIVE", "no NVML GPM metric"),
        ("DCGM_FI_DEV_CPU_UTIL_TOTAL", "sysmon"),
        ("DCGM_FI_DEV_CONNECTX_HEALTH", "ConnectX"),
        ("DCGM_FI_IMEX_DOMAIN_STATUS", "IMEX"),
        ("DCGM_FI_DEV_DIAG_STATUS", "diagnostics"),
        ("DCGM_FI_DEV_VGPU_UUID", "vGPU"),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_L0", "NVLink"),
        ("DCGM_FI_DEV_PSTATE", DEFAULT_REASON),
        ("dcgm_gpu_temp", "1.x name: list the field as DCGM_FI_DEV_GPU_TEMP"),
        ("dcgm_power_violation", "1.x name: list the field as DCGM_FI_DEV_POWER_VIOLATION"),
    ],
)
def test_unsupported_fields_say_why(name, words):
    selection = _parse(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{name}, gauge, x\n")
    assert [f.name for f in selection.listed] == ["DCGM_FI_DEV_GPU_TEMP"]
    [unsupported] = selection.unsupported
    assert unsupported.name == name
    assert words in unsupported.reason


# Refusals: one line naming the file, the line and the problem.


def test_an_unknown_field_is_refused_naming_file_line_and_name():
    message = _refusal(
        "# comment\n\nDCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_GPU_TMP, gauge, x\n"
    )
    assert message == "collectors file fields.csv:4: DCGM_FI_DEV_GPU_TMP is not a DCGM field"


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (
            "DCGM_FI_DEV_GPU_TEMP, gauges, t",
            "unknown type gauges (use one of gauge, counter, label)",
        ),
        ("DCGM_FI_DEV_GPU_TEMP, Gauge, t", "unknown type Gauge"),
        ("DCGM_FI_DEV_GPU_TEMP, histogram, t", "histogram"),
        ("DCGM_FI_DEV_GPU_TEMP, summary, t", "summary"),
        ("DCGM_FI_DEV_GPU_TEMP, gauge", "expected 3 columns (FIELD, type, help), found 2"),
        ("DCGM_FI_DEV_GPU_TEMP", "found 1"),
        (", gauge, t", "the field name is empty"),
        ("DCGM_FI_DEV_GPU_TEMP, , t", "DCGM_FI_DEV_GPU_TEMP has no type"),
        ("DCGM_FI_DEV\x0bGPU_TEMP, gauge, t", '"DCGM_FI_DEV\\x0bGPU_TEMP" is not a DCGM field'),
        ("DCGM_FI_DEV\x1b[31m, gauge, t", '"DCGM_FI_DEV\\x1b[31m" is not a DCGM field'),
        ('DCGM_FI_DEV_GPU_TEMP, "gau\rge", t', 'unknown type "gau\\rge"'),
    ],
)
def test_malformed_lines_are_refused(line, words):
    message = _refusal(f"DCGM_FI_DEV_FB_USED, gauge, u\n{line}\n")
    assert message.startswith("collectors file fields.csv:2: ")
    assert words in message


def test_a_missing_file_is_one_line(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(ConfigurationError) as caught:
        read_collectors_file(str(path))
    assert str(caught.value) == f"collectors file {path}: cannot read: No such file or directory"


def test_a_directory_binary_or_huge_file_is_one_line(tmp_path):
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"DCGM_FI_DEV_GPU_TEMP, gauge, \xff\xfe\n")
    huge = tmp_path / "huge.csv"
    with huge.open("wb") as out:
        out.truncate(2 << 20)
    for path, words in ((tmp_path, "not a regular file"), (binary, "UTF-8"), (huge, "byte limit")):
        with pytest.raises(ConfigurationError) as caught:
            read_collectors_file(str(path))
        message = str(caught.value)
        assert message.startswith(f"collectors file {path}: ")
        assert words in message
        assert len(message.splitlines()) == 1


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    with pytest.raises(ConfigurationError, match="not a regular file"):
        read_collectors_file(str(fifo))


def test_the_reader_reads_the_file_it_is_given(tmp_path: Path):
    path = tmp_path / "mine.csv"
    path.write_text("DCGM_FI_DEV_FAN_SPEED, gauge, fan\nDCGM_FI_DEV_PSTATE, counter, v\n")
    selection = read_collectors_file(str(path))
    assert selection.path == str(path)
    assert [f.row.name for f in selection.listed] == ["DCGM_FI_DEV_FAN_SPEED"]
    assert [u.name for u in selection.unsupported] == ["DCGM_FI_DEV_PSTATE"]

"""--collectors and its companions on the command line: dcgm-exporter's CSV, its variables and
count windows, per-field read intervals, and that nothing changes without them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.config import CollectionConfig, LabelConfig
from kube_gpu_exporter.exporter.flags.parser import build_parser
from kube_gpu_exporter.exporter.flags.settings import parse_config
from tests.conftest import REPO

DEFAULT_COUNTERS = REPO / "tests" / "fixtures" / "dcgm-exporter" / "default-counters.csv"
WITH_COUNTS = (
    "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n"
    "DCGM_FI_DEV_FAN_SPEED, gauge, fan\n"
    "DCGM_EXP_XID_ERRORS_COUNT, counter, xids in the window\n"
    "DCGM_EXP_CLOCK_EVENTS_COUNT, counter, clock events in the window\n"
)


@pytest.fixture
def csv(tmp_path: Path):
    """Writes a collectors file and returns its path."""

    def write(text: str, name: str = "fields.csv") -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    return write


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kube-gpu-exporter: error: ")
    return lines[0]


def config(*args: str, **env: str):
    return parse_config(list(args), environ=env)


# Choosing the file.


@pytest.mark.parametrize("form", [["-f", "{}"], ["--collectors", "{}"], ["--collectors={}"]])
def test_the_flag_in_each_form(csv, form):
    path = csv("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    fields = config(*(word.format(path) for word in form)).fields
    assert fields is not None and fields.path == path
    assert [f.name for f in fields.listed] == ["DCGM_FI_DEV_GPU_TEMP"]


@pytest.mark.parametrize("variable", ["DCGM_EXPORTER_COLLECTORS", "KUBE_GPU_EXPORTER_COLLECTORS"])
def test_the_environment_names_the_file(csv, variable):
    path = csv("DCGM_FI_DEV_FB_USED, gauge, u\n")
    fields = config(**{variable: path}).fields
    assert fields is not None and fields.path == path


def test_the_flag_beats_both_variables_and_ours_beats_upstreams(csv):
    flag = csv("DCGM_FI_DEV_GPU_TEMP, gauge, t\n", "flag.csv")
    ours = csv("DCGM_FI_DEV_FB_USED, gauge, u\n", "ours.csv")
    theirs = csv("DCGM_FI_DEV_FB_FREE, gauge, f\n", "theirs.csv")
    env = {"KUBE_GPU_EXPORTER_COLLECTORS": ours, "DCGM_EXPORTER_COLLECTORS": theirs}
    for args in (["-f", flag], ["--collectors", flag], [f"--collectors={flag}"]):
        fields = config(*args, **env).fields
        assert fields is not None and fields.path == flag
    fields = config(**env).fields
    assert fields is not None and fields.path == ours


def test_upstreams_default_file_selects_the_driver_label_and_no_windows():
    cfg = config("-f", str(DEFAULT_COUNTERS))
    assert cfg.fields is not None and len(cfg.fields.listed) == 26
    assert cfg.labels.driver_version_label == "DCGM_FI_DRIVER_VERSION"
    assert cfg.collection.extra_fields == frozenset()
    assert cfg.collection.xid_count_window_ms is None
    assert cfg.collection.clock_events_count_window_ms is None


def test_listed_rows_that_are_off_by_default_are_read(csv):
    collection = config("-f", csv(WITH_COUNTS)).collection
    assert collection.extra_fields == {
        "DCGM_FI_DEV_FAN_SPEED",
        "DCGM_EXP_XID_ERRORS_COUNT",
        "DCGM_EXP_CLOCK_EVENTS_COUNT",
    }


# Bad files: one line, status 2.


@pytest.mark.parametrize(
    ("args", "env", "words"),
    [
        (["-f", "/nonexistent/fields.csv"], {}, "/nonexistent/fields.csv: cannot read"),
        ([], {"DCGM_EXPORTER_COLLECTORS": "/nonexistent/x.csv"}, "/nonexistent/x.csv"),
        (["--collectors="], {}, "argument --collectors: the path is empty"),
    ],
)
def test_a_file_that_cannot_be_read_is_one_line(cli, args, env, words):
    code, out, err = cli(*args, env=env)
    assert (code, out) == (2, "")
    assert words in one_error_line(err)


def test_a_bad_type_is_one_line(cli, csv):
    path = csv("DCGM_FI_DEV_GPU_TEMP, gauge, t\n\nDCGM_FI_DEV_FB_USED, histogram, u\n")
    code, _, err = cli("-f", path)
    assert code == 2
    assert f"collectors file {path}:3: DCGM_FI_DEV_FB_USED has type histogram" in one_error_line(
        err
    )


# The driver-version label follows the file unless the flag names one.


def test_the_driver_label_is_off_when_the_file_lacks_it(csv):
    path = csv("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    assert config("-f", path).labels.driver_version_label == ""
    assert config("-f", path, "--compat.dcgm-exporter=4.9").labels.driver_version_label == ""


def test_an_explicit_driver_label_wins_over_the_file(csv):
    path = csv("DCGM_FI_DEV_GPU_TEMP, gauge, t\n")
    labels = config("-f", path, "--driver-version-label=DCGM_FI_DRIVER_VERSION").labels
    assert labels.driver_version_label == "DCGM_FI_DRIVER_VERSION"
    env = {"KUBE_GPU_EXPORTER_DRIVER_VERSION_LABEL": "DCGM_FI_SYSTEM_DRIVER_VERSION"}
    assert config("-f", path, **env).labels.driver_version_label == "DCGM_FI_SYSTEM_DRIVER_VERSION"
    driver = csv("DCGM_FI_DRIVER_VERSION, label, v\n", "driver.csv")
    assert config("-f", driver, "--driver-version-label=none").labels.driver_version_label == ""


@pytest.mark.parametrize("name", ["DCGM_FI_DRIVER_VERSION", "DCGM_FI_SYSTEM_DRIVER_VERSION"])
def test_the_driver_label_is_named_as_the_file_lists_it(csv, name):
    path = csv(f"DCGM_FI_DEV_GPU_TEMP, gauge, t\n{name}, label, Driver Version\n")
    for compat in ("4.8.3", "4.9"):
        labels = config("-f", path, f"--compat.dcgm-exporter={compat}").labels
        assert labels.driver_version_label == name


# Count windows.


def test_windows_default_to_five_minutes_when_listed(csv):
    collection = config("-f", csv(WITH_COUNTS)).collection
    assert (collection.xid_count_window_ms, collection.clock_events_count_window_ms) == (
        300_000,
        300_000,
    )


def test_window_flags_and_variables(csv):
    path = csv(WITH_COUNTS)
    collection = config(
        "-f", path, "-x", "1000", "--clock-events-count-window-size=2000"
    ).collection
    assert (collection.xid_count_window_ms, collection.clock_events_count_window_ms) == (1000, 2000)
    assert config("-f", path, "--xid-count-window-size=7").collection.xid_count_window_ms == 7
    upstream = {
        "DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "3000",
        "DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "4000",
    }
    collection = config("-f", path, **upstream).collection
    assert (collection.xid_count_window_ms, collection.clock_events_count_window_ms) == (3000, 4000)
    ours = {**upstream, "KUBE_GPU_EXPORTER_XID_COUNT_WINDOW_SIZE": "5000"}
    assert config("-f", path, **ours).collection.xid_count_window_ms == 5000
    assert config("-f", path, "-x", "6000", **ours).collection.xid_count_window_ms == 6000


def test_a_window_applies_only_to_a_listed_family(csv):
    path = csv("DCGM_EXP_XID_ERRORS_COUNT, gauge, x\n")
    collection = config("-f", path, "--clock-events-count-window-size=9").collection
    assert (collection.xid_count_window_ms, collection.clock_events_count_window_ms) == (
        300_000,
        None,
    )


@pytest.mark.parametrize(
    ("args", "env", "mentions"),
    [
        (
            ["-x", "0"],
            {},
            "argument --xid-count-window-size/-x: 0 is not a whole number of milliseconds "
            "from 1 to 604800000 (168h)",
        ),
        (["--xid-count-window-size=-5"], {}, "--xid-count-window-size"),
        (["--xid-count-window-size=5s"], {}, "5s is not a whole number of milliseconds"),
        (["--clock-events-count-window-size=0"], {}, "--clock-events-count-window-size"),
        (["--clock-events-count-window-size=1.5"], {}, "--clock-events-count-window-size"),
        (
            [],
            {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "soon"},
            "environment variable DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE",
        ),
        (
            [],
            {"KUBE_GPU_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "0"},
            "environment variable KUBE_GPU_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE",
        ),
        # The short flag's own bad value is blamed on the flag, not on a good variable.
        (
            ["-x", "0"],
            {"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "1000"},
            "argument --xid-count-window-size/-x",
        ),
    ],
)
def test_bad_windows_are_one_line(cli, args, env, mentions):
    code, out, err = cli(*args, env=env)
    assert (code, out) == (2, "")
    assert mentions in one_error_line(err)


# Per-field read intervals.


def test_field_intervals_in_every_form():
    collection = config(
        "--collector.field-interval=DCGM_FI_DEV_GPU_TEMP=30s,DCGM_FI_DEV_FB_USED_BYTES=250ms",
        "--collector.field-interval",
        "DCGM_FI_DEV_POWER_MGMT_LIMIT=1m30s, DCGM_FI_DEV_SM_CLOCK=2.5",
        "--collector.field-interval=DCGM_FI_DEV_PCIE_REPLAY_COUNTER=0",
    ).collection
    assert collection.field_intervals == (
        ("DCGM_FI_DEV_GPU_TEMP", 30.0),
        ("DCGM_FI_DEV_FB_USED", 0.25),
        ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 90.0),
        ("DCGM_FI_DEV_SM_CLOCK", 2.5),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0.0),
    )


def test_the_last_interval_for_a_field_wins():
    collection = config(
        "--collector.field-interval=DCGM_FI_DEV_GPU_TEMP=30s",
        "--collector.field-interval=DCGM_FI_DEV_GPU_TEMP=5s",
    ).collection
    assert collection.field_intervals == (("DCGM_FI_DEV_GPU_TEMP", 5.0),)


def test_field_intervals_from_the_environment():
    env = {"KUBE_GPU_EXPORTER_COLLECTOR_FIELD_INTERVAL": "DCGM_FI_DEV_GPU_TEMP=20s"}
    assert config(**env).collection.field_intervals == (("DCGM_FI_DEV_GPU_TEMP", 20.0),)
    flagged = config("--collector.field-interval=DCGM_FI_DEV_FB_FREE=1s", **env).collection
    assert flagged.field_intervals == (("DCGM_FI_DEV_FB_FREE", 1.0),)


@pytest.mark.parametrize(
    "name", ["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL"]
)
def test_the_energy_fields_interval_is_the_energy_read_interval(name):
    collection = config(
        "--collector.field-interval=energy-counter=90s", f"--collector.field-interval={name}=2m"
    ).collection
    assert collection.energy_read_interval_seconds == 120.0
    assert collection.field_intervals == ()


@pytest.mark.parametrize(
    ("value", "mentions"),
    [
        ("DCGM_FI_NOPE=1s", "DCGM_FI_NOPE is not a DCGM field"),
        ("DCGM_FI_\nNOPE=1s", '"DCGM_FI_\\nNOPE" is not a DCGM field'),
        ("DCGM_FI_DEV_PSTATE=1s", "is a DCGM field this exporter does not read"),
        ("DCGM_FI_PROF_SM_ACTIVE=1s", "GPM sampler"),
        ("DCGM_FI_PROF_SM_UTIL_RATIO=1s", "GPM sampler"),
        ("DCGM_FI_DEV_PCIE_TX_THROUGHPUT=1s", "set pcie-sampler=SECONDS instead"),
        ("DCGM_FI_DEV_XID_ERRORS=1s", "--collector.xid"),
        ("DCGM_EXP_CLOCK_EVENTS_TOTAL=1s", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=30s", "the clock-event counts sample it"),
        ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS=30s", "read every sweep"),
        ("DCGM_FI_DRIVER_VERSION=1s", "identity"),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS=1s", "identity"),
        ("DCGM_FI_DEV_GPU_TEMP=-1", "-1 is out of range (from 0s to 1h)"),
        ("DCGM_FI_DEV_GPU_TEMP=-1s", "invalid duration"),
        ("DCGM_FI_DEV_GPU_TEMP=2h", "out of range"),
        ("DCGM_FI_DEV_GPU_TEMP=nan", "nan is not a finite number; expected a duration from 0s"),
        ("DCGM_FI_DEV_GPU_TEMP=soon", "invalid duration soon"),
        ("DCGM_FI_DEV_GPU_TEMP=", 'invalid duration ""'),
        ("DCGM_FI_DEV_GPU_TEMP", "is not NAME=SECONDS"),
        ("=5s", "is not NAME=SECONDS"),
        (",", "expected NAME=SECONDS"),
    ],
)
def test_bad_field_intervals_are_one_line(cli, value, mentions):
    code, out, err = cli(f"--collector.field-interval={value}")
    assert (code, out) == (2, "")
    line = one_error_line(err)
    assert "argument --collector.field-interval: " in line
    assert mentions in line


def test_a_bad_field_interval_from_the_environment_names_the_variable(cli):
    env = {"KUBE_GPU_EXPORTER_COLLECTOR_FIELD_INTERVAL": "DCGM_FI_NOPE=1s"}
    code, _, err = cli(env=env)
    assert code == 2
    assert "environment variable KUBE_GPU_EXPORTER_COLLECTOR_FIELD_INTERVAL" in one_error_line(err)


# Nothing changes without a file.


def test_without_a_file_nothing_changes():
    plain = config()
    assert plain.fields is None
    assert plain.collection == CollectionConfig()
    assert plain.labels == LabelConfig()
    # The windows only matter for a file's families: they are kept for one (a built-in
    # fleet's, applied later), and change nothing else.
    windowed = config("-x", "1000", "--clock-events-count-window-size=2000")
    assert windowed.selection_flags.xid_count_window_ms == 1000
    assert windowed.selection_flags.clock_events_count_window_ms == 2000
    assert replace(windowed, selection_flags=plain.selection_flags) == plain
    from_env = config(DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE="1000")
    assert replace(from_env, selection_flags=plain.selection_flags) == plain
    assert config(DCGM_EXPORTER_COLLECTORS_UNRELATED="x") == plain


# Help and start-up messages.


def test_help_marks_49_as_a_preview_and_names_the_new_flags():
    text = " ".join(build_parser().format_help().split())
    assert "4.9 (a preview: no upstream release confirms its names yet" in text
    for flag in (
        "--collectors FILE, -f FILE",
        "--xid-count-window-size MS, -x MS",
        "--clock-events-count-window-size MS",
        "--collector.field-interval NAME=SECONDS",
    ):
        assert flag in text


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        yield taken.getsockname()[1]


def test_each_unsupported_field_is_logged_once_at_start(cli, csv, busy_port):
    path = csv(
        "DCGM_FI_DEV_GPU_TEMP, gauge, t\n"
        "DCGM_FI_DEV_PSTATE, counter, v\n"
        "DCGM_FI_DEV_SERIAL, label, s\n"
        "DCGM_FI_DEV_PSTATE, counter, again\n"
    )
    code, _, err = cli(
        "--simulate",
        f"--web.listen-address=127.0.0.1:{busy_port}",
        "--log.format=json",
        "-f",
        path,
    )
    # It then stops on the port, which proves the warnings come before anything starts.
    assert code == 2
    messages = [json.loads(line)["msg"] for line in err.splitlines() if line.startswith("{")]
    assert messages == [
        f"{path}: DCGM_FI_DEV_PSTATE is not exported: "
        "a DCGM-only field: NVML has no source for it here",
        f"{path}: DCGM_FI_DEV_SERIAL is not exported: "
        "label fields other than the driver version and the fabric cluster UUID are not exported",
    ]


def test_a_file_that_exports_nothing_is_logged(cli, csv, busy_port):
    path = csv("# nothing yet\n")
    code, _, err = cli(
        "--simulate", f"--web.listen-address=127.0.0.1:{busy_port}", "--log.format=json", "-f", path
    )
    assert code == 2
    messages = [json.loads(line)["msg"] for line in err.splitlines() if line.startswith("{")]
    assert messages == [f"{path} lists no field this exporter exports: no DCGM series"]

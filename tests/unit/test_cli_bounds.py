"""Bounds on every duration and count window the command line and the environment take, and
errors that cannot forge a log record.

Each hostile value (hundreds of digits, 1e400, inf, nan, negative, zero where zero means nothing,
just past the bound, control characters) fails in one line on stderr with status 2, naming the
flag or the variable and the bound; the value at the bound is accepted and cannot overflow a
timer later. Whatever user text an error carries is escaped, so the error stays one line.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.durations import format_duration
from kube_gpu_exporter.exporter.errors import SHOWN_CHARS, one_line, quoted
from kube_gpu_exporter.exporter.fields.flags import MAX_COUNT_WINDOW_MS, MAX_FIELD_INTERVAL_SECONDS
from kube_gpu_exporter.exporter.flags.model import Kind, env_name
from kube_gpu_exporter.exporter.flags.parser import UsageError, build_parser
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.flags.table import FLAGS
from kube_gpu_exporter.exporter.flags.upstream import UPSTREAM_ENV
from kube_gpu_exporter.exporter.logs import JsonFormatter, LogfmtFormatter

DURATION_BOUNDS = {
    flag.name: flag.bounds for flag in FLAGS if flag.kind is Kind.DURATION and flag.bounds
}
# The dcgm-exporter variables that set a flag of ours.
UPSTREAM_VARIABLE = {row.flag: row.env for row in UPSTREAM_ENV if row.translate is not None}
FIELD = "DCGM_FI_DEV_GPU_TEMP"
FIELD_INTERVAL = "--collector.field-interval"
WINDOWS = ("--xid-count-window-size", "--clock-events-count-window-size")
# Take free text that no bound applies to: a regular expression, a fleet's name or path.
FREE_TEXT = {"--kubernetes.pod-label-allowlist", "--simulate"}
WITH_COUNTS = "DCGM_EXP_XID_ERRORS_COUNT, counter, x\nDCGM_EXP_CLOCK_EVENTS_COUNT, counter, c\n"
# Refused only after every flag has parsed: were a hostile value accepted, main() fails on this
# instead of running the exporter in the test's process, and the test fails on its message.
GUARD = "--web.telemetry-path=guard"


def the_line(err: str) -> str:
    """stderr's one line: nothing a terminal or a log reader would split or run."""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].isprintable(), err
    assert lines[0].startswith("kube-gpu-exporter: error: ")
    return lines[0]


@dataclass(frozen=True)
class Bounded:
    flag: str
    at_bound: str
    past_bound: str
    # How every refusal names the bound.
    bound: str
    zero_allowed: bool
    # --collector.field-interval's value is NAME=SECONDS.
    prefix: str = ""


def bounded_flags() -> list[Bounded]:
    cases = [
        Bounded(flag, f"{high:g}", f"{high + 0.001}", f"to {format_duration(high)}", low == 0)
        for flag, (low, high) in DURATION_BOUNDS.items()
    ]
    high = MAX_FIELD_INTERVAL_SECONDS
    bound = f"to {format_duration(high)}"
    cases.append(Bounded(FIELD_INTERVAL, f"{high:g}", f"{high + 0.001}", bound, True, f"{FIELD}="))
    widest, over = str(MAX_COUNT_WINDOW_MS), str(MAX_COUNT_WINDOW_MS + 1)
    cases += [Bounded(flag, widest, over, f"to {widest}", False) for flag in WINDOWS]
    return cases


BOUNDED = bounded_flags()
HOSTILE = [
    str(10**400),
    "1e400",
    "inf",
    "-inf",
    "nan",
    "-1",
    "5\nts=2026 level=error msg=forged",
    "5\r0",
    "\x1b[31m5",
]


def hostile_values(case: Bounded) -> list[str]:
    return [*HOSTILE, case.past_bound, *([] if case.zero_allowed else ["0"])]


@pytest.mark.parametrize(
    ("case", "value"),
    [(case, value) for case in BOUNDED for value in hostile_values(case)],
    ids=lambda x: x.flag if isinstance(x, Bounded) else ascii(x[:12]),
)
def test_each_hostile_value_is_one_line_naming_the_flag_and_the_bound(cli, case, value):
    code, out, err = cli(f"{case.flag}={case.prefix}{value}", GUARD)
    assert (code, out) == (2, "")
    line = the_line(err)
    # argparse names a flag with a short alias "--long/-s".
    assert f"argument {case.flag}" in line
    assert case.bound in line


@pytest.mark.parametrize("case", BOUNDED, ids=lambda case: case.flag)
@pytest.mark.parametrize("value", [str(10**400), "nan", "5\nx"], ids=["digits", "nan", "newline"])
def test_from_the_environment_the_line_names_the_variable(cli, case, value):
    variables = [env_name(case.flag)]
    if case.flag in UPSTREAM_VARIABLE:
        variables.append(UPSTREAM_VARIABLE[case.flag])
    for variable in variables:
        code, _, err = cli(GUARD, env={variable: f"{case.prefix}{value}"})
        assert code == 2
        line = the_line(err)
        assert f"environment variable {variable}: " in line
        assert case.bound in line


@pytest.mark.parametrize("case", BOUNDED, ids=lambda case: case.flag)
def test_the_value_at_the_bound_is_accepted(case, tmp_path):
    given = f"{case.flag}={case.prefix}{case.at_bound}"
    action = build_parser()._option_string_actions[case.flag]
    parsed = getattr(build_parser().parse_args([given]), action.dest)
    if case.flag == FIELD_INTERVAL:
        assert parsed == [[(FIELD, MAX_FIELD_INTERVAL_SECONDS)]]
    else:
        assert parsed == float(case.at_bound)
    # And nothing past parsing refuses it: the windows apply once a file lists their families.
    csv = tmp_path / "fields.csv"
    csv.write_text(WITH_COUNTS)
    collection = parse_config([given, "-f", str(csv)], environ={}).collection
    if case.flag in WINDOWS:
        windows = (collection.xid_count_window_ms, collection.clock_events_count_window_ms)
        assert MAX_COUNT_WINDOW_MS in windows


def test_every_duration_flag_is_in_the_bounds_table():
    """A new flag that takes a duration must get its bound in DURATION_BOUNDS."""
    durations = set()
    for action in build_parser()._actions:
        flags = [f for f in action.option_strings if f.startswith("--")]
        if not flags or action.nargs == 0 or flags[0] in (FIELD_INTERVAL, "--help", "--version"):
            continue
        try:
            parsed = getattr(build_parser().parse_args([f"{flags[0]}=5s"]), action.dest)
        except UsageError:
            continue
        if parsed == 5.0:
            durations.add(flags[0])
    assert durations == set(DURATION_BOUNDS)


def test_every_flag_but_free_text_refuses_four_hundred_digits():
    """A new numeric flag without a bound fails here: 10**400 parses as an int and as a float
    (infinity) and so overflows whatever timer or float it reaches."""
    accepted = set()
    for action in build_parser()._actions:
        flags = [f for f in action.option_strings if f.startswith("--")]
        if not flags or action.nargs == 0 or action.dest in ("help", "version"):
            continue
        try:
            parse_config([f"{flags[0]}={10**400}"], environ={})
        except UsageError as exc:
            assert "\n" not in str(exc)
            continue
        accepted.add(flags[0])
    assert accepted == FREE_TEXT


def test_no_accepted_value_can_overflow_a_timer():
    seconds = [high for _, high in DURATION_BOUNDS.values()]
    seconds += [MAX_FIELD_INTERVAL_SECONDS, MAX_COUNT_WINDOW_MS / 1000]
    # Derived ones: --snapshot.stale-after defaults to three intervals.
    seconds.append(3 * DURATION_BOUNDS["--collector.interval"][1])
    lock = threading.Lock()
    for value in seconds:
        assert value < threading.TIMEOUT_MAX
        # Lock.acquire checks its timeout even when the lock is free: OverflowError past the max.
        assert lock.acquire(timeout=value)
        lock.release()
        assert time.monotonic() + value < float("inf")


# ---- The findings, as reported ----


def test_a_window_of_400_digits_from_dcgm_exporters_variable_is_one_line(cli, tmp_path):
    csv = tmp_path / "fields.csv"
    csv.write_text(WITH_COUNTS)
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")  # were the window accepted, fail here rather than run
    code, out, err = cli(
        "--simulate",
        str(bad_fleet),
        "-f",
        str(csv),
        "--web.listen-address=127.0.0.1:1",
        env={"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": str(10**400)},
    )
    assert (code, out) == (2, "")
    line = the_line(err)
    assert "environment variable DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE: " in line
    assert f"from 1 to {MAX_COUNT_WINDOW_MS}" in line
    assert "(401 characters)" in line  # cut, not printed whole


def test_a_window_of_ten_to_the_twenty_milliseconds_is_refused(cli):
    code, _, err = cli("--xid-count-window-size", str(10**20), GUARD)
    assert code == 2
    assert "argument --xid-count-window-size/-x: 100000000000000000000 is not" in the_line(err)


def test_a_newline_in_the_collectors_path_cannot_forge_a_record(cli, tmp_path):
    path = f"{tmp_path}/x\nts=2026 level=error msg=forged"
    code, _, err = cli("--simulate", "-f", path)
    assert code == 2
    line = the_line(err)
    assert f'collectors file "{tmp_path}/x\\nts=2026 level=error msg=forged": cannot read' in line


def test_argparses_own_messages_are_folded_onto_one_line(cli):
    # "unrecognized arguments" joins the words as given: only the printer's fold stops them.
    code, _, err = cli("stray\nts=2026 level=error msg=forged")
    assert code == 2
    assert "unrecognized arguments: stray\\nts=2026" in the_line(err)
    code, _, err = cli("hash-password", "--salt=\r\x1b[2K")
    assert code == 2
    assert "unrecognized arguments: --salt=\\r\\x1b[2K" in the_line(err)


# ---- The quoting helper ----


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/etc/kge/fields.csv", "/etc/kge/fields.csv"),
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP"),
        ("", '""'),
        ("two words", '"two words"'),
        ('a"b\\c', '"a\\"b\\\\c"'),
        ("a\nb\rc\td", '"a\\nb\\rc\\td"'),
        ("\x1b[31mred", '"\\x1b[31mred"'),
        ("\x00\x7f\x85", '"\\x00\\x7f\\x85"'),
        ("line\u2028sep\u202eltr", '"line\\u2028sep\\u202eltr"'),
        # Bytes that are not UTF-8 reach argv as lone surrogates.
        ("caf\udce9", '"caf\\udce9"'),
        ("\U000e0001tag", '"\\U000e0001tag"'),
        ("température", '"température"'),
    ],
)
def test_quoted_escapes_what_could_end_or_hide_a_line(text, shown):
    assert quoted(text) == shown


def test_quoted_cuts_long_values_and_says_how_long_they_were():
    assert quoted("x" * 1000) == '"' + "x" * SHOWN_CHARS + '"... (1000 characters)'
    assert quoted("/a" * 300, limit=600) == "/a" * 300
    assert quoted("\n" * 1000).isprintable()


def test_one_line_escapes_control_characters_and_leaves_quotes_alone():
    assert one_line('web config "a\\nb": x') == 'web config "a\\nb": x'
    assert one_line("a\nb\r\x1b") == "a\\nb\\r\\x1b"


# ---- Log lines ----


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("exporter.test", logging.WARNING, __file__, 1, message, (), None)


@pytest.mark.parametrize(
    ("message", "shown"),
    [
        ("plain", "msg=plain"),
        ("a\rlevel=error", 'msg="a\\rlevel=error"'),
        ("a\nb", 'msg="a\\nb"'),
        ("\x1b[31mred", 'msg="\\x1b[31mred"'),
        ("tab\tand\u2028sep", 'msg="tab\\tand\\u2028sep"'),
        ('say "hi" \\ bye', 'msg="say \\"hi\\" \\\\ bye"'),
        ("", 'msg=""'),
    ],
)
def test_logfmt_escapes_every_control_character(message, shown):
    line = LogfmtFormatter().format(_record(message))
    assert line.endswith(shown)
    assert len(line.splitlines()) == 1 and line.isprintable()


def test_json_lines_stay_one_line_too():
    line = JsonFormatter().format(_record("a\rb\nc\x1b\u2028"))
    assert len(line.splitlines()) == 1 and line.isprintable()


def test_a_hostile_path_in_a_start_up_warning_stays_in_its_record(cli, tmp_path: Path):
    folder = tmp_path / "a\rlevel=error msg=forged"
    folder.mkdir()
    csv = folder / "fields.csv"
    csv.write_text("DCGM_FI_DEV_GPU_TEMP, gauge, t\nDCGM_FI_DEV_PSTATE, counter, v\n")
    bad_fleet = tmp_path / "bad-fleet.yaml"
    bad_fleet.write_text("gpus: []\n")
    code, _, err = cli("--simulate", str(bad_fleet), "-f", str(csv), "--web.listen-address=:1")
    assert code == 2
    warning, error = err.splitlines()
    assert warning.startswith("ts=") and " level=warn " in warning and warning.isprintable()
    # Escaped twice: once as the message quotes the path, once as logfmt quotes the message.
    assert "a\\\\rlevel=error msg=forged/fields.csv" in warning
    assert error.startswith("kube-gpu-exporter: error: fleet file ")


def test_the_configuration_page_states_each_bound():
    from tests.conftest import REPO

    page = (REPO / "docs" / "configuration.md").read_text()
    section = page[page.index("### Bounds") :].split("\n### ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| `-") and " to " in line]

    def row_of(flag: str) -> str:
        [row] = [row for row in rows if f"`{flag}`" in row]
        return row

    for flag, (low, high) in DURATION_BOUNDS.items():
        assert f"`{format_duration(low)}` to `{format_duration(high)}`" in row_of(flag), flag
    assert f"`0s` to `{format_duration(MAX_FIELD_INTERVAL_SECONDS)}`" in row_of(
        f"{FIELD_INTERVAL} NAME=SECONDS"
    )
    for flag in WINDOWS:
        assert f"`1` to `{MAX_COUNT_WINDOW_MS}` milliseconds" in row_of(flag)

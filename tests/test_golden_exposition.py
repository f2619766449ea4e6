"""What users scrape from the simulated node, held against the committed golden files, and the
exporter's own families held against their one table of declarations."""

from __future__ import annotations

import difflib

import pytest

from exporter.config import HostLabel
from exporter.exposition.metric_family import HOST, LABEL_PREFIXED, MetricFamily
from exporter.exposition.own_families import (
    ALL_FAMILIES,
    OWN_FAMILIES,
    PREFIX,
    declaration_problems,
)
from exporter.exposition.text_format import escape_help
from tests.golden.node_scrape import GOLDENS, Golden, samples, scrape, shape

HOST_LABEL = HostLabel.CLASSIC.value  # the default --host-label, which the goldens use
# Own families no golden can show: they appear only once something has failed.
ERROR_ONLY = {f"{PREFIX}nvml_errors_total", f"{PREFIX}podresources_errors_total"}


@pytest.fixture(scope="module")
def scraped() -> dict[str, str]:
    return {golden.file: scrape(golden) for golden in GOLDENS}


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda g: g.file)
def test_exposition_matches_its_golden_file(golden: Golden, scraped: dict[str, str]) -> None:
    fresh = shape(scraped[golden.file])
    committed = golden.path.read_text() if golden.path.exists() else ""
    if fresh != committed:
        diff = "".join(
            difflib.unified_diff(
                committed.splitlines(keepends=True),
                fresh.splitlines(keepends=True),
                fromfile=f"tests/golden/{golden.file} (committed)",
                tofile="fresh scrape",
            )
        )
        pytest.fail(
            f"What users scrape changed ({golden.file}). If that is intended, run make golden "
            f"(.venv/bin/python -m tests.golden.regenerate) and commit the result.\n{diff}",
            pytrace=False,
        )


def test_every_scraped_family_is_declared_with_its_help_and_type(scraped: dict[str, str]) -> None:
    declared = {f.name: f for f in ALL_FAMILIES}
    for text in scraped.values():
        for line in text.splitlines():
            if not line.startswith(("# HELP ", "# TYPE ")):
                continue
            _, keyword, name, rest = line.split(" ", 3)
            assert name in declared, f"{name} is written but not declared"
            expected = (
                escape_help(declared[name].help) if keyword == "HELP" else declared[name].kind
            )
            assert rest == expected, f"{keyword} of {name}"


def _fits(actual: list[str], declared: tuple[str, ...]) -> bool:
    """Whether `actual` is `declared` in order with some names left out; LABEL_PREFIXED stands
    for any number of label_* names."""
    wanted = [HOST_LABEL if name == HOST else name for name in declared]
    position = 0
    for name in actual:
        while position < len(wanted) and not (
            name == wanted[position]
            or (wanted[position] == LABEL_PREFIXED and name.startswith("label_"))
        ):
            position += 1
        if position == len(wanted):
            return False
        if wanted[position] != LABEL_PREFIXED:
            position += 1
    return True


def test_own_samples_carry_only_their_declared_labels_in_order(scraped: dict[str, str]) -> None:
    own = {f.name: f for f in OWN_FAMILIES}
    seen: set[str] = set()
    for text in scraped.values():
        for name, labels in samples(text):
            if name in own:
                seen.add(name)
                names = [label for label, _ in labels]
                assert _fits(names, own[name].labels), f"{name}{names} vs {own[name].labels}"
    assert set(own) - seen == ERROR_ONLY


def test_label_check_rejects_undeclared_and_reordered_labels() -> None:
    declared = ("gpu", "UUID", HOST, LABEL_PREFIXED)
    assert _fits(["gpu", "Hostname", "label_team", "label_app"], declared)
    assert not _fits(["UUID", "gpu"], declared)
    assert not _fits(["gpu", "pod"], declared)


def test_the_declarations_are_sound() -> None:
    assert declaration_problems(ALL_FAMILIES, OWN_FAMILIES) == []


def test_a_name_declared_twice_is_reported_across_dcgm_and_own_families() -> None:
    clash = MetricFamily("DCGM_FI_DEV_GPU_TEMP", "gauge", "Ours.")
    problems = declaration_problems([*ALL_FAMILIES, clash], [])
    assert problems == ["DCGM_FI_DEV_GPU_TEMP is declared 2 times"]


def test_own_declarations_follow_the_naming_rules() -> None:
    bad = [
        MetricFamily(f"{PREFIX}restarts", "counter", "No _total."),
        MetricFamily("other_metric", "gauge", "No prefix."),
        MetricFamily(f"{PREFIX}info", "histogram", "Not written by hand.", ("a", "a", "b-c")),
    ]
    assert declaration_problems(bad, bad) == [
        f"{PREFIX}info has type 'histogram'",
        f"counter {PREFIX}restarts does not end in _total",
        f"other_metric lacks the {PREFIX} prefix",
        f"{PREFIX}info: bad label name 'b-c'",
        f"{PREFIX}info declares a label twice",
    ]


def test_shape_keeps_names_help_and_labels_but_not_values() -> None:
    text = (
        "# HELP m_b Second.\n# TYPE m_b counter\n"
        'm_b{version="1.2.3",x="a\\"b"} 7\n'
        "# HELP m_a First.\n# TYPE m_a gauge\n"
        'm_a{gpu="1"} 0.5\nm_a{gpu="0"} 2\n'
    )
    assert shape(text) == (
        "# HELP m_a First.\n# TYPE m_a gauge\n"
        'm_a{gpu="0"}\nm_a{gpu="1"}\n'
        "# HELP m_b Second.\n# TYPE m_b counter\n"
        'm_b{version="*",x="a\\"b"}\n'
    )

"""What users scrape from the simulated node, held against the committed golden files, and the
exporter's own families held against their one table of declarations."""

from __future__ import annotations

import difflib

import pytest

from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_PROFILE, PROFILES, DcgmVersion
from kube_gpu_exporter.exporter.exposition.dcgm_families import families_for
from kube_gpu_exporter.exporter.exposition.metric_family import (
    DCGM_ENTITY,
    HOST,
    LABEL_PREFIXED,
    Declared,
    MetricFamily,
)
from kube_gpu_exporter.exporter.exposition.own_families import (
    OWN_FAMILIES,
    PREFIX,
    all_families,
    declaration_problems,
    meaning_problems,
    profile_problems,
)
from kube_gpu_exporter.exporter.exposition.text_format import escape_help
from kube_gpu_exporter.exporter.fields.collectors_file import read_collectors_file
from kube_gpu_exporter.exporter.simulator.fleet import builtin_collectors
from tests.golden.node_scrape import GOLDENS, Golden, samples, scrape, shape

# Own families no golden can show: they appear only once something has failed.
# Families the goldens never show: written only on errors, or only with a --collectors file.
ERROR_ONLY = {
    f"{PREFIX}fields_unsupported",
    f"{PREFIX}nvml_errors_total",
    f"{PREFIX}podresources_errors_total",
    f"{PREFIX}readings_rejected_total",
    f"{PREFIX}render_errors_total",
}


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


def test_one_golden_per_profile_for_the_default_node() -> None:
    plain = [g for g in GOLDENS if not g.flags and not g.fleet]
    assert sorted(g.dcgm for g in plain) == sorted(DcgmVersion)
    assert next(g for g in plain if g.file == "default_node.prom").profile == DEFAULT_PROFILE


def _declared(golden: Golden) -> tuple[Declared, ...]:
    """What the golden's exposition may write: a fleet that ships a collectors file (gb200)
    serves exactly the families it lists."""
    path = builtin_collectors(golden.fleet or None)
    if path is None:
        return all_families(golden.profile)
    selection = read_collectors_file(path)
    return (*families_for(golden.profile, selection).declared, *OWN_FAMILIES)


@pytest.mark.parametrize("golden", GOLDENS, ids=lambda g: g.file)
def test_every_scraped_family_is_declared_with_its_help_and_type(
    golden: Golden, scraped: dict[str, str]
) -> None:
    declared = {f.name: f for f in _declared(golden)}
    for text in (scraped[golden.file],):
        for line in text.splitlines():
            if not line.startswith(("# HELP ", "# TYPE ")):
                continue
            _, keyword, name, rest = line.split(" ", 3)
            assert name in declared, f"{name} is written but not declared"
            expected = (
                escape_help(declared[name].help) if keyword == "HELP" else declared[name].kind
            )
            assert rest == expected, f"{keyword} of {name}"


def _fits(actual: list[str], declared: tuple[str, ...], host_label: str = "hostname") -> bool:
    """Whether `actual` is `declared` in order with some names left out; LABEL_PREFIXED stands
    for any number of label_* names, DCGM_ENTITY for any names not declared after it."""
    wanted = [host_label if name == HOST else name for name in declared]
    position = 0
    for name in actual:
        while position < len(wanted) and not (
            name == wanted[position]
            or (wanted[position] == LABEL_PREFIXED and name.startswith("label_"))
            or (wanted[position] == DCGM_ENTITY and name not in wanted[position + 1 :])
        ):
            position += 1
        if position == len(wanted):
            return False
        if wanted[position] not in (LABEL_PREFIXED, DCGM_ENTITY):
            position += 1
    return True


def test_own_samples_carry_only_their_declared_labels_in_order(scraped: dict[str, str]) -> None:
    own = {f.name: f for f in OWN_FAMILIES}
    seen: set[str] = set()
    for golden in GOLDENS:
        for name, labels in samples(scraped[golden.file]):
            if name in own:
                seen.add(name)
                names = [label for label, _ in labels]
                assert _fits(names, own[name].labels, golden.profile.host_label), (
                    f"{golden.file}: {name}{names} vs {own[name].labels}"
                )
    assert set(own) - seen == ERROR_ONLY


def test_label_check_rejects_undeclared_and_reordered_labels() -> None:
    declared = ("gpu", "UUID", HOST, LABEL_PREFIXED)
    assert _fits(["gpu", "Hostname", "label_team", "label_app"], declared, "Hostname")
    assert not _fits(["gpu", "Hostname"], declared, "hostname")
    assert not _fits(["UUID", "gpu"], declared)
    assert not _fits(["gpu", "pod"], declared)


def test_the_declarations_are_sound_in_every_profile() -> None:
    assert profile_problems(PROFILES.values(), OWN_FAMILIES) == []


def test_a_name_declared_twice_is_reported_across_dcgm_and_own_families() -> None:
    clash = MetricFamily("DCGM_FI_DEV_GPU_TEMP", "gauge", "Ours.")
    problems = declaration_problems([*all_families(PROFILES[DcgmVersion.V4_8_2]), clash], [])
    assert problems == ["DCGM_FI_DEV_GPU_TEMP is declared 2 times"]
    renamed = MetricFamily("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "gauge", "Ours.")
    problems = declaration_problems([*all_families(PROFILES[DcgmVersion.V4_9]), renamed], [])
    assert problems == ["DCGM_FI_DEV_GPU_TEMP_CELSIUS is declared 2 times"]


def test_a_name_meaning_two_readings_across_profiles_is_reported() -> None:
    written = [
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_TEMP"),
        ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_MEMORY_TEMP"),
        ("DCGM_FI_DEV_GPU_TEMP_CELSIUS", "DCGM_FI_DEV_GPU_TEMP"),
    ]
    assert meaning_problems(written) == [
        "DCGM_FI_DEV_GPU_TEMP means DCGM_FI_DEV_GPU_TEMP and DCGM_FI_DEV_MEMORY_TEMP in "
        "different profiles"
    ]


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

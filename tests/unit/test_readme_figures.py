"""The README quotes no figure that nothing in the repository holds.

A number with a unit (`5s`, `53.4 MB`, `80.8x`, `nine minutes`, `300 tests`) in README.md must
appear, with the same value and unit, in a committed result file (`benchmarks/results/`), a docs
page that holds measured figures, or the code or configuration the README describes there: a flag's
default in kube_gpu_exporter/exporter/flags/table.py, the demo's timings in
kube_gpu_exporter/bundle/localstack/, the bundle's defaults in kube_gpu_exporter/bundle/config.py.
Each README section names the files it may quote; a section not named may quote any of them. So a
figure edited in the README alone fails here, and a figure that goes stale is changed where it is
measured or defined. Version numbers, ports and counts without a unit are not figures here; the few
figures that are quoted but held nowhere are in ALLOWED, each with why.

Beside that: the flag tables quote the parser's defaults, image names and tags are the Dockerfile's
and pyproject.toml's, every `make` target the README names exists, every relative link in the
README and docs/ reaches a file and a heading, and the README keeps its opening and its length.
"""

from __future__ import annotations

import argparse
import re
import tomllib
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path

import pytest

from kube_gpu_exporter.exporter.flags.parser import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

# What the README may quote, per section (its `## ` heading, or a `###` heading listed here);
# sections not listed may quote any file named here.
RESULTS = ("benchmarks/results/*.md", "benchmarks/results/*.yaml")
MEASURED_DOCS = ("docs/benchmarks.md", "docs/performance.md")
CLI = ("kube_gpu_exporter/exporter/flags/table.py", "kube_gpu_exporter/exporter/flags/settings.py")
DEMO = ("kube_gpu_exporter/bundle/localstack/*.py",)
BUNDLE = (
    "kube_gpu_exporter/bundle/config.py",
    "kube_gpu_exporter/bundle/scrape_configs.py",
    "kube_gpu_exporter/bundle/dashboards/*.py",
    "kube_gpu_exporter/bundle/alerts/*.py",
)
DEPLOY = (
    "Dockerfile",
    "Makefile",
    "deploy/**/*.yaml",
    "deploy/image/*.py",
    "kube_gpu_exporter/bundle/config.py",
    "kube_gpu_exporter/bundle/deploy_manifests.py",
    "kube_gpu_exporter/exporter/connection_guard.py",
)
SECTION_SOURCES: dict[str, tuple[str, ...]] = {
    "": ("Makefile", *RESULTS),  # the opening, before the first section
    "Try the whole stack locally (`make demo`)": (*DEMO, "Makefile"),
    "Install": ("pyproject.toml",),
    "Deploy on Kubernetes": DEPLOY,
    # Its values table is made from deploy/helm/kube-gpu-exporter/values.yaml (in DEPLOY's globs).
    "Install with Helm": DEPLOY,
    "Configure": CLI,
    "Migrating from dcgm-exporter": ("kube_gpu_exporter/exporter/dcgm_compat.py", *CLI, *BUNDLE),
    "Monitoring bundle": BUNDLE,
    "Development": ("Makefile", "pyproject.toml"),
}
ALL_SOURCES = tuple(
    dict.fromkeys([*(g for globs in SECTION_SOURCES.values() for g in globs), *MEASURED_DOCS])
)

# Figures quoted in the README that no source file holds in the form the README gives. Each entry:
# the figure as the README writes it, and why it may stand there.
ALLOWED: dict[str, str] = {}

# Unit spellings, each to (canonical unit, factor): durations become seconds, so `60s`, `1m` and
# `one minute` are one figure.
UNITS: dict[str, tuple[str, Decimal]] = {
    **dict.fromkeys(("µs", "us"), ("s", Decimal("0.000001"))),
    "ms": ("s", Decimal("0.001")),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), ("s", Decimal(1))),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), ("s", Decimal(60))),
    **dict.fromkeys(("h", "hour", "hours"), ("s", Decimal(3600))),
    **dict.fromkeys(("d", "day", "days"), ("s", Decimal(86400))),
    **{unit: (unit, Decimal(1)) for unit in ("B", "KB", "kB", "KiB", "MB", "MiB", "GB", "GiB")},
    **{unit: (unit, Decimal(1)) for unit in ("Ki", "Mi", "Gi", "W", "MHz", "GHz")},
    "bytes": ("B", Decimal(1)),
    "°C": ("°C", Decimal(1)),
    **dict.fromkeys(("%", "percent"), ("%", Decimal(1))),
    **dict.fromkeys(("x", "×", "times"), ("x", Decimal(1))),
    **dict.fromkeys(("core", "cores"), ("cores", Decimal(1))),
    **dict.fromkeys(("GPU", "GPUs"), ("GPUs", Decimal(1))),
    **dict.fromkeys(("test", "tests"), ("tests", Decimal(1))),
}
_WORD_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WORDS = {name: Decimal(value) for value, name in enumerate(_WORD_NAMES)} | {
    "ten": Decimal(10),
    "eleven": Decimal(11),
    "twelve": Decimal(12),
    "fifteen": Decimal(15),
    "twenty": Decimal(20),
    "thirty": Decimal(30),
    "sixty": Decimal(60),
}
# Spelled-out numbers are figures only with these units ("two set-up commands" is not one).
WORD_UNITS = ("seconds?", "minutes?", "hours?", "days?", "times", "percent", "tests?")

_UNIT = "|".join(re.escape(u) for u in sorted(UNITS, key=len, reverse=True))
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# Not inside a name, a version, a path or another number (`H100`, `4.8.3`, `gpu-0`, `1g.10gb`);
# an optional range (`30-50 %`); at most one space or a hyphen (`8-GPU`) before the unit; the
# unit a whole word.
FIGURE = re.compile(
    rf"(?<![\w.,/:+-])(?P<low>{_NUMBER})(?:[-–](?P<high>{_NUMBER}))?[ \u00a0-]?(?P<unit>{_UNIT})"
    r"(?![\w°])"
)
WORD_FIGURE = re.compile(
    rf"\b(?P<word>{'|'.join(WORDS)})[ -](?P<unit>{'|'.join(WORD_UNITS)})\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Figure:
    value: Decimal
    unit: str
    text: str  # as written
    start: int  # where the number starts in the text it came from
    end: int


def _decimal(text: str) -> Decimal:
    return Decimal(text.replace(",", ""))


def figures(text: str) -> Iterator[Figure]:
    for m in FIGURE.finditer(text):
        unit, factor = UNITS[m.group("unit")]
        for part in ("low", "high"):
            if m.group(part) is not None:
                value = (_decimal(m.group(part)) * factor).normalize()
                yield Figure(value, unit, m.group(0), m.start(part), m.end(part))
    for m in WORD_FIGURE.finditer(text):
        unit, factor = UNITS[m.group("unit").lower()]
        value = (WORDS[m.group("word").lower()] * factor).normalize()
        yield Figure(value, unit, m.group(0), m.start("word"), m.end("word"))


def _column_unit(header: str) -> tuple[str, Decimal] | None:
    """The unit a table column's header ends in (`steady RSS MB`, `Prometheus scrape ms`); none
    for a rate such as `CPU s / h`, or a header that ends in no unit."""
    words = header.split()
    if not words or words[-1] not in UNITS or (len(words) > 1 and words[-2] == "/"):
        return None
    return UNITS[words[-1]]


def table_figures(text: str) -> Iterator[tuple[Decimal, str]]:
    """(value, unit) of each number that stands alone in a markdown table's cell, with the unit
    its column's header ends in: a results table writes the unit once, in the header."""
    units: list[tuple[str, Decimal] | None] = []
    for line in text.splitlines():
        if not line.startswith("|"):
            units = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not units:
            units = [_column_unit(c) for c in cells]
            continue
        for cell, unit in zip(cells, units, strict=False):
            if unit is not None and re.fullmatch(_NUMBER, cell):
                yield (_decimal(cell) * unit[1]).normalize(), unit[0]


@cache
def held(globs: tuple[str, ...]) -> frozenset[tuple[Decimal, str]]:
    """(value, unit) of every figure the files matching `globs` hold, in their text or in their
    tables' cells."""
    paths = {p for g in globs for p in ROOT.glob(g) if p.is_file()}
    assert paths, f"no source file matches {globs}"
    texts = [p.read_text() for p in paths]
    return frozenset(
        {(f.value, f.unit) for text in texts for f in figures(text)}
        | {figure for text in texts for figure in table_figures(text)}
    )


def sections(text: str) -> Iterator[tuple[str, int, int]]:
    """(heading, start, end) of the README's opening ("") and each `##` or `###` section, outside
    code blocks. A `###` section SECTION_SOURCES does not name goes by its `##` section's name."""
    cuts: list[tuple[int, str]] = [(0, "")]
    fenced = False
    offset = 0
    parent = ""
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"(#{2,3}) (.+?)\s*$", line)):
            heading = m.group(2)
            if len(m.group(1)) == 2:
                parent = heading
            elif heading not in SECTION_SOURCES:
                heading = parent
            cuts.append((offset, heading))
        offset += len(line)
    for (start, heading), (end, _) in zip(cuts, [*cuts[1:], (len(text), "")], strict=True):
        yield heading, start, end


def unsourced(text: str) -> list[str]:
    """The figures of `text` (a README) that no allowed source holds, one line each."""
    problems = []
    for heading, start, end in sections(text):
        globs = SECTION_SOURCES.get(heading, ALL_SOURCES)
        for figure in figures(text[start:end]):
            if figure.text in ALLOWED:
                continue
            if (figure.value, figure.unit) not in held(globs):
                line = text.count("\n", 0, start + figure.start) + 1
                where = f"section '{heading}'" if heading else "the opening"
                problems.append(
                    f"README.md:{line}: {figure.text!r} ({where}) is in none of {', '.join(globs)}"
                )
    return problems


def readme() -> str:
    return README.read_text()


# The figures.


def test_the_extractor_finds_figures_and_leaves_versions_ports_and_names_alone() -> None:
    found = [
        (f.value, f.unit)
        for f in figures(
            "make test takes about nine minutes; `5s`, 500ms, 53.4 MB, 80.8x, 0.55 times, 1,350 "
            "tests, 30-50 %, the simulated 8-GPU node; not Python 3.11.11, :9455, H100, "
            "gpu-0, 1g.10gb, v26.7 or XID 79"
        )
    ]
    assert found == [
        (Decimal(5), "s"),
        (Decimal("0.5"), "s"),
        (Decimal("53.4"), "MB"),
        (Decimal("80.8"), "x"),
        (Decimal("0.55"), "x"),
        (Decimal(1350), "tests"),
        (Decimal(30), "%"),
        (Decimal(50), "%"),
        (Decimal(8), "GPUs"),
        (Decimal(540), "s"),
    ]


def test_a_results_table_gives_its_cells_the_unit_of_their_header() -> None:
    table = (
        "| poll | exporter | CPU s / h | steady RSS MB | scrape ms |\n"
        "|---:|---|---:|---:|---:|\n"
        "| 1 s | ours | 14.0 | 57.3 | 7.0 |\n"
        "| 5 s | ours | 10.5 | 57.0 / 58 | - |\n"
    )
    assert set(table_figures(table)) == {
        (Decimal("57.3"), "MB"),
        (Decimal("0.007"), "s"),
    }


def test_every_figure_in_the_readme_comes_from_a_result_file_or_the_code() -> None:
    problems = unsourced(readme())
    assert not problems, (
        "figures in the README that no committed result file or code holds (change the figure "
        "where it is measured or defined, or drop it from the README):\n" + "\n".join(problems)
    )


def test_the_readme_quotes_figures_at_all() -> None:
    # A check that finds nothing proves nothing: the opening quotes measured figures.
    assert len(list(figures(readme()))) >= 5


def test_a_figure_edited_in_the_readme_alone_fails() -> None:
    text = readme()
    checked = 0
    for figure in figures(text):
        if figure.text in ALLOWED:
            continue
        number = text[figure.start : figure.end]
        replacement = "7919.3" if "." in number else "7919"
        edited = text[: figure.start] + replacement + text[figure.end :]
        assert unsourced(edited), f"editing {figure.text!r} to {replacement} went unnoticed"
        checked += 1
    assert checked >= 5


def test_every_allowed_figure_is_still_quoted_and_has_a_reason() -> None:
    quoted = {f.text for f in figures(readme())}
    for text, reason in ALLOWED.items():
        assert text in quoted, f"ALLOWED[{text!r}]: the README no longer quotes it"
        assert len(reason.split()) >= 4, f"ALLOWED[{text!r}]: say why it may stand"


def test_the_figures_the_last_review_found_stale_are_gone() -> None:
    text = readme()
    assert "over 300 tests" not in text
    assert "nine minutes" not in text
    assert "python:3.11-slim-bookworm" not in text


# Defaults, images, targets.


def _option_defaults() -> dict[str, object]:
    defaults: dict[str, object] = {}
    for action in build_parser()._actions:
        for option in action.option_strings:
            if option.startswith("--") and not option.startswith("--no-"):
                defaults[option] = action.default
    return defaults


def _format_default(action_default: object) -> str | None:
    if action_default is None:
        return None
    if isinstance(action_default, bool):
        return "on" if action_default else "off"
    if isinstance(action_default, float):
        seconds = Decimal(str(action_default)).normalize()
        return f"{seconds:f}s" if seconds >= 1 else f"{(seconds * 1000).normalize():f}ms"
    return str(action_default)


def flag_rows(text: str) -> Iterator[tuple[list[str], str]]:
    """(flags, default cell) of every table row whose first cell names flags."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`--"):
            flags = [
                "--" + name.removeprefix("[no-]")
                for name in re.findall(r"`--(\S+?)(?: \[[A-Z]+\])?`", cells[0])
            ]
            yield flags, cells[1]


@pytest.mark.parametrize("page", ["README.md", "docs/configuration.md"])
def test_flag_tables_quote_the_parsers_defaults(page: str) -> None:
    defaults = _option_defaults()
    rows = list(flag_rows((ROOT / page).read_text()))
    assert len(rows) >= 8, f"{page}: no flag table found"
    problems = []
    for flags, cell in rows:
        quoted = re.findall(r"`([^`]*)`", cell)
        for i, flag in enumerate(flags):
            assert flag in defaults, f"{page}: {flag} is not a flag of kube-gpu-exporter"
            expected = _format_default(defaults[flag])
            if expected is None:
                continue  # no fixed default: the cell says in words what it depends on
            if expected in ("on", "off"):
                ok = cell.startswith(expected)
            else:
                ok = len(quoted) > i and quoted[i] == expected
            if not ok:
                problems.append(f"{page}: {flag}: the default is {expected}, the table says {cell}")
    assert not problems, "\n".join(problems)


def _dockerfile_base() -> str:
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    assert match, "the Dockerfile has no ARG PYTHON_IMAGE"
    return match.group(1)


def _user_pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def test_python_base_images_named_are_the_dockerfiles() -> None:
    base = _dockerfile_base()
    named = {
        (page.relative_to(ROOT).as_posix(), image)
        for page in _user_pages()
        for image in re.findall(r"\bpython:\d[\w.-]*", page.read_text())
    }
    wrong = sorted(f"{page}: {image}" for page, image in named if image != base)
    assert not wrong, f"the Dockerfile builds on {base}:\n" + "\n".join(wrong)


def test_image_tags_named_are_the_packages_version() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for page in _user_pages():
        for tag in re.findall(r"\bkube-gpu-exporter:(\d[\w.-]*)", page.read_text()):
            assert tag == version, f"{page.name}: kube-gpu-exporter:{tag}, the version is {version}"


def test_the_image_name_the_readme_replaces_is_the_manifests() -> None:
    kustomization = (ROOT / "deploy/base/kustomization.yaml").read_text()
    [name] = re.findall(r"^- name: (\S+)$", kustomization, re.M)
    text = readme()
    assert f"- name: {name}\n" in text
    assert f"kustomize edit set image {name}=" in text


def test_every_make_target_the_readme_names_exists() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", readme()))
    assert named, "the README names no make target"
    assert named <= targets, f"no such make target: {sorted(named - targets)}"


# The README's shape.


def test_the_readme_opens_with_the_two_set_up_commands() -> None:
    lines = readme().splitlines()
    assert lines[:3] == ["# kube-gpu-exporter", "", "```sh"]
    assert lines[3].startswith("make run ") and lines[4].startswith("make test ")
    assert lines[5] == "```"


def test_the_readme_stays_short() -> None:
    assert len(readme().splitlines()) < 300, "move detail into a page under docs/"


def test_the_readme_says_where_readiness_is_documented() -> None:
    assert "(docs/health.md)" in readme()


def test_install_lines_do_not_promise_a_package_index() -> None:
    text = readme()
    assert "not yet on PyPI" in text
    assert "pip install 'kube-gpu-exporter[bundle]'" not in text
    assert "pip install '.[bundle]'" in text


# Links.


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    seen: dict[str, int] = {}
    found = set()
    fenced = False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        if not fenced and (m := re.match(r"#{1,6} (.+?)\s*#*\s*$", line)):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return frozenset(found)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def links(page: Path) -> Iterable[tuple[int, str]]:
    fenced = False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced:
            for target in LINK.findall(line):
                if not re.match(r"[a-z]+:", target):
                    yield number, target


@pytest.mark.parametrize("page", _user_pages(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_reaches_a_file_and_a_heading(page: Path) -> None:
    broken = []
    for number, target in links(page):
        path_part, _, anchor = target.partition("#")
        path = (page.parent / path_part).resolve() if path_part else page
        if not path.exists():
            broken.append(f"{number}: {target}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{number}: {target}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}:\n" + "\n".join(broken)


def test_links_into_the_readme_from_the_image_reach_a_heading() -> None:
    # The image's documentation label points at a README section.
    label = re.findall(r"kube-gpu-exporter#([\w-]+)", (ROOT / "Dockerfile").read_text())
    assert label, "the Dockerfile's documentation label no longer names a README section"
    assert set(label) <= anchors(README), label


def test_parser_is_what_the_flag_check_reads() -> None:
    # _option_defaults reads argparse's own table; make sure it still describes the parser.
    actions = build_parser()._actions
    assert any(isinstance(a, argparse.BooleanOptionalAction) for a in actions)
    assert _option_defaults()["--collector.interval"] == 5.0

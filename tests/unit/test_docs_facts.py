"""The upstream facts the code relies on live in docs/, inside the repository.

A clone has nothing outside the repository, so no file may point at the fact sheets that once sat
beside the checkout, and every docs page (and section) that code, tests, benchmarks, the bundle or
a README cites must exist.

The files checked are the ones a clone has: the working tree, less .git and what .gitignore leaves
out. Walking the tree instead of asking git keeps this test free of child processes.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"

# Spelled in pieces so that this file does not match itself.
OUTSIDE_PATHS = ("../" + "shared", "shared/" + "reference")
OLD_SHEETS = tuple(
    "-".join(parts) + ".md"
    for parts in (
        ("nvml", "facts"),
        ("dcgm", "compat"),
        ("podresources", "facts"),
        ("bundle", "conventions"),
        ("performance", "facts"),
    )
)

# A repository-relative page: "docs/nvml.md", not "project/docs/nvml.md". Our pages are lower-case.
PAGE = re.compile(r"(?<![\w./-])docs/([a-z0-9-]+\.md)")
# "docs/nvml.md, 'Device table'" or "docs/nvml.md, section 'MIG profiles'", possibly wrapped onto
# the next comment line.
SECTION = re.compile(r"(?<![\w./-])docs/([a-z0-9-]+\.md),[\s#/]*(?:section\s+)?'([^'\n]+)'")
HEADING = re.compile(r"^#{1,6}\s+(?:\d+(?:\.\d+)*\.?\s+)?(?P<title>.+?)\s*$", re.MULTILINE)


def _ignored_patterns() -> list[str]:
    gitignore = REPO / ".gitignore"
    lines = gitignore.read_text().splitlines() if gitignore.exists() else []
    patterns = [line.strip().rstrip("/") for line in lines]
    return [".git", *(p for p in patterns if p and not p.startswith(("#", "!")))]


def repository_files() -> Iterator[tuple[Path, str]]:
    """(path relative to the repository, text) of every text file a clone would have."""
    ignored = _ignored_patterns()

    def kept(name: str) -> bool:
        return not any(fnmatch.fnmatch(name, pattern) for pattern in ignored)

    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if kept(d))
        for name in sorted(files):
            if not kept(name):
                continue
            path = Path(root, name)
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary files cite nothing
            yield path.relative_to(REPO), text


def headings(page: str) -> set[str]:
    return {m.group("title").lower() for m in HEADING.finditer((DOCS / page).read_text())}


def test_the_walk_sees_the_repository_and_skips_ignored_trees() -> None:
    seen = {path.as_posix() for path, _ in repository_files()}
    assert "tests/unit/test_docs_facts.py" in seen
    assert "kube_gpu_exporter/exporter/podresources/v1/api.proto" in seen
    assert not any(p.startswith((".venv/", ".git/")) or "__pycache__" in p for p in seen)


def test_no_file_points_outside_the_repository() -> None:
    needles = OUTSIDE_PATHS + OLD_SHEETS
    offenders = [
        f"{path}:{number}: {line.strip()}"
        for path, text in repository_files()
        for number, line in enumerate(text.splitlines(), 1)
        if any(needle in line for needle in needles)
    ]
    assert not offenders, "cite docs/ instead:\n" + "\n".join(offenders)


def test_every_cited_docs_page_exists() -> None:
    cited = {
        (path, match.group(1)) for path, text in repository_files() for match in PAGE.finditer(text)
    }
    assert {page for _, page in cited} >= {
        "nvml.md",
        "dcgm-exporter-compatibility.md",
        "pod-resources.md",
    }
    missing = sorted(f"{path}: docs/{page}" for path, page in cited if not (DOCS / page).is_file())
    assert not missing, "cited pages that do not exist:\n" + "\n".join(missing)


def test_every_cited_section_exists() -> None:
    cited = [
        (path, match.group(1), match.group(2))
        for path, text in repository_files()
        for match in SECTION.finditer(text)
        if (DOCS / match.group(1)).is_file()
    ]
    assert len(cited) >= 5, "the section citations in code and tests were not found"
    missing = [
        f"{path}: docs/{page}, '{section}'"
        for path, page, section in cited
        if section.lower() not in headings(page)
    ]
    assert not missing, "cited sections with no such heading:\n" + "\n".join(missing)


def test_the_docs_index_links_every_page() -> None:
    index = (DOCS / "README.md").read_text()
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert pages, "docs/ has no pages"
    unlisted = [page for page in pages if f"]({page})" not in index]
    assert not unlisted, f"docs/README.md does not link {unlisted}"


def test_every_docs_section_names_its_sources() -> None:
    unsourced = []
    for page in sorted(p for p in DOCS.glob("*.md") if p.name != "README.md"):
        sections = re.split(r"^## ", page.read_text(), flags=re.MULTILINE)[1:]
        assert sections, f"{page.name} has no sections"
        unsourced += [
            f"{page.name}: {s.splitlines()[0]}" for s in sections if "\nSources: " not in s
        ]
    assert not unsourced, "sections without a 'Sources:' line:\n" + "\n".join(unsourced)

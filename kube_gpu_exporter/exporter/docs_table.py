"""The docs' tables of the DCGM field table, made from the rows alone, and the pages they live in.

Two tables, each between a pair of markers in a docs page: every row of
kube_gpu_exporter/exporter/fields/table.py (docs/fields.md) and the 4.9 spellings
(docs/dcgm-exporter-compatibility.md, 'Version profiles'). `make bundle` rewrites them
(kube_gpu_exporter/bundle/render.py) and `python -m kube_gpu_exporter.bundle.render --check` names a
page whose blocks differ from a fresh render, so a row edited in the table and not in the docs fails
the drift check. `Block` and the page functions serve the other generated docs tables too
(kube_gpu_exporter/exporter/health/docs_table.py, kube_gpu_exporter/exporter/flags/docs_table.py).

It sits beside kube_gpu_exporter/exporter/dcgm_compat.py rather than in
kube_gpu_exporter/exporter/fields/: the tables show what the profiles make of the rows, and the
profiles are made from the field table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kube_gpu_exporter.exporter.dcgm_compat import PROFILES, RENAMES_4_9
from kube_gpu_exporter.exporter.fields.model import DcgmField
from kube_gpu_exporter.exporter.fields.table import (
    DCGM_4_7_DOCS,
    DCGM_ALIAS,
    FIELDS,
    GO_DCGM_FIELD,
    NVLINK_BANDWIDTH_KIND,
)

TABLE_SOURCE = "kube_gpu_exporter/exporter/fields/table.py"

# The rename table's source column in the words docs/dcgm-exporter-compatibility.md explains
# above it; tests/unit/test_dcgm_profiles.py reads them back.
SOURCE_WORDS = {
    DCGM_ALIAS: "DCGM alias",
    GO_DCGM_FIELD: "go-dcgm field",
    DCGM_4_7_DOCS: "DCGM 4.7 docs, unconfirmed",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{text}`"


def nvlink_kind() -> str:
    """The NVLink bandwidth row's type, which each profile sets: "counter (4.8.2) / gauge
    (4.8.3+)" while the profiles change it once."""
    versions = list(PROFILES)
    parts: list[str] = []
    start = 0
    for i in range(1, len(versions) + 1):
        kind = PROFILES[versions[start]].nvlink_bandwidth_kind
        if i < len(versions) and PROFILES[versions[i]].nvlink_bandwidth_kind == kind:
            continue
        run = versions[start:i]
        # A run that reaches the newest profile is open-ended.
        span = f"{run[0]}+" if i == len(versions) and len(run) > 1 else ", ".join(run)
        parts.append(f"{kind} ({span})")
        start = i
    return " / ".join(parts)


def _kind(row: DcgmField) -> str:
    return nvlink_kind() if row.kind == NVLINK_BANDWIDTH_KIND else row.kind


def _unit(unit: str) -> str:
    return unit or "-"


def fields_table() -> str:
    """Every row of the field table, in its order (the order of /metrics)."""
    lines = [
        "| DCGM name | Field | From NVML | Unit | NVML's unit | Type | Scope | Read | Default |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in FIELDS:
        cells = (
            _code(row.name),
            str(row.field_id) if row.field_id else "-",
            row.source.describe(),
            _unit(row.unit),
            _unit(row.native_unit),
            _kind(row),
            row.scope.value,
            row.cadence.value,
            "on" if row.default else "off",
        )
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _unit_change(before: str, after: str) -> str:
    return before if before == after else f"{before} → {after}"


def renames_table() -> str:
    """What `--compat.dcgm-exporter=4.9` renames (classic name, 4.9 name, unit, HELP, and the
    source of the name), then a sentence for each other row with a 4.9 spelling."""
    lines = [
        "| Classic name | 4.9 name | Unit | 4.9 HELP | Source |",
        "|---|---|---|---|---|",
    ]
    others: list[str] = []
    for row in FIELDS:
        spelling = row.spelling_4_9
        if spelling is None:
            continue
        unit = _unit_change(row.unit, spelling.unit)
        source = SOURCE_WORDS.get(spelling.source, spelling.source)
        if row.name not in RENAMES_4_9:
            # Outside the profile's renames: the driver version is a label, not a family, and an
            # off-by-default row is only ever spelt by the --collectors file that lists it.
            if row.kind == "label":
                others.append(
                    f"{_code(row.name)} is a label, which the 4.9 profile names "
                    f"{_code(spelling.name)} ({source})."
                )
            else:
                others.append(
                    f"{_code(row.name)}, off by default, is {_code(spelling.name)} ({unit}; "
                    f"{source}) when a `--collectors` file lists it by that name."
                )
            continue
        cells = (_code(row.name), _code(spelling.name), unit, spelling.help, source)
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    text = "\n".join(lines) + "\n"
    if others:
        text += "\n" + " ".join(others) + "\n"
    return text


@dataclass(frozen=True, slots=True)
class Block:
    """A generated table and the markers that hold it in a page."""

    page: str
    what: str
    render: Callable[[], str]
    source: str = TABLE_SOURCE

    @property
    def begin(self) -> str:
        return f"<!-- {self.what}: generated by `make bundle` from {self.source}; do not edit -->\n"

    @property
    def end(self) -> str:
        return f"<!-- end of {self.what} -->\n"


BLOCKS: tuple[Block, ...] = (
    Block("docs/fields.md", "field table", fields_table),
    Block("docs/dcgm-exporter-compatibility.md", "4.9 renames table", renames_table),
)


def with_block(document: str, block: Block) -> str | None:
    """`document` with `block`'s table freshly rendered between its markers; None without them."""
    start, end = document.find(block.begin), document.find(block.end)
    if start < 0 or end < start:
        return None
    return document[: start + len(block.begin)] + block.render() + document[end:]


def rendered(text: str, page: str, blocks: tuple[Block, ...] = BLOCKS) -> str | None:
    """The page's text with its blocks rendered; None where a block's markers are missing."""
    result: str | None = text
    for block in blocks:
        if block.page == page and result is not None:
            result = with_block(result, block)
    return result


def pages(blocks: tuple[Block, ...] = BLOCKS) -> list[str]:
    return sorted({block.page for block in blocks})


def stale_pages(root: Path, blocks: tuple[Block, ...] = BLOCKS) -> list[str]:
    """The pages under `root` whose generated blocks are missing or differ from a fresh render."""
    stale = []
    for page in pages(blocks):
        path = root / page
        text = path.read_text() if path.is_file() else ""
        if rendered(text, page, blocks) != text:
            stale.append(page)
    return stale


def write_pages(root: Path, blocks: tuple[Block, ...] = BLOCKS) -> None:
    """Rewrites the blocks of the pages under `root` that hold their markers."""
    for page in pages(blocks):
        path = root / page
        if not path.is_file():
            continue
        made = rendered(path.read_text(), page, blocks)
        if made is not None and made != path.read_text():
            path.write_text(made)

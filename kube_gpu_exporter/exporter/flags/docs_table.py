"""The docs' flag tables, made from the rows alone: every flag of ours with its variable and
default (docs/configuration.md), and every dcgm-exporter flag with what to give instead
(docs/dcgm-exporter-compatibility.md). `make bundle` writes them between their markers and
`python -m kube_gpu_exporter.bundle.render --check` fails where a page and a fresh render differ."""

from __future__ import annotations

from kube_gpu_exporter.exporter.docs_table import Block
from kube_gpu_exporter.exporter.flags.model import Flag, Kind
from kube_gpu_exporter.exporter.flags.parser import help_text, shown_default
from kube_gpu_exporter.exporter.flags.sources import keys_of
from kube_gpu_exporter.exporter.flags.table import FLAGS
from kube_gpu_exporter.exporter.flags.upstream import UPSTREAM, Upstream


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _spelling(flag: Flag) -> str:
    name = f"--[no-]{flag.name[2:]}" if flag.kind is Kind.SWITCH else flag.name
    if flag.metavar:
        name += f" {flag.metavar}"
    return f"`{flag.short}`, `{name}`" if flag.short else f"`{name}`"


def _default(flag: Flag) -> str:
    """A literal default in code quotes, words (on, none, "3 intervals") as they are."""
    literal = not flag.shown_default and flag.default is not None and flag.kind is not Kind.SWITCH
    literal = literal and not flag.deprecated
    return f"`{shown_default(flag)}`" if literal else shown_default(flag)


def _meaning(flag: Flag) -> str:
    text = flag.help if not flag.deprecated else help_text(flag)
    return f"{text} See [{flag.see}]({flag.see})." if flag.see else text


def flags_table() -> str:
    lines = [
        "| Flag | Default | Variable, config file key | Meaning |",
        "|---|---|---|---|",
    ]
    for flag in FLAGS:
        keys = ", ".join(f"`{key}`" for key in keys_of(flag))
        where = f"`{flag.env}`" + ("" if flag.name == "--config.file" else f", {keys}")
        cells = (_spelling(flag), _default(flag), where, _meaning(flag))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _upstream_row(row: Upstream) -> str:
    flags = ", ".join(f"`{flag}`" for flag in row.flags)
    if row.since:
        flags += f" ({row.since})"
    if not row.env:
        variable = "none known"
    elif row.translate is not None:
        variable = f"`{row.env}`: read"
    else:
        variable = f"`{row.env}`: logged once, not read"
    cells = (flags, variable, row.here, row.note)
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def upstream_table() -> str:
    header = "| dcgm-exporter | Its variable here | Here | Notes |\n|---|---|---|---|\n"
    return header + "\n".join(_upstream_row(row) for row in UPSTREAM) + "\n"


BLOCKS: tuple[Block, ...] = (
    Block(
        "docs/configuration.md",
        "flag table",
        flags_table,
        "kube_gpu_exporter/exporter/flags/table.py",
    ),
    Block(
        "docs/dcgm-exporter-compatibility.md",
        "dcgm-exporter flag table",
        upstream_table,
        "kube_gpu_exporter/exporter/flags/upstream.py",
    ),
)

"""docs/health.md's reason table, made from kube_gpu_exporter/exporter/health/reasons.py alone:
`make bundle` writes it between its markers and `python -m kube_gpu_exporter.bundle.render --check`
fails where the page and the table differ, as for the field table
(kube_gpu_exporter/exporter/docs_table.py)."""

from __future__ import annotations

from kube_gpu_exporter.exporter.docs_table import Block
from kube_gpu_exporter.exporter.health.reasons import (
    DOCUMENTED_XIDS,
    HEALTHY,
    REASONS,
    Reason,
    xid_reason,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(reason: Reason) -> str:
    cells = (
        f"`{reason.name}`",
        reason.evidence,
        reason.severity.value,
        reason.action.value,
        reason.clears.value,
        f"`{reason.watch}` / `{reason.code}`",
    )
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def reasons_table() -> str:
    header = (
        "| Reason | NVML evidence | Severity | Action | Clears | dcgm-exporter watch / code |\n"
        "|---|---|---|---|---|---|\n"
    )
    rows = [HEALTHY, *REASONS, *(xid_reason(code) for code in DOCUMENTED_XIDS)]
    return header + "\n".join(_row(r) for r in rows) + "\n"


BLOCKS: tuple[Block, ...] = (
    Block(
        "docs/health.md",
        "reason table",
        reasons_table,
        "kube_gpu_exporter/exporter/health/reasons.py",
    ),
)

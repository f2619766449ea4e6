"""Cell formatting and tables for the report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def verdict(ok: bool | None) -> str:
    return {True: "ok", False: "**FAIL**", None: "n/a"}[ok]


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def user_system(user: float | None, system: float | None, digits: int = 1) -> str:
    """ "user / system", or "-" where not measured."""
    if user is None or system is None:
        return "-"
    return f"{user:,.{digits}f} / {system:,.{digits}f}"

"""Where the bundle's hand-written sources (the runbook, the promtool tests, the Helm chart's
templates) are read from, and where a checkout's generated files are written.

In a checkout that is the repository root. An installed wheel ships the same files under this
package's `sources/` folder at the same relative paths (pyproject.toml's package-dir), and has no
pyproject.toml there, so the generator knows it has nothing committed to regenerate."""

from __future__ import annotations

from pathlib import Path

_SHIPPED = Path(__file__).resolve().parent / "sources"

ROOT = _SHIPPED if _SHIPPED.is_dir() else Path(__file__).resolve().parents[2]

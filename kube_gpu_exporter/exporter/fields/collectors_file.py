"""Reading a dcgm-exporter collectors file (--collectors, its CSV of `FIELD, type, help` lines).

The file is read as dcgm-exporter reads it, so that the one a cluster already mounts works
unchanged: `#` comment lines and blank lines are skipped, spaces around the commas do not count
(its own default file has `DCGM_FI_DEV_DEC_UTIL ,`), and the file's type and HELP are the ones the
family is published with, even where they differ from the field table's.

Where it differs, on purpose:

- The HELP is everything after the second comma, so it may contain commas; dcgm-exporter's CSV
  reader would see a fourth column and refuse the file. A HELP in double quotes (CSV quoting) loses
  its quotes, as there.
- A field listed twice (by the same name, or by its classic and its 4.9 name) is exported once,
  as its first line says; later lines for it are ignored. dcgm-exporter would write the family
  twice, which scrapers reject or de-duplicate.
- `histogram` and `summary`, which dcgm-exporter accepts, are refused: a field is one value per
  entity, which cannot be written as a valid histogram or summary family.
- A DCGM field this exporter has no source for is not an error but an UnsupportedField, logged
  once at start-up and counted in /metrics, as dcgm-exporter skips the profiling fields a GPU
  lacks. A name that is no DCGM field at all is an error.
- A file that lists nothing is allowed, as dcgm-exporter allows it: no DCGM families, only the
  exporter's own.

Every refusal is a ConfigurationError of one line naming the file, the line and what is wrong;
the path and any text from the file in it are shown by kube_gpu_exporter.exporter.errors.quoted,
escaped.
"""

from __future__ import annotations

from pathlib import Path

from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted, quoted_path
from kube_gpu_exporter.exporter.fields import dcgm_catalogue
from kube_gpu_exporter.exporter.fields.health_status_row import HEALTH_ROWS
from kube_gpu_exporter.exporter.fields.model import DcgmField
from kube_gpu_exporter.exporter.fields.p2p_status_row import P2P_STATUS_ROW
from kube_gpu_exporter.exporter.fields.selection import (
    FieldSelection,
    ListedField,
    UnsupportedField,
)
from kube_gpu_exporter.exporter.fields.table import BY_ANY_NAME, BY_NAME

# dcgm-exporter's own files are about 6 KB; a ConfigMap holds at most 1 MiB.
MAX_FILE_BYTES = 1 << 20
TYPES = ("gauge", "counter", "label")
# Accepted by dcgm-exporter's CSV reader, refused here (see the module's docstring).
DISTRIBUTION_TYPES = ("histogram", "summary")

LABEL_REASON = (
    "label fields other than the driver version and the fabric cluster UUID are not exported"
)
# For both string fields the table has (the driver version, the fabric cluster UUID).
DRIVER_AS_VALUE_REASON = "the field is a string, exported only as a label: list it with type label"
DEFAULT_REASON = "a DCGM-only field: NVML has no source for it here"
# By prefix, first match wins; the rest of DCGM's fields get DEFAULT_REASON.
PREFIX_REASONS: tuple[tuple[str, str], ...] = (
    ("DCGM_FI_DEV_NVSWITCH_", "NVSwitch fields need DCGM's NVSwitch module"),
    ("DCGM_FI_PROF_", "no NVML GPM metric for it"),
    ("DCGM_FI_DEV_CPU_", "CPU fields need DCGM's sysmon module for Grace CPUs"),
    ("DCGM_FI_DEV_MODULE_", "CPU fields need DCGM's sysmon module for Grace CPUs"),
    ("DCGM_FI_DEV_SYSIO_", "CPU fields need DCGM's sysmon module for Grace CPUs"),
    ("DCGM_FI_DEV_CONNECTX_", "ConnectX fields need DCGM's NIC support"),
    ("DCGM_FI_IMEX_", "IMEX fields need DCGM's IMEX support"),
    ("DCGM_FI_DEV_DIAG_", "diagnostic results need DCGM's diagnostics"),
    (
        "DCGM_FI_DEV_NVLINK_",
        "not read here: of the NVLink fields, only the bandwidth total, the error counters (per "
        "link for links 0-11, and totals) and the Blackwell NVLINK_COUNT_* family are",
    ),
    ("DCGM_FI_DEV_VGPU_", "vGPU fields other than the license status are not read here"),
)
EXPORTER_REASONS: dict[str, str] = {}
# dcgm-exporter's own families that we compute, beside the table's rows.
EXPORTER_ROWS = {**HEALTH_ROWS, P2P_STATUS_ROW.name: P2P_STATUS_ROW}


def read_collectors_file(path: str) -> FieldSelection:
    """The fields the file at `path` lists, or ConfigurationError (one line)."""
    try:
        text = small_yaml.read_text(Path(path), MAX_FILE_BYTES)
    except small_yaml.YamlRefused as exc:
        raise ConfigurationError(f"collectors file {quoted_path(path)}: {exc}") from None
    return parse_collectors(text, path)


def parse_collectors(text: str, path: str) -> FieldSelection:
    """The fields `text`, the contents of the file at `path`, lists."""
    listed: list[ListedField] = []
    unsupported: list[UnsupportedField] = []
    seen: set[str] = set()
    shown_path = quoted_path(path)
    # Editors on Windows start UTF-8 files with a byte-order mark; it is not part of the name.
    text = text.removeprefix("\ufeff")
    # Split on newlines only, so line numbers match an editor's (splitlines also breaks at form
    # feeds and other separators).
    for number, raw in enumerate(text.split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"collectors file {shown_path}:{number}"
        name, kind, help_text = _columns(line, where)
        if not dcgm_catalogue.is_dcgm_field(name):
            raise ConfigurationError(f"{where}: {quoted(name)} is not a DCGM field")
        if kind in DISTRIBUTION_TYPES:
            raise ConfigurationError(
                f"{where}: {quoted(name)} has type {kind}, which one value per GPU cannot be "
                f"written as; use {' or '.join(TYPES[:2])}"
            )
        if kind not in TYPES:
            raise ConfigurationError(
                f"{where}: {quoted(name)} has unknown type {quoted(kind)} "
                f"(use one of {', '.join(TYPES)})"
            )
        row = BY_ANY_NAME.get(name) or EXPORTER_ROWS.get(name)
        key = row.name if row is not None else name
        if key in seen:
            continue
        seen.add(key)
        reason = _unsupported_reason(name, kind, row)
        if reason is not None:
            unsupported.append(UnsupportedField(name, reason))
        elif row is not None:
            listed.append(ListedField(row=row, name=name, kind=kind, help=help_text))
    return FieldSelection(path=path, listed=tuple(listed), unsupported=tuple(unsupported))


def _columns(line: str, where: str) -> tuple[str, str, str]:
    parts = line.split(",", 2)
    if len(parts) < 3:
        raise ConfigurationError(
            f"{where}: expected 3 columns (FIELD, type, help), found {len(parts)}"
        )
    name, kind, help_text = (_unquoted(part.strip()) for part in parts)
    if not name:
        raise ConfigurationError(f"{where}: the field name is empty")
    if not kind:
        raise ConfigurationError(f"{where}: {quoted(name)} has no type")
    return name, kind, help_text


def _unquoted(column: str) -> str:
    if len(column) >= 2 and column[0] == column[-1] == '"':
        return column[1:-1].replace('""', '"')
    return column


def _unsupported_reason(name: str, kind: str, row: DcgmField | None) -> str | None:
    """Why the line's field cannot be exported, or None when it can."""
    if row is not None:
        if row.kind == "label":
            return None if kind == "label" else DRIVER_AS_VALUE_REASON
        return LABEL_REASON if kind == "label" else None
    if name in EXPORTER_REASONS:
        return EXPORTER_REASONS[name]
    if dcgm_catalogue.is_legacy_name(name):
        return _legacy_reason(name)
    if kind == "label":
        return LABEL_REASON
    for prefix, reason in PREFIX_REASONS:
        if name.startswith(prefix):
            return reason
    return DEFAULT_REASON


def _legacy_reason(name: str) -> str:
    field = dcgm_catalogue.field_id(name)
    ours = [row.name for row in BY_NAME.values() if field and row.field_id == field]
    dcgm = dcgm_catalogue.names_of(field) if field else ()
    current = (ours or list(dcgm) or [f"field {field}"])[0]
    return f"a dcgm-exporter 1.x name: list the field as {current}"

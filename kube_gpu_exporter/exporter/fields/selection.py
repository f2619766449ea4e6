"""Which DCGM fields a --collectors file (dcgm-exporter's CSV) selects, and what it lists that we
cannot export. Built once by the command line
(kube_gpu_exporter/exporter/fields/collectors_file.py); None in the config means no file: the
table's default fields, spelt by the --compat.dcgm-exporter profile."""

from __future__ import annotations

from dataclasses import dataclass

from kube_gpu_exporter.exporter.fields.model import DcgmField


@dataclass(frozen=True, slots=True)
class ListedField:
    """A line of the file that names a row of the field table."""

    row: DcgmField
    # As the file spells it (the classic name, or the row's 4.9 spelling): the family's name.
    name: str
    # The file's Prometheus type ("gauge", "counter", or "label") and HELP, which the family
    # takes, as dcgm-exporter's does.
    kind: str
    help: str

    @property
    def base_units(self) -> bool:
        """Listed by its 4.9 name, so published in the 4.9 spelling's unit."""
        spelling = self.row.spelling_4_9
        return spelling is not None and spelling.name == self.name != self.row.name

    @property
    def unit(self) -> str:
        """The unit the family is published in: the 4.9 spelling's for a 4.9 name."""
        spelling = self.row.spelling_4_9
        return spelling.unit if spelling is not None and self.base_units else self.row.unit


@dataclass(frozen=True, slots=True)
class UnsupportedField:
    """A DCGM field the file lists that this exporter cannot export, and why (one line)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class FieldSelection:
    # The file it came from, for messages.
    path: str
    listed: tuple[ListedField, ...]
    unsupported: tuple[UnsupportedField, ...] = ()

    def get(self, row_name: str) -> ListedField | None:
        """The line that lists the row named `row_name` (its classic name), if any."""
        for listed in self.listed:
            if listed.row.name == row_name:
                return listed
        return None

    def lists(self, row_name: str) -> bool:
        return self.get(row_name) is not None

"""What a metric family declares before any sample is written: its name, type, HELP and labels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

# Placeholders in `MetricFamily.labels` for names that depend on configuration or on data.
HOST = "<host>"  # the --host-label name (Hostname, hostname), or nothing with --host-label=none
LABEL_PREFIXED = "<label_*>"  # any number of `label_...` names from Kubernetes labels
# The labels of the entity's DCGM series, whatever the profile, the CSV and the pod labels make
# them, for our families that must join those series label for label.
DCGM_ENTITY = "<DCGM labels>"


class Declared(Protocol):
    """Anything the family writer can print a HELP and TYPE header for."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def help(self) -> str: ...


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: str
    help: str
    # Every label a sample may carry, in the order it is written; a sample may omit some (the MIG
    # labels of a whole GPU, the pod metadata without --kubernetes) but never reorder or add one.
    # Left empty for the DCGM_* families, whose labels are their entity's (entities.py).
    labels: tuple[str, ...] = ()

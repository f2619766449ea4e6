"""What a flag row says: its name, how its value is read and checked, its default and its help.
The parser, the environment variable, the config file's key and the docs' row all follow from it."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

ENV_PREFIX = "KUBE_GPU_EXPORTER_"


def env_name(flag: str) -> str:
    """`--a.b-c` is KUBE_GPU_EXPORTER_A_B_C."""
    return ENV_PREFIX + re.sub(r"[.-]", "_", flag.lstrip("-")).upper()


class Kind(Enum):
    # On or off, with a --no- form (argparse.BooleanOptionalAction).
    SWITCH = "switch"
    # A duration ("5s", "500ms", "1m"), in seconds, within `bounds`.
    DURATION = "duration"
    # A whole number within `bounds`.
    COUNT = "count"
    # One of `choices`.
    CHOICE = "choice"
    # Free text, checked where the configuration is built (paths, regexes, addresses).
    TEXT = "text"
    # Text read by the row's own `read` function.
    CUSTOM = "custom"


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag of the exporter."""

    name: str
    dest: str
    kind: Kind
    default: Any
    help: str
    bounds: tuple[float, float] | None = None
    choices: tuple[str, ...] = ()
    read: Callable[[str], Any] | None = None
    short: str = ""
    metavar: str | None = None
    # Given more than once, the values add up (argparse's "append").
    repeatable: bool = False
    # May be given without a value (`--simulate` alone); the value then is "".
    optional_value: bool = False
    # The default as the docs say it, where it is computed rather than a literal.
    shown_default: str = ""
    # A docs page and section to read more, as a relative markdown link target.
    see: str = ""
    # Kept for one release under its old name: what to give instead. A use is logged once.
    deprecated: str = ""

    @property
    def env(self) -> str:
        return env_name(self.name)

    @property
    def negated(self) -> str:
        return f"--no-{self.name[2:]}"

"""Reading the small YAML files users hand us (fleet files, --web.config.file) without letting a
hostile one hurt: a size cap, UTF-8 only, no Python tags (safe loader), no aliases (how YAML
bombs multiply), and a nesting cap (PyYAML composes recursively, so 100,000 brackets would be a
RecursionError instead of an error message). Every refusal is one line for the caller to prefix
with the file's name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 32
# Values echoed back in error messages are cut here, so one line stays one readable line.
SHOWN_CHARS = 60


class YamlRefused(ValueError):
    """The file cannot be used; str() is one line without the file's name."""


def read_text(path: Path, max_bytes: int) -> str:
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise YamlRefused(f"{size} bytes is over the {max_bytes}-byte limit")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise YamlRefused(f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise YamlRefused("not UTF-8 text") from None


def load(text: str) -> Any:
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise YamlRefused("YAML aliases (*name) are not allowed")
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise YamlRefused(f"nested deeper than {MAX_DEPTH} levels")
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise YamlRefused(f"not valid YAML{where}: {problem}") from None
    except YamlRefused:
        raise
    except ValueError as exc:
        # Python refuses to convert integers of over 4,300 digits; PyYAML lets that through.
        raise YamlRefused(f"a value cannot be read: {str(exc)[:SHOWN_CHARS]}") from None


def shown(value: Any) -> str:
    """repr(value), cut to SHOWN_CHARS characters."""
    try:
        text = repr(value)
    except ValueError:  # an integer too long to print
        return "a number too large to show"
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}..."

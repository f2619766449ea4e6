"""Reading the small YAML files users hand us (fleet files, --web.config.file) without letting a
hostile one hurt: regular files only (a FIFO would block forever, /dev/zero never ends), a cap on
the bytes actually read, UTF-8 only, no Python tags (safe loader), no aliases (how YAML bombs
multiply), no duplicate keys (YAML keeps the last silently, so a typo'd override would win), and
a nesting cap (PyYAML composes recursively, so 100,000 brackets would be a RecursionError instead
of an error message). Every refusal is one line for the caller to prefix with the file's name."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_DEPTH = 32
# Values echoed back in error messages are cut here, so one line stays one readable line.
SHOWN_CHARS = 60


class YamlRefused(ValueError):
    """The file cannot be used; str() is one line without the file's name."""


def read_text(path: Path, max_bytes: int) -> str:
    data = read_bytes(path, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise YamlRefused("not UTF-8 text") from None


def read_bytes(path: Path, max_bytes: int) -> bytes:
    """At most `max_bytes` of a regular file, or YamlRefused."""
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. The type is
        # checked on the open descriptor, so the file cannot be swapped between check and read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        # A unix socket cannot be opened at all (ENXIO): say what it is rather than why not.
        with contextlib.suppress(OSError):
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                raise YamlRefused(f"not a regular file but {_file_kind(mode)}") from None
        raise YamlRefused(f"cannot read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise YamlRefused(f"not a regular file but {_file_kind(info.st_mode)}")
        if info.st_size > max_bytes:
            raise YamlRefused(f"{info.st_size} bytes is over the {max_bytes}-byte limit")
        # st_size can be wrong (files in /proc say 0, a file can grow): cap what is read.
        with os.fdopen(fd, "rb", closefd=False) as file:
            data = file.read(max_bytes + 1)
    except OSError as exc:
        raise YamlRefused(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise YamlRefused(f"more than {max_bytes} bytes: over the {max_bytes}-byte limit")
    return data


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "a special file")


class _NoDuplicateKeysLoader(yaml.SafeLoader):
    """The safe loader, refusing a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            # A non-scalar key is refused by PyYAML itself (unhashable); `<<` merges are not keys.
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            if key in first_line:
                raise YamlRefused(
                    f"duplicate key {shown(key)} at line {line} (first at line {first_line[key]})"
                )
            first_line[key] = line
        return super().construct_mapping(node, deep=deep)


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
        return yaml.load(text, Loader=_NoDuplicateKeysLoader)
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

"""The exporter's own error for bad start-up input, in a module of its own: the config, the web
config and the node backends all raise it, and none of them should import the others for it.

Also how user-supplied text goes into such a one-line error, or a log line: a path or value may
hold a newline, a carriage return or a terminal escape, and printed raw it would end the line and
start what a log collector reads as a record of its own."""

from __future__ import annotations

import os
import re


class ConfigurationError(Exception):
    """Bad input found while starting up (e.g. the fleet file); str() is a one-line message."""


# A value longer than this is cut: the message is read by a person, and a 1 MiB value in it
# would be a denial of service on the log pipeline rather than a clue.
SHOWN_CHARS = 100
# Paths are shown whole up to a length no sane mount reaches, so that the file can be found.
SHOWN_PATH_CHARS = 512
# Shown bare: nothing in it can end a line, split a logfmt field or hide where the value ends.
_PLAIN = re.compile(r"[A-Za-z0-9_./:@+,=%~^-]+")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_char(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escaped(text: str) -> str:
    """`text` with backslashes, double quotes and every character that is not printable (control
    characters, line and paragraph separators, lone surrogates from undecodable bytes) written as
    backslash escapes, so that it fits between double quotes on one line."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    return "".join(
        _ESCAPES.get(char) or (char if char.isprintable() else _escape_char(char)) for char in text
    )


def quoted(text: str, limit: int = SHOWN_CHARS) -> str:
    """`text` as a one-line message shows it: bare when it is a plain word (a name, a number, a
    path without spaces) of at most `limit` characters, so that common messages read as before;
    otherwise in double quotes, escaped, and cut to `limit` characters with the full length said."""
    if len(text) <= limit and _PLAIN.fullmatch(text):
        return text
    shown = f'"{escaped(text[:limit])}"'
    if len(text) > limit:
        shown += f"... ({len(text)} characters)"
    return shown


def quoted_path(path: str | os.PathLike[str]) -> str:
    """quoted() with room for a whole path."""
    return quoted(os.fspath(path), SHOWN_PATH_CHARS)


def one_line(message: str) -> str:
    """`message` with every character that is not printable escaped, quotes and backslashes left
    alone: the last defence of the error printer against text that reached a message unquoted."""
    if message.isprintable():
        return message
    return "".join(
        char if char.isprintable() else _ESCAPES.get(char) or _escape_char(char) for char in message
    )

"""`kube-gpu-exporter hash-password`: the bcrypt hash a --web.config.file's basic_auth_users
entry needs, made with the exporter's own bcrypt, so a fresh machine needs neither htpasswd nor a
Python with bcrypt."""

from __future__ import annotations

import getpass
from collections.abc import Callable
from typing import TextIO

import bcrypt

# exporter-toolkit's documentation uses 10. Every step doubles what each check costs the two
# threads that verify passwords, so the ceiling stays far below bcrypt's own 31.
DEFAULT_COST = 10
MIN_COST, MAX_COST = 4, 16
# bcrypt reads at most 72 bytes: older releases ignore the rest, newer ones refuse it. Either way a
# longer password would not mean what its owner thinks.
MAX_PASSWORD_BYTES = 72


class PasswordError(ValueError):
    pass


def read_password(stdin: TextIO, prompt: Callable[[str], str] = getpass.getpass) -> str:
    """Asked twice on a terminal, without echo; otherwise the first line of `stdin`, so that
    `printf %s "$PASSWORD" | kube-gpu-exporter hash-password` works in scripts."""
    if stdin.isatty():
        try:
            first = prompt("Password: ")
            again = prompt("Repeat it: ")
        except EOFError:
            raise PasswordError("no password given") from None
        if first != again:
            raise PasswordError("the two passwords differ")
        return first
    # Bounded: a stray `< /dev/zero` must not fill memory.
    limit = 4 * MAX_PASSWORD_BYTES + 2
    raw = getattr(stdin, "buffer", None)
    if raw is None:  # a text stream with no bytes beneath it
        line = stdin.readline(limit)
    else:
        # Decoded here, strictly: the text layer would turn bytes that are not UTF-8 into
        # surrogates, or under another locale's encoding into other characters, and so hash a
        # password other than the one a client will send.
        data = raw.readline(limit)
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PasswordError(
                f"standard input is not UTF-8 text (byte {exc.start + 1} is "
                f"{data[exc.start]:#04x}); give the password as UTF-8"
            ) from None
    return line.removesuffix("\n").removesuffix("\r")


def hash_password(password: str, cost: int = DEFAULT_COST) -> str:
    try:
        data = password.encode()
    except UnicodeEncodeError:
        # A terminal whose bytes were not text in its locale's encoding (getpass keeps them
        # as surrogates).
        raise PasswordError("the password is not valid text; give it as UTF-8") from None
    if not data:
        raise PasswordError("the password is empty")
    if len(data) > MAX_PASSWORD_BYTES:
        raise PasswordError(
            f"the password is {len(data)} bytes; bcrypt uses at most {MAX_PASSWORD_BYTES}"
        )
    return bcrypt.hashpw(data, bcrypt.gensalt(cost)).decode()

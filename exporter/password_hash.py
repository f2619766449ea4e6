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
    line = stdin.readline(4 * MAX_PASSWORD_BYTES + 2)
    return line.removesuffix("\n").removesuffix("\r")


def hash_password(password: str, cost: int = DEFAULT_COST) -> str:
    data = password.encode()
    if not data:
        raise PasswordError("the password is empty")
    if len(data) > MAX_PASSWORD_BYTES:
        raise PasswordError(
            f"the password is {len(data)} bytes; bcrypt uses at most {MAX_PASSWORD_BYTES}"
        )
    return bcrypt.hashpw(data, bcrypt.gensalt(cost)).decode()

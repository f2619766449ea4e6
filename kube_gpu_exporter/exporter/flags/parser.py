"""The argparse parser, made from the flag table: each row's kind picks the action and the value
check, and its default is appended to its help from the row itself."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from kube_gpu_exporter import __version__
from kube_gpu_exporter.exporter.durations import bounded_duration
from kube_gpu_exporter.exporter.errors import quoted
from kube_gpu_exporter.exporter.flags.model import ENV_PREFIX, Flag, Kind
from kube_gpu_exporter.exporter.flags.table import FLAGS

PROG = "kube-gpu-exporter"
HASH_PASSWORD = "hash-password"


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def whole_number(low: int, high: int) -> Callable[[str], int]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{quoted(text)} is not a whole number from {low} to {high}"
            ) from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{quoted(text)} is out of range ({low} to {high})")
        return value

    return check


def shown_default(flag: Flag) -> str:
    """The default as --help and the docs say it."""
    if flag.shown_default:
        return flag.shown_default
    if flag.deprecated:
        return "deprecated"
    if flag.default is None:
        return "none"
    if flag.kind is Kind.SWITCH:
        return "on" if flag.default else "off"
    if flag.kind is Kind.DURATION:
        # In seconds, as the docs' tables and the README write defaults (60s, not 1m).
        seconds = float(flag.default)
        return f"{seconds:g}s" if seconds >= 1 else f"{seconds * 1000:g}ms"
    return str(flag.default)


def help_text(flag: Flag) -> str:
    if flag.deprecated:
        return f"{flag.help} Deprecated, read for one release: use {flag.deprecated}."
    return f"{flag.help} Default: {shown_default(flag)}."


def _value_check(flag: Flag) -> Callable[[str], Any] | None:
    if flag.kind is Kind.DURATION:
        assert flag.bounds is not None, flag.name
        return bounded_duration(*flag.bounds)
    if flag.kind is Kind.COUNT:
        assert flag.bounds is not None, flag.name
        return whole_number(int(flag.bounds[0]), int(flag.bounds[1]))
    return flag.read


def add_flag(parser: argparse.ArgumentParser, flag: Flag) -> None:
    names = [flag.name, *([flag.short] if flag.short else [])]
    options: dict[str, Any] = {
        "dest": flag.dest,
        "default": flag.default,
        "help": help_text(flag).replace("%", "%%"),
    }
    if flag.kind is Kind.SWITCH:
        options["action"] = argparse.BooleanOptionalAction
    else:
        if flag.metavar:
            options["metavar"] = flag.metavar
        if flag.kind is Kind.CHOICE:
            options["choices"] = list(flag.choices)
        elif (check := _value_check(flag)) is not None:
            options["type"] = check
        if flag.repeatable:
            options["action"] = "append"
        if flag.optional_value:
            options["nargs"] = "?"
            options["const"] = ""
    parser.add_argument(*names, **options)


def build_parser(flags: Sequence[Flag] = FLAGS) -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="NVIDIA GPU exporter for Kubernetes with dcgm-exporter-compatible metrics. "
        f"Every flag can also be set through the environment variable {ENV_PREFIX}<FLAG>, "
        "e.g. --collector.interval as KUBE_GPU_EXPORTER_COLLECTOR_INTERVAL, or in the "
        "--config.file.",
        epilog=f"{PROG} {HASH_PASSWORD} [--cost N] reads a password and prints its bcrypt hash "
        "for --web.config.file's basic_auth_users.",
    )
    for flag in flags:
        add_flag(parser, flag)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def hash_password_parser() -> argparse.ArgumentParser:
    from kube_gpu_exporter.exporter.password_hash import DEFAULT_COST, MAX_COST, MIN_COST

    parser = _Parser(
        prog=f"{PROG} {HASH_PASSWORD}",
        description="Print the bcrypt hash of a password, for basic_auth_users in "
        "--web.config.file. On a terminal the password is asked twice without echo; otherwise "
        "the first line of standard input is read.",
    )
    parser.add_argument(
        "--cost",
        type=whole_number(MIN_COST, MAX_COST),
        default=DEFAULT_COST,
        help=f"bcrypt cost (default {DEFAULT_COST}; each step doubles the time of every check)",
    )
    return parser

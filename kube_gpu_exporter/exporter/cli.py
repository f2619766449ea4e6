"""The command line's entry point: `kube-gpu-exporter [flags]` runs the exporter on this node's
GPUs or, with --simulate, on a simulated node; `kube-gpu-exporter hash-password` prints a bcrypt
hash for --web.config.file instead. The flags are data (kube_gpu_exporter/exporter/flags/table.py);
a bad flag or value prints one line naming it and exits with status 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.errors import ConfigurationError, one_line
from kube_gpu_exporter.exporter.fields.flags import log_selection
from kube_gpu_exporter.exporter.flags.parser import (
    HASH_PASSWORD,
    PROG,
    UsageError,
    hash_password_parser,
)
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.logs import configure_logging

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.node_backend import NodeBackend

log = logging.getLogger(__name__)


def hash_password_main(argv: Sequence[str]) -> int:
    from kube_gpu_exporter.exporter.password_hash import PasswordError, hash_password, read_password

    try:
        args = hash_password_parser().parse_args(argv)
        print(hash_password(read_password(sys.stdin), args.cost))
    except (UsageError, PasswordError) as exc:
        return _usage_error(f"{HASH_PASSWORD}: {exc}")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
    return 0


def _usage_error(message: str) -> int:
    # Values are quoted where messages are made; argparse's own ("unrecognized arguments: ...")
    # are not, and whatever slipped through must still not end the line.
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr)
    return 2


def node_backend(config: Config) -> AbstractContextManager[NodeBackend]:
    """The node to run on: this host's GPUs, or with --simulate the simulated node. The only
    place that names the simulator, imported here alone so that production never loads it."""
    if config.simulate:
        try:
            from kube_gpu_exporter.exporter.simulator.node import simulated_backend
        except ModuleNotFoundError as exc:
            if exc.name != "grpc":
                raise
            raise ConfigurationError(
                "--simulate needs the simulator's extra dependencies, which this install lacks: "
                "pip install '.[simulator]' in a checkout (README.md, 'Install')"
            ) from None
        return simulated_backend(config)
    from kube_gpu_exporter.exporter.real_node import real_backend

    return real_backend(config)


def main(argv: Sequence[str] | None = None, environ: dict[str, str] | None = None) -> int:
    """Run the exporter; the exit status: 0, or 2 after one line on stderr for bad input.

    `argv` and `environ` default to the process's own; tests pass theirs to run in-process.
    """
    argv = sys.argv[1:] if argv is None else argv
    if list(argv[:1]) == [HASH_PASSWORD]:
        return hash_password_main(argv[1:])
    try:
        config = parse_config(argv, environ)
    except UsageError as exc:
        return _usage_error(str(exc))
    except SystemExit as exc:
        # argparse ends --help and --version this way, after printing what was asked for.
        return exc.code if isinstance(exc.code, int) else 0
    configure_logging(config.log_level, config.log_format)
    # Logged only now, in the chosen format; a bad file has already failed with one line.
    for warning in config.web.security.warnings if config.web.security else ():
        log.warning(warning)
    for notice in config.notices:
        log.warning(notice)
    log_selection(config.fields)
    from kube_gpu_exporter.exporter.app import ignore_stray_signals, run

    ignore_stray_signals()
    try:
        return run(node_backend(config), config.web.listen_address)
    except ConfigurationError as exc:
        return _usage_error(str(exc))
    except KeyboardInterrupt:
        return 0

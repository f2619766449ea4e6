"""Where a flag's value may come from besides the command line, and which one wins: the command
line, then KUBE_GPU_EXPORTER_<FLAG>, then the dcgm-exporter variable of the same meaning
(upstream.py), then the --config.file, then the row's default.

Each source is turned into arguments placed before the command line's, so that the parser checks
every value the same way wherever it came from. A flag set by a stronger source is left out of
the weaker ones entirely, so a repeatable flag never mixes values from two sources."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.errors import quoted, quoted_path
from kube_gpu_exporter.exporter.flags.model import Flag, Kind
from kube_gpu_exporter.exporter.flags.parser import UsageError
from kube_gpu_exporter.exporter.flags.table import BY_NAME, FLAGS
from kube_gpu_exporter.exporter.flags.upstream import UPSTREAM_ENV

CONFIG_FILE = "--config.file"
# Every flag set in YAML is a few hundred bytes; a file a thousand times that is no config file.
MAX_CONFIG_BYTES = 1 << 20
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def env_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {quoted(text)} (use true or false)")


@dataclass
class Layered:
    """The arguments the environment and the config file add, before the command line's, and
    for each flag they set, the words naming where it came from (for error messages)."""

    arguments: list[str] = field(default_factory=list)
    sources: dict[str, str] = field(default_factory=dict)
    # What was set but is not honoured, said once in the log when the exporter starts.
    notices: list[str] = field(default_factory=list)


def given_flags(argv: Sequence[str]) -> set[str]:
    """The flags argv sets, by row name, counting short aliases (-f FILE, -x5) and --no- forms."""
    by_option = {f.short: f.name for f in FLAGS if f.short}
    by_option |= {f.negated: f.name for f in FLAGS if f.kind is Kind.SWITCH}
    given: set[str] = set()
    for arg in argv:
        option = arg.split("=", 1)[0] if arg.startswith("--") else arg[:2]
        given.add(by_option.get(option, option))
    return given


def _arguments(flag: Flag, value: Any, source: str) -> list[str]:
    """The arguments that give `flag` the value `value` (a string from the environment, or what
    YAML made of the file)."""
    if flag.kind is Kind.SWITCH or flag.optional_value:
        if isinstance(value, str):
            try:
                value = env_bool(value)
            except argparse.ArgumentTypeError as exc:
                if not flag.optional_value:
                    raise UsageError(f"{source}: {exc}") from None
        if isinstance(value, bool):
            if flag.kind is Kind.SWITCH:
                return [flag.name if value else flag.negated]
            return [flag.name] if value else []
    values = value if flag.repeatable and isinstance(value, list) else [value]
    arguments = []
    for item in values:
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise UsageError(f"{source}: {flag.name} takes a value, not {small_yaml.shown(item)}")
        arguments.append(f"{flag.name}={item}")
    return arguments


def from_environment(environ: Mapping[str, str], given: set[str]) -> Layered:
    """Our variables, then dcgm-exporter's, for the flags not in `given`."""
    given = set(given)
    layered = Layered()
    for flag in FLAGS:
        if flag.name in given or flag.name == CONFIG_FILE:
            continue
        if (value := environ.get(flag.env)) is not None:
            source = f"environment variable {flag.env}"
            layered.arguments += _arguments(flag, value, source)
            layered.sources[flag.name] = source
            given.add(flag.name)
    for upstream in UPSTREAM_ENV:
        value = environ.get(upstream.env)
        if value is None:
            continue
        if upstream.flag is None or upstream.translate is None:
            layered.notices.append(f"{upstream.env} is set but not used: {upstream.note}")
            continue
        if upstream.flag in given or (translated := upstream.translate(value)) is None:
            continue
        source = f"environment variable {upstream.env}"
        layered.arguments += _arguments(BY_NAME[upstream.flag], translated, source)
        layered.sources[upstream.flag] = source
        given.add(upstream.flag)
    return layered


def config_file_path(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The --config.file to read and where it was named; None without one."""
    finder = argparse.ArgumentParser(add_help=False)
    finder.add_argument(CONFIG_FILE, dest="path", default=None)
    try:
        known, _ = finder.parse_known_args(list(argv))
    except SystemExit:
        raise UsageError(f"argument {CONFIG_FILE}: expected one argument") from None
    if known.path is not None:
        return known.path, f"argument {CONFIG_FILE}"
    variable = BY_NAME[CONFIG_FILE].env
    if environ.get(variable):
        return environ[variable], f"environment variable {variable}"
    return None


def _flattened(mapping: Mapping[Any, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in mapping.items():
        if not isinstance(key, str) or not key:
            raise UsageError(f"key {small_yaml.shown(key)} is not a flag name")
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from _flattened(value, f"{path}.")
        else:
            yield path, value


def _flag_of_key(key: str) -> Flag | None:
    """A key is a flag's name without its dashes; a switch that other flags' names continue
    (kubernetes, podresources) may also be written `enabled` under its own key."""
    flag = BY_NAME.get(f"--{key}")
    if flag is None and key.endswith(".enabled"):
        flag = BY_NAME.get(f"--{key.removesuffix('.enabled')}")
    return flag if flag is not None and flag.name != CONFIG_FILE else None


def keys_of(flag: Flag) -> tuple[str, ...]:
    """The config file keys that set `flag`."""
    key = flag.name[2:]
    if any(other.name.startswith(f"{flag.name}.") for other in FLAGS):
        return (key, f"{key}.enabled")
    return (key,)


def from_config_file(path: str, named: str) -> Layered:
    """The file's flags as arguments; UsageError naming the file and the key on anything wrong."""
    where = f"config file {quoted_path(path)}"
    try:
        document = small_yaml.load(small_yaml.read_text(Path(path), MAX_CONFIG_BYTES))
    except small_yaml.YamlRefused as exc:
        raise UsageError(f"{named}: {quoted_path(path)}: {exc}") from None
    if document is None:
        return Layered()
    if not isinstance(document, Mapping):
        raise UsageError(f"{where}: the top level must be a mapping of flag names")
    layered = Layered()
    try:
        items = list(_flattened(document))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    keys = sorted(key for flag in FLAGS if flag.name != CONFIG_FILE for key in keys_of(flag))
    for key, value in items:
        flag = _flag_of_key(key)
        if flag is None:
            if key == CONFIG_FILE[2:]:
                raise UsageError(f"{where}: config.file cannot name another file")
            # Imported only to explain a mistake: a process that starts cleanly never loads it.
            import difflib

            close = difflib.get_close_matches(key, keys, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"{where}: {quoted(key)} is not a flag{hint}")
        if flag.name in layered.sources:
            raise UsageError(f"{where}: {flag.name[2:]} is set twice")
        source = f"{where}, key {key}"
        layered.arguments += _arguments(flag, value, source)
        layered.sources[flag.name] = source
    return layered


def layered(argv: Sequence[str], environ: Mapping[str, str]) -> Layered:
    """The arguments to place before argv: the config file's, then the environment's, each left
    out where a stronger source sets the same flag."""
    given = given_flags(argv)
    env = from_environment(environ, given)
    named = config_file_path(argv, environ)
    file = Layered() if named is None else from_config_file(*named)
    stronger = given | set(env.sources)
    return Layered(
        [a for a in file.arguments if given_flags([a]).isdisjoint(stronger)] + env.arguments,
        {k: v for k, v in file.sources.items() if k not in stronger} | env.sources,
        env.notices,
    )


def with_source(message: str, sources: Mapping[str, str]) -> str:
    """argparse's message about a flag, naming the variable or file key it came from instead."""
    for flag_name, source in sources.items():
        flag = BY_NAME[flag_name]
        # argparse names a flag with a short alias as "--long/-s".
        if message.startswith((f"argument {flag.name}:", f"argument {flag.name}/")):
            return f"{source}: {message.split(':', 1)[1].strip()}"
    return message

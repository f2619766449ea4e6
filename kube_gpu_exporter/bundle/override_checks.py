"""What each overridable value may be, judged by what it is pasted into.

Selectors, label names, regexes and durations go into PromQL and rule files as they are: a quote
in a regex ends the PromQL string it sits in, and what follows becomes query
(`"} or vector(1) or {x="` made an alert fire for ever, and promtool found nothing wrong), while
a label name with a dash or a duration of `1m1h` only surfaces when Prometheus refuses the file.
Kubernetes names, label keys and values, quantities and ports go into the deploy manifests and
monitors, where the API server would refuse them at apply time. Each check here refuses such a
value with one line naming the key and the value, before anything is generated.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from kube_gpu_exporter.exporter import small_yaml


class CheckFailed(ValueError):
    """One line: the key, the value as given (cut short), and what is wrong."""


Check = Callable[[str, Any], None]


def _fail(path: str, value: Any, problem: str) -> CheckFailed:
    return CheckFailed(f"{path}: {small_yaml.shown(value)} {problem}")


# ---- PromQL ----

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def label_name(path: str, value: Any) -> None:
    if value is None:  # labels.hostname: the profile's
        return
    if not LABEL_NAME.fullmatch(value):
        raise _fail(path, value, "is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)")
    if value.startswith("__"):
        raise _fail(path, value, "is not a label name to use: '__' names are Prometheus' own")


# What RE2, Prometheus' regex engine, lacks but Python's `re` accepts: lookaround and named
# groups written (?<...>) (both begin "(?<"), atomic groups, conditionals, named backreferences
# and possessive quantifiers. Backreferences by number need a backslash, refused before this.
_NOT_RE2 = re.compile(r"\(\?[=!<>(]|\(\?P=|[*+?}]\+")


def _regex_problem(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"is not a regular expression: {exc}"
    if found := _NOT_RE2.search(pattern):
        return f"uses {found.group(0)!r}, which Prometheus' RE2 regexes do not support"
    return None


def promql_regex(path: str, value: Any) -> None:
    """A regex placed between the double quotes of a PromQL matcher as it is."""
    if not value:
        raise _fail(path, value, "is empty: it would match only series without the label")
    if any(c in value for c in '"\\') or not value.isprintable():
        raise _fail(
            path,
            value,
            "must not hold a quote, a backslash or a control character: it is placed inside a "
            "PromQL string as it is (write [.] for a literal dot)",
        )
    if problem := _regex_problem(value):
        raise _fail(path, value, problem)


# PromQL's quoted strings, with the escapes its lexer takes. Its third form, `raw`, cannot go
# where selectors go (see `matchers`).
_STRING = r""""(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*'"""
_MATCHER = re.compile(rf"\s*({LABEL_NAME.pattern})\s*(=~|!~|!=|=)\s*({_STRING})\s*")
_ESCAPE = re.compile(
    r"\\(?:([abfnrtv\\'\"])|([0-7]{3})|x([0-9a-fA-F]{2})|u([0-9a-fA-F]{4})|U([0-9a-fA-F]{8})|(.))",
    re.S,
)
_SIMPLE_ESCAPES = dict(zip("abfnrtv\\'\"", "\a\b\f\n\r\t\v\\'\"", strict=True))


def _unquote(literal: str) -> str:
    """The value of a PromQL string literal; ValueError naming a bad escape."""
    quote, body = literal[0], literal[1:-1]

    def one(match: re.Match[str]) -> str:
        simple, octal, hex2, hex4, hex8, other = match.groups()
        if simple is not None:
            if simple in "'\"" and simple != quote:
                raise ValueError(f"\\{simple} is not an escape in a {quote}-quoted string")
            return _SIMPLE_ESCAPES[simple]
        if other is not None:
            raise ValueError(f"\\{other} is not an escape PromQL knows")
        code = int(octal, 8) if octal else int(hex2 or hex4 or hex8, 16)
        if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise ValueError(f"{match.group(0)} is not a character")
        return chr(code)

    return _ESCAPE.sub(one, body)


def matchers(path: str, value: Any) -> None:
    """Label matchers without braces, `job="x", cluster=~"a|b"`, joined with others into one
    selector: each must parse as PromQL parses it, and regexes must be RE2's."""
    if not value.strip():
        raise _fail(path, value, "is empty: every query needs it")
    if value.strip().startswith("{"):
        raise _fail(path, value, "must be matchers without braces: the queries add them")
    if "`" in value or "%" in value:
        # The alert descriptions also run them in a template query: printf `...{selector}...`.
        raise _fail(path, value, "must not hold ` or %: alert descriptions quote it in printf `…`")
    position = 0
    while True:
        found = _MATCHER.match(value, position)
        if found is None:
            where = value[position:].strip() or "the end"
            raise _fail(
                path,
                value,
                f'is not label matchers such as job="x", cluster=~"a|b" '
                f"(cannot parse {small_yaml.shown(where)})",
            )
        name, operator, literal = found.groups()
        try:
            text = _unquote(literal)
        except ValueError as exc:
            raise _fail(path, value, f"has a bad string: {exc}") from None
        if operator in ("=~", "!~") and (problem := _regex_problem(text)):
            raise _fail(path, value, f"has a regex for {name} that {problem}")
        position = found.end()
        if position == len(value):
            return
        if value[position] != ",":
            raise _fail(path, value, "needs a comma between two matchers")
        position += 1
        if not value[position:].strip():
            raise _fail(path, value, "ends with a comma: others are appended after it")


# Prometheus' duration syntax: each unit at most once, largest first.
_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_UNIT_MS = (365 * 86400_000, 7 * 86400_000, 86400_000, 3600_000, 60_000, 1000, 1)
SECOND_MS, YEAR_MS = 1000, 365 * 86400_000


def duration_ms(text: str) -> int | None:
    """Milliseconds of a Prometheus duration (`1h30m`), or None if it is not one."""
    found = _DURATION.fullmatch(text)
    if not text or found is None:
        return None
    return sum(int(n) * unit for n, unit in zip(found.groups(), _UNIT_MS, strict=True) if n)


def _show_ms(ms: int) -> str:
    for unit, size in (("y", YEAR_MS), ("d", 86400_000), ("h", 3600_000), ("m", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def duration(low_ms: int, high_ms: int) -> Check:
    """A Prometheus duration from `low_ms` to `high_ms`: a window or lookback must be over
    zero, and past a year it is a typo (and past 292 years Prometheus cannot hold it)."""

    def check(path: str, value: Any) -> None:
        ms = duration_ms(value)
        if ms is None:
            raise _fail(
                path, value, "is not a duration such as 15m (y w d h m s ms, largest first)"
            )
        if not low_ms <= ms <= high_ms:
            raise _fail(path, value, f"is not between {_show_ms(low_ms)} and {_show_ms(high_ms)}")

    return check


# A `for` may be zero (fire at once); a range or lookback may not.
FOR = duration(0, YEAR_MS)
WINDOW = duration(SECOND_MS, YEAR_MS)
# Prometheus looks back 5 minutes for a series' last sample, so scraping less often than that
# would leave every query with gaps.
SCRAPE_INTERVAL = duration(SECOND_MS, 5 * 60_000)


def runbook_url_pattern(path: str, value: Any) -> None:
    """`pattern % alert_name`: exactly one %s, and any other % written %%."""
    placeholders = 0
    for found in re.finditer(r"%(.?)", value, re.S):
        if found.group(1) == "s":
            placeholders += 1
        elif found.group(1) != "%":
            raise _fail(path, value, f"has {found.group(0)!r}: write a literal % as %%")
    if placeholders != 1:
        raise _fail(path, value, f"needs exactly one %s for the alert name, not {placeholders}")


def xid_codes(path: str, value: Any) -> None:
    if not value or any(code < 1 for code in value):
        raise _fail(path, value, "must list XID codes, whole numbers from 1, at least one")


def dashboard_uids(path: str, value: Any) -> None:
    for key, uid in value.items():
        if not re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", uid):
            raise _fail(f"{path}.{key}", uid, "is not a Grafana uid (1-40 of a-z A-Z 0-9 - _)")


def positive_number(path: str, value: Any) -> None:
    """A finite number above zero, or None where None turns the setting off. A carbon intensity
    of 0 or below (or infinity, or NaN) would record estimates that mean nothing."""
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise _fail(path, value, "is not a positive number such as 400 (null turns it off)")


# ---- Kubernetes ----

_NAME_63 = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?"
_DNS_SUBDOMAIN = rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*"


def _kubernetes(pattern: str, what: str, longest: int = 253) -> Check:
    compiled = re.compile(pattern)

    def check(path: str, value: Any) -> None:
        if len(value) > longest or not compiled.fullmatch(value):
            raise _fail(path, value, f"is not {what}")

    return check


LABEL_KEY = _kubernetes(
    rf"(?:{_DNS_SUBDOMAIN}/)?{_NAME_63}", "a Kubernetes label key (prefix/name)", 253 + 1 + 63
)
LABEL_VALUE = _kubernetes(rf"(?:{_NAME_63})?", "a Kubernetes label value", 63)
DNS_LABEL = _kubernetes(_DNS_LABEL, "a Kubernetes name (a-z 0-9 -, at most 63)", 63)
DNS_SUBDOMAIN = _kubernetes(_DNS_SUBDOMAIN, "a Kubernetes name (a-z 0-9 - ., at most 253)")
QUANTITY = _kubernetes(
    r"(?:\d+(?:\.\d*)?|\.\d+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?\d+)?",
    "a Kubernetes quantity such as 20m, 0.5 or 80Mi",
    63,
)
# maxUnavailable: Kubernetes reads a string as a percentage only, and it is written as a string.
PERCENT = _kubernetes(r"(?:100|[1-9]?\d)%", "a percentage such as 10%")
IMAGE = _kubernetes(
    r"(?:[A-Za-z0-9.-]+(?::\d+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*",
    "an image name such as registry.example.com/team/kube-gpu-exporter",
)
IMAGE_TAG = _kubernetes(r"[\w][\w.-]{0,127}", "an image tag (a-z A-Z 0-9 _ . -, at most 128)", 128)


def port_name(path: str, value: Any) -> None:
    if (
        len(value) > 15
        or not re.fullmatch(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?", value)
        or "--" in value
        or not re.search("[a-z]", value)
    ):
        raise _fail(path, value, "is not a port name (a-z 0-9 -, a letter, at most 15)")


def port(path: str, value: Any) -> None:
    if not 1 <= value <= 65535:
        raise _fail(path, value, "is not a port from 1 to 65535")


def pairs(key: Check, value: Check) -> Check:
    def check(path: str, items: Any) -> None:
        for k, v in items:
            key(f"{path}.{k}", k)
            value(f"{path}.{k}", v)

    return check


def each(check_one: Check) -> Check:
    def check(path: str, items: Any) -> None:
        for i, item in enumerate(items):
            check_one(f"{path}[{i}]", item)

    return check


# Keyed by the dotted path of a BundleConfig field. A key not listed is free text (a severity, a
# dashboard title, a Grafana folder), which YAML and JSON quote as needed.
CHECKS: dict[str, Check] = {
    "selectors.exporter": matchers,
    "selectors.kube_state_metrics": matchers,
    **{
        f"labels.{name}": label_name for name in ("cluster", "hostname", "node", "pod", "namespace")
    },
    "resources.gpu_ksm_regex": promql_regex,
    "thresholds.xid_critical_codes": xid_codes,
    "dashboards.uids": dashboard_uids,
    "dashboards.rate_interval": WINDOW,
    "dashboards.device_history_window": WINDOW,
    "scrape.namespace": DNS_LABEL,
    "scrape.app_label": LABEL_KEY,
    "scrape.app_name": LABEL_VALUE,
    "scrape.port_name": port_name,
    "scrape.port": port,
    "scrape.interval": SCRAPE_INTERVAL,
    "scrape.timeout": SCRAPE_INTERVAL,
    "scrape.release_label": LABEL_VALUE,
    "deployment.image": IMAGE,
    "deployment.tag": IMAGE_TAG,
    "deployment.node_selector": pairs(LABEL_KEY, LABEL_VALUE),
    "deployment.toleration_keys": each(LABEL_KEY),
    "deployment.cpu_request": QUANTITY,
    "deployment.memory_request": QUANTITY,
    "deployment.cpu_limit": QUANTITY,
    "deployment.memory_limit": QUANTITY,
    "deployment.priority_class": DNS_SUBDOMAIN,
    "deployment.runtime_class": DNS_SUBDOMAIN,
    "deployment.max_unavailable": PERCENT,
    "runbook_url_pattern": runbook_url_pattern,
    "carbon_intensity_g_per_kwh": positive_number,
}


def check_value(path: str, value: Any) -> None:
    """Raises CheckFailed if `value`, given for the field at `path`, cannot go where it goes."""
    check = CHECKS.get(path)
    if check is None and path.startswith("thresholds.") and isinstance(value, str):
        # Every string threshold is a `for` duration, a window or a lookback.
        check = FOR if path.endswith("_for") else WINDOW
    if check is not None:
        check(path, value)


def check_combination(config: Any) -> None:
    """What no single value shows: Prometheus refuses a scrape timeout over its interval."""
    scrape = config.scrape
    timeout, interval = duration_ms(scrape.timeout), duration_ms(scrape.interval)
    if timeout is not None and interval is not None and timeout > interval:
        raise _fail(
            "scrape.timeout", scrape.timeout, f"is longer than scrape.interval {scrape.interval!r}"
        )

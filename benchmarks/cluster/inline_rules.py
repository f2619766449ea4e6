"""A dashboard query as it would read without the recording rules: every recorded series it
names replaced by the rule's own expression, recursively, with the query's matchers pushed down.

`FREE{resource="nvidia.com/gpu", node=~".+"}` becomes the rule's expression with those matchers
added to each scraped selector inside it (the exporter's series carry `resource` and `node`
unchanged through the rule's aggregation, so filtering before aggregating gives the same result).
A matcher on a label the rule itself sets (`gpus_per_pod`) picks the rule variant instead, and a
rule with variants contributes all of them, each labelled as its rule labels it. The tests check
that both forms of every capacity query return the same answer from the same data.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

_MATCHER = re.compile(r'\s*([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_SELECTOR = re.compile(r'(?<![\w:"])([A-Za-z_]\w*)\{([^{}]*)\}')
# Labels kube-state-metrics shares with the exporter's series, under the same name and meaning.
_KSM_SHARED = frozenset({"cluster", "namespace", "node"})
_EXPORTER_JOB = 'job="kube-gpu-exporter"'
_KSM_JOB = 'job="kube-state-metrics"'


class RecordingRule(Protocol):
    record: str
    expr: str
    labels: dict[str, str]
    # The rule group's own evaluation interval, if it has one.
    interval: str | None


def _matchers(text: str) -> list[tuple[str, str, str]]:
    found = []
    position = 0
    while position < len(text):
        match = _MATCHER.match(text, position)
        if not match:
            raise ValueError(f"cannot parse matchers {text!r}")
        found.append((match.group(1), match.group(2), match.group(3)))
        position = match.end()
        if position < len(text) and text[position] == ",":
            position += 1
    return found


def _format(matchers: Sequence[tuple[str, str, str]]) -> str:
    return ", ".join(f'{name}{op}"{value}"' for name, op, value in matchers)


def _holds(value: str, op: str, wanted: str) -> bool:
    if op == "=":
        return value == wanted
    if op == "!=":
        return value != wanted
    full = re.fullmatch(wanted, value) is not None
    return full if op == "=~" else not full


class Inliner:
    """`evaluation_interval`: how often the rules are evaluated where their group does not say.
    A range over a recorded series (`avg_over_time(rule[2h])`) becomes a subquery at the rule's
    resolution, which reads as many points as the recorded series holds (aligned to the clock,
    where a group's evaluations carry an offset of their own)."""

    def __init__(self, rules: Sequence[RecordingRule], evaluation_interval: str) -> None:
        self._rules: dict[str, list[RecordingRule]] = {}
        for rule in rules:
            self._rules.setdefault(rule.record, []).append(rule)
        self._resolution = evaluation_interval
        names = sorted(self._rules, key=len, reverse=True)
        self._recorded = re.compile(
            r"(?<![\w:])(" + "|".join(re.escape(n) for n in names) + r")(?![\w:])"
            r"(\{[^{}]*\})?(\[\w+\])?"
        )

    def uses_rules(self, query: str) -> bool:
        return self._recorded.search(query) is not None

    def recorded_names(self, query: str) -> list[str]:
        return [m.group(1) for m in self._recorded.finditer(query)]

    def inline(self, query: str, pushed: Sequence[tuple[str, str, str]] = ()) -> str:
        """`query` with every recorded series replaced by its rule, `pushed` matchers added."""

        def replace(match: re.Match[str]) -> str:
            own = _matchers(match.group(2)[1:-1]) if match.group(2) else []
            expanded = self._expand(match.group(1), [*own, *pushed])
            if match.group(3):
                resolution = self._rules[match.group(1)][0].interval or self._resolution
                return f"{expanded}{match.group(3)[:-1]}:{resolution}]"
            return expanded

        return self._recorded.sub(replace, query)

    def _expand(self, record: str, matchers: list[tuple[str, str, str]]) -> str:
        variants = self._rules[record]
        rule_labels = {name for rule in variants for name in rule.labels}
        chosen = [
            rule
            for rule in variants
            if all(
                _holds(rule.labels.get(name, ""), op, value)
                for name, op, value in matchers
                if name in rule_labels
            )
        ]
        passed = [m for m in matchers if m[0] not in rule_labels]
        parts = []
        for rule in chosen:
            expr = self.inline(self._push(rule.expr, passed), passed)
            for name, value in rule.labels.items():
                expr = f'label_replace({expr}, "{name}", "{value}", "", "")'
            parts.append(expr)
        return "(" + " or ".join(parts) + ")" if parts else "vector(0) < 0"

    @staticmethod
    def _push(expr: str, matchers: Sequence[tuple[str, str, str]]) -> str:
        """Adds `matchers` to the scraped selectors of `expr` that carry those labels."""
        if not matchers:
            return expr

        def add(match: re.Match[str]) -> str:
            body = match.group(2)
            if _EXPORTER_JOB in body:
                extra = list(matchers)
            elif _KSM_JOB in body:
                extra = [m for m in matchers if m[0] in _KSM_SHARED]
            else:
                return match.group(0)
            return f"{match.group(1)}{{{body}, {_format(extra)}}}" if extra else match.group(0)

        return _SELECTOR.sub(add, expr)

"""Derives another flavour's hand-written files from the default flavour's: the runbook, and the
promtool unit tests of the rules, so both flavours are tested on the same cases.

What changes from one profile to another: DCGM family names (also inside recorded names), the
host label, runbook links, and the values of families whose unit changes (input series, and the
expected samples of series recorded from them), converted with dcgm_compat's table.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dcgm_units import classic_to_profile, metric_of, number, plain, rename

_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_ROUNDED = re.compile(r"^\s*round\(")
# promtool's expanding notation: `a`, `axn`, `a+bxn`, `a-bxn`; `_`, `_xn` and `stale` hold no value.
_NUMBER = r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?"
_VALUE = re.compile(
    rf"^(?P<start>{_NUMBER})(?:(?P<sign>[+-])(?P<step>{_NUMBER}))?(?:x(?P<count>\d+))?$"
)


class Translator:
    """From the default flavour's spelling (`source`, classic names) to `target`'s."""

    def __init__(self, source: BundleConfig, target: BundleConfig) -> None:
        if source.profile.base_units:
            raise ValueError("translations start from a flavour with classic names")
        self.source, self.target = source, target

    # ---- names ----
    def _token(self, token: str) -> str:
        if token == self.source.host_label:
            return self.target.host_label
        return rename(self.target.profile, token)

    def text(self, text: str) -> str:
        """Every metric, recorded-series and host-label name in `text`, as `target` spells it."""
        text = _IDENTIFIER.sub(lambda m: self._token(m.group(0)), text)
        source_url = self.source.runbook_url_pattern.split("%s")[0]
        return text.replace(source_url, self.target.runbook_url_pattern.split("%s")[0])

    # ---- values ----
    def factor(self, series: str) -> Fraction:
        """What a value of this (classic) series is multiplied by in `target`'s unit."""
        name = _IDENTIFIER.match(series)
        if name is None:
            return Fraction(1)
        return classic_to_profile(self.target.profile, metric_of(name.group(0)))

    @staticmethod
    def values(values: str, factor: Fraction) -> str:
        if factor == 1:
            return values

        def scale(token: str) -> str:
            match = _VALUE.match(token)
            if match is None:
                return token
            start = Fraction(match["start"]) * factor
            if match["step"] is None:
                count = "" if match["count"] is None else "x" + match["count"]
                return number(start) + count
            # promtool adds the step up in floats (0.1 * 15 -> 1.5000000000000002): spelling
            # each value out keeps the expected samples exact.
            step = Fraction(match["step"]) * factor * (-1 if match["sign"] == "-" else 1)
            steps = int(match["count"] or 0)
            return " ".join(number(start + step * i) for i in range(steps + 1))

        return " ".join(scale(token) for token in values.split())

    # ---- promtool unit-test documents ----
    def tests(self, document: dict[str, Any]) -> dict[str, Any]:
        out = dict(document)
        out["tests"] = [self._test(test) for test in document.get("tests", [])]
        return out

    def _test(self, test: dict[str, Any]) -> dict[str, Any]:
        out = {key: self._any(value) for key, value in test.items()}
        if "name" in test:
            out["name"] = test["name"]
        out["input_series"] = [
            {
                **series,
                "series": self.text(series["series"]),
                "values": self.values(str(series["values"]), self.factor(series["series"])),
            }
            for series in test.get("input_series", [])
        ]
        if "promql_expr_test" in test:
            out["promql_expr_test"] = [self._expr_test(case) for case in test["promql_expr_test"]]
        return out

    def _expr_test(self, case: dict[str, Any]) -> dict[str, Any]:
        out = {key: self._any(value) for key, value in case.items()}
        samples = []
        for sample in case.get("exp_samples") or []:
            labels = str(sample.get("labels", ""))
            # A sample named by its labels' metric, or else by the expression it answers (under
            # a rounding, which tests use where float sums depend on series order).
            answered = _ROUNDED.sub("", case["expr"])
            factor = self.factor(labels if _IDENTIFIER.match(labels) else answered)
            translated = {**sample, "labels": self.text(labels)}
            if "value" in sample:
                translated["value"] = plain(Fraction(str(sample["value"])) * factor)
            samples.append(translated)
        if "exp_samples" in case:
            out["exp_samples"] = samples
        return out

    def _any(self, value: Any) -> Any:
        """Names in strings and mapping keys (exp_labels), everywhere in a test."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self._key(k): self._any(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._any(v) for v in value]
        return value

    def _key(self, key: Any) -> Any:
        return self._token(key) if isinstance(key, str) else key

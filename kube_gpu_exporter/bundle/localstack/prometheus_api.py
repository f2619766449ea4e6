"""The few Prometheus HTTP API calls the local stack needs, over plain urllib."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any


class PrometheusAPIError(RuntimeError):
    pass


class PrometheusAPI:
    def __init__(self, base_url: str, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(
            [(k, v) for k, vs in params.items() for v in (vs if isinstance(vs, list) else [vs])]
        )
        url = f"{self.base_url}{path}?{query}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            body = json.loads(exc.read() or b"{}")
            raise PrometheusAPIError(f"{path}: {body.get('error', exc)}") from None
        if body.get("status") != "success":
            raise PrometheusAPIError(f"{path}: {body.get('error', body)}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        data = self._get("/api/v1/query", query=expr, time=at if at is not None else time.time())
        return data["result"] if data["resultType"] in ("vector", "matrix") else [data]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        data = self._get("/api/v1/query_range", query=expr, start=start, end=end, step=step)
        return data["result"]

    def series(self, match: str, start: float | None = None) -> list[dict[str, str]]:
        params: dict[str, Any] = {"match[]": match}
        if start is not None:
            params["start"] = start
        return self._get("/api/v1/series", **params)

    def label_values(self, label: str, match: str, start: float | None = None) -> list[str]:
        """What Grafana's `label_values(match, label)` lists."""
        return sorted({s[label] for s in self.series(match, start) if s.get(label)})

    def targets(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/targets")["activeTargets"]

    def rule_groups(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/rules")["groups"]

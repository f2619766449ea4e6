"""An Alertmanager webhook receiver: records every notification and lets a caller wait for one.

Alertmanager's webhook payload (version 4) carries `status` and `alerts`, each alert with its own
`status` ("firing" or "resolved"), `labels`, `annotations`, `startsAt` and `endsAt`.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Alert = dict[str, Any]
MAX_BODY_BYTES = 4 << 20


class AlertWebhook:
    def __init__(
        self, host: str, port: int, on_alert: Callable[[Alert], None] | None = None
    ) -> None:
        self._alerts: list[Alert] = []
        self._changed = threading.Condition()
        self._on_alert = on_alert
        self._server = ThreadingHTTPServer((host, port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="alert-webhook", daemon=True
        )

    @property
    def url(self) -> str:
        # The bound address, as server_address holds it, but typed as a TCP socket's (host, port).
        host, port = self._server.socket.getsockname()[:2]
        return f"http://{host}:{port}/alerts"

    def start(self) -> AlertWebhook:
        self._thread.start()
        return self

    def stop(self) -> None:
        # shutdown() waits for serve_forever() to return, forever if it never ran.
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()

    def alerts(self) -> list[Alert]:
        with self._changed:
            return list(self._alerts)

    def wait_for(
        self, predicate: Callable[[Alert], bool], timeout: float, after: int = 0
    ) -> Alert | None:
        """The first alert received (from index `after` on) that satisfies `predicate`."""
        with self._changed:
            found: list[Alert] = []

            def seen() -> bool:
                found.extend(a for a in self._alerts[after:] if predicate(a))
                return bool(found)

            self._changed.wait_for(seen, timeout)
            return found[0] if found else None

    def _record(self, payload: dict[str, Any]) -> None:
        alerts = payload.get("alerts")
        if not isinstance(alerts, list):
            return
        with self._changed:
            self._alerts.extend(a for a in alerts if isinstance(a, dict))
            self._changed.notify_all()
        if self._on_alert:
            for alert in alerts:
                self._on_alert(alert)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 < length <= MAX_BODY_BYTES:
                    self.send_error(400, "expected a JSON body up to 4 MiB")
                    return
                try:
                    payload = json.loads(self.rfile.read(length))
                except ValueError:
                    self.send_error(400, "body is not JSON")
                    return
                webhook._record(payload if isinstance(payload, dict) else {})
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass  # Alertmanager posts often; the stack's own output says what matters.

        return Handler

"""The demo's own words: the banner's URLs follow what the started binaries serve, alert lines
tell alerts apart, repeats are not printed twice, and bad ports are one line before anything
starts."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kube_gpu_exporter.bundle.localstack.__main__ import (
    AlertPrinter,
    DemoFacts,
    WebPages,
    alert_line,
    answers_directly,
    banner,
    detect_web_pages,
    port_problem,
)
from kube_gpu_exporter.bundle.localstack.configs import FAST
from kube_gpu_exporter.bundle.localstack.stack import Ports, alertmanager_flags, prometheus_flags
from kube_gpu_exporter.bundle.localstack.webhook import AlertWebhook

FACTS = DemoFacts(
    exporter="http://127.0.0.1:9455",
    prometheus="http://127.0.0.1:9090",
    alertmanager="http://127.0.0.1:9093",
    node_name="sim-gpu-node-0",
    dcgm_version="4.8.3",
    workdir=Path("/tmp/demo"),
    fast_alerts=False,
)
DEBIAN = WebPages(
    prometheus_alerts="/classic/alerts", prometheus_query="/classic/graph", alertmanager_ui=False
)
UPSTREAM = WebPages(prometheus_alerts="/alerts", prometheus_query="/graph", alertmanager_ui=True)


def _table(text: str) -> dict[str, str]:
    """The banner's `  Name   where` rows; the indented curl examples are not rows."""
    rows = (line.strip() for line in text.splitlines() if line.startswith("  "))
    return dict(re.split(r"\s{2,}", row, maxsplit=1) for row in rows if not row.startswith("curl "))


def test_banner_on_debian_builds_prints_classic_pages_and_the_alertmanager_api() -> None:
    text = banner(FACTS, DEBIAN)
    table = _table(text)
    assert table["Prometheus alerts"] == "http://127.0.0.1:9090/classic/alerts"
    assert table["Prometheus queries"] == "http://127.0.0.1:9090/classic/graph"
    assert table["Alertmanager alerts"].startswith("curl -s http://127.0.0.1:9093/api/v2/alerts")
    assert "http://127.0.0.1:9090/alerts" not in text
    assert "/#/alerts" not in text


def test_banner_on_builds_with_web_uis_links_them() -> None:
    table = _table(banner(FACTS, UPSTREAM))
    assert table["Prometheus alerts"] == "http://127.0.0.1:9090/alerts"
    assert table["Alertmanager alerts"] == "http://127.0.0.1:9093/#/alerts"


def test_banner_without_any_prometheus_page_gives_the_api() -> None:
    table = _table(banner(FACTS, WebPages()))
    assert table["Prometheus alerts"].startswith("curl -s http://127.0.0.1:9090/api/v1/alerts")
    assert "Prometheus queries" not in table


def test_banner_names_the_fastest_way_to_an_alert() -> None:
    slow = banner(FACTS, DEBIAN)
    assert "make demo ARGS=--fast-alerts" in slow
    assert "curl -X POST -d '{\"xid\": 79}' http://127.0.0.1:9455/-/simulator/gpus/0/xid" in slow
    fast = banner(DemoFacts(**{**_fields(FACTS), "fast_alerts": True}), DEBIAN)
    assert "restart with --fast-alerts" not in fast
    assert "inject XID 79" in fast


def _fields(facts: DemoFacts) -> dict[str, Any]:
    return {name: getattr(facts, name) for name in DemoFacts.__slots__}


def test_detection_takes_the_first_page_that_answers() -> None:
    answering = {
        "http://p/classic/alerts",
        "http://p/graph",
        "http://p/classic/graph",
    }
    asked: list[str] = []

    def answers(url: str) -> bool:
        asked.append(url)
        return url in answering

    pages = detect_web_pages("http://p", "http://a", answers)
    assert pages == WebPages("/classic/alerts", "/graph", alertmanager_ui=False)
    assert "http://a/script.js" in asked


class _DebianLikePrometheus(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/classic/alerts":
            self.send_response(200)
        elif self.path == "/graph":
            self.send_response(302)
            self.send_header("Location", "/classic/alerts")
        else:
            self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def debian_like_prometheus() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DebianLikePrometheus)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_page_that_only_redirects_or_is_missing_does_not_count(debian_like_prometheus) -> None:
    base = debian_like_prometheus
    assert answers_directly(f"{base}/classic/alerts")
    assert not answers_directly(f"{base}/alerts")
    assert not answers_directly(f"{base}/graph")
    pages = detect_web_pages(base, base)
    assert pages == WebPages(prometheus_alerts="/classic/alerts")


def _alert(clock_event: str, status: str = "firing", fingerprint: str = "") -> dict[str, Any]:
    return {
        "status": status,
        "fingerprint": fingerprint or f"fp-{clock_event}",
        "labels": {
            "alertname": "GPUThermalSlowdown",
            "severity": "warning",
            "cluster": "local",
            "hostname": "sim-gpu-node-0",
            "gpu": "1",
            "UUID": "GPU-9e54a891",
            "clock_event": clock_event,
        },
        "annotations": {"summary": "A GPU is slowed down by heat."},
    }


def test_alert_lines_show_the_labels_that_tell_alerts_apart() -> None:
    hw, sw = alert_line(_alert("hw_thermal"), "hostname"), alert_line(_alert("sw_thermal"))
    assert hw == (
        "[firing  ] GPUThermalSlowdown (warning) hostname=sim-gpu-node-0 gpu=1 "
        "clock_event=hw_thermal: A GPU is slowed down by heat."
    )
    assert hw != sw
    assert "clock_event=sw_thermal" in sw
    assert "UUID" not in hw and "cluster" not in hw


def test_the_printer_prints_each_alert_once_per_status() -> None:
    lines: list[str] = []
    printer = AlertPrinter("hostname", lines.append)
    # Alertmanager resends the whole group when a second alert joins it.
    for notification in (
        [_alert("hw_thermal")],
        [_alert("hw_thermal"), _alert("sw_thermal")],
        [_alert("hw_thermal", "resolved"), _alert("sw_thermal")],
    ):
        for alert in notification:
            printer(alert)
    assert len(lines) == 3
    assert "clock_event=hw_thermal" in lines[0] and lines[0].startswith("[firing")
    assert "clock_event=sw_thermal" in lines[1] and lines[1].startswith("[firing")
    assert "clock_event=hw_thermal" in lines[2] and lines[2].startswith("[resolved")


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_port_in_use_is_one_line_naming_the_option(taken_port: int) -> None:
    problem = port_problem("127.0.0.1", Ports(prometheus=taken_port))
    assert problem is not None and "\n" not in problem
    assert problem.startswith(f"--prometheus-port: 127.0.0.1:{taken_port} is already in use")


def test_free_and_any_ports_pass() -> None:
    assert port_problem("127.0.0.1", Ports()) is None


@pytest.mark.parametrize(
    ("ports", "expected"),
    [
        (Ports(prometheus=9093, alertmanager=9093), "--prometheus-port and --alertmanager-port"),
        (Ports(webhook=70000), "--webhook-port=70000: not a TCP port"),
        (Ports(exporter=-1), "--exporter-port=-1: not a TCP port"),
    ],
)
def test_bad_port_choices_are_named(ports: Ports, expected: str) -> None:
    problem = port_problem("127.0.0.1", ports, taken=lambda host, port: False)
    assert problem is not None and problem.startswith(expected)


def test_a_host_that_does_not_resolve_is_named() -> None:
    problem = port_problem("nosuch.invalid", Ports())
    assert problem is not None and problem.startswith("--host=nosuch.invalid: ")


def test_generator_and_external_urls_use_the_printed_address(tmp_path: Path) -> None:
    assert "--web.external-url=http://127.0.0.1:9090" in prometheus_flags(
        tmp_path, "127.0.0.1:9090", FAST
    )
    assert "--web.external-url=http://127.0.0.1:9093" in alertmanager_flags(
        tmp_path, "127.0.0.1:9093"
    )


def test_a_webhook_never_started_stops_at_once() -> None:
    webhook = AlertWebhook("127.0.0.1", 0)
    stopper = threading.Thread(target=webhook.stop, daemon=True)
    stopper.start()
    stopper.join(timeout=5)
    assert not stopper.is_alive(), "stop() hung on a webhook that never served"

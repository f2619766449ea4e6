"""`make demo`: the exporter on its simulated node, a real Prometheus with the bundle's scrape
config and rules, and a real Alertmanager, on loopback until Ctrl-C. Alerts print as they arrive.

    python -m kube_gpu_exporter.bundle.localstack [--compat.dcgm-exporter V] [--fast-alerts]
                                                  [--workdir DIR] [--host H] [--*-port N]

--compat.dcgm-exporter picks the bundle flavour and runs the exporter with the same profile.
A start-up failure (a port in use, a missing binary) prints one line and exits with status 2.
"""

from __future__ import annotations

import argparse
import errno
import signal
import socket
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from kube_gpu_exporter.bundle.localstack.configs import FAST, PRODUCTION, quick_alerts
from kube_gpu_exporter.bundle.localstack.processes import StackError
from kube_gpu_exporter.bundle.localstack.stack import LocalStack, Ports
from kube_gpu_exporter.bundle.localstack.webhook import Alert

DEFAULT_PORTS = Ports(exporter=9455, prometheus=9090, alertmanager=9093, webhook=9096)
STARTUP_FAILURE = 2

# Candidate pages, newest UI first: Prometheus 3 serves /query, 2.x's React UI /graph and
# /alerts, and Debian's build only the classic pages under /classic/.
PROMETHEUS_ALERT_PAGES = ("/alerts", "/classic/alerts")
PROMETHEUS_QUERY_PAGES = ("/query", "/graph", "/classic/graph")
# Served only by an Alertmanager built with its web UI; Debian's has none, only the API.
ALERTMANAGER_UI_ASSET = "/script.js"

# Shown in their own place on the line, or the same on every alert of the demo, or a long form
# of what `gpu` already says.
LABELS_NOT_LISTED = frozenset({"alertname", "severity", "cluster", "UUID"})


@dataclass(frozen=True, slots=True)
class WebPages:
    """Which web pages the started Prometheus and Alertmanager serve: paths, or None."""

    prometheus_alerts: str | None = None
    prometheus_query: str | None = None
    alertmanager_ui: bool = False


@dataclass(frozen=True, slots=True)
class DemoFacts:
    """What the banner tells: base URLs of the running parts and how the demo was started."""

    exporter: str
    prometheus: str
    alertmanager: str
    node_name: str
    dcgm_version: str
    workdir: Path
    fast_alerts: bool


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # A page that only redirects is not the page to print.


_OPENER = urllib.request.build_opener(_NoRedirects)


def answers_directly(url: str, timeout: float = 2.0) -> bool:
    """True if `url` answers 200 itself, without a redirect."""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def detect_web_pages(
    prometheus: str, alertmanager: str, answers: Callable[[str], bool] = answers_directly
) -> WebPages:
    """Probes the running binaries, since packaged builds differ in the UIs they carry."""

    def first(base: str, paths: tuple[str, ...]) -> str | None:
        return next((path for path in paths if answers(base + path)), None)

    return WebPages(
        prometheus_alerts=first(prometheus, PROMETHEUS_ALERT_PAGES),
        prometheus_query=first(prometheus, PROMETHEUS_QUERY_PAGES),
        alertmanager_ui=answers(alertmanager + ALERTMANAGER_UI_ASSET),
    )


def alert_line(alert: Alert, host_label: str = DEFAULT.host_label) -> str:
    """One line per alert, with every label that tells it from its neighbours (host and GPU
    first), so that e.g. two GPUThermalSlowdown alerts differing in clock_event read apart."""
    labels = alert.get("labels") or {}
    first = [key for key in (host_label, "gpu") if labels.get(key)]
    rest = sorted(
        key for key, value in labels.items() if value and key not in {*first, *LABELS_NOT_LISTED}
    )
    where = " ".join(f"{key}={labels[key]}" for key in [*first, *rest])
    summary = (alert.get("annotations") or {}).get("summary", "")
    return (
        f"[{alert.get('status', '?'):8}] {labels.get('alertname')} "
        f"({labels.get('severity')}) {where}: {summary}"
    )


class AlertPrinter:
    """Prints an alert when it first arrives and when its status changes. Alertmanager resends
    every alert of a group whenever the group changes; those repeats are not news."""

    def __init__(
        self, host_label: str = DEFAULT.host_label, write: Callable[[str], None] | None = None
    ) -> None:
        self._host_label = host_label
        self._write = write or (lambda line: print(line, flush=True))
        self._status: dict[object, str] = {}
        self._lock = threading.Lock()  # The webhook serves each POST on a thread of its own.

    def __call__(self, alert: Alert) -> None:
        labels = alert.get("labels") or {}
        key = alert.get("fingerprint") or tuple(sorted(labels.items()))
        status = str(alert.get("status", "?"))
        with self._lock:
            if self._status.get(key) == status:
                return
            self._status[key] = status
            self._write(alert_line(alert, self._host_label))


def _page_lines(facts: DemoFacts, pages: WebPages) -> list[tuple[str, str]]:
    prometheus, alertmanager = facts.prometheus, facts.alertmanager
    lines = [
        ("Exporter metrics", f"{facts.exporter}/metrics"),
        ("Simulator control", f"{facts.exporter}/-/simulator/gpus"),
    ]
    if pages.prometheus_alerts:
        lines.append(("Prometheus alerts", prometheus + pages.prometheus_alerts))
    else:
        lines.append(("Prometheus alerts", f"curl -s {prometheus}/api/v1/alerts   (no web UI)"))
    if pages.prometheus_query:
        lines.append(("Prometheus queries", prometheus + pages.prometheus_query))
    if pages.alertmanager_ui:
        lines.append(("Alertmanager alerts", f"{alertmanager}/#/alerts"))
    else:
        lines.append(
            (
                "Alertmanager alerts",
                f"curl -s {alertmanager}/api/v2/alerts   (this build has no web UI)",
            )
        )
    lines.append(("Files and logs", str(facts.workdir)))
    return lines


def _fastest_alert(facts: DemoFacts) -> str:
    if facts.fast_alerts:
        return (
            "Fastest way to see an alert: inject XID 79 (the first curl below); GPUXidCritical\n"
            "prints here within about 10 seconds."
        )
    return (
        "Fastest way to see an alert: restart with --fast-alerts (make demo ARGS=--fast-alerts),\n"
        "then inject XID 79 (the first curl below): its alert prints within about 10 seconds.\n"
        "With the production rules it takes one to two minutes."
    )


def banner(facts: DemoFacts, pages: WebPages) -> str:
    exporter, prometheus = facts.exporter, facts.prometheus
    dashboards = flavour_paths(facts.dcgm_version).grafana_com[0].parent
    timing = (
        "fast alerts: every `for` 5s, windows 15s, scrapes every 1s"
        if facts.fast_alerts
        else "production rules and `for` durations"
    )
    width = max(len(name) for name, _ in _page_lines(facts, pages)) + 2
    table = "\n".join(f"  {name:{width}}{where}" for name, where in _page_lines(facts, pages))
    return f"""
kube-gpu-exporter demo: simulated node {facts.node_name}, {timing}.
Series, rules and dashboards as of dcgm-exporter {facts.dcgm_version} (--compat.dcgm-exporter).

{table}

Grafana: add a Prometheus data source with URL {prometheus} (from Grafana in a container,
use the host's address instead of 127.0.0.1 and start the demo with --host 0.0.0.0), then
import {dashboards}/*.json and pick that data source.

{_fastest_alert(facts)}

Inject a fault, e.g. XID 79 on GPU 0, overheating GPU 1, or lose GPU 2:
  curl -X POST -d '{{"xid": 79}}' {exporter}/-/simulator/gpus/0/xid
  curl -X POST -d '{{"offset_celsius": 40}}' {exporter}/-/simulator/gpus/1/temperature
  curl -X POST {exporter}/-/simulator/gpus/2/lose

Alerts print below as Alertmanager delivers them. Ctrl-C stops everything.
"""


def port_taken(host: str, port: int) -> bool:
    """True if a server could not listen on `host`:`port` now. SO_REUSEADDR as servers set it,
    so a port left in TIME_WAIT by a previous run does not count as taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def port_problem(
    host: str, ports: Ports, taken: Callable[[str, int], bool] = port_taken
) -> str | None:
    """One line naming the first option whose port cannot be used, or None. Checked before
    anything starts, so the answer names the option instead of a child's log."""
    chosen = {part: getattr(ports, part) for part in Ports.__slots__}
    seen: dict[int, str] = {}
    for part, port in chosen.items():
        if port == 0:
            continue
        if not 0 < port < 65536:
            return f"--{part}-port={port}: not a TCP port (1-65535, or 0 for any free one)"
        if port in seen:
            return f"--{seen[port]}-port and --{part}-port are both {port}"
        seen[port] = part
    try:
        socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError as exc:
        return f"--host={host}: {exc.strerror or exc}"
    for part, port in chosen.items():
        try:
            if port and taken(host, port):
                return (
                    f"--{part}-port: {host}:{port} is already in use; "
                    f"pass --{part}-port=N (0 picks a free one)"
                )
        except OSError as exc:
            return f"--{part}-port: cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def bundle_config(version: str, fast_alerts: bool) -> BundleConfig:
    """The flavour of the bundle for a dcgm-exporter profile, shortened for --fast-alerts."""
    config = FLAVOURS[version]
    return quick_alerts(config) if fast_alerts else config


def facts_of(stack: LocalStack, fast_alerts: bool) -> DemoFacts:
    urls: Mapping[str, str] = {part: stack.url(part) for part in Ports.__slots__}
    return DemoFacts(
        exporter=urls["exporter"],
        prometheus=urls["prometheus"],
        alertmanager=urls["alertmanager"],
        node_name=stack.node_name,
        dcgm_version=stack.config.dcgm_version,
        workdir=stack.workdir,
        fast_alerts=fast_alerts,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compat.dcgm-exporter",
        dest="dcgm_version",
        choices=sorted(FLAVOURS),
        default=DEFAULT.dcgm_version,
        help=f"bundle flavour and exporter profile (default {DEFAULT.dcgm_version})",
    )
    parser.add_argument(
        "--fast-alerts",
        action="store_true",
        help="every `for` 5s and scrapes every second: an injected fault alerts within seconds",
    )
    parser.add_argument("--workdir", type=Path, help="keep configs, data and logs here")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    for part in Ports.__slots__:
        parser.add_argument(
            f"--{part}-port",
            type=int,
            default=getattr(DEFAULT_PORTS, part),
            metavar="N",
            help=f"(default {getattr(DEFAULT_PORTS, part)}; 0 picks a free one)",
        )
    args = parser.parse_args(argv)
    ports = Ports(**{part: getattr(args, f"{part}_port") for part in Ports.__slots__})
    if problem := port_problem(args.host, ports):
        print(f"demo: {problem}", file=sys.stderr)
        return STARTUP_FAILURE
    config = bundle_config(args.dcgm_version, args.fast_alerts)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with tempfile.TemporaryDirectory(prefix="kube-gpu-demo-") as tmp:
        try:
            stack = LocalStack(
                args.workdir or Path(tmp),
                config,
                FAST if args.fast_alerts else PRODUCTION,
                ports,
                host=args.host,
                # The simulated cluster's pods, owners and node labels, from the exporter's
                # built-in fake API: what enrichment adds, without a cluster.
                exporter_args=("--kubernetes",),
                on_alert=AlertPrinter(config.host_label),
            )
            stack.start()
            # The banner invites injecting an XID at once; one sent earlier would be lost.
            stack.wait_for_xid_watch()
        except (StackError, OSError) as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return STARTUP_FAILURE
        try:
            facts = facts_of(stack, args.fast_alerts)
            pages = detect_web_pages(facts.prometheus, facts.alertmanager)
            print(banner(facts, pages), flush=True)
            stopping.wait()
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

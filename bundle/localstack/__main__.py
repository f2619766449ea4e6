"""`make demo`: the exporter on its simulated node, a real Prometheus with the bundle's scrape
config and rules, and a real Alertmanager, on loopback until Ctrl-C. Alerts print as they arrive.

    python -m bundle.localstack [--compat.dcgm-exporter V] [--fast-alerts] [--workdir DIR]
                                [--host H] [--*-port N]

--compat.dcgm-exporter picks the bundle flavour and runs the exporter with the same profile.
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import threading
from pathlib import Path

from bundle.config import DEFAULT, BundleConfig
from bundle.flavours import FLAVOURS, flavour_paths
from bundle.localstack.configs import FAST, PRODUCTION, quick_alerts
from bundle.localstack.processes import StackError
from bundle.localstack.stack import LocalStack, Ports
from bundle.localstack.webhook import Alert

DEFAULT_PORTS = Ports(exporter=9455, prometheus=9090, alertmanager=9093, webhook=9096)


def print_alert(alert: Alert, host_label: str = DEFAULT.host_label) -> None:
    labels = alert.get("labels", {})
    where = " ".join(
        f"{k}={labels[k]}" for k in (host_label, "node", "gpu", "xid", "pod") if labels.get(k)
    )
    summary = alert.get("annotations", {}).get("summary", "")
    print(
        f"[{alert.get('status', '?'):8}] {labels.get('alertname')} "
        f"({labels.get('severity')}) {where}: {summary}",
        flush=True,
    )


def banner(stack: LocalStack, fast: bool) -> str:
    exporter, prometheus = stack.url("exporter"), stack.url("prometheus")
    version = stack.config.dcgm_version
    dashboards = flavour_paths(version).grafana_com[0].parent
    timing = (
        "fast alerts: every `for` 5s, windows 15s, scrapes every 1s"
        if fast
        else "production rules and `for` durations (add ARGS=--fast-alerts to see alerts quickly)"
    )
    return f"""
kube-gpu-exporter demo: simulated node {stack.node_name}, {timing}.
Series, rules and dashboards as of dcgm-exporter {version} (--compat.dcgm-exporter).

  Exporter metrics    {exporter}/metrics
  Simulator control   {exporter}/-/simulator/gpus
  Prometheus          {prometheus}   (alerts: {prometheus}/alerts)
  Alertmanager        {stack.url("alertmanager")}
  Files and logs      {stack.workdir}

Grafana: add a Prometheus data source with URL {prometheus} (from Grafana in a container,
use the host's address instead of 127.0.0.1 and start the demo with --host 0.0.0.0), then
import {dashboards}/*.json and pick that data source.

Inject a fault, e.g. XID 79 on GPU 0, overheating GPU 1, or lose GPU 2:
  curl -X POST -d '{{"xid": 79}}' {exporter}/-/simulator/gpus/0/xid
  curl -X POST -d '{{"offset_celsius": 40}}' {exporter}/-/simulator/gpus/1/temperature
  curl -X POST {exporter}/-/simulator/gpus/2/lose

Alerts print below as Alertmanager delivers them. Ctrl-C stops everything.
"""


def bundle_config(version: str, fast_alerts: bool) -> BundleConfig:
    """The flavour of the bundle for a dcgm-exporter profile, shortened for --fast-alerts."""
    config = FLAVOURS[version]
    return quick_alerts(config) if fast_alerts else config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--compat.dcgm-exporter",
        dest="dcgm_version",
        choices=sorted(FLAVOURS),
        default=DEFAULT.dcgm_version,
        help=f"bundle flavour and exporter profile (default {DEFAULT.dcgm_version})",
    )
    parser.add_argument("--fast-alerts", action="store_true", help="short `for` and intervals")
    parser.add_argument("--workdir", type=Path, help="keep configs, data and logs here")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default loopback)")
    for part in Ports.__slots__:
        parser.add_argument(
            f"--{part}-port", type=int, default=getattr(DEFAULT_PORTS, part), metavar="N"
        )
    args = parser.parse_args(argv)
    ports = Ports(**{part: getattr(args, f"{part}_port") for part in Ports.__slots__})
    config = bundle_config(args.dcgm_version, args.fast_alerts)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    with tempfile.TemporaryDirectory(prefix="kube-gpu-demo-") as tmp:
        stack = LocalStack(
            args.workdir or Path(tmp),
            config,
            FAST if args.fast_alerts else PRODUCTION,
            ports,
            host=args.host,
            on_alert=lambda alert: print_alert(alert, config.host_label),
        )
        try:
            stack.start()
        except (StackError, OSError) as exc:
            print(f"demo: {exc}", file=sys.stderr)
            return 1
        try:
            print(banner(stack, args.fast_alerts), flush=True)
            stopping.wait()
        finally:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

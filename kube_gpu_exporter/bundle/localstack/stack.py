"""The whole stack on loopback, as a user would run it: the exporter on its simulated node, a real
Prometheus with the bundle's static scrape config and rules, and a real Alertmanager that posts
to a webhook. `make demo` and the end-to-end tests start this same class."""

from __future__ import annotations

import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.bundle.localstack.configs import (
    PRODUCTION,
    Timing,
    alertmanager_config,
    exporter_flags,
    prometheus_config,
    write_rule_files,
)
from kube_gpu_exporter.bundle.localstack.processes import (
    ChildProcess,
    StackError,
    find_binary,
    free_port,
    start_in_order,
    stop_in_reverse,
)
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI
from kube_gpu_exporter.bundle.localstack.simulator_control import SimulatorControl
from kube_gpu_exporter.bundle.localstack.webhook import Alert, AlertWebhook

XID_WATCHED = '\nkube_gpu_exporter_collector_success{collector="xid"} 1\n'


def _fetch_text(url: str, timeout: float = 5.0) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return str(response.read().decode(errors="replace"))
    except OSError:
        return ""


@dataclass(frozen=True, slots=True)
class Ports:
    """0 picks a free port."""

    exporter: int = 0
    prometheus: int = 0
    alertmanager: int = 0
    webhook: int = 0


ANY_PORTS = Ports()


@dataclass(frozen=True, slots=True)
class CompanionExporter:
    """Another simulated exporter beside the stack's own, e.g. under another dcgm-exporter
    profile. Prometheus scrapes it under a job of its own, which the bundle's rules and
    dashboards (they select the bundle's job) never read."""

    job: str
    args: tuple[str, ...] = ()
    # Scraped as this job instead (a relabel of `job`), so the bundle's rules read it as one more
    # node of the cluster, e.g. a DRA node beside a device-plugin node.
    as_job: str = ""


def simulated_exporter(
    name: str, address: str, timing: Timing, log: Path, extra_args: Sequence[str] = ()
) -> ChildProcess:
    """The exporter on its built-in simulated node, ready once it has a snapshot."""
    return ChildProcess(
        name,
        [
            sys.executable,
            "-m",
            "kube_gpu_exporter",
            "--simulate",
            f"--web.listen-address={address}",
            f"--collector.interval={timing.collector_interval}",
            *extra_args,
        ],
        log,
        f"http://{address}/readyz",
    )


def alertmanager_flags(workdir: Path, address: str) -> list[str]:
    return [
        f"--config.file={workdir / 'alertmanager.yml'}",
        f"--storage.path={workdir / 'alertmanager-data'}",
        f"--web.listen-address={address}",
        # Otherwise links in notifications name the machine's host name, not the address printed.
        f"--web.external-url=http://{address}",
        "--cluster.listen-address=",  # one instance: no gossip port
        "--log.level=warn",
    ]


def alertmanager(workdir: Path, address: str) -> ChildProcess:
    """One Alertmanager reading `workdir`/alertmanager.yml."""
    return ChildProcess(
        "alertmanager",
        [
            find_binary(
                "prometheus-alertmanager", "alertmanager", package="prometheus-alertmanager"
            ),
            *alertmanager_flags(workdir, address),
        ],
        workdir / "alertmanager.log",
        f"http://{address}/-/ready",
    )


def prometheus_flags(workdir: Path, address: str, timing: Timing) -> list[str]:
    return [
        f"--config.file={workdir / 'prometheus.yml'}",
        f"--storage.tsdb.path={workdir / 'prometheus-data'}",
        f"--web.listen-address={address}",
        # Alerts' generatorURL is built from this; by default it names the machine's host name,
        # which need not resolve, instead of the address the stack prints.
        f"--web.external-url=http://{address}",
        # Resend firing alerts at the evaluation pace, so Alertmanager hears of each change
        # without Prometheus' one-minute default delay.
        f"--rules.alert.resend-delay={timing.evaluation_interval}",
        "--log.level=warn",
    ]


class LocalStack:
    def __init__(
        self,
        workdir: Path,
        config: BundleConfig = DEFAULT,
        timing: Timing = PRODUCTION,
        ports: Ports = ANY_PORTS,
        host: str = "127.0.0.1",
        exporter_args: Sequence[str] = (),
        extra_jobs: Sequence[dict[str, Any]] = (),
        on_alert: Callable[[Alert], None] | None = None,
        companions: Sequence[CompanionExporter] = (),
        extra_rules: Mapping[str, str] | None = None,
    ) -> None:
        """`exporter_args` come after the flags `config` implies (its dcgm-exporter profile);
        `extra_rules` (file name -> rules YAML) load beside the bundle's rule files."""
        from kube_gpu_exporter.exporter.simulator.fleet import default_fleet

        self.workdir = workdir
        self.config = config
        self.timing = timing
        self.host = host
        self.node_name = default_fleet().node_name
        port = {name: getattr(ports, name) or free_port(host) for name in Ports.__slots__}
        self.addresses = {name: f"{host}:{p}" for name, p in port.items()}
        if clash := self.addresses.keys() & {c.job for c in companions}:
            raise ValueError(f"companion jobs must not be named like a part: {sorted(clash)}")
        self.addresses |= {c.job: f"{host}:{free_port(host)}" for c in companions}
        self.exporter = simulated_exporter(
            "exporter",
            self.addresses["exporter"],
            timing,
            workdir / "exporter.log",
            [*exporter_flags(config), *exporter_args],
        )
        self.companions = {
            c.job: simulated_exporter(
                f"exporter ({c.job})",
                self.addresses[c.job],
                timing,
                workdir / f"exporter-{c.job}.log",
                c.args,
            )
            for c in companions
        }
        self.alertmanager = alertmanager(workdir, self.addresses["alertmanager"])
        self.prometheus = ChildProcess(
            "prometheus",
            [
                find_binary("prometheus", package="prometheus"),
                *prometheus_flags(workdir, self.addresses["prometheus"], timing),
            ],
            workdir / "prometheus.log",
            f"{self.url('prometheus')}/-/ready",
        )
        self.api = PrometheusAPI(self.url("prometheus"))
        self.simulator = SimulatorControl(self.url("exporter"))
        self._extra_jobs = [
            *extra_jobs,
            *(
                {
                    "job_name": c.job,
                    "static_configs": [{"targets": [self.addresses[c.job]]}],
                    **(
                        {"relabel_configs": [{"target_label": "job", "replacement": c.as_job}]}
                        if c.as_job
                        else {}
                    ),
                }
                for c in companions
            ),
        ]
        self._extra_rules = dict(extra_rules or {})
        # Bound last: nothing above can then fail and leave its socket open.
        self.webhook = AlertWebhook(host, port["webhook"], on_alert)

    def url(self, part: str) -> str:
        return f"http://{self.addresses[part]}"

    def write_configs(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        rules = write_rule_files(self.config, self.workdir, self._extra_rules)
        (self.workdir / "prometheus.yml").write_text(
            prometheus_config(
                self.config,
                self.timing,
                {self.node_name: self.addresses["exporter"]},
                self.addresses["alertmanager"],
                rules,
                self._extra_jobs,
            )
        )
        (self.workdir / "alertmanager.yml").write_text(
            alertmanager_config(self.config, self.timing, self.webhook.url)
        )

    @property
    def _parts(self) -> list[ChildProcess]:
        # Receivers first, so the first scrape and the first alert find someone listening.
        return [self.alertmanager, self.exporter, *self.companions.values(), self.prometheus]

    def start(self) -> LocalStack:
        self.write_configs()
        self.webhook.start()
        try:
            start_in_order(self._parts)
        except BaseException:
            self.webhook.stop()
            raise
        return self

    def stop(self) -> None:
        stop_in_reverse(self._parts)
        self.webhook.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def wait_for_scrapes(self, timeout: float = 30.0) -> None:
        """Until every target has been scraped successfully at least once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            targets = self.api.targets()
            if targets and all(t["health"] == "up" for t in targets):
                return
            time.sleep(0.2)
        states = ", ".join(f"{t['scrapeUrl']} {t['health']} {t['lastError']}" for t in targets)
        raise StackError(f"targets not all up after {timeout:g}s: {states}")

    def wait_for_xid_watch(self, timeout: float = 30.0) -> None:
        """Until the exporter says it watches XID events. /readyz answers a few seconds before
        that, and an XID injected in between is never seen, as on a real GPU."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if XID_WATCHED in _fetch_text(f"{self.url('exporter')}/metrics"):
                return
            time.sleep(0.2)
        raise StackError(
            f"exporter not watching XID events after {timeout:g}s: {self.exporter.log_tail()}"
        )

    def gpus(self) -> list[dict[str, Any]]:
        """The simulated GPUs, with the pods that hold them, from the simulator's control API."""
        return self.simulator.gpus()

    def inject(self, gpu: int, action: str, /, **body: Any) -> dict[str, Any]:
        """POST a fault (or its cure) to the running simulator, e.g. inject(3, "xid", xid=79)."""
        return self.simulator.inject(gpu, action, **body)

"""Two clusters in one global view, the way Thanos, Mimir or VictoriaMetrics users run the bundle.

Each cluster is an exporter on its simulated node, scraped with the bundle's static scrape config
by a Prometheus in agent mode that names its cluster in `external_labels` and remote-writes to
one VictoriaMetrics. vmalert evaluates the bundle's recording and alert rules over that global
view, writes the recorded series back, and notifies a real Alertmanager that posts to a webhook.
Both simulated nodes carry the same node name, as nodes of two clusters often do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.localstack.configs import (
    RULE_FILES,
    Timing,
    alertmanager_config,
    exporter_flags,
    write_rule_files,
)
from kube_gpu_exporter.bundle.localstack.processes import (
    ChildProcess,
    find_binary,
    free_port,
    start_in_order,
    stop_in_reverse,
)
from kube_gpu_exporter.bundle.localstack.prometheus_api import PrometheusAPI
from kube_gpu_exporter.bundle.localstack.simulator_control import SimulatorControl
from kube_gpu_exporter.bundle.localstack.stack import alertmanager, simulated_exporter
from kube_gpu_exporter.bundle.localstack.webhook import AlertWebhook
from kube_gpu_exporter.bundle.scrape_configs import static_config

HOST = "127.0.0.1"


@dataclass
class Cluster:
    name: str
    exporter: ChildProcess
    agent: ChildProcess
    simulator: SimulatorControl


class GlobalView:
    def __init__(
        self, workdir: Path, config: BundleConfig, timing: Timing, clusters: tuple[str, ...]
    ) -> None:
        from kube_gpu_exporter.exporter.simulator.fleet import default_fleet

        self.workdir = workdir
        self.config = config
        self.timing = timing
        self.node_name = default_fleet().node_name
        self.vm_url = f"http://{HOST}:{free_port(HOST)}"
        self.api = PrometheusAPI(self.vm_url)
        self.webhook = AlertWebhook(HOST, free_port(HOST))
        self.victoria_metrics = ChildProcess(
            "victoria-metrics",
            [
                find_binary("victoria-metrics", package="victoria-metrics"),
                f"-storageDataPath={workdir / 'vm-data'}",
                f"-httpListenAddr={self.vm_url.removeprefix('http://')}",
                # Samples are queryable as soon as they land, not 30 s later.
                "-search.latencyOffset=0s",
                "-search.disableCache",
                "-loggerLevel=ERROR",
            ],
            workdir / "victoria-metrics.log",
            f"{self.vm_url}/health",
        )
        alertmanager_address = f"{HOST}:{free_port(HOST)}"
        self.alertmanager = alertmanager(workdir, alertmanager_address)
        vmalert = f"{HOST}:{free_port(HOST)}"
        self.vmalert = ChildProcess(
            "vmalert",
            [
                find_binary("vmalert", package="victoria-metrics"),
                *(f"-rule={path}" for path in self._rule_paths()),
                f"-datasource.url={self.vm_url}",
                f"-remoteWrite.url={self.vm_url}",
                f"-notifier.url=http://{alertmanager_address}",
                f"-evaluationInterval={timing.evaluation_interval}",
                f"-rule.resendDelay={timing.evaluation_interval}",
                f"-httpListenAddr={vmalert}",
                "-loggerLevel=ERROR",
            ],
            workdir / "vmalert.log",
            f"http://{vmalert}/health",
        )
        self.clusters = [self._cluster(name) for name in clusters]

    def _rule_paths(self) -> list[Path]:
        """Where `write_rule_files` puts the bundle's rule files."""
        return [self.workdir / Path(name).name for name in RULE_FILES]

    def _cluster(self, name: str) -> Cluster:
        exporter = f"{HOST}:{free_port(HOST)}"
        agent = f"{HOST}:{free_port(HOST)}"
        directory = self.workdir / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "agent.yml").write_text(self._agent_config(name, exporter))
        return Cluster(
            name,
            simulated_exporter(
                f"exporter ({name})",
                exporter,
                self.timing,
                directory / "exporter.log",
                exporter_flags(self.config),
            ),
            ChildProcess(
                f"prometheus agent ({name})",
                [
                    find_binary("prometheus", package="prometheus"),
                    "--enable-feature=agent",
                    f"--config.file={directory / 'agent.yml'}",
                    f"--storage.agent.path={directory / 'agent-data'}",
                    f"--web.listen-address={agent}",
                    "--log.level=warn",
                ],
                directory / "agent.log",
                f"http://{agent}/-/ready",
            ),
            SimulatorControl(f"http://{exporter}"),
        )

    def _agent_config(self, cluster: str, exporter: str) -> str:
        scrape = replace(
            self.config.scrape,
            interval=self.timing.scrape_interval,
            timeout=self.timing.scrape_timeout,
        )
        jobs = static_config(replace(self.config, scrape=scrape), {self.node_name: exporter})
        document: dict[str, Any] = {
            "global": {
                "scrape_interval": self.timing.scrape_interval,
                "scrape_timeout": self.timing.scrape_timeout,
                "external_labels": {self.config.labels.cluster: cluster},
            },
            "scrape_configs": jobs["scrape_configs"],
            "remote_write": [
                {
                    "url": f"{self.vm_url}/api/v1/write",
                    "queue_config": {"batch_send_deadline": "1s"},
                }
            ],
        }
        return yaml.safe_dump(document, sort_keys=False)

    def start(self) -> GlobalView:
        write_rule_files(self.config, self.workdir)
        (self.workdir / "alertmanager.yml").write_text(
            alertmanager_config(self.config, self.timing, self.webhook.url)
        )
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

    @property
    def _parts(self) -> list[ChildProcess]:
        # The global store and its ruler before any cluster writes to them.
        parts = [self.victoria_metrics, self.alertmanager, self.vmalert]
        for cluster in self.clusters:
            parts += [cluster.exporter, cluster.agent]
        return parts

    def __enter__(self) -> GlobalView:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

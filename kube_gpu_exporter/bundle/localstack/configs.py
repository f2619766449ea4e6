"""Configuration files of the local stack, all derived from the bundle: Prometheus loads the
project's static scrape config and its generated rules; Alertmanager routes to one webhook."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import yaml

from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.render import artifacts
from kube_gpu_exporter.bundle.scrape_configs import static_config

RULE_FILES = ("alerts/prometheus_rules.yaml", "alerts/prometheus_alerts.yaml")


@dataclass(frozen=True, slots=True)
class Timing:
    """How fast the stack moves. Production values by default; tests and the demo's
    --fast-alerts shorten them."""

    scrape_interval: str = "15s"
    scrape_timeout: str = "10s"
    evaluation_interval: str = "15s"
    collector_interval: str = "5s"
    group_wait: str = "10s"
    group_interval: str = "30s"
    repeat_interval: str = "4h"


PRODUCTION = Timing()
FAST = Timing(
    scrape_interval="1s",
    scrape_timeout="1s",
    evaluation_interval="1s",
    collector_interval="1s",
    group_wait="1s",
    group_interval="1s",
)


def quick_alerts(config: BundleConfig, for_: str = "5s", window: str = "15s") -> BundleConfig:
    """The same rules with every `for` set to `for_` and every look-back window to `window`, so
    that an alert fires and resolves within seconds. Never written to the committed files."""
    thresholds = config.thresholds
    # Keyword arguments of replace(): Any, as the checker cannot tell which fields the names pick.
    durations: dict[str, Any] = {
        f.name: for_ for f in fields(thresholds) if f.name.endswith("_for")
    }
    return replace(
        config,
        thresholds=replace(
            thresholds,
            **durations,
            xid_window=window,
            idle_window=window,
            nvlink_error_window=window,
            fabric_startup_grace=window,
            gpu_missing_lookback="10m",
        ),
        # Its rule group runs once per window: the idlest-GPU table fills within one.
        dashboards=replace(config.dashboards, device_history_window=window),
    )


def exporter_flags(config: BundleConfig) -> list[str]:
    """The exporter flags whose series are what `config`'s rules and dashboards read: its
    dcgm-exporter profile, and the host label where the bundle names another than the profile's."""
    args = [f"--compat.dcgm-exporter={config.dcgm_version}"]
    if config.host_label != config.profile.host_label:
        args.append(f"--host-label={config.host_label}")
    return args


def write_rule_files(
    config: BundleConfig, directory: Path, extra: Mapping[str, str] | None = None
) -> list[Path]:
    """The bundle's rule files for `config`, then `extra` (file name -> rules YAML), in
    `directory`."""
    files = artifacts(config)
    contents = {Path(name).name: files[name] for name in RULE_FILES}
    if clash := contents.keys() & (extra or {}).keys():
        raise ValueError(f"extra rule files would replace the bundle's: {sorted(clash)}")
    contents |= extra or {}
    paths = []
    for name, text in contents.items():
        path = directory / name
        path.write_text(text)
        paths.append(path)
    return paths


def prometheus_config(
    config: BundleConfig,
    timing: Timing,
    exporters: Mapping[str, str],
    alertmanager: str,
    rule_files: Sequence[Path],
    extra_jobs: Sequence[dict[str, Any]] = (),
) -> str:
    """`exporters` maps node names to `host:port`."""
    scrape = replace(config.scrape, interval=timing.scrape_interval, timeout=timing.scrape_timeout)
    jobs = static_config(replace(config, scrape=scrape), exporters)["scrape_configs"]
    document = {
        "global": {
            "scrape_interval": timing.scrape_interval,
            "scrape_timeout": timing.scrape_timeout,
            "evaluation_interval": timing.evaluation_interval,
        },
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [*jobs, *extra_jobs],
    }
    return _yaml(document)


def alertmanager_config(config: BundleConfig, timing: Timing, webhook_url: str) -> str:
    labels = config.labels
    document = {
        "route": {
            "receiver": "webhook",
            "group_by": ["alertname", labels.cluster, config.host_label, "gpu"],
            "group_wait": timing.group_wait,
            "group_interval": timing.group_interval,
            "repeat_interval": timing.repeat_interval,
        },
        "receivers": [
            {
                "name": "webhook",
                "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
            }
        ],
    }
    return _yaml(document)


def _yaml(document: dict[str, Any]) -> str:
    return (
        "# Written by kube_gpu_exporter/bundle/localstack for a local stack; "
        "not a committed artifact.\n" + (yaml.safe_dump(document, sort_keys=False))
    )

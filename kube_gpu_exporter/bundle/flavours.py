"""The committed flavours of the bundle, one per dcgm-exporter profile it ships for, and where each
flavour's files live.

The default flavour (the exporter's default profile) sits at the top of alerts/ and dashboards/;
any other lives in a `dcgm-<version>/` folder inside them, with its own dashboard uids, titles and
tag (both flavours can be imported into one Grafana) and its own runbook. Deploy manifests and
scrape configs exist for the default flavour only: they name no DCGM metric, but they embed the
default flavour's rules and dashboards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType

from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.exporter.dcgm_compat import profile


def folder(version: str) -> str:
    """The folder a non-default flavour's files sit in, inside alerts/ and dashboards/."""
    return f"dcgm-{version}"


def flavour_config(version: str, base: BundleConfig = DEFAULT) -> BundleConfig:
    """`base` for another profile, told apart from the default flavour wherever both meet: in
    Grafana (uids, titles, the tag its dashboard links follow) and in runbook links."""
    if version == base.dcgm_version:
        return base
    suffix = "-" + folder(version).replace(".", "-")
    dashboards = base.dashboards
    return replace(
        base,
        dcgm_version=version,
        dashboards=replace(
            dashboards,
            name_prefix=dashboards.name_prefix.replace(" / ", f" (DCGM {version}) / ", 1),
            tags=(dashboards.tags[0] + suffix, *dashboards.tags[1:]),
            uids={key: uid + suffix for key, uid in dashboards.uids.items()},
        ),
        runbook_url_pattern=base.runbook_url_pattern.replace(
            "alerts/runbook.md", f"alerts/{folder(version)}/runbook.md"
        ),
    )


# Keyed by the value of the exporter's `--compat.dcgm-exporter` that each flavour is made for.
FLAVOURS: Mapping[str, BundleConfig] = MappingProxyType(
    {version: flavour_config(version) for version in (DEFAULT.dcgm_version, "4.9")}
)


def fitting_flavour(version: str, carried: Iterable[str]) -> str | None:
    """The flavour among `carried` whose queries fit the profile `version`: its own, or one made
    for a profile that serves the same scrape (4.8.4 and 4.8.3), else None."""
    wanted = profile(version)
    for flavour in carried:
        if replace(profile(flavour), version=wanted.version) == wanted:
            return flavour
    return None


@dataclass(frozen=True, slots=True)
class FlavourPaths:
    """A flavour's generated files, relative to the repository root."""

    alerts: Path
    rules: Path
    prometheusrule: Path
    runbook: Path
    tests: Path
    provisioned: tuple[Path, ...]
    grafana_com: tuple[Path, ...]

    @property
    def rule_files(self) -> tuple[Path, Path]:
        """Recording rules first: the alerts and dashboards read what they record."""
        return self.rules, self.alerts


def relocate(version: str, path: str) -> str:
    """A default-flavour path (`alerts/x.yaml`) as the flavour's (`alerts/dcgm-4.9/x.yaml`)."""
    if version == DEFAULT.dcgm_version:
        return path
    top, _, rest = path.partition("/")
    return f"{top}/{folder(version)}/{rest}"


def flavour_paths(version: str) -> FlavourPaths:
    if version not in FLAVOURS:
        raise KeyError(f"no committed flavour for dcgm-exporter {version}: {', '.join(FLAVOURS)}")
    from kube_gpu_exporter.bundle.dashboards.render import DASHBOARDS

    def at(path: str) -> Path:
        return Path(relocate(version, path))

    def dashboards(kind: str) -> tuple[Path, ...]:
        return tuple(at(f"dashboards/{kind}/{module.FILE}.json") for module in DASHBOARDS)

    return FlavourPaths(
        alerts=at("alerts/prometheus_alerts.yaml"),
        rules=at("alerts/prometheus_rules.yaml"),
        prometheusrule=at("alerts/prometheusrule.yaml"),
        runbook=at("alerts/runbook.md"),
        tests=at("alerts/tests"),
        provisioned=dashboards("provisioned"),
        grafana_com=dashboards("grafana-com"),
    )

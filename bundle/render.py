"""Writes every generated artifact of the bundle from one config (`make bundle`).

    python -m bundle.render           # regenerate the committed files
    python -m bundle.render --check   # exit 1 and name the files that differ

Generation is deterministic, so the committed files are exactly what this prints.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from bundle.config import DEFAULT, BundleConfig

ROOT = Path(__file__).resolve().parent.parent


def _alerts(config: BundleConfig) -> dict[str, str]:
    from alerts.rules_file import alert_groups, prometheus_rule, recording_groups, rules_document
    from bundle.yaml_output import dump

    source = "alerts/*.py"
    return {
        "alerts/prometheus_alerts.yaml": dump(rules_document(alert_groups(config), config), source),
        "alerts/prometheus_rules.yaml": dump(
            rules_document(recording_groups(config), config), source
        ),
        "alerts/prometheusrule.yaml": dump(prometheus_rule(config), source),
    }


def _dashboards(config: BundleConfig) -> dict[str, str]:
    from dashboards.render import dashboard_files

    return dashboard_files(config)


def _scrape_configs(config: BundleConfig) -> dict[str, str]:
    from bundle.scrape_configs import scrape_config_files

    return scrape_config_files(config)


def _deploy(config: BundleConfig) -> dict[str, str]:
    from alerts.rules_file import prometheus_rule
    from bundle.deploy_manifests import manifest_files
    from bundle.scrape_configs import service_monitor
    from dashboards.render import dashboard_files

    return manifest_files(
        config, prometheus_rule(config), service_monitor(config), dashboard_files(config)
    )


GENERATORS: tuple[Callable[[BundleConfig], dict[str, str]], ...] = (
    _alerts,
    _dashboards,
    _scrape_configs,
    _deploy,
)


def artifacts(config: BundleConfig = DEFAULT) -> dict[str, str]:
    """Repository-relative path -> file content, for every generated file."""
    files: dict[str, str] = {}
    for generate in GENERATORS:
        files.update(generate(config))
    return files


def drifted(config: BundleConfig = DEFAULT, root: Path = ROOT) -> list[str]:
    """Generated files whose committed copy is missing or differs."""
    return sorted(
        path
        for path, content in artifacts(config).items()
        if not (root / path).is_file() or (root / path).read_text() != content
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    args = parser.parse_args(argv)
    if args.check:
        stale = drifted()
        for path in stale:
            print(f"bundle: {path} differs from its generator; run `make bundle`", file=sys.stderr)
        return 1 if stale else 0
    for path, content in artifacts().items():
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes every generated artifact of the bundle from one config (`make bundle`).

    python -m kube_gpu_exporter.bundle.render          # regenerate the committed files
    python -m kube_gpu_exporter.bundle.render --check  # exit 1 and name the files that differ
    python -m kube_gpu_exporter.bundle.render --config my.yaml --out DIR  # your overrides, in DIR

Generation is deterministic, so the committed files are exactly what this prints. Each flavour
(kube_gpu_exporter/bundle/flavours.py) is one dcgm-exporter profile; the default one also gets the
deploy manifests and scrape configs, and the others get a runbook and promtool tests derived from
the default's. The Helm chart's generated parts (kube_gpu_exporter/bundle/helm_chart.py) hold every
flavour's rules and dashboards.

With --out, the bundle one config makes (the defaults, or them with an overrides file laid over
them, see kube_gpu_exporter/bundle/overrides.py) goes into DIR with the committed bundle's files and
paths: every flavour, the runbooks, and the promtool tests where they still hold (bundle_files); the
committed tree is left alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import yaml

from kube_gpu_exporter.bundle import helm_chart, overrides
from kube_gpu_exporter.bundle.config import DEFAULT, BundleConfig
from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_config, flavour_paths, relocate
from kube_gpu_exporter.bundle.source_root import ROOT
from kube_gpu_exporter.exporter import docs_table
from kube_gpu_exporter.exporter.flags import docs_table as flag_docs
from kube_gpu_exporter.exporter.health import docs_table as health_docs

__all__ = [
    "FLAVOURS",
    "ROOT",
    "all_artifacts",
    "artifacts",
    "bundle_files",
    "drifted",
    "flavour_paths",
]


def _alerts(config: BundleConfig) -> dict[str, str]:
    from kube_gpu_exporter.bundle.alerts.rules_file import (
        alert_groups,
        prometheus_rule,
        recording_groups,
        rules_document,
    )
    from kube_gpu_exporter.bundle.yaml_output import dump

    source = "kube_gpu_exporter/bundle/alerts/*.py"
    return {
        "alerts/prometheus_alerts.yaml": dump(rules_document(alert_groups(config), config), source),
        "alerts/prometheus_rules.yaml": dump(
            rules_document(recording_groups(config), config), source
        ),
        "alerts/prometheusrule.yaml": dump(prometheus_rule(config), source),
    }


def _dashboards(config: BundleConfig) -> dict[str, str]:
    from kube_gpu_exporter.bundle.dashboards.render import dashboard_files

    return dashboard_files(config)


def _scrape_configs(config: BundleConfig) -> dict[str, str]:
    from kube_gpu_exporter.bundle.scrape_configs import scrape_config_files

    return scrape_config_files(config)


def _deploy(config: BundleConfig) -> dict[str, str]:
    from kube_gpu_exporter.bundle.alerts.rules_file import prometheus_rule
    from kube_gpu_exporter.bundle.dashboards.render import dashboard_files
    from kube_gpu_exporter.bundle.deploy_manifests import manifest_files
    from kube_gpu_exporter.bundle.scrape_configs import service_monitor

    return manifest_files(
        config, prometheus_rule(config), service_monitor(config), dashboard_files(config)
    )


def _helm_chart(config: BundleConfig) -> dict[str, str]:
    """The Helm chart's generated parts (kube_gpu_exporter/bundle/helm_chart.py), with the rules and
    dashboards of `config`'s flavour and, for the default profile, of every other committed flavour,
    as bundle_files makes them. Not one of GENERATORS: those make one flavour's files, and the
    chart holds every flavour."""
    from kube_gpu_exporter.bundle.alerts.rules_file import prometheus_rule
    from kube_gpu_exporter.bundle.dashboards.render import dashboard_files
    from kube_gpu_exporter.bundle.helm_chart import chart_files

    flavours = {config.dcgm_version: config}
    if config.dcgm_version == DEFAULT.dcgm_version:
        flavours |= {v: flavour_config(v, config) for v in FLAVOURS if v != config.dcgm_version}
    return chart_files(
        config,
        {version: prometheus_rule(c) for version, c in flavours.items()},
        {version: dashboard_files(c) for version, c in flavours.items()},
    )


GENERATORS: tuple[Callable[[BundleConfig], dict[str, str]], ...] = (
    _alerts,
    _dashboards,
    _scrape_configs,
    _deploy,
)


def artifacts(config: BundleConfig = DEFAULT) -> dict[str, str]:
    """Path -> file content for every file generated from `config`, at the default flavour's
    paths whatever the config's profile (a local stack writes them where it likes)."""
    files: dict[str, str] = {}
    for generate in GENERATORS:
        files.update(generate(config))
    return files


# The default flavour's hand-written sources that other configs get translated copies of.
RUNBOOK = "alerts/runbook.md"
TESTS = "alerts/tests"
# What the promtool tests exercise: the rules, with their annotations.
RULE_FILES = ("alerts/prometheus_alerts.yaml", "alerts/prometheus_rules.yaml")


def _test_sources() -> list[Path]:
    return sorted((ROOT / TESTS).glob("*.yaml"))


def _derived(config: BundleConfig, *, note: bool = True, tests: bool = True) -> dict[str, str]:
    """The default flavour's hand-written runbook and, with `tests`, promtool tests, translated
    for `config`; with `note`, each says it is generated and from what."""
    from kube_gpu_exporter.bundle.flavour_translate import Translator
    from kube_gpu_exporter.bundle.yaml_output import dump

    translate = Translator(DEFAULT, config)
    said = (
        f"<!-- Generated by `make bundle` from {RUNBOOK}. Do not edit; change that file. -->\n"
        if note
        else ""
    )
    files = {RUNBOOK: said + translate.text((ROOT / RUNBOOK).read_text())}
    for source in _test_sources() if tests else ():
        relative = source.relative_to(ROOT).as_posix()
        document = translate.tests(yaml.safe_load(source.read_text()))
        files[relative] = dump(document, relative, origin="that file")
    return files


def tests_hold(config: BundleConfig) -> bool:
    """Whether the hand-written promtool tests hold for `config`'s rules: they do where its rule
    files are its profile's committed ones but for the runbook links, which the translation
    rewrites, and the carbon estimate's records, which only add to the rules the tests read. A
    changed threshold, selector or label would fail them for no fault of the rules."""
    committed = FLAVOURS.get(config.dcgm_version)
    if committed is None:
        return False
    ours = _alerts(dataclasses.replace(config, carbon_intensity_g_per_kwh=None))
    theirs = _alerts(committed)

    def prefix(c: BundleConfig) -> str:
        return c.runbook_url_pattern.split("%s")[0]

    return all(
        ours[path].replace(prefix(config), prefix(committed)) == theirs[path] for path in RULE_FILES
    )


def bundle_files(config: BundleConfig = DEFAULT) -> dict[str, str]:
    """Path -> content of the whole bundle `config` makes, laid out as the committed one: its
    own flavour with the deploy manifests, scrape configs and runbook at the top, each other
    committed flavour made from it as flavours.py makes them (alerts/dcgm-4.9/...), and the
    promtool tests where they hold (tests_hold), and the Helm chart (its generated parts with the
    hand-written ones beside them). From DEFAULT, exactly the committed files. A config for
    another profile than the default is one flavour: it has no other to go with."""
    tests = tests_hold(config)
    if config == DEFAULT:
        # The hand-written sources as they are: a translation to the same config would only
        # re-spell the tests' YAML.
        own = {
            RUNBOOK: (ROOT / RUNBOOK).read_text(),
            **{p.relative_to(ROOT).as_posix(): p.read_text() for p in _test_sources()},
        }
    else:
        own = _derived(config, note=False, tests=tests)
    files = {**artifacts(config), **own, **_helm_chart(config)}
    # The chart's templates, NOTES.txt and ci/ are hand-written: a copy without them is no
    # chart, so a generator outside a checkout (an installed wheel) leaves the chart out.
    chart = helm_chart.hand_written(ROOT)
    if chart:
        files.update(chart)
    else:
        files = {path: text for path, text in files.items() if not helm_chart.is_generated(path)}
    if config.dcgm_version != DEFAULT.dcgm_version:
        return files
    for version in FLAVOURS:
        if version == config.dcgm_version:
            continue
        flavour = flavour_config(version, config)
        made = {**_alerts(flavour), **_dashboards(flavour), **_derived(flavour, tests=tests)}
        files.update({relocate(version, path): content for path, content in made.items()})
    return files


def flavour_artifacts(version: str) -> dict[str, str]:
    """One flavour's committed files, at that flavour's paths."""
    config = FLAVOURS[version]
    if version == DEFAULT.dcgm_version:
        return artifacts(config)
    files = {**_alerts(config), **_dashboards(config), **_derived(config)}
    return {relocate(version, path): content for path, content in files.items()}


def all_artifacts() -> dict[str, str]:
    """Repository-relative path -> file content, for every generated file of every flavour."""
    files: dict[str, str] = {}
    for version in FLAVOURS:
        files.update(flavour_artifacts(version))
    files.update(_helm_chart(DEFAULT))
    return files


def orphans(files: Mapping[str, str], root: Path = ROOT) -> list[str]:
    """Files in a flavour's own folders, or in the chart's generated ones, that nothing
    generates any more (a deleted test file, a dashboard of a flavour that went)."""
    folders = {
        (root / relocate(version, top)).parent
        for version in FLAVOURS
        if version != DEFAULT.dcgm_version
        for top in ("alerts/x", "dashboards/x")
    } | {root / helm_chart.CHART_DIR / folder for folder in helm_chart.GENERATED_DIRS}
    found = {
        path.relative_to(root).as_posix()
        for folder in folders
        if folder.is_dir()
        for path in folder.rglob("*")
        if path.is_file()
    }
    return sorted(found - set(files))


def drifted(root: Path = ROOT, files: Mapping[str, str] | None = None) -> list[str]:
    """Generated files whose committed copy is missing or differs, orphaned flavour files, and
    pages whose values table (kube_gpu_exporter/bundle/helm_chart.py) is not the chart's
    values.yaml's, or whose field tables (kube_gpu_exporter/exporter/docs_table.py) are not the
    field table's. `files`: what all_artifacts() gives, where the caller has it already."""
    files = all_artifacts() if files is None else files
    stale = [
        path
        for path, content in files.items()
        if not (root / path).is_file() or (root / path).read_text() != content
    ]
    stale += helm_chart.stale_tables(root, files[helm_chart.VALUES])
    stale += docs_table.stale_pages(root)
    stale += docs_table.stale_pages(root, health_docs.BLOCKS)
    stale += docs_table.stale_pages(root, flag_docs.BLOCKS)
    return sorted(stale + orphans(files, root))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kube_gpu_exporter.bundle.render", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    parser.add_argument(
        "--config", type=Path, help="a YAML file of overrides to the defaults (needs --out)"
    )
    parser.add_argument("--out", type=Path, help="write one config's files into this directory")
    args = parser.parse_args(argv)
    if args.check and (args.config or args.out):
        parser.error("--check compares the committed files; it takes neither --config nor --out")
    if args.config and not args.out:
        # The committed files must stay the defaults' outputs (`--check` holds them to it).
        parser.error("--config needs --out DIR: the committed files are generated from defaults")
    if args.out:
        return _render_into(args.out, args.config)
    if not (ROOT / "pyproject.toml").is_file():
        # Installed from a wheel, ROOT holds the shipped sources only: nothing there to regenerate.
        parser.error("outside a source checkout, give --out DIR (and --config my.yaml)")
    if args.check:
        stale = drifted()
        for path in stale:
            print(f"bundle: {path} differs from its generator; run `make bundle`", file=sys.stderr)
        return 1 if stale else 0
    files = all_artifacts()
    for path, content in files.items():
        target = ROOT / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
    for path in orphans(files):
        (ROOT / path).unlink()
    helm_chart.write_tables(ROOT, files[helm_chart.VALUES])
    docs_table.write_pages(ROOT)
    docs_table.write_pages(ROOT, health_docs.BLOCKS)
    docs_table.write_pages(ROOT, flag_docs.BLOCKS)
    return 0


def _render_into(out: Path, config_path: Path | None) -> int:
    try:
        config = DEFAULT if config_path is None else overrides.load(config_path)
    except overrides.OverrideError as exc:
        print(f"bundle: {exc}", file=sys.stderr)
        return 2
    if out.exists() and not out.is_dir():
        print(f"bundle: --out {out}: exists and is not a directory", file=sys.stderr)
        return 2
    files = bundle_files(config)
    try:
        for path, content in files.items():
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    except OSError as exc:
        print(f"bundle: --out {exc.filename or out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    left_out = (
        ""
        if any(path.startswith(TESTS + "/") for path in files)
        else f" (no promtool tests: {config_path} changes the rules they are written for)"
    )
    print(f"bundle: wrote {len(files)} files under {out}{left_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

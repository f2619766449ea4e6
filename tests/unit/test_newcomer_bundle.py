"""A custom bundle is a whole bundle (`python -m kube_gpu_exporter.bundle.render [--config my.yaml]
--out DIR`): the same files as the committed defaults, runbooks and the 4.9 flavour included, with
promtool tests wherever they still hold; and every alert's runbook_url points at a runbook the
bundle ships, not at a repository that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from kube_gpu_exporter.bundle.config import DEFAULT
from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from kube_gpu_exporter.bundle.helm_chart import hand_written
from kube_gpu_exporter.bundle.render import ROOT, bundle_files, main
from tests.support.generated_bundle import generated

COMMITTED_SOURCES = (
    "alerts/runbook.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "alerts" / "tests").glob("*.yaml")),
    # The Helm chart's hand-written templates, notes and ci/ values, with its generated parts.
    *hand_written(ROOT),
)


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def _alerts(text: str) -> list[dict]:
    return [r for g in yaml.safe_load(text)["groups"] for r in g["rules"] if "alert" in r]


def _render(tmp_path: Path, overrides: str | None, capsys) -> tuple[Path, str]:
    out = tmp_path / "out"
    argv = ["--out", str(out)]
    if overrides is not None:
        config = tmp_path / "my.yaml"
        config.write_text(overrides)
        argv = ["--config", str(config), *argv]
    assert main(argv) == 0
    return out, capsys.readouterr().err


def test_out_without_a_config_writes_exactly_the_committed_bundle(tmp_path, capsys):
    out, said = _render(tmp_path, None, capsys)
    committed = set(generated()) | set(COMMITTED_SOURCES)
    assert _files(out) == committed
    for path in sorted(committed):
        assert (out / path).read_text() == (ROOT / path).read_text(), path
    assert f"wrote {len(committed)} files" in said and "promtool" not in said


def test_a_changed_threshold_gets_both_flavours_and_runbooks_but_no_stale_tests(tmp_path, capsys):
    out, said = _render(tmp_path, "thresholds:\n  temperature_warning_celsius: 81\n", capsys)
    written = _files(out)
    expected = {p for p in set(generated()) | set(COMMITTED_SOURCES) if "/tests/" not in p}
    assert written == expected
    for version in FLAVOURS:
        paths = flavour_paths(version)
        # A warning and a critical rule; the override moves the warning's threshold.
        hot = [a for a in _alerts((out / paths.alerts).read_text()) if "TEMP" in a["expr"]]
        assert [a["expr"].split()[-1] for a in hot] == ["81", "92"], (version, hot)
        assert (out / paths.runbook).read_text().count("## GPUTemperatureHigh\n") == 1
    assert "no promtool tests" in said and "my.yaml changes the rules" in said


def test_every_default_runbook_link_opens_a_section_of_a_runbook_the_bundle_ships():
    files = bundle_files(DEFAULT)
    seen = 0
    for version in FLAVOURS:
        paths = flavour_paths(version)
        for alert in _alerts(files[paths.alerts.as_posix()]):
            target, _, anchor = alert["annotations"]["runbook_url"].partition("#")
            assert target == paths.runbook.as_posix(), alert["annotations"]["runbook_url"]
            headings = re.findall(r"^## (\S+)$", files[target], re.M)
            assert anchor in {h.lower() for h in headings}, (target, anchor)
            seen += 1
    assert seen >= 2 * 19
    # Nothing the bundle generates links to the project's old, non-existent home.
    assert not [p for p, text in files.items() if "github.com/kube-gpu-exporter" in text]

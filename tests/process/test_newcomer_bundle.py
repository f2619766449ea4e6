"""A custom bundle is a whole bundle (`python -m kube_gpu_exporter.bundle.render [--config my.yaml]
--out DIR`):: the cases that start a process or need a system package's binary; the others are in
tests/unit/test_newcomer_bundle.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kube_gpu_exporter.bundle.flavours import FLAVOURS, flavour_paths
from tests.unit.test_newcomer_bundle import COMMITTED_SOURCES, _alerts, _files, _render


def test_a_new_runbook_link_keeps_the_tests_and_they_pass_promtool(tmp_path, capsys):
    base = "https://git.example.com/ops/gpu/blob/main/"
    out, _ = _render(
        tmp_path,
        f"runbook_url_pattern: {base}alerts/runbook.md#%s\nscrape:\n  release_label: prom\n",
        capsys,
    )
    assert set(COMMITTED_SOURCES) <= _files(out)
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not on PATH: `make system-deps` installs it", pytrace=False)
    for version in FLAVOURS:
        paths = flavour_paths(version)
        for alert in _alerts((out / paths.alerts).read_text()):
            link = alert["annotations"]["runbook_url"]
            assert link == f"{base}{paths.runbook.as_posix()}#{alert['alert'].lower()}"
        tests = sorted(p.name for p in (out / paths.tests).glob("*.yaml"))
        assert tests, version
        run = subprocess.run(
            [promtool, "test", "rules", *tests],
            cwd=out / paths.tests,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

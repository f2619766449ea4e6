"""The newcomer's two commands: `make run` installs the exporter alone and says which URL to open
(with the port it really bound), and `make test` opens by saying everything it installs and how
long it takes, while CI (`.ci/run`) still runs it and so installs everything."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO, wait_for
from tests.process.test_newcomer_health import Exporter


def _make(*args: str, tmp_path: Path) -> str:
    # A virtualenv path that does not exist, so that -n shows every install step.
    venv = tmp_path / "venv"
    run = subprocess.run(
        ["make", "--no-print-directory", f"VENV={venv}", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def _name(requirement: str) -> str:
    """The distribution name a requirement starts with ("ruff>=0.5" -> "ruff")."""
    found = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert found, requirement
    return found.group(0)


def _test_extra() -> list[str]:
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["test"]
    return [_name(requirement) for requirement in extra]


def test_make_run_installs_the_exporter_without_the_test_tools(tmp_path):
    steps = _make("-n", "run", tmp_path=tmp_path)
    installs = [line for line in steps.splitlines() if "pip install" in line]
    assert installs[-1].endswith("pip install --quiet -e '.[simulator]'"), installs
    assert steps.splitlines()[-1].rstrip().endswith("kube-gpu-exporter --simulate")
    # The simulator's own needs (grpcio for its fake kubelet) are an extra, which a real node's
    # install leaves out, and none of the test tools are in it.
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    simulator = {_name(r) for r in project["optional-dependencies"]["simulator"]}
    assert simulator == {"grpcio"}
    assert not {_name(r) for r in project["dependencies"]} & (simulator | set(_test_extra()))


def test_simulate_without_the_simulator_extra_is_one_line_and_status_2():
    # A fresh process in which grpcio cannot be imported, as after `pip install kube-gpu-exporter`.
    # Refused before the address is bound: port 1 is never listened on.
    code = (
        "import sys; sys.modules['grpc'] = None; from kube_gpu_exporter.exporter.cli import main; "
        "sys.exit(main(['--simulate', '--web.listen-address=127.0.0.1:1']))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1, done.stderr
    # A command that works from a checkout: kube-gpu-exporter is on no package index.
    assert "pip install '.[simulator]' in a checkout" in done.stderr


def test_make_test_first_says_what_it_installs_and_how_long(tmp_path):
    steps = _make("-n", "test", tmp_path=tmp_path).splitlines()
    # The plan's lines come before anything is installed.
    first_install = next(i for i, line in enumerate(steps) if "venv" in line or "pip" in line)
    assert first_install > 0 and all(line.startswith("echo") for line in steps[:first_install])
    plan = _make("test-plan", tmp_path=tmp_path)
    assert len(plan.splitlines()) <= 24, "more than a first screen"
    assert re.search(r"about \d+ minutes on a fresh 2-core VM", plan), plan
    for requirement in _test_extra():
        assert requirement in plan, requirement
    # Every Debian package the recipes install, read from what make would run.
    for target in ("system-deps", "grafana-schema-deps"):
        recipe = _make("-n", target, tmp_path=tmp_path)
        installed = re.search(r"--no-install-recommends\s+([^>]+)>", recipe)
        assert installed, recipe
        for package in installed.group(1).replace("\\", " ").split():
            assert package in plan, package
    assert "container image" in plan and "npm" in plan
    # CI's entry point runs the README's test command, which installs the [test] extra.
    assert (REPO / ".ci" / "run").read_text().rstrip().endswith("\nmake test")
    assert any("-e '.[test]'" in line for line in steps)


def test_the_exporter_logs_the_url_to_open_with_the_port_it_bound(tmp_path):
    node = Exporter(tmp_path / "exporter.log", "--simulate")
    try:
        wanted = f"metrics at http://127.0.0.1:{node.port}/metrics "
        assert wait_for(
            lambda: node.logged("kube_gpu_exporter.exporter.server", wanted), timeout=30
        ), node.lines()
    finally:
        node.stop()

"""The README's Install section, followed as a new user follows it: its shell lines, read from the
section's fenced block, run in a fresh virtualenv against a fresh copy of the checkout; then the
installed `kube-gpu-exporter --simulate` serves the simulated node's DCGM series, and the
installed bundle generator writes the files the checkout's `make bundle` writes.

It needs the network (pip fetches the dependencies from the package index; its cache makes a second
run quicker)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.exporter_process import free_port, get

# Slow for a process test: a cold pip cache downloads every dependency (about 70 s on a 2-core
# VM), and the rest takes under 30 s.
pytestmark = pytest.mark.timeout(300)

INSTALL_TIMEOUT_S = 240
START_TIMEOUT_S = 60
RENDER_TIMEOUT_S = 120
# A line that names where the user got the code (`<org>`) cannot run here.
PLACEHOLDER = re.compile(r"<[a-z-]+>")


@dataclass(frozen=True)
class InstallLines:
    pip: list[list[str]]  # each pip line's arguments after `pip`
    skipped: list[str]  # lines that hold a placeholder
    exporter: list[str]  # the `kube-gpu-exporter` line's arguments


def install_block(readme: str) -> str:
    """The first fenced shell block of the README's `## Install` section."""
    section = re.search(r"^## Install\n(.*?)(?=^## |\Z)", readme, re.M | re.S)
    assert section, "the README has no '## Install' section"
    block = re.search(r"^```sh\n(.*?)^```$", section.group(1), re.M | re.S)
    assert block, "the README's Install section has no ```sh block"
    return block.group(1)


def install_lines(block: str) -> InstallLines:
    pip: list[list[str]] = []
    skipped: list[str] = []
    exporter: list[list[str]] = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if PLACEHOLDER.search(" ".join(words)):
            skipped.append(line)
        elif words[0] == "pip":
            pip.append(words[1:])
        elif words[0] == "kube-gpu-exporter":
            exporter.append(words[1:])
        else:
            pytest.fail(f"the Install block has a line this test cannot run: {line!r}")
    assert pip, f"the Install block installs nothing:\n{block}"
    assert len(exporter) == 1, f"the Install block should start the exporter once:\n{block}"
    return InstallLines(pip, skipped, exporter[0])


def test_the_install_block_is_read_as_the_readme_writes_it() -> None:
    lines = install_lines(install_block((REPO / "README.md").read_text()))
    # What --simulate needs is installed from the checkout itself: no index has the package.
    assert any(
        args[0] == "install" and args[-1].startswith(".[") and "simulator" in args[-1]
        for args in lines.pip
    ), lines.pip
    assert all("git+https://" in line for line in lines.skipped), lines.skipped
    assert lines.exporter[0] == "--simulate", lines.exporter


def copy_checkout(destination: Path) -> None:
    """The checkout's files as a fresh clone would have them with the working tree's edits:
    tracked and untracked ones, less what git ignores (.venv, build/, *.egg-info). Built from a
    copy, pip leaves no build/ or egg-info in the checkout, and nothing stale there gets in."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        check=True,
        timeout=60,
    ).stdout.decode()
    for name in sorted({n for n in listed.split("\0") if n}):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the working tree is gone from it
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination / name)


def user_env(venv: Path) -> dict[str, str]:
    """The environment of a shell with `venv` activated: its bin first, nothing of this run's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}"
    return env


def relative_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_new_user_following_the_install_section_gets_the_exporter_and_the_bundle(
    tmp_path: Path, started: list[subprocess.Popen]
) -> None:
    lines = install_lines(install_block((REPO / "README.md").read_text()))
    checkout, venv, home = tmp_path / "checkout", tmp_path / "venv", tmp_path / "user"
    checkout.mkdir()
    home.mkdir()
    copy_checkout(checkout)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = user_env(venv)

    began = time.monotonic()
    for args in lines.pip:
        done = subprocess.run(
            [str(venv / "bin" / "pip"), *args, "--quiet"],
            cwd=checkout,
            env=env,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        assert done.returncode == 0, f"pip {shlex.join(args)}:\n{done.stderr[-4000:]}"
    installed_in = time.monotonic() - began

    # The installed copy answers, not the checkout's sources.
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import kube_gpu_exporter.bundle; print(kube_gpu_exporter.__file__)",
        ],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert where.startswith(str(venv)), where

    # The README's exporter line, on a free loopback port.
    port = free_port()
    log = (tmp_path / "exporter.log").open("w")
    exporter = subprocess.Popen(
        [
            str(venv / "bin" / "kube-gpu-exporter"),
            *lines.exporter,
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        cwd=home,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    started.append(exporter)
    series: list[str] = []
    deadline = time.monotonic() + START_TIMEOUT_S
    while not series and time.monotonic() < deadline:
        assert exporter.poll() is None, (
            f"kube-gpu-exporter {shlex.join(lines.exporter)} exited {exporter.returncode}:\n"
            + (tmp_path / "exporter.log").read_text()[-3000:]
        )
        try:
            status, body = get(f"http://127.0.0.1:{port}/metrics", timeout=5)
        except OSError:  # not listening yet
            time.sleep(0.2)
            continue
        if status == 200:
            series = [s for s in body.splitlines() if s.startswith("DCGM_FI_DEV_GPU_UTIL{")]
        if not series:
            time.sleep(0.2)
    assert series, (
        f"no DCGM_FI_DEV_GPU_UTIL series within {START_TIMEOUT_S} s (installed in "
        f"{installed_in:.0f} s):\n" + (tmp_path / "exporter.log").read_text()[-3000:]
    )

    # The installed bundle generator, away from any checkout, against the checkout's `make
    # bundle OUT=...` (the copy's, so both read one snapshot of the sources). VENV is the venv
    # running the tests, left as it is: its install step is not redone.
    installed_out, checkout_out = tmp_path / "installed-bundle", tmp_path / "checkout-bundle"
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "kube_gpu_exporter.bundle.render",
            "--out",
            str(installed_out),
        ],
        cwd=home,
        env=env,
        capture_output=True,
        check=True,
        timeout=RENDER_TIMEOUT_S,
    )
    subprocess.run(
        [
            "make",
            "--no-print-directory",
            f"VENV={sys.prefix}",
            "-o",
            f"{sys.prefix}/.installed-bundle",
            "bundle",
            f"OUT={checkout_out}",
        ],
        cwd=checkout,
        capture_output=True,
        check=True,
        timeout=RENDER_TIMEOUT_S,
    )
    installed, expected = relative_files(installed_out), relative_files(checkout_out)
    assert any(p.startswith("deploy/helm/kube-gpu-exporter/templates/") for p in expected)
    missing = sorted(expected.keys() - installed.keys())
    extra = sorted(installed.keys() - expected.keys())
    assert not missing and not extra, (
        f"the installed bundle wrote {len(installed)} files, the checkout's {len(expected)}; "
        f"missing: {missing}; extra: {extra}"
    )
    differ = sorted(p for p in expected if installed[p] != expected[p])
    assert not differ, f"the installed bundle's files differ from the checkout's: {differ}"

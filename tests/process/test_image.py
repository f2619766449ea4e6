"""The container image, built by podman and run as users run it.

The build goes through `python -m deploy.image` (what `make image` runs) on the Python base it
makes from Debian packages, since CI reaches no container registry. Each container runs with a
read-only root filesystem, the image's own user, no capabilities and no new privileges, and is
always removed. Its configuration is read back with skopeo, the way a registry client sees it.

The unit tests at the end cover what the containers cannot: the simulator's choice of a scratch
directory, and reading apt's sources for the Debian mirror.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
import tarfile
import time
import tomllib
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.image import debian_base
from kube_gpu_exporter.bundle.localstack.processes import find_binary, free_port

ROOT = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
RUN_ID = uuid.uuid4().hex[:8]
# crun fails on hybrid cgroups and podman's default nofile limit is above some hosts' hard limit:
# runc with limits inside the host's works everywhere CI runs.
RUNTIME = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]
HARDENED = ["--read-only", "--cap-drop=ALL", "--security-opt", "no-new-privileges"]
# No /tmp at all: podman would otherwise mount a tmpfs there under --read-only, Docker does not.
NO_TMP = ["--read-only-tmpfs=false"]
BUILD_TIMEOUT_S = 1500
COMMAND_TIMEOUT_S = 60
START_TIMEOUT_S = 60
STOP_WITHIN_S = 5.0
# The image measured 261 MB on the Debian base; growth past this is a slimming step undone.
MAX_ON_DISK_BYTES = 290_000_000
GPUS = {str(i) for i in range(8)}

# Alone, after the parallel part of `make test`: it builds the image in the container engine's one
# store, and times the container's stop.
pytestmark = [pytest.mark.timeout(BUILD_TIMEOUT_S + 300), pytest.mark.serial]


def podman(*args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_binary("podman", package="podman"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def podman_ok(*args: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
    done = podman(*args, timeout=timeout)
    assert done.returncode == 0, f"podman {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout


def built_image(tag: str, *options: str, timeout: float = BUILD_TIMEOUT_S) -> Iterator[str]:
    """The image built by deploy.image with podman on the Debian base under `tag` (`options`
    pass a platform), yielded, then removed."""
    find_binary("podman", package="podman")
    command = [sys.executable, "-m", "deploy.image", "--engine", "podman"]
    command += ["--base", debian_base.ALIAS, *options, "--tag", tag]
    started = time.monotonic()
    build = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert build.returncode == 0, (build.stdout + build.stderr)[-6000:]
    print(f"image {tag} built in {time.monotonic() - started:.0f} s")
    try:
        yield tag
    finally:
        podman("rmi", "--force", tag)


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    """The image, built once per session under a tag of its own, removed afterwards."""
    yield from built_image(f"kube-gpu-exporter-test:{RUN_ID}")


def wait_until(what: str, check: Callable[[], bool], timeout: float, logs: Callable[[], str]):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s; the container said:\n{logs()}")
        time.sleep(0.2)


def get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode()
    except OSError:
        return None


class Container:
    def __init__(self, name: str, port: int) -> None:
        self.name, self.url = name, f"http://127.0.0.1:{port}"

    def logs(self) -> str:
        done = podman("logs", self.name)
        return done.stdout + done.stderr

    def running(self) -> bool:
        return podman_ok("inspect", "--format", "{{.State.Running}}", self.name).strip() == "true"

    def wait_ready(self) -> None:
        """Until the first snapshot is served: /healthz answers before that."""

        def ready() -> bool:
            assert self.running(), f"the container exited:\n{self.logs()}"
            return (get(f"{self.url}/readyz") or "").strip() == "ready"

        wait_until("/readyz did not answer ready", ready, START_TIMEOUT_S, self.logs)


@contextlib.contextmanager
def container(image: str, *options: str, args: tuple[str, ...] = ()) -> Iterator[Container]:
    """A detached container publishing the exporter's port on loopback; always removed, its log
    printed when the test fails."""
    port = free_port("127.0.0.1")
    name = f"kgx-test-{RUN_ID}-{uuid.uuid4().hex[:6]}"
    run = ["run", "--detach", "--name", name, *RUNTIME, *options]
    podman_ok(*run, "--publish", f"127.0.0.1:{port}:9455", image, *args)
    started = Container(name, port)
    try:
        yield started
    except BaseException:
        print(f"--- log of {name} ---\n{started.logs()}")
        raise
    finally:
        podman("rm", "--force", "--time", "0", name)


def proc_status(name: str) -> dict[str, str]:
    text = podman_ok("exec", name, "cat", "/proc/1/status")
    return dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)


def series_gpus(metrics: str, family: str) -> set[str]:
    return set(re.findall(rf'^{family}{{gpu="(\d+)"', metrics, re.M))


def test_runs_hardened_serves_dcgm_series_and_stops_cleanly_on_sigterm(image):
    with container(image, *HARDENED, args=("--simulate",)) as c:
        c.wait_ready()
        assert (get(f"{c.url}/healthz") or "").strip() == "ok"
        metrics = get(f"{c.url}/metrics") or ""
        assert series_gpus(metrics, "DCGM_FI_DEV_GPU_TEMP") == GPUS
        assert series_gpus(metrics, "DCGM_FI_DEV_FB_USED") == GPUS
        status = proc_status(c.name)
        assert status["Uid"].split()[:2] == ["65532", "65532"], status["Uid"]
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0
        assert status["NoNewPrivs"].strip() == "1"

        started = time.monotonic()
        podman_ok("stop", "--time", "10", c.name)
        stopped_in = time.monotonic() - started
        code = podman_ok("inspect", "--format", "{{.State.ExitCode}}", c.name).strip()
        logs = c.logs()
        assert (code, stopped_in < STOP_WITHIN_S) == ("0", True), (code, stopped_in, logs)
        assert "Traceback" not in logs
        assert 'msg="shutting down"' in "".join(logs.strip().splitlines()[-3:]), logs


def test_simulate_without_tmp_uses_dev_shm(image):
    with container(image, *HARDENED, *NO_TMP, args=("--simulate",)) as c:
        c.wait_ready()
        assert series_gpus(get(f"{c.url}/metrics") or "", "DCGM_FI_DEV_GPU_TEMP") == GPUS
        assert "kubelet.sock" in podman_ok("exec", c.name, "ls", "-R", "/dev/shm")
        assert podman("exec", c.name, "touch", "/tmp/x").returncode != 0, "/tmp is writable"


def test_simulate_with_nothing_writable_is_one_line_and_status_2(image):
    # --ipc=none: no /dev/shm either.
    done = podman("run", "--rm", *RUNTIME, *HARDENED, *NO_TMP, "--ipc=none", image, "--simulate")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("kube-gpu-exporter: error: --simulate needs a writable directory")
    assert "emptyDir" in lines[0]


def test_kubernetes_enrichment_works_with_the_trimmed_client(image):
    """kubernetes.aio is left out of the image; the synchronous client the exporter uses must
    still list and watch (the simulated node's in-process API)."""
    with container(image, *HARDENED, *NO_TMP, args=("--simulate", "--kubernetes")) as c:
        c.wait_ready()

        def enriched() -> bool:
            metrics = get(f"{c.url}/metrics") or ""
            return 'collector="kubernetes"} 1' in metrics and 'owner_kind="Job"' in metrics

        wait_until("no pod owners from the API", enriched, START_TIMEOUT_S, c.logs)
        assert "aio" not in podman_ok(
            "run", "--rm", *RUNTIME, "--entrypoint", "python3", image, "-c",
            "import kubernetes, os; print(*os.listdir(os.path.dirname(kubernetes.__file__)))",
        ).split()  # fmt: skip


def test_oci_config_read_by_skopeo(image):
    skopeo = find_binary("skopeo", package="skopeo")
    image_id = podman_ok("image", "inspect", "--format", "{{.Id}}", image).strip()
    done = subprocess.run(
        [skopeo, "inspect", "--config", f"containers-storage:{image_id}"],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["kube-gpu-exporter"]
    assert "9455/tcp" in config["ExposedPorts"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.title"] == "kube-gpu-exporter"
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.source"].startswith("https://")
    assert any(e.startswith("PYTHONDONTWRITEBYTECODE=") for e in config["Env"])
    assert "MALLOC_ARENA_MAX=2" in config["Env"]
    size = int(podman_ok("image", "inspect", "--format", "{{.Size}}", image))
    assert size < MAX_ON_DISK_BYTES, f"{size / 1e6:.0f} MB on disk"


# Both interpreters: the virtualenv's, and the base's own (the binary the venv links to, run
# outside the venv) with its site-packages, ensurepip's bundled wheels and Debian's copies.
INSTALLER_PROBE = """
import glob, importlib.util, sysconfig
found = [m for m in ("pip", "setuptools", "wheel") if importlib.util.find_spec(m)]
found += glob.glob(sysconfig.get_paths()["stdlib"] + "/ensurepip/_bundled/*.whl")
print(found + glob.glob("/usr/share/python-wheels/*.whl"))
"""


def test_no_installer_or_compiler_in_the_image(image):
    script = (
        "for t in pip pip3 pip3.11 gcc cc c++ g++ clang ld as make; do command -v $t; done; "
        'venv=/opt/kube-gpu-exporter/bin/python3; for py in $venv "$(readlink -f $venv)"; do '
        '$py -c "$0"; done'
    )
    done = podman(
        "run", "--rm", *RUNTIME, "--entrypoint", "sh", image, "-c", script, INSTALLER_PROBE
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"], done.stdout + done.stderr


# ---- unit: no containers ----


DEB822 = """\
Types: deb
# a comment
URIs: http://mirror.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
"""


def _layer(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as layer:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            layer.addfile(info, io.BytesIO(content))
    return buffer.getvalue()

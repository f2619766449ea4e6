"""The container engine that builds here (docker, podman or buildah) and the commands it takes."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# In this order: a working Docker is what most users mean; podman and buildah build the same
# Dockerfile without a daemon.
ENGINES = ("docker", "podman", "buildah")
QUERY_TIMEOUT_S = 30.0
DOCKER_DAEMON_CHECK = ["docker", "version", "--format", "{{.Server.Version}}"]


class ImageError(Exception):
    """What went wrong, in one line for the user."""


@dataclass(frozen=True)
class Engine:
    name: str

    def build(
        self,
        context: Path,
        tags: list[str],
        build_args: dict[str, str],
        secrets: dict[str, Path],
        platform: str | None = None,
    ) -> list[str]:
        # buildah alone keeps no layer cache unless asked; the others do by default.
        command = ["buildah", "bud", "--layers"] if self.name == "buildah" else [self.name, "build"]
        if platform:
            command += ["--platform", platform]
        for tag in tags:
            command += ["--tag", tag]
        for name, value in build_args.items():
            command += ["--build-arg", f"{name}={value}"]
        for name, path in secrets.items():
            command += ["--secret", f"id={name},src={path}"]
        return [*command, str(context)]

    def has_image(self, image: str) -> list[str]:
        if self.name == "buildah":
            return ["buildah", "inspect", "--type", "image", image]
        return [self.name, "image", "inspect", image]

    def architecture(self, image: str) -> list[str]:
        """Prints the architecture a local image was built for (amd64, arm64)."""
        if self.name == "buildah":
            return [
                "buildah",
                "inspect",
                "--type",
                "image",
                "--format",
                "{{.OCIv1.Architecture}}",
                image,
            ]
        return [self.name, "image", "inspect", "--format", "{{.Architecture}}", image]

    def pull(self, image: str, platform: str | None = None) -> list[str]:
        return [self.name, "pull", *(["--platform", platform] if platform else []), image]

    def save(self, image: str, archive: Path) -> list[str]:
        """The image as a docker-archive: one uncompressed tar per layer and the config."""
        if self.name == "buildah":
            return ["buildah", "push", image, f"docker-archive:{archive}"]
        if self.name == "podman":
            return ["podman", "save", "--format", "docker-archive", "--output", str(archive), image]
        return ["docker", "save", "--output", str(archive), image]

    def size_on_disk(self, image: str) -> list[str] | None:
        """None for buildah, which reports no size for images it did not pull."""
        if self.name == "buildah":
            return None
        return [self.name, "image", "inspect", "--format", "{{.Size}}", image]

    def environment(self) -> dict[str, str]:
        # The Dockerfile's build secret is a BuildKit feature; older Dockers need asking.
        return {**os.environ, "DOCKER_BUILDKIT": "1"} if self.name == "docker" else dict(os.environ)


def succeeds(command: list[str], timeout: float = QUERY_TIMEOUT_S) -> bool:
    try:
        return subprocess.run(command, capture_output=True, timeout=timeout).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def output(command: list[str], timeout: float = QUERY_TIMEOUT_S) -> str:
    """The command's stdout; an ImageError naming its last line of stderr when it fails."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ImageError(f"{' '.join(command[:3])} did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise ImageError(f"{' '.join(command[:3])}: {lines[-1]}")
    return done.stdout


def find_engine(wanted: str | None = None) -> Engine:
    """The first engine that works; a Docker client without a daemon does not."""
    skipped = []
    for name in (wanted,) if wanted else ENGINES:
        if shutil.which(name) is None:
            skipped.append(f"no {name}")
        elif name == "docker" and not succeeds(DOCKER_DAEMON_CHECK):
            skipped.append("docker has no daemon answering")
        else:
            return Engine(name)
    raise ImageError(
        f"no container engine to build with ({', '.join(skipped)}): install podman, buildah or "
        "Docker (`make system-deps` installs podman)"
    )

"""The platforms the image is built for, and the names each tool gives their architecture."""

from __future__ import annotations

import platform

from deploy.image.engines import ImageError

# Debian's and OCI's architecture names, to the kernel's (`uname -m`): the image carries the
# first, binfmt_misc and qemu the second.
MACHINES = {"amd64": "x86_64", "arm64": "aarch64"}
PLATFORMS = tuple(f"linux/{arch}" for arch in MACHINES)


def arch_of(wanted: str) -> str:
    """`linux/arm64` -> `arm64`; an ImageError for a platform the image is not built for."""
    os_name, _, arch = wanted.partition("/")
    if os_name != "linux" or arch not in MACHINES:
        raise ImageError(f"--platform {wanted}: the image is built for {' or '.join(PLATFORMS)}")
    return arch


def host_arch() -> str:
    """This machine's architecture by Debian's name; the kernel's where the image has none (the
    Dockerfile still builds natively there)."""
    machine = platform.machine()
    return next((arch for arch, name in MACHINES.items() if name == machine), machine)

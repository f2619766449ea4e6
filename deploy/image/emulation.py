"""Running another architecture's binaries here, through qemu-user-static and binfmt_misc, so
that a build for arm64 can debootstrap its base and run its Dockerfile's steps on an amd64 host.

Idempotent: an interpreter the kernel already has for the architecture is kept as it is.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from deploy.image.engines import ImageError
from deploy.image.platforms import MACHINES, host_arch

BINFMT = Path("/proc/sys/fs/binfmt_misc")
# Debian's qemu-user-static ships one registration line per architecture here.
BINFMT_CONFIGS = Path("/usr/lib/binfmt.d")
MOUNT_TIMEOUT_S = 30


def _registration(machine: str, configs: Path) -> str:
    config = configs / f"qemu-{machine}.conf"
    if not config.is_file():
        raise ImageError(
            f"no {config}: install qemu-user-static to emulate {machine} "
            "(`make system-deps` installs it)"
        )
    for line in config.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            return line.strip()
    raise ImageError(f"{config} holds no binfmt_misc registration line")


def _mount(binfmt: Path) -> None:
    if (binfmt / "register").exists():
        return
    try:
        done = subprocess.run(
            ["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)],
            capture_output=True,
            text=True,
            timeout=MOUNT_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ImageError(f"cannot mount binfmt_misc at {binfmt}: {exc}") from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ImageError(f"cannot mount binfmt_misc at {binfmt}: {said}")


def _check_entry(entry: Path) -> None:
    text = entry.read_text()
    if text.startswith("disabled"):
        raise ImageError(f"{entry} is disabled: `echo 1 > {entry}` turns it on")
    flags = next(
        (line.split(":", 1)[1] for line in text.splitlines() if line.startswith("flags:")), ""
    )
    # Without F the kernel looks the interpreter up inside each container's root filesystem,
    # where there is none, and every emulated step fails with "no such file or directory".
    if "F" not in flags:
        raise ImageError(
            f"{entry} was registered without the F flag, which containers need: "
            f"`echo -1 > {entry}`, then build again"
        )


def ensure(arch: str, binfmt: Path = BINFMT, configs: Path = BINFMT_CONFIGS) -> None:
    """Make this machine run `arch` binaries (a no-op for its own architecture), or say in one
    line why it cannot."""
    if arch == host_arch():
        return
    machine = MACHINES[arch]
    entry = binfmt / f"qemu-{machine}"
    if not entry.exists():
        line = _registration(machine, configs)
        if os.geteuid() != 0:
            raise ImageError(
                f"emulating {arch} needs root once, to register qemu with binfmt_misc: "
                f"run the build as root, or write {configs}/qemu-{machine}.conf's line to "
                f"{binfmt}/register yourself"
            )
        _mount(binfmt)
        if not entry.exists():
            try:
                (binfmt / "register").write_text(line + "\n")
            except OSError as exc:
                # Another build may have registered it since the check above.
                if not entry.exists():
                    raise ImageError(
                        f"cannot register qemu-{machine} with binfmt_misc: {exc}"
                    ) from None
        if not entry.exists():
            raise ImageError(f"registered qemu-{machine}, yet the kernel lists no {entry}")
    _check_entry(entry)

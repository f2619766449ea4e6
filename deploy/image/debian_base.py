"""A Python base image made here from Debian packages, for machines that reach a Debian mirror but
no container registry. It stands in for python:3.11-slim-bookworm: the same Debian release, a
Python 3.11 with venv, nothing else. It is built for building and testing the exporter's image,
not for shipping: debootstrap installs the release as published, without its security updates.

It is built once per recipe and architecture: its tag carries both, with a hash of everything
below, and an image with that tag is reused. For another architecture than this machine's,
debootstrap's second stage runs under qemu (deploy/image/emulation.py), and the packages it
downloaded stay in build/debootstrap/, so that a changed recipe only unpacks them again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from deploy.image import emulation
from deploy.image.engines import Engine, ImageError, succeeds
from deploy.image.platforms import host_arch

NAME = "kube-gpu-exporter-base"
ALIAS = "debian-local"
SUITE = "bookworm"
PACKAGES = ("python3", "python3-venv")
# What a slim image leaves out too: package caches and lists, logs, documentation, translations,
# and the build host's own name and resolver (the runtime provides both).
TRIMMED = (
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*",
    "var/log/*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
    "etc/hostname",
    "etc/resolv.conf",
)
CONTAINERFILE = """\
FROM scratch
ADD rootfs.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\
    LANG=C.UTF-8
CMD ["python3"]
"""
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
DEBOOTSTRAP_TIMEOUT_S = 1800
PACKAGE_CACHE = Path(__file__).resolve().parents[2] / "build" / "debootstrap"


def tag(arch: str | None = None) -> str:
    arch = arch or host_arch()
    recipe = json.dumps([SUITE, arch, "minbase", PACKAGES, TRIMMED, CONTAINERFILE]).encode()
    return f"{NAME}:{SUITE}-{arch}-{hashlib.sha256(recipe).hexdigest()[:12]}"


def _source_files(paths: Iterable[Path]) -> list[Path]:
    files = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".list", ".sources"))
        elif path.is_file():
            files.append(path)
    return files


def _entries(text: str, deb822: bool) -> Iterable[tuple[list[str], list[str], list[str]]]:
    """(URIs, suites, components) of each `deb` entry, in either apt format."""
    if not deb822:
        for line in text.splitlines():
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 4 and words[0] == "deb":
                yield [words[1]], [words[2]], words[3:]
        return
    for paragraph in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line.startswith("#") or ":" not in line:
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
            yield (
                fields.get("uris", "").split(),
                fields.get("suites", "").split(),
                fields.get("components", "").split(),
            )


def mirror(paths: Iterable[Path] = APT_SOURCES) -> str:
    """The Debian mirror this machine's apt uses: the first `main` archive of a release (not of
    its -security or -updates pockets), which serves every release."""
    for file in _source_files(paths):
        for uris, suites, components in _entries(file.read_text(), file.suffix == ".sources"):
            if "main" in components and any("-" not in s and "/" not in s for s in suites):
                usable = [u for u in uris if not u.startswith("cdrom:")]
                if usable:
                    return usable[0]
    raise ImageError(
        "found no Debian mirror in /etc/apt/sources.list*: pass --mirror URL for debootstrap"
    )


def _step(what: str, command: list[str], **kwargs) -> None:
    print(f"deploy.image: {what}", file=sys.stderr, flush=True)
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise ImageError(f"{what} failed: {command[0]} exited with status {done.returncode}")


def _trim(root: Path) -> None:
    for pattern in TRIMMED:
        for path in root.glob(pattern):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()


def build(engine: Engine, image: str, mirror_url: str, arch: str) -> None:
    if os.geteuid() != 0:
        raise ImageError("building the Debian base needs root (debootstrap): run it as root")
    if shutil.which("debootstrap") is None:
        raise ImageError("building the Debian base needs debootstrap: apt-get install debootstrap")
    emulation.ensure(arch)
    emulated = arch != host_arch()
    packages = PACKAGE_CACHE / f"{SUITE}-{arch}"
    packages.mkdir(parents=True, exist_ok=True)
    scratch = "/var/tmp" if os.access("/var/tmp", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="kube-gpu-exporter-base-", dir=scratch) as work:
        root, context = Path(work) / "rootfs", Path(work) / "context"
        context.mkdir()
        started = time.monotonic()
        _step(
            f"debootstrap {SUITE} for {arch} from {mirror_url} "
            f"({'several minutes under emulation' if emulated else 'about a minute'})",
            [
                "debootstrap",
                # Natively debootstrap's own default, which knows names the image has none for.
                *([f"--arch={arch}"] if emulated else []),
                f"--cache-dir={packages}",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                SUITE,
                str(root),
                mirror_url,
            ],
            timeout=DEBOOTSTRAP_TIMEOUT_S,
        )
        debootstrapped = time.monotonic()
        _trim(root)
        # Device nodes come from the runtime; numeric owners keep the image's ids the rootfs's.
        tar = ["tar", "-C", str(root), "--numeric-owner", "--exclude=./dev/*"]
        _step("packing the root filesystem", [*tar, "-cf", str(context / "rootfs.tar"), "."])
        (context / "Dockerfile").write_text(CONTAINERFILE)
        _step(
            f"building {image}",
            engine.build(context, [image], {}, {}, f"linux/{arch}" if emulated else None),
            env=engine.environment(),
        )
        print(
            f"deploy.image: {image} built: debootstrap {debootstrapped - started:.0f} s, "
            f"image {time.monotonic() - debootstrapped:.0f} s",
            file=sys.stderr,
        )


def ensure(engine: Engine, mirror_url: str | None = None, arch: str | None = None) -> str:
    """The base's tag for `arch` (default: this machine's), built first unless an image with it
    exists."""
    arch = arch or host_arch()
    image = tag(arch)
    if succeeds(engine.has_image(image)):
        print(f"deploy.image: reusing {image}", file=sys.stderr)
    else:
        build(engine, image, mirror_url or mirror(), arch)
    return image

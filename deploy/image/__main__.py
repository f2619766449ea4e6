"""`make image`: build the exporter's image with docker, podman or buildah."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from deploy.image import debian_base, emulation, manifest
from deploy.image.engines import ENGINES, Engine, ImageError, find_engine, output, succeeds
from deploy.image.measure import measure, report
from deploy.image.platforms import PLATFORMS, arch_of, host_arch

ROOT = Path(__file__).resolve().parents[2]
NAME = "kube-gpu-exporter"
CA_BUNDLE_VARIABLES = ("PIP_CERT", "SSL_CERT_FILE", "REQUESTS_CA_BUNDLE")
BUILD_TIMEOUT_S = 1800


def version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def default_base() -> str:
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (ROOT / "Dockerfile").read_text(), re.M)
    if match is None:
        raise ImageError("the Dockerfile has no ARG PYTHON_IMAGE=<default>")
    return match.group(1)


def ca_bundle(given: str | None) -> Path | None:
    """The CA bundle pip trusts inside the build: given, or the one this machine tells its own
    Python tools to use (networks that inspect TLS need it); None for pip's own."""
    candidates = [given] if given else [os.environ.get(v) for v in CA_BUNDLE_VARIABLES]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    if given:
        raise ImageError(f"--ca-bundle {given}: no such file")
    return None


def _has_image_for(engine: Engine, image: str, arch: str) -> bool:
    return succeeds(engine.has_image(image)) and output(engine.architecture(image)).strip() == arch


def resolve_base(
    engine: Engine, base: str | None, mirror: str | None, platform: str | None = None
) -> str | None:
    """The PYTHON_IMAGE build argument; None keeps the Dockerfile's default, pulled first so
    that an unreachable registry is one line rather than a failed build."""
    arch = arch_of(platform) if platform else host_arch()
    if base == debian_base.ALIAS:
        return debian_base.ensure(engine, mirror, arch)
    if base:
        return base
    image = default_base()
    # A copy pulled for another architecture is no base for this one.
    if not _has_image_for(engine, image, arch) and not succeeds(
        engine.pull(image, platform), timeout=600
    ):
        raise ImageError(
            f"cannot pull the base {image} (no registry reachable?): "
            f"`make image BASE={debian_base.ALIAS}` builds on a Python base made here from "
            "Debian packages, BASE=<image> on another Python 3.11 image"
        )
    return None


def default_tags(without_kubernetes: bool, platform: str | None) -> list[str]:
    suffix = "-no-kubernetes" if without_kubernetes else ""
    # Each platform's image under a tag of its own, which the manifest list then names: one
    # platform's build never replaces another's.
    suffix += f"-{arch_of(platform)}" if platform else ""
    return [f"{NAME}:{version()}{suffix}", f"{NAME}:latest{suffix}"]


def build(args: argparse.Namespace, platform: str | None = None) -> str:
    """The image for `platform` (default: args.platform, else this machine's, untagged by
    architecture); its first tag."""
    platform = platform or args.platform
    engine = find_engine(args.engine)
    if platform:
        # Before the base: debootstrap for another architecture runs its binaries too.
        emulation.ensure(arch_of(platform))
    base = resolve_base(engine, args.base, args.mirror, platform)
    tags = (args.tag if not args.multiarch else None) or default_tags(
        args.without_kubernetes, platform
    )
    build_args = {"VERSION": version()}
    if base:
        build_args["PYTHON_IMAGE"] = base
    if args.without_kubernetes:
        build_args["WITH_KUBERNETES"] = "false"
    bundle = ca_bundle(args.ca_bundle)
    secrets = {"ca-bundle": bundle} if bundle else {}
    command = engine.build(ROOT, tags, build_args, secrets, platform)
    print(f"deploy.image: {' '.join(command)}", file=sys.stderr, flush=True)
    started = time.monotonic()
    try:
        status = subprocess.run(
            command, cwd=ROOT, env=engine.environment(), timeout=BUILD_TIMEOUT_S
        ).returncode
    except subprocess.TimeoutExpired:
        raise ImageError(f"the build did not finish in {BUILD_TIMEOUT_S} s") from None
    if status != 0:
        raise ImageError(f"{engine.name} could not build the image (exit status {status})")
    print(
        f"deploy.image: built {', '.join(tags)} with {engine.name} "
        f"for {platform or 'linux/' + host_arch()} on "
        f"{base or default_base()} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    if args.measure:
        print(report(tags[0], measure(engine, tags[0])))
    return tags[0]


def build_multiarch(args: argparse.Namespace) -> str:
    """An image per platform, then the manifest list over them; the list's name."""
    engine = find_engine(args.engine)
    suffix = "-no-kubernetes" if args.without_kubernetes else ""
    name = args.tag[0] if args.tag else f"{NAME}:{version()}{suffix}-multiarch"
    # Docker is refused before the builds, not after them.
    manifest.commands(engine, name, [])
    images = [build(args, platform) for platform in PLATFORMS]
    manifest.create(engine, name, images)
    print(
        f"deploy.image: manifest list {name} of {', '.join(images)}; push both with "
        f"`{engine.name} manifest push --all {name} docker://<registry>/{NAME}:<tag>`",
        file=sys.stderr,
    )
    return name


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m deploy.image", description="Build the kube-gpu-exporter image."
    )
    parser.add_argument("--engine", choices=ENGINES, help="default: the first that works")
    parser.add_argument(
        "--base",
        help=f"the Python image to build on (default: the Dockerfile's); {debian_base.ALIAS}: "
        "one made here from Debian packages with debootstrap, for machines with no registry",
    )
    parser.add_argument("--mirror", help="the Debian mirror for debootstrap (default: apt's)")
    parser.add_argument(
        "--tag", action="append", help=f"default: {NAME}:<version> and {NAME}:latest"
    )
    parser.add_argument(
        "--without-kubernetes",
        action="store_true",
        help="leave out the kubernetes client (no --kubernetes); tags end in -no-kubernetes",
    )
    parser.add_argument(
        "--ca-bundle",
        help=f"CA bundle for pip in the build (default: ${' or $'.join(CA_BUNDLE_VARIABLES)})",
    )
    parser.add_argument(
        "--measure", action="store_true", help="then print its size, per layer and package"
    )
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--platform",
        choices=PLATFORMS,
        help="build for this platform, under qemu where it is not this machine's; tags end in "
        "-<arch> (default: this machine's, tags without it)",
    )
    target.add_argument(
        "--multiarch",
        action="store_true",
        help=f"an image for each of {', '.join(PLATFORMS)}, then a manifest list over them, "
        f"named by --tag (default: {NAME}:<version>-multiarch); podman or buildah",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.multiarch and args.tag and len(args.tag) > 1:
        print("deploy.image: error: --multiarch takes one --tag, the list's name", file=sys.stderr)
        return 2
    try:
        build_multiarch(args) if args.multiarch else build(args)
    except ImageError as exc:
        print(f"deploy.image: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

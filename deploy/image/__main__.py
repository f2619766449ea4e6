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

from deploy.image import debian_base
from deploy.image.engines import ENGINES, Engine, ImageError, find_engine, succeeds
from deploy.image.measure import measure, report

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


def resolve_base(engine: Engine, base: str | None, mirror: str | None) -> str | None:
    """The PYTHON_IMAGE build argument; None keeps the Dockerfile's default, pulled first so
    that an unreachable registry is one line rather than a failed build."""
    if base == debian_base.ALIAS:
        return debian_base.ensure(engine, mirror)
    if base:
        return base
    image = default_base()
    if not succeeds(engine.has_image(image)) and not succeeds(engine.pull(image), timeout=600):
        raise ImageError(
            f"cannot pull the base {image} (no registry reachable?): "
            f"`make image BASE={debian_base.ALIAS}` builds on a Python base made here from "
            "Debian packages, BASE=<image> on another Python 3.11 image"
        )
    return None


def build(args: argparse.Namespace) -> str:
    engine = find_engine(args.engine)
    base = resolve_base(engine, args.base, args.mirror)
    suffix = "-no-kubernetes" if args.without_kubernetes else ""
    tags = args.tag or [f"{NAME}:{version()}{suffix}", f"{NAME}:latest{suffix}"]
    build_args = {"VERSION": version()}
    if base:
        build_args["PYTHON_IMAGE"] = base
    if args.without_kubernetes:
        build_args["WITH_KUBERNETES"] = "false"
    bundle = ca_bundle(args.ca_bundle)
    secrets = {"ca-bundle": bundle} if bundle else {}
    command = engine.build(ROOT, tags, build_args, secrets)
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
        f"deploy.image: built {', '.join(tags)} with {engine.name} on "
        f"{base or default_base()} in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    if args.measure:
        print(report(tags[0], measure(engine, tags[0])))
    return tags[0]


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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        build(args)
    except ImageError as exc:
        print(f"deploy.image: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

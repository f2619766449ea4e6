"""What the image costs: on disk, compressed as a registry stores it (each layer gzipped), per
layer, and inside the virtualenv per top-level package. Read from the image saved as a
docker-archive, so it is the same for every engine."""

from __future__ import annotations

import json
import re
import tarfile
import tempfile
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from deploy.image.engines import Engine, output

SITE_PACKAGES = re.compile(r"^(?:\./)?opt/kube-gpu-exporter/lib/python3[^/]*/site-packages/([^/]+)")
# Registries store layers gzipped. zlib at its default level 6 stands in for the pushing tool's
# gzip: Go's, which docker, podman and skopeo use, writes about 5 % more.
GZIP_LEVEL = 6
CHUNK = 1 << 20


@dataclass(frozen=True)
class Layer:
    created_by: str
    size: int
    compressed: int


@dataclass
class Measurement:
    on_disk: int
    layers: list[Layer]
    # Top-level name in site-packages (a package, a module, or "*.dist-info" for all metadata).
    packages: Counter[str] = field(default_factory=Counter)

    @property
    def compressed(self) -> int:
        return sum(layer.compressed for layer in self.layers)


def gzipped_size(stream: IO[bytes]) -> int:
    compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 31)  # 31: a gzip header
    size = 0
    while chunk := stream.read(CHUNK):
        size += len(compressor.compress(chunk))
    return size + len(compressor.flush())


def _package_of(name: str) -> str | None:
    match = SITE_PACKAGES.match(name)
    if match is None:
        return None
    top = match.group(1)
    return "*.dist-info" if top.endswith(".dist-info") else top


def read_archive(archive: Path, on_disk: int | None = None) -> Measurement:
    """`on_disk` as the engine reports it; without it, the sum of the layers' file sizes."""
    with tarfile.open(archive) as outer:
        manifest = json.load(_member(outer, "manifest.json"))[0]
        config = json.load(_member(outer, manifest["Config"]))
        # Each history entry that made a layer, in the layers' order.
        made = [h for h in config.get("history", []) if not h.get("empty_layer")]
        measurement = Measurement(0, [])
        for index, name in enumerate(manifest["Layers"]):
            compressed = gzipped_size(_member(outer, name))
            size = 0
            with tarfile.open(fileobj=_member(outer, name)) as layer:
                for member in layer:
                    if member.isfile():
                        size += member.size
                        if package := _package_of(member.name):
                            measurement.packages[package] += member.size
            created_by = made[index].get("created_by", "") if index < len(made) else ""
            measurement.layers.append(Layer(created_by, size, compressed))
    measurement.on_disk = on_disk or sum(layer.size for layer in measurement.layers)
    return measurement


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    stream = archive.extractfile(name)
    if stream is None:
        raise ValueError(f"{name} is not a file in the image archive")
    return stream


def measure(engine: Engine, image: str) -> Measurement:
    asked = engine.size_on_disk(image)
    on_disk = int(output(asked).strip()) if asked else None
    with tempfile.TemporaryDirectory(prefix="kube-gpu-exporter-measure-") as work:
        archive = Path(work) / "image.tar"
        output(engine.save(image, archive), timeout=600)
        return read_archive(archive, on_disk)


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def report(image: str, measurement: Measurement, top: int = 15) -> str:
    lines = [
        f"{image}: {megabytes(measurement.on_disk)} on disk, "
        f"{megabytes(measurement.compressed)} compressed",
        "layers (files, gzipped, made by):",
    ]
    for layer in measurement.layers:
        made_by = re.sub(r"\s+", " ", layer.created_by.replace("/bin/sh -c #(nop) ", ""))
        lines.append(
            f"  {megabytes(layer.size):>10} {megabytes(layer.compressed):>10}  {made_by[:70]}"
        )
    total = sum(measurement.packages.values())
    lines.append(f"virtualenv site-packages: {megabytes(total)}, the largest:")
    for name, size in measurement.packages.most_common(top):
        lines.append(f"  {megabytes(size):>10}  {name}")
    return "\n".join(lines)

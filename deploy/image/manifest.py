"""A multi-arch manifest list over images built here for each platform, made with podman or
buildah (Docker makes one only while pushing, with buildx)."""

from __future__ import annotations

from deploy.image.engines import Engine, ImageError, output, succeeds


def _local(image: str) -> str:
    """The name podman and buildah store an image under: a tag without a registry host is
    theirs as localhost/, while containers-storage: alone would read it as docker.io's."""
    first = image.split("/", 1)[0]
    has_host = "/" in image and ("." in first or ":" in first or first == "localhost")
    return image if has_host else f"localhost/{image}"


def commands(engine: Engine, name: str, images: list[str]) -> list[list[str]]:
    """What makes `name` anew from `images`: each image's own platform is read from its config,
    so the list needs no --arch."""
    if engine.name == "docker":
        raise ImageError(
            "a multi-arch manifest is made here with podman or buildah (ENGINE=podman); "
            "Docker makes one only while pushing (docker buildx build --platform ... --push)"
        )
    made = [[engine.name, "manifest", "create", name]]
    # containers-storage: so that the local image is added, never one looked up in a registry.
    made += [
        [engine.name, "manifest", "add", name, f"containers-storage:{_local(i)}"] for i in images
    ]
    return made


def create(engine: Engine, name: str, images: list[str]) -> None:
    steps = commands(engine, name, images)
    # A list of the same name from an earlier run would keep its old entries beside the new.
    if succeeds([engine.name, "manifest", "exists", name]):
        output([engine.name, "manifest", "rm", name])
    for step in steps:
        output(step)

"""Build, and measure, the exporter's container image with whichever engine the machine has.

    python -m deploy.image                      docker, podman or buildah; the Dockerfile's base
    python -m deploy.image --base debian-local  a Python base made here from Debian packages
    python -m deploy.image --measure            then its size: on disk, compressed, per layer and
                                                per package of the virtualenv

`make image` runs the first line; see `python -m deploy.image --help` for the rest.
"""

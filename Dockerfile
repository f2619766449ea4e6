# kube-gpu-exporter container image. Two stages: the first builds a virtualenv from the wheel, the
# second is a plain slim Python with that virtualenv copied in: no compilers, no pip, no build
# tools. Every dependency ships manylinux wheels, so nothing is compiled at all.
#
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container runtime mounts the host
# driver's copy together with /dev/nvidia* when NVIDIA_VISIBLE_DEVICES is set (see deploy/).
#
# `make image` builds it; `make image BASE=debian-local` builds on a base made from Debian
# packages where no registry is reachable (python3 rather than python below works on both).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
RUN python3 -m venv /opt/kube-gpu-exporter
COPY pyproject.toml ./
# false: no `kubernetes` client (and its pydantic/requests/oauthlib tree), so no --kubernetes.
# Declared here, late, so that both variants share the cached steps above.
ARG WITH_KUBERNETES=true
# The requirements come from pyproject.toml, with the [simulator] extra (--simulate works in the
# image) and less the client when it is not wanted. Installed before the exporter's own code is
# copied in, so that a change to the code reuses this layer: under emulation (an arm64 build on
# amd64) it is the slowest step. --only-binary: every dependency must come as a wheel for the
# platform built for (manylinux x86_64 or aarch64), so the build fails, rather than reach for a
# compiler the image does not have, where one does not.
# A CA bundle given as the `ca-bundle` build secret is trusted by pip for these steps only
# (networks that inspect TLS) and never lands in a layer.
RUN --mount=type=secret,id=ca-bundle,required=false \
    set -eu; venv=/opt/kube-gpu-exporter; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi; \
    "$venv/bin/python" -c 'import sys, tomllib; \
        kube = sys.argv[1] != "false"; \
        project = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
        deps = project["dependencies"] + project["optional-dependencies"]["simulator"]; \
        print("\n".join(d for d in deps if kube or not d.startswith("kubernetes")))' \
        "$WITH_KUBERNETES" > requirements.txt; \
    "$venv/bin/pip" install --no-cache-dir --only-binary=:all: --requirement requirements.txt
COPY README.md ./
COPY kube_gpu_exporter ./kube_gpu_exporter
# The wheel's one package also carries the bundle generator and the hand-written files it reads;
# they are needed to build the wheel, and removed below with the rest the exporter never uses.
COPY alerts ./alerts
COPY deploy/helm ./deploy/helm
# The wheel then goes in without resolving again. Then what the running exporter never uses
# goes: the bundle generator (it needs grafanalib, which the image lacks), pip, setuptools and
# wheel, the dependencies' own test suites, and the kubernetes client's asyncio twin,
# kubernetes.aio (66 MB, a third of the virtualenv): the exporter uses the synchronous client,
# and nothing outside kubernetes.aio imports it. Bytecode is compiled once,
# here, because the root filesystem is read-only at run time; pip already compiled what it
# installed, so compileall only fills gaps.
RUN --mount=type=secret,id=ca-bundle,required=false \
    set -eu; venv=/opt/kube-gpu-exporter; \
    if [ -s /run/secrets/ca-bundle ]; then export PIP_CERT=/run/secrets/ca-bundle; fi; \
    "$venv/bin/pip" install --no-cache-dir --no-deps .; \
    "$venv/bin/python" -m pip uninstall --yes --quiet pip setuptools wheel; \
    site="$(echo "$venv"/lib/python3*/site-packages)"; \
    find "$site" -mindepth 2 -type d -name tests -prune -exec rm -rf {} +; \
    rm -rf "$site/kubernetes/aio" "$site/kube_gpu_exporter/bundle"; \
    "$venv/bin/python" -m compileall -q "$venv"

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kube-gpu-exporter" \
      org.opencontainers.image.description="NVIDIA GPU exporter for Kubernetes with dcgm-exporter-compatible metrics and pod attribution" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube-gpu-exporter/kube-gpu-exporter" \
      org.opencontainers.image.documentation="https://github.com/kube-gpu-exporter/kube-gpu-exporter#deploy-on-kubernetes"
# The base's own installer goes too (python:*-slim keeps pip, setuptools and wheel in its
# site-packages and ensurepip's wheels, Debian's python3-venv its copies of them): nothing
# installs anything at run time.
RUN rm -rf /usr/local/bin/pip* /usr/local/lib/python3*/site-packages/pip* \
        /usr/local/lib/python3*/site-packages/setuptools* \
        /usr/local/lib/python3*/site-packages/wheel* \
        /usr/local/lib/python3*/ensurepip/_bundled /usr/share/python-wheels
COPY --from=build /opt/kube-gpu-exporter /opt/kube-gpu-exporter
ENV PATH=/opt/kube-gpu-exporter/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility \
    MALLOC_ARENA_MAX=2
# MALLOC_ARENA_MAX: glibc gives each of the exporter's ~36 threads a malloc arena of its own, and
# RSS crept up by 6.8 MB over a 100,000-sweep soak; with two arenas it settled at +2.9 MB
# (benchmarks/soak.py). The threads mostly hold the GIL, so they lose nothing by sharing.
# Non-root by default: NVML works unprivileged through the runtime's device nodes. Reading the
# kubelet's pod-resources socket needs root on most nodes; deploy/ sets runAsUser: 0 for that.
USER 65532:65532
EXPOSE 9455
ENTRYPOINT ["kube-gpu-exporter"]

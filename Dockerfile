# kube-gpu-exporter container image. Two stages: the first builds a virtualenv from the wheel, the
# second is a plain slim Python with that virtualenv copied in: no compilers, no pip cache, no
# build tools. Every dependency ships manylinux wheels, so nothing is compiled at all.
#
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container runtime mounts the host
# driver's copy together with /dev/nvidia* when NVIDIA_VISIBLE_DEVICES is set (see deploy/).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
RUN python -m venv /opt/kube-gpu-exporter
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# Bytecode is compiled here because the running container's root filesystem is read-only; pip and
# setuptools (24 MB) are not needed at run time.
RUN /opt/kube-gpu-exporter/bin/pip install --no-cache-dir . \
    && /opt/kube-gpu-exporter/bin/python -m pip uninstall --yes pip setuptools \
    && /opt/kube-gpu-exporter/bin/python -m compileall -q /opt/kube-gpu-exporter

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kube-gpu-exporter" \
      org.opencontainers.image.description="NVIDIA GPU exporter for Kubernetes with dcgm-exporter-compatible metrics and pod attribution" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/kube-gpu-exporter/kube-gpu-exporter" \
      org.opencontainers.image.documentation="https://github.com/kube-gpu-exporter/kube-gpu-exporter#deploy-on-kubernetes"
COPY --from=build /opt/kube-gpu-exporter /opt/kube-gpu-exporter
ENV PATH=/opt/kube-gpu-exporter/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# Non-root by default: NVML works unprivileged through the runtime's device nodes. Reading the
# kubelet's pod-resources socket needs root on most nodes; deploy/ sets runAsUser: 0 for that.
USER 65532:65532
EXPOSE 9455
ENTRYPOINT ["kube-gpu-exporter"]

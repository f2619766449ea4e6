"""The one place that imports `pynvml`, checks it is the right package, and names its errors."""

from __future__ import annotations

import pynvml

from kube_gpu_exporter.exporter.nvml.source import NvmlSource

NVMLError = pynvml.NVMLError

# Errors that mean "this device or driver will never answer this call": remembered, never retried.
PERMANENTLY_UNAVAILABLE: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
)
GPU_GONE: tuple[type[BaseException], ...] = (pynvml.NVMLError_GpuIsLost,)

_ERROR_NAMES: dict[int, str] = {
    getattr(pynvml, name): name.removeprefix("NVML_ERROR_")
    for name in dir(pynvml)
    if name.startswith("NVML_ERROR_") and isinstance(getattr(pynvml, name), int)
}


def error_name(exc: BaseException) -> str:
    """NVML's constant suffix for an error ("NOT_SUPPORTED"), stable across binding versions."""
    value = getattr(exc, "value", None)
    if isinstance(value, int):
        return _ERROR_NAMES.get(value, f"CODE_{value}")
    return type(exc).__name__


def check_binding() -> str | None:
    """Return a problem description if `pynvml` is not nvidia-ml-py's single-module binding.

    The deprecated `pynvml` PyPI package (<= 11.5.3) ships a package directory that shadows
    nvidia-ml-py's `pynvml.py` and silently gives old bindings.
    """
    path = getattr(pynvml, "__file__", "") or ""
    if not path.endswith("pynvml.py"):
        return (
            f"the pynvml module at {path!r} is not nvidia-ml-py's pynvml.py; "
            "uninstall the 'pynvml' PyPI package and install 'nvidia-ml-py'"
        )
    return None


def real_nvml() -> NvmlSource:
    """What the poller calls on a real node: nvidia-ml-py's module itself, whose functions reach
    the driver's libnvidia-ml.so.1."""
    return NvmlSource(api=pynvml)

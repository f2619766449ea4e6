"""The fake Kubernetes API lives in the package, where `--simulate --kubernetes` serves from it;
the tests keep importing it from here."""

from exporter.simulator.fake_kube_api import (
    SLICE_VERSIONS,
    SLICES,
    FakeKubeApi,
    as_v1beta1,
    slice_device,
    write_kubeconfig,
)

__all__ = [
    "SLICES",
    "SLICE_VERSIONS",
    "FakeKubeApi",
    "as_v1beta1",
    "slice_device",
    "write_kubeconfig",
]

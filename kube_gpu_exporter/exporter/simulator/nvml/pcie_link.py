"""The PCIe link getters (nvmlDeviceGet{Curr,Max}PcieLink{Generation,Width}) and
nvmlDeviceGetP2PStatus, as the simulated boards answer them.

Every simulated board sits in a x16 slot of its own generation, so it trains at its maximum
unless the control API's `pcie-downtrain` says otherwise (FakeNvml.set_pcie_downtrain). The
current generation does not drop when the board idles, as a real one's may (dynamic link
speed): the verdict compares the generation only under load either way (health/verdict.py).

P2P over NVLink (NVML_P2P_CAPS_INDEX_NVLINK): OK between two boards with NVLink, NOT_SUPPORTED
where either has none, which is what `nvidia-smi topo -p2p n` shows ("NS") on PCIe-only boards;
a lost board answers GPU_IS_LOST, from either side.
"""

from __future__ import annotations

from typing import Any

import pynvml

from kube_gpu_exporter.exporter.simulator.gpu_models import ARCH_AMPERE, ARCH_HOPPER, GpuModel
from kube_gpu_exporter.exporter.simulator.nvml.core import NvmlCore, nvml_call
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu

X16 = 16


def max_generation(model: GpuModel) -> int:
    """The board's PCIe generation: 3 before Ampere (the T4), 4 for Ampere and Ada, 5 from
    Hopper (the simulated slots match the board, so the system allows it)."""
    if model.architecture < ARCH_AMPERE:
        return 3
    return 5 if model.architecture >= ARCH_HOPPER else 4


class PcieLinkCalls(NvmlCore):
    # GPU index -> (generation, width) the link trained at instead of its maximum; None in
    # either place: that one is at its maximum.
    _pcie_downtrained: dict[int, tuple[int | None, int | None]]

    def set_pcie_downtrain(self, index: int, generation: int | None, width: int | None) -> None:
        """Make GPU `index`'s link train at `generation` and `width` (None: the maximum). A
        value above the maximum is refused: a link never trains past its slot."""
        gpu = self.gpus[index]
        if generation is not None and not 1 <= generation <= max_generation(gpu.model):
            raise ValueError(f"generation {generation} is outside 1..{max_generation(gpu.model)}")
        if width is not None and width not in (1, 2, 4, 8, X16):
            raise ValueError(f"width {width} is not one of 1, 2, 4, 8, 16")
        self._downtrains()[index] = (generation, width)

    def _downtrains(self) -> dict[int, tuple[int | None, int | None]]:
        # Made on first use, so the mixin needs no constructor of its own.
        if not hasattr(self, "_pcie_downtrained"):
            self._pcie_downtrained = {}
        return self._pcie_downtrained

    def _current(self, gpu: SimGpu) -> tuple[int, int]:
        generation, width = self._downtrains().get(gpu.index, (None, None))
        return generation or max_generation(gpu.model), width or X16

    @nvml_call()
    def nvmlDeviceGetMaxPcieLinkGeneration(self, gpu: SimGpu, instance: None) -> int:
        return max_generation(gpu.model)

    @nvml_call()
    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: SimGpu, instance: None) -> int:
        return X16

    @nvml_call()
    def nvmlDeviceGetCurrPcieLinkGeneration(self, gpu: SimGpu, instance: None) -> int:
        return self._current(gpu)[0]

    @nvml_call()
    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: SimGpu, instance: None) -> int:
        return self._current(gpu)[1]

    @nvml_call()
    def nvmlDeviceGetP2PStatus(
        self, gpu: SimGpu, instance: None, peer_handle: Any, caps_index: int
    ) -> int:
        peer, peer_instance = self.resolve(peer_handle)
        if peer_instance is not None:
            raise pynvml.NVMLError_NotSupported()
        if peer.lost:
            raise pynvml.NVMLError_GpuIsLost()
        if caps_index != pynvml.NVML_P2P_CAPS_INDEX_NVLINK:
            # Only the NVLink index is modelled (the only one the exporter asks).
            raise pynvml.NVMLError_NotSupported()
        if gpu.model.nvlink_links and peer.model.nvlink_links:
            return int(pynvml.NVML_P2P_STATUS_OK)
        return int(pynvml.NVML_P2P_STATUS_NOT_SUPPORTED)

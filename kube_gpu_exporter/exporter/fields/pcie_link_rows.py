"""The field-table rows of the GPU's PCIe link: the generation and width it trained at, and the
most it could train at in this slot (the verdict's `pcie_downtrained`,
kube_gpu_exporter/exporter/health/).

Off by default as families, as in dcgm-exporter (its default CSV lists none of them); the device
reader reads them anyway, because the health verdict needs them (health/verdict.INPUT_FIELDS).
They change only when the link retrains, so they go with the slow fields.

The maximum generation is `nvmlDeviceGetMaxPcieLinkGeneration`, the most "possible with this
device and system" (a Gen5 board in a Gen4 slot answers 4), not
`nvmlDeviceGetGpuMaxPcieLinkGeneration`, the board's own capability: a link can never train
past its slot, so comparing against the board alone would call every board in an older slot
downtrained for ever. The maximum width is the same kind of answer (device and system).
"""

from __future__ import annotations

from kube_gpu_exporter.exporter.fields.model import Cadence, DcgmField, Getter, Scope

PCIE_MAX_LINK_GEN = "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"
PCIE_MAX_LINK_WIDTH = "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"
PCIE_LINK_GEN = "DCGM_FI_DEV_PCIE_LINK_GEN"
PCIE_LINK_WIDTH = "DCGM_FI_DEV_PCIE_LINK_WIDTH"

# (DCGM name, DCGM id, the NVML getter, HELP).
_ROWS = (
    (
        PCIE_MAX_LINK_GEN,
        235,
        "nvmlDeviceGetMaxPcieLinkGeneration",
        "The highest PCIe generation the link can train at with this board in this slot.",
    ),
    (
        PCIE_MAX_LINK_WIDTH,
        236,
        "nvmlDeviceGetMaxPcieLinkWidth",
        "The widest PCIe link (lanes) possible with this board in this slot.",
    ),
    (
        PCIE_LINK_GEN,
        237,
        "nvmlDeviceGetCurrPcieLinkGeneration",
        "The PCIe generation the link runs at now (an idle board may run lower to save power).",
    ),
    (
        PCIE_LINK_WIDTH,
        238,
        "nvmlDeviceGetCurrPcieLinkWidth",
        "The PCIe link width (lanes) the link trained at.",
    ),
)


def _row(name: str, field_id: int, function: str, help_text: str) -> DcgmField:
    return DcgmField(
        name=name,
        field_id=field_id,
        source=Getter(name.removeprefix("DCGM_FI_DEV_").lower(), (function,)),
        native_unit="count",
        unit="count",
        kind="gauge",
        help=help_text,
        scope=Scope.GPU,
        cadence=Cadence.SLOW,
        default=False,
    )


PCIE_LINK_FIELDS: tuple[DcgmField, ...] = tuple(_row(*row) for row in _ROWS)

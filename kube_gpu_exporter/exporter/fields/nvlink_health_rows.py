"""The field-table rows of NVLink errors, the NVLink fabric, Grace's C2C links and the driver's
recovery action (Blackwell and Grace nodes; docs/nvml.md, 'Fabric, NVLink errors, C2C and the
recovery action').

None is in dcgm-exporter's default CSV (its NVLink error totals are there commented out), so all
are off by default and a --collectors file turns them on. Every one is NOT_SUPPORTED-safe: a
board that lacks it answers NOT_SUPPORTED, the reader drops it from that GPU's batch, and the
family has no series for that GPU.

Cadence: the error counters are cheap field values (about 3 µs each, call_costs.py's default for
unmeasured fields), read every sweep in the device's one batch, except the Blackwell per-link
family, which costs one entry per link (18 on a B200) and is read with the slow fields. The
fabric and the recovery action change rarely and go with the slow fields too.
"""

from __future__ import annotations

import pynvml

from kube_gpu_exporter.exporter.fields.model import Cadence, Computed, DcgmField, FieldValue, Scope

# (DCGM's word, NVML's word, DCGM's id for links 0-5, for links 6-11, for the total, what it is).
_CLASSIC = (
    ("CRC_FLIT", "CRC_FLIT", 400, 451, 409, "NVLink flow-control (flit) CRC errors"),
    ("CRC_DATA", "CRC_DATA", 410, 457, 419, "NVLink data CRC errors"),
    ("REPLAY", "REPLAY", 420, 463, 429, "NVLink replays (retransmissions)"),
    ("RECOVERY", "RECOVERY", 430, 469, 439, "NVLink link recoveries"),
)
# NVML names per-link ids for links 0-11 only; links 12-17 are in the totals.
PER_LINK_IDS = 12


def _row(
    name: str,
    field_id: int,
    source: FieldValue | Computed,
    kind: str,
    unit: str,
    help_text: str,
    cadence: Cadence,
) -> DcgmField:
    return DcgmField(
        name=name,
        field_id=field_id,
        source=source,
        native_unit=unit,
        unit=unit,
        kind=kind,
        help=help_text,
        scope=Scope.GPU,
        cadence=cadence,
        default=False,
    )


def _classic_rows() -> list[DcgmField]:
    rows: list[DcgmField] = []
    for dcgm, nvml, first, later, total, what in _CLASSIC:
        stem = f"NVML_FI_DEV_NVLINK_{nvml}_ERROR_COUNT_"
        rows.append(
            _row(
                f"DCGM_FI_DEV_NVLINK_{dcgm}_ERROR_COUNT_TOTAL",
                total,
                FieldValue(getattr(pynvml, stem + "TOTAL"), stem + "TOTAL"),
                "counter",
                "count",
                f"{what}, over all links.",
                Cadence.SWEEP,
            )
        )
        for link in range(PER_LINK_IDS):
            field_id = first + link if link < 6 else later + link - 6
            rows.append(
                _row(
                    f"DCGM_FI_DEV_NVLINK_{dcgm}_ERROR_COUNT_L{link}",
                    field_id,
                    FieldValue(getattr(pynvml, f"{stem}L{link}"), f"{stem}L{link}"),
                    "counter",
                    "count",
                    f"{what} on link {link}.",
                    Cadence.SWEEP,
                )
            )
    return rows


# (DCGM name's tail, DCGM id, NVML name's tail, HELP).
_BLACKWELL = (
    ("TX_PACKETS", 1200, "XMIT_PACKETS", "NVLink packets transmitted, over all links."),
    ("TX_BYTES", 1201, "XMIT_BYTES", "NVLink bytes transmitted, over all links."),
    ("RX_PACKETS", 1202, "RCV_PACKETS", "NVLink packets received, over all links."),
    ("RX_BYTES", 1203, "RCV_BYTES", "NVLink bytes received, over all links."),
    (
        "RX_MALFORMED_PACKET_ERRORS",
        1204,
        "MALFORMED_PACKET_ERRORS",
        "Malformed NVLink packets received, over all links.",
    ),
    (
        "RX_BUFFER_OVERRUN_ERRORS",
        1205,
        "BUFFER_OVERRUN_ERRORS",
        "NVLink receive buffer overruns, over all links.",
    ),
    ("RX_ERRORS", 1206, "RCV_ERRORS", "NVLink receive errors, over all links."),
    ("RX_REMOTE_ERRORS", 1207, "RCV_REMOTE_ERRORS", "NVLink remote receive errors, all links."),
    ("RX_GENERAL_ERRORS", 1208, "RCV_GENERAL_ERRORS", "NVLink general receive errors, all links."),
    (
        "LOCAL_LINK_INTEGRITY_ERRORS",
        1209,
        "LOCAL_LINK_INTEGRITY_ERRORS",
        "NVLink local link integrity errors, over all links.",
    ),
    ("TX_DISCARDS", 1210, "XMIT_DISCARDS", "NVLink transmit discards, over all links."),
    (
        "LINK_RECOVERY_SUCCESSFUL_EVENTS",
        1211,
        "LINK_RECOVERY_SUCCESSFUL_EVENTS",
        "Successful NVLink link recoveries, over all links.",
    ),
    (
        "LINK_RECOVERY_FAILED_EVENTS",
        1212,
        "LINK_RECOVERY_FAILED_EVENTS",
        "Failed NVLink link recoveries, over all links.",
    ),
    ("RX_SYMBOL_ERRORS", 1214, "SYMBOL_ERRORS", "NVLink symbol errors received, all links."),
    ("EFFECTIVE_ERRORS", 1219, "EFFECTIVE_ERRORS", "NVLink effective errors, over all links."),
)


def _blackwell_rows() -> list[DcgmField]:
    rows: list[DcgmField] = []
    for dcgm, field_id, nvml, help_text in _BLACKWELL:
        name = f"NVML_FI_DEV_NVLINK_COUNT_{nvml}"
        unit = "B" if dcgm.endswith("_BYTES") else "count"
        rows.append(
            _row(
                f"DCGM_FI_DEV_NVLINK_COUNT_{dcgm}",
                field_id,
                FieldValue(getattr(pynvml, name), name, per_link=True),
                "counter",
                unit,
                help_text,
                Cadence.SLOW,
            )
        )
    return rows


_FABRIC = Computed("`nvmlDeviceGetGpuFabricInfoV` (its v3 struct)")
# Fabric rows by name -> the struct member (or derived value) they export; device_reader reads them.
FABRIC_STATUS = "DCGM_FI_DEV_FABRIC_MANAGER_STATUS"
FABRIC_ERROR_CODE = "DCGM_FI_DEV_FABRIC_MANAGER_ERROR_CODE"
FABRIC_CLIQUE_ID = "DCGM_FI_DEV_FABRIC_CLIQUE_ID"
FABRIC_HEALTH_MASK = "DCGM_FI_DEV_FABRIC_HEALTH_MASK"
FABRIC_HEALTH_SUMMARY = "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY"
FABRIC_CLUSTER_UUID = "DCGM_FI_DEV_FABRIC_CLUSTER_UUID"


def _other_rows() -> list[DcgmField]:
    slow = Cadence.SLOW
    return [
        _row(
            FABRIC_STATUS,
            170,
            _FABRIC,
            "gauge",
            "count",
            "Fabric registration of the GPU (1 = not started, 2 = in progress, 3 = completed, "
            "4 = completed with an error).",
            slow,
        ),
        _row(
            FABRIC_ERROR_CODE,
            171,
            _FABRIC,
            "gauge",
            "count",
            "The NVML return code of the GPU's fabric registration, once completed (0 = success).",
            slow,
        ),
        _row(
            FABRIC_CLIQUE_ID,
            173,
            _FABRIC,
            "gauge",
            "count",
            "The NVLink fabric clique the GPU belongs to.",
            slow,
        ),
        _row(
            FABRIC_HEALTH_MASK,
            174,
            _FABRIC,
            "gauge",
            "count",
            "The GPU's fabric health as NVML's bitmask (NVML_GPU_FABRIC_HEALTH_MASK_*).",
            slow,
        ),
        _row(
            FABRIC_HEALTH_SUMMARY,
            175,
            _FABRIC,
            "gauge",
            "count",
            "The GPU's fabric health summary (1 = healthy, 2 = unhealthy, 3 = limited capacity).",
            slow,
        ),
        _row(
            "DCGM_FI_DEV_C2C_LINK_COUNT",
            285,
            FieldValue(pynvml.NVML_FI_DEV_C2C_LINK_COUNT, "NVML_FI_DEV_C2C_LINK_COUNT"),
            "gauge",
            "count",
            "Number of NVLink-C2C links between the GPU and its Grace CPU.",
            slow,
        ),
        _row(
            "DCGM_FI_DEV_C2C_LINK_STATUS",
            286,
            FieldValue(pynvml.NVML_FI_DEV_C2C_LINK_GET_STATUS, "NVML_FI_DEV_C2C_LINK_GET_STATUS"),
            "gauge",
            "count",
            "NVLink-C2C link status (1 = active, 0 = inactive).",
            slow,
        ),
        _row(
            "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
            1523,
            FieldValue(
                pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION"
            ),
            "gauge",
            "count",
            "The recovery the driver asks for (0 = none, 1 = GPU reset, 2 = node reboot, "
            "3 = drain peer-to-peer traffic, 4 = drain and reset).",
            slow,
        ),
    ]


# A string, so a label, as dcgm-exporter exports its string fields: a collectors line of type
# label puts it on each of the GPU's DCGM series (and its MIG instances'), beside the driver
# version. It stands in the table's label rows (table.EVENT_FIELDS), not with the values above.
FABRIC_CLUSTER_UUID_ROW = DcgmField(
    name=FABRIC_CLUSTER_UUID,
    field_id=172,
    source=Computed(
        "`nvmlDeviceGetGpuFabricInfoV`'s cluster UUID, once registered, as a label on the GPU's "
        "DCGM series"
    ),
    native_unit="",
    unit="",
    kind="label",
    help="Fabric cluster UUID",
    scope=Scope.BOTH,
    cadence=Cadence.SLOW,
    default=False,
)

NVLINK_HEALTH_FIELDS: tuple[DcgmField, ...] = (
    *_classic_rows(),
    *_blackwell_rows(),
    *_other_rows(),
)
FABRIC_FIELDS = frozenset(
    {FABRIC_STATUS, FABRIC_ERROR_CODE, FABRIC_CLIQUE_ID, FABRIC_HEALTH_MASK, FABRIC_HEALTH_SUMMARY}
)

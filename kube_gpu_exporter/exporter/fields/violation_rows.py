"""The field-table rows of the throttle-time (violation) counters and of page retirement
(docs/nvml.md, 'Violation counters' and 'Page retirement').

Violation counters: how long, in nanoseconds since the driver loaded, each NVML performance
policy held the clocks back (DCGM fields 240-247). NVML serves each as a field value
(`NVML_FI_DEV_PERF_POLICY_*`, ids 74-81), so they ride in the device's one field-value batch
instead of costing one `nvmlDeviceGetViolationStatus` call per policy per GPU. They are
cumulative, and a scrape only ever takes their rise, so the slow fields' cadence loses nothing.
On by default, unlike in dcgm-exporter's CSV (where they are commented out): the Health row of the
bundle's GPU devices dashboard shows from them the share of time each GPU was held back, and why.

Retired pages (fields 390-392): the count of pages retired for repeated single-bit and for
double-bit ECC errors, and whether a retirement awaits the next GPU reset. Boards before Ampere
retire pages; Ampere and newer remap rows instead and answer NOT_SUPPORTED, so on those the
batch drops the entries and the families have no series. They are field values too
(`NVML_FI_DEV_RETIRED_*`, ids 29-31), the counts `nvmlDeviceGetRetiredPages` and
`nvmlDeviceGetRetiredPagesPendingStatus` give: a refusal in the batch is neither an NVML error
nor a call repeated each sweep, where a refused getter would be counted once per GPU in
kube_gpu_exporter_nvml_errors_total on every Ampere-and-newer node. On by default as the row
remapping fields are, with the slow fields (they change on the scale of days).

No 4.9 spelling for the violation counters: neither go-dcgm 4.6.1's dcgm_fields.h nor DCGM 4.7's
documentation renames them. The retired-page fields' DCGM 4.6 names (`DCGM_FI_DEV_PAGE_RETIRED_*`)
are the 4.9 spelling, the classic ones being their deprecated aliases.
"""

from __future__ import annotations

import pynvml

from kube_gpu_exporter.exporter.fields.model import (
    DCGM_ALIAS,
    Cadence,
    DcgmField,
    FieldValue,
    Scope,
    Spelling,
)

# (DCGM's word, DCGM id, NVML's word, what holds the clocks back).
_VIOLATIONS = (
    ("POWER", 240, "POWER", "power constraints"),
    ("THERMAL", 241, "THERMAL", "thermal constraints"),
    ("SYNC_BOOST", 242, "SYNC_BOOST", "sync-boost constraints"),
    ("BOARD_LIMIT", 243, "BOARD_LIMIT", "board limit constraints"),
    ("LOW_UTIL", 244, "LOW_UTILIZATION", "low utilization"),
    ("RELIABILITY", 245, "RELIABILITY", "reliability constraints"),
    ("TOTAL_APP_CLOCKS", 246, "TOTAL_APP_CLOCKS", "any reason, below the application clocks"),
    ("TOTAL_BASE_CLOCKS", 247, "TOTAL_BASE_CLOCKS", "any reason, below the base clocks"),
)


def _row(
    name: str,
    field_id: int,
    nvml_name: str,
    kind: str,
    unit: str,
    help_text: str,
    spelling_4_9: Spelling | None = None,
) -> DcgmField:
    return DcgmField(
        name=name,
        field_id=field_id,
        source=FieldValue(getattr(pynvml, nvml_name), nvml_name),
        native_unit=unit,
        unit=unit,
        kind=kind,
        help=help_text,
        scope=Scope.GPU,
        cadence=Cadence.SLOW,
        default=True,
        spelling_4_9=spelling_4_9,
    )


VIOLATION_FIELDS: tuple[DcgmField, ...] = tuple(
    _row(
        f"DCGM_FI_DEV_{dcgm}_VIOLATION",
        field_id,
        f"NVML_FI_DEV_PERF_POLICY_{nvml}",
        "counter",
        "ns",
        f"Throttling duration due to {what} (in ns).",
    )
    for dcgm, field_id, nvml, what in _VIOLATIONS
)


def _retired(name: str, field_id: int, nvml: str, kind: str, help_text: str) -> DcgmField:
    new_name = {
        "SBE": "DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL",
        "DBE": "DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL",
        "PENDING": "DCGM_FI_DEV_PAGE_RETIRED_PENDING",
    }[name]
    return _row(
        f"DCGM_FI_DEV_RETIRED_{name}",
        field_id,
        nvml,
        kind,
        "count",
        help_text,
        Spelling(new_name, "count", help_text, DCGM_ALIAS),
    )


RETIRED_PAGE_FIELDS: tuple[DcgmField, ...] = (
    _retired(
        "SBE",
        390,
        "NVML_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
    ),
    _retired(
        "DBE",
        391,
        "NVML_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
    ),
    # NVML's field is a flag, and so is nvmlDeviceGetRetiredPagesPendingStatus: a gauge, as
    # the row-remap pending field is, though dcgm-exporter's CSV types it a counter.
    _retired(
        "PENDING",
        392,
        "NVML_FI_DEV_RETIRED_PENDING",
        "gauge",
        "Whether a page retirement is pending until the next GPU reset (1 = yes).",
    ),
)

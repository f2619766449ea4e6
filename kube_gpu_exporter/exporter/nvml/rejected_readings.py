"""Readings NVML returned that the device cannot have produced, left out as missing samples.

A glitched board power (0xFFFFFFFF mW) or a GPM ratio of +Inf is worse than no reading: it goes
into counters that never fall (the energy counter, the per-pod joules) and stays there. The code
that spots one drops it and records it here, by GPU, DCGM field and reason, for
kube_gpu_exporter_readings_rejected_total; the first of each kind per GPU is logged, the rest
only counted, so a board glitching every sweep does not flood the log.
"""

from __future__ import annotations

import logging
import threading

from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally

log = logging.getLogger(__name__)

# Why a reading was left out: the `reason` label values of readings_rejected_total.
NOT_FINITE = "not_finite"
NEGATIVE = "negative"
ABOVE_LIMIT = "above_limit"


class RejectedReadings:
    def __init__(self) -> None:
        self._tally = ErrorTally()
        self._lock = threading.Lock()
        self._logged: set[tuple[str, str, str]] = set()

    def record(self, uuid: str, field: str, reason: str, value: object) -> None:
        self._tally.record(uuid, field, reason)
        key = (uuid, field, reason)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        log.warning(
            "%s: %s read %r, which the GPU cannot produce (%s); left out as a missing sample, "
            "and only counted from now on (readings_rejected_total)",
            uuid,
            field,
            value,
            reason,
        )

    def snapshot(self) -> tuple[tuple[tuple[str, ...], int], ...]:
        return self._tally.snapshot()

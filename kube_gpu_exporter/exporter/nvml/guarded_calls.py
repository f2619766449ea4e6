"""NVML calls that remember what a device cannot do.

NOT_SUPPORTED and FunctionNotFound are properties of the device or driver, not transient
failures: the first one is logged and counted, and the call is never made again for that device
(dcgm-exporter #599 shows what retrying unsupported lookups every sweep costs). GPU_IS_LOST is
re-raised so the caller can mark the whole device down; any other error counts and yields None.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from kube_gpu_exporter.exporter.nvml.binding import (
    GPU_GONE,
    PERMANENTLY_UNAVAILABLE,
    NVMLError,
    error_name,
)
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally

log = logging.getLogger(__name__)

Alternative = tuple[str, tuple[Any, ...], dict[str, Any]]


def alt(function: str, *args: Any, **kwargs: Any) -> Alternative:
    return (function, args, kwargs)


class GuardedNvml:
    def __init__(self, tally: ErrorTally, api: Any) -> None:
        self._tally = tally
        # NvmlSource.api: where the calls go. Callers whose errors are not this guard's business
        # (a handle lookup that a lost GPU fails) call it directly.
        self.api = api
        self._lock = threading.Lock()
        # (device uuid, call key) -> NVML error name that made us give up on it.
        self._unavailable: dict[tuple[str, str], str] = {}

    def is_unavailable(self, uuid: str, key: str) -> bool:
        return (uuid, key) in self._unavailable

    def forget(self, uuid: str) -> None:
        """Drop what we learned about a device, e.g. after its MIG mode changed."""
        with self._lock:
            for k in [k for k in self._unavailable if k[0] == uuid]:
                del self._unavailable[k]

    def call(self, uuid: str, key: str, function: str, *args: Any, **kwargs: Any) -> Any | None:
        return self.first_available(uuid, key, [(function, args, kwargs)])

    def probe(self, uuid: str, key: str, function: str, *args: Any) -> Any | None:
        """As call(), for a feature asked of every GPU whether or not the user listed it (the
        NVLink fabric): NOT_SUPPORTED is then the ordinary answer of a board without it, so it
        is remembered as call() remembers it but neither counted nor logged above debug, as a
        field value a batch refuses is not (otherwise every H100 or L4 node would show NVML
        errors for a call nobody asked for)."""
        return self.first_available(uuid, key, [(function, args, {})], count_refusal=False)

    def first_available(
        self,
        uuid: str,
        key: str,
        alternatives: Sequence[Alternative],
        *,
        count_refusal: bool = True,
    ) -> Any:
        """Try each alternative in order (newest API first); remember the ones that cannot work."""
        for position, (function, args, kwargs) in enumerate(alternatives):
            alt_key = f"{key}:{position}"
            if (uuid, alt_key) in self._unavailable:
                continue
            try:
                return getattr(self.api, function)(*args, **kwargs)
            except GPU_GONE:
                self._tally.record(function, "GPU_IS_LOST")
                raise
            except PERMANENTLY_UNAVAILABLE as exc:
                name = error_name(exc)
                if count_refusal:
                    self._tally.record(function, name)
                with self._lock:
                    self._unavailable[(uuid, alt_key)] = name
                log.log(
                    logging.INFO if count_refusal else logging.DEBUG,
                    "%s: %s is %s on this device; not asking again",
                    uuid,
                    function,
                    name,
                )
            except NVMLError as exc:
                self._tally.record(function, error_name(exc))
                log.debug("%s: %s failed: %s", uuid, function, exc)
                return None
        return None

    def raw(
        self,
        function: str,
        *args: Any,
        answers: tuple[type[NVMLError], ...] = (),
        **kwargs: Any,
    ) -> Any:
        """Call without memoisation, counting any error before re-raising it; errors of the
        `answers` types are an expected reply (a privilege refusal), re-raised uncounted."""
        try:
            return getattr(self.api, function)(*args, **kwargs)
        except answers:
            raise
        except NVMLError as exc:
            self._tally.record(function, error_name(exc))
            raise

"""The watch of this node's ResourceSlices: which NVIDIA GPU DRA devices the node offers.

It follows the pods' and node's list-then-watch protocol, in the same retry loop, always with
`fieldSelector=spec.nodeName=<node>,spec.driver=gpu.nvidia.com` (both are field selectors the API
server supports for ResourceSlices): other nodes' slices are none of this exporter's business,
and a DaemonSet listing them cluster-wide multiplies the API server's work by the node count;
other drivers' slices would only be read to be dropped, and count toward the LIST's byte limit.

resource.k8s.io/v1 is served from Kubernetes 1.34; 1.32 and 1.33 serve v1beta1, which is tried
when v1 answers 404. A cluster serving neither has no DRA at all: that is no error, and asking
again every few seconds would only load the API server, so the watch says so once and checks
again after `recheck_seconds` (ten minutes in production).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.clock import Clock
from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER
from kube_gpu_exporter.exporter.dra.slices import (
    MAX_SLICES_PER_NODE,
    ParsedSlice,
    SliceDevice,
    object_name,
    offered_devices,
    parse_resource_slice,
)
from kube_gpu_exporter.exporter.kubernetes.api_answers import MAX_SLICE_LIST_BYTES

log = logging.getLogger(__name__)

_NOT_FOUND = 404
# Newest first; the first one the server answers is asked first from then on.
API_VERSIONS = ("v1", "v1beta2", "v1beta1")
NO_DRA_RECHECK_SECONDS = 600.0
# The view's field this watch feeds.
SYNCED = "slices_synced"


def slices_path(version: str) -> str:
    """The collection of ResourceSlices in one version of resource.k8s.io."""
    return f"/apis/resource.k8s.io/{version}/resourceslices"


def _as_is(obj: Any) -> Any:
    return obj


def slice_selector(node: str) -> str:
    """The field selector of every ResourceSlice request: this node's, of NVIDIA's GPU driver."""
    return f"spec.nodeName={node},spec.driver={NVIDIA_GPU_DRIVER}"


class SliceStore:
    """This node's NVIDIA GPU driver slices by object name, as list and watch events leave them."""

    def __init__(self) -> None:
        self.slices: dict[str, ParsedSlice] = {}
        # Slices left out because the store was full. One refused stays out until the next
        # relist, even if room is made meanwhile: a node with that many is broken anyway.
        self.refused = 0

    def apply(self, kind: str, obj: object) -> None:
        name = object_name(obj)
        if name is None:
            return
        parsed = None if kind == "DELETED" else parse_resource_slice(obj)
        # A slice that turned malformed or foreign is dropped, not kept in its last good state.
        if parsed is None or parsed.driver != NVIDIA_GPU_DRIVER:
            self.slices.pop(name, None)
            return
        if name not in self.slices and len(self.slices) >= MAX_SLICES_PER_NODE:
            self.refused += 1
            return
        self.slices[name] = parsed

    def offered(self) -> Mapping[tuple[str, str], SliceDevice]:
        return offered_devices(self.slices.values())


class SliceWatchOwner(Protocol):
    """What the slice watch uses of the watcher that runs it (watcher.py's KubernetesWatcher):
    named here so that this module need not import that one, which imports this."""

    _stop: threading.Event
    _node: str
    _clock: Clock

    def _watch_forever(self, one_round: Callable[[], None], synced_field: str) -> None: ...

    def _update(self, **changes: Any) -> None: ...

    def _list(
        self,
        path: str,
        selector: str,
        what: str,
        max_bytes: int,
        convert: Callable[[Any], Any],
        synced_field: str,
    ) -> tuple[list[Any], str]: ...

    def _watch(
        self,
        path: str,
        selector: str,
        version: str,
        on_event: Callable[[str, dict], None],
        what: str,
        synced_field: str,
        synced_on_open: bool = True,
    ) -> None: ...


class SliceWatchThread(BackgroundThread):
    """The ResourceSlice watch, in a supervised thread of its own, stopped with the others."""

    thread_name = "kubernetes-resourceslices"

    def __init__(self, owner: SliceWatchOwner, recheck_seconds: float) -> None:
        super().__init__(owner._clock)
        self._stop = owner._stop
        self._owner = owner
        self._recheck = recheck_seconds
        self._preferred = API_VERSIONS[0]
        self._said_no_dra = False
        self._said_full = False

    def _run(self) -> None:
        self._owner._watch_forever(self._round, "slices_synced")

    def _on_crash(self) -> None:
        self._owner._update(slices_synced=False)

    def _list_served(self, selector: str) -> tuple[str, list[Any], str] | None:
        """The collection path of the first API version the server serves, its items and
        version; None when it serves none of them."""
        import kubernetes

        order = [self._preferred, *(v for v in API_VERSIONS if v != self._preferred)]
        for version in order:
            path = slices_path(version)
            try:
                items, resource_version = self._owner._list(
                    path,
                    selector,
                    "the ResourceSlice LIST",
                    MAX_SLICE_LIST_BYTES,
                    _as_is,
                    SYNCED,
                )
            except kubernetes.client.ApiException as exc:
                if exc.status == _NOT_FOUND:
                    continue
                raise
            if version != self._preferred or self._said_no_dra:
                log.info("watching ResourceSlices through resource.k8s.io/%s", version)
            self._preferred = version
            self._said_no_dra = False
            return path, items, resource_version
        return None

    def _no_dra(self) -> None:
        if not self._said_no_dra:
            log.info(
                "the API server serves no ResourceSlices (resource.k8s.io %s): no DRA on this "
                "cluster; asking again every %.0f s",
                " nor ".join(API_VERSIONS),
                self._recheck,
            )
            self._said_no_dra = True
        # None, as with the watch off: there is nothing to watch, and nothing has failed.
        self._owner._update(resource_slices=MappingProxyType({}), slices_synced=None)
        # Not a failure: the thread is doing what it should.
        self._progressed()
        self._clock.wait(self._stop, self._recheck)

    def _publish(self, store: SliceStore, *, synced: bool = True) -> None:
        if store.refused and not self._said_full:
            log.warning(
                "this node has more than %d ResourceSlices of %s; the others are ignored",
                MAX_SLICES_PER_NODE,
                NVIDIA_GPU_DRIVER,
            )
            self._said_full = True
        self._owner._update(resource_slices=store.offered(), slices_updated_at=self._clock.time())
        if synced:
            self._owner._update(slices_synced=True)

    def _round(self) -> None:
        selector = slice_selector(self._owner._node)
        served = self._list_served(selector)
        if served is None:
            self._no_dra()
            return
        path, items, version = served
        store = SliceStore()
        for obj in items:
            store.apply("ADDED", obj)
        # Synced once the watch from this list is answered.
        self._publish(store, synced=False)
        self._progressed()

        def on_event(kind: str, obj: dict) -> None:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                store.apply(kind, obj)
                self._publish(store)
            else:
                self._owner._update(slices_synced=True, slices_updated_at=self._clock.time())

        self._owner._watch(path, selector, version, on_event, "the ResourceSlice watch", SYNCED)

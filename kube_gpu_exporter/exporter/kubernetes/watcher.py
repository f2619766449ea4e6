"""Watches this node's pods, this node object and, optionally, this node's ResourceSlices
(kube_gpu_exporter/exporter/kubernetes/slice_watch.py) through the `kubernetes` client.

Each watch follows the API's list-then-watch protocol: LIST with `resourceVersion=0` (served from
the API server's watch cache, which indexes pods by node, instead of a quorum read of every pod
from etcd), then WATCH from the list's version with bookmarks, resuming from the newest version
seen; 410 Gone means that version fell out of the history, so it lists again. Errors and 410s
back off exponentially with jitter: a server answering every watch with 410 would otherwise be
listed from in a tight loop, by every node at once. Every watch sets its field selector: a
DaemonSet that lists pods cluster-wide on every node is how control planes go down.

Requests go through kube_gpu_exporter/exporter/kubernetes/api_requests.py, and answers are read
within byte limits and deadlines and parsed with their failures caught (api_answers.py,
answer_deadlines.py, watch_stream.py): an error answer with a huge or trickled body, an endless
event line, a LIST too large to parse within the pod's memory limit, an answer trickled a byte at a
time, or JSON nested past the recursion limit is one failed round, logged on one line, with the view
unsynced until a LIST succeeds again. A watch that has not been refreshed (a LIST, a watch answered,
an event) for longer than a healthy watch ever goes without reads unsynced too, whatever it is stuck
in.

Only the failures an API conversation is expected to have (HTTP errors, broken connections,
undecodable bodies, a missing kubeconfig) are retried here. Anything else is a bug or an object
nobody foresaw, and ends the watch's loop: `BackgroundThread` logs it once with its traceback,
reports the watch unsynced (so `collector_success{collector="kubernetes"}` reads 0) and restarts
it with backoff; each watch runs in its own supervised thread.
"""

from __future__ import annotations

import http.client
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

import urllib3.exceptions

from kube_gpu_exporter.exporter.background import BackgroundThread
from kube_gpu_exporter.exporter.backoff import Backoff
from kube_gpu_exporter.exporter.clock import SYSTEM_CLOCK, Clock
from kube_gpu_exporter.exporter.kubernetes.answer_deadlines import (
    HEADERS_SECONDS,
    Deadline,
    shut_down,
)
from kube_gpu_exporter.exporter.kubernetes.api_answers import (
    MAX_NODE_LIST_BYTES,
    MAX_POD_LIST_BYTES,
    BadAnswer,
    list_answer,
    read_body,
)
from kube_gpu_exporter.exporter.kubernetes.api_requests import (
    ERROR_BODY_SECONDS,
    ApiGetter,
    OpenAnswers,
    close,
)
from kube_gpu_exporter.exporter.kubernetes.pod_metadata import (
    EMPTY_VIEW,
    SERIES_DROP_REASONS,
    KubernetesView,
    LabelSelection,
    PodMetadata,
    node_gpu_labels,
    pod_metadata,
)
from kube_gpu_exporter.exporter.kubernetes.slice_watch import (
    NO_DRA_RECHECK_SECONDS,
    SliceWatchThread,
)
from kube_gpu_exporter.exporter.kubernetes.watch_stream import WatchExpired, WatchStream

log = logging.getLogger(__name__)

T = TypeVar("T")
PODS_PATH = "/api/v1/pods"
NODES_PATH = "/api/v1/nodes"

# A round that failed after running this long was healthy until then: the backoff starts over,
# as client-go's reflector resets its own after two minutes without failing.
HEALTHY_ROUND_SECONDS = 60.0
# A watch the server ended sooner than this with no event in it was not held open at all.
EMPTY_WATCH_SECONDS = 0.5


def _expected_errors() -> tuple[type[BaseException], ...]:
    import kubernetes

    return (
        kubernetes.client.ApiException,
        kubernetes.config.ConfigException,
        urllib3.exceptions.HTTPError,
        http.client.HTTPException,
        OSError,  # TimeoutError included: a watch that did not end in time
        BadAnswer,
        ValueError,  # a body that is not JSON
    )


def _as_is(obj: Any) -> Any:
    return obj


def _failure(exc: BaseException) -> str:
    """One line about a failed API conversation. An ApiException's text spans lines, the first
    of which holds only the status code."""
    import kubernetes

    if isinstance(exc, kubernetes.client.ApiException):
        return f"HTTP {exc.status} {exc.reason}"[:300]
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


class _NodeWatchThread(BackgroundThread):
    """The node's watch: the same retry loop as the pods' watch, in a thread of its own, stopped
    together with it."""

    thread_name = "kubernetes-node"

    def __init__(self, owner: KubernetesWatcher) -> None:
        super().__init__(owner._clock)
        self._stop = owner._stop
        self._owner = owner

    def _run(self) -> None:
        self._owner._watch_forever(self._owner._node_round, "node_synced")

    def _on_crash(self) -> None:
        self._owner._update(node_synced=False)


class KubernetesWatcher(BackgroundThread):
    thread_name = "kubernetes-pods"

    def __init__(
        self,
        api_client_factory: Callable[[], Any],
        node_name: str,
        label_allowlist: re.Pattern[str] | None = None,
        max_labels_per_pod: int = 10,
        series_labels: bool = False,
        max_backoff_seconds: float = 30.0,
        watch_timeout_seconds: int = 300,
        list_timeout_seconds: float = 30.0,
        stall_grace_seconds: float = 15.0,
        watch_resource_slices: bool = False,
        no_dra_recheck_seconds: float = NO_DRA_RECHECK_SECONDS,
        healthy_round_seconds: float = HEALTHY_ROUND_SECONDS,
        error_body_seconds: float = ERROR_BODY_SECONDS,
        headers_seconds: float = HEADERS_SECONDS,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        """`clock` is what backoffs, rounds and refreshes are timed by; the deadlines on an
        answer being read (`list_timeout_seconds`, the watch's timeout and stall grace,
        `error_body_seconds`, `headers_seconds`) are the sockets' own, on the system's."""
        super().__init__(clock)
        self._factory = api_client_factory
        self._node = node_name
        # series_labels: --kubernetes.enable-pod-labels, the pod labels on the DCGM series too.
        self._selection = LabelSelection(label_allowlist, max_labels_per_pod, series_labels)
        self._max_backoff = max_backoff_seconds
        self._watch_timeout = watch_timeout_seconds
        self._list_timeout = list_timeout_seconds
        # An overloaded API server can hold a watch open and send nothing, not even the closing
        # chunk at its own timeout; a read silent for longer than that plus this is abandoned,
        # and the next round lists again, so no change is lost while the stream was stuck.
        self._stall_grace = stall_grace_seconds
        self._healthy_round = healthy_round_seconds
        self._lock = threading.Lock()
        self._view = EMPTY_VIEW
        if series_labels:
            # Every reason from the start, so rate() over the counter has a first sample.
            self._view = replace(
                EMPTY_VIEW, series_labels_dropped=tuple((r, 0) for r in SERIES_DROP_REASONS)
            )
        self._node_watch = _NodeWatchThread(self)
        self._slice_watch: SliceWatchThread | None = None
        if watch_resource_slices:
            self._slice_watch = SliceWatchThread(self, no_dra_recheck_seconds)
            # None would say the watch is off; it is on, and has not listed yet.
            self._view = replace(self._view, slices_synced=False)
        self._client: Any = None
        self._getter_made: ApiGetter | None = None
        # Every answer being read, for stop() to shut down at once.
        self._answers = OpenAnswers()
        # Synced field -> when its watch was last refreshed (a LIST, a watch answered or ended,
        # an event): monotonic, set by the watch's own thread.
        self._refreshed: dict[str, float] = {}
        # A healthy watch is refreshed at least this often: the server ends each watch within
        # its timeout, the stall grace abandons one it does not end, and the next one is
        # answered within the headers' deadline.
        self._refresh_bound = watch_timeout_seconds + stall_grace_seconds + headers_seconds
        self._error_body_seconds = error_body_seconds
        self._headers_seconds = headers_seconds

    # ---- lifecycle ----

    def _side_watches(self) -> list[BackgroundThread]:
        threads: list[BackgroundThread] = [self._node_watch]
        if self._slice_watch is not None:
            threads.append(self._slice_watch)
        return threads

    def start(self) -> None:
        super().start()
        for thread in self._side_watches():
            thread.start()

    def request_stop(self) -> None:
        self._stop.set()
        # A quiet or stuck read would hold its thread until the server's timeout; shutting every
        # open answer down wakes them now instead.
        self._answers.shut_down_all()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop this watch and those beside it, all within `timeout`."""
        self.request_stop()
        deadline = time.monotonic() + timeout
        for thread in [self, *self._side_watches()]:
            thread.join(max(0.0, deadline - time.monotonic()))

    def problem(self) -> str | None:
        return super().problem() or next(
            (p for t in self._side_watches() if (p := t.problem()) is not None), None
        )

    def view(self) -> KubernetesView:
        """The latest view; never synced while the watch that feeds it is crashed, or has gone
        without a refresh for longer than a healthy one does."""
        view = self._view
        threads = {
            "pods_synced": self,
            "node_synced": self._node_watch,
            "slices_synced": self._slice_watch,
        }
        now = self._clock.monotonic()
        stale: dict[str, Any] = {}
        for synced_field, thread in threads.items():
            if not getattr(view, synced_field) or thread is None:
                continue
            refreshed = self._refreshed.get(synced_field, now)
            if not thread.thread_healthy or now - refreshed > self._refresh_bound:
                stale[synced_field] = False
        return replace(view, **stale) if stale else view

    def _refresh(self, synced_field: str) -> None:
        self._refreshed[synced_field] = self._clock.monotonic()

    def _on_crash(self) -> None:
        self._update(pods_synced=False)

    def _replace(self, change: Callable[[dict[str, Any]], None]) -> None:
        # Readers get the whole view by one reference read; writers (one per watch) serialise here.
        with self._lock:
            fields = {f: getattr(self._view, f) for f in KubernetesView.__slots__}
            change(fields)
            self._view = KubernetesView(**fields)

    def _update(self, **changes: Any) -> None:
        self._replace(lambda fields: fields.update(changes))

    def _count(self, name: str, by: int = 1) -> None:
        self._replace(lambda fields: fields.__setitem__(name, fields[name] + by))

    def _count_series_drops(self, dropped: Counter[str]) -> None:
        if not dropped:
            return

        def add(fields: dict[str, Any]) -> None:
            totals = Counter(dict(fields["series_labels_dropped"])) + dropped
            fields["series_labels_dropped"] = tuple((r, totals[r]) for r in SERIES_DROP_REASONS)

        self._replace(add)

    def _api_client(self) -> Any:
        # The watch threads start here at once; one client (and one connection pool) for all.
        with self._lock:
            if self._client is None:
                self._client = self._factory()
            return self._client

    def _getter(self) -> ApiGetter:
        client = self._api_client()
        with self._lock:
            if self._getter_made is None:
                self._getter_made = ApiGetter(
                    client, self._answers, self._headers_seconds, self._error_body_seconds
                )
            return self._getter_made

    # ---- the retry loop shared by the watches ----

    def _run(self) -> None:
        self._watch_forever(self._pods_round, "pods_synced")

    def _watch_forever(self, one_round: Callable[[], None], synced_field: str) -> None:
        """Run `one_round` until stopped; after a failure, the view's `synced_field` reads False
        until a round lists again."""
        backoff = Backoff(0.5, self._max_backoff)
        last_error = ""
        expected = _expected_errors()
        clock = self._clock
        while not self._stop.is_set():
            started = clock.monotonic()
            try:
                one_round()
                backoff.succeeded()
                continue
            except WatchExpired:
                # Events since the watch's version may be lost: not synced until the relist.
                self._replace(lambda f: f.update(relists=f["relists"] + 1, **{synced_field: False}))
                log.info(
                    "watch history expired (410 Gone); listing again (%s)",
                    threading.current_thread().name,
                )
            except expected as exc:
                if self._stop.is_set():
                    break  # stop() closed the stream under us
                # One update: a reader never sees the error counted and the view still synced.
                self._replace(
                    lambda f: f.update(watch_errors=f["watch_errors"] + 1, **{synced_field: False})
                )
                message = _failure(exc)
                if message != last_error:
                    log.warning(
                        "Kubernetes API watch failed: %s (%s)",
                        message,
                        threading.current_thread().name,
                    )
                    last_error = message
            if clock.monotonic() - started >= self._healthy_round:
                backoff.succeeded()
            clock.wait(self._stop, backoff.failed())

    def _list(
        self,
        path: str,
        selector: str,
        what: str,
        max_bytes: int,
        convert: Callable[[Any], T],
        synced_field: str,
    ) -> tuple[list[T], str]:
        """The items (each through `convert`) and resourceVersion of a LIST of the collection at
        `path` from the watch cache, read within `max_bytes` and the list timeout; `what` names
        it in errors."""
        getter = self._getter()
        query = [("fieldSelector", selector), ("resourceVersion", "0")]
        response = getter.open(path, query, self._list_timeout, what)
        try:
            with (
                getter.holding(response),
                Deadline(self._list_timeout, shut_down(response)) as deadline,
            ):
                body = read_body(response, max_bytes, what, deadline)
        except BaseException:
            # Unread bytes must not go back to the pool with the connection.
            close(response)
            raise
        response.release_conn()
        answer = list_answer(body, what, convert)
        self._refresh(synced_field)
        return answer

    def _watch(
        self,
        path: str,
        selector: str,
        version: str,
        on_event: Callable[[str, dict], None],
        what: str,
        synced_field: str,
        synced_on_open: bool = True,
    ) -> None:
        """Stream events until stopped, one watch request after another, each resuming from the
        newest version seen. The view's `synced_field` reads True from the moment a watch is
        answered (`synced_on_open`: unless the LIST found nothing to be synced with), and
        False from the first failure, which ends this call."""
        # A server that ends every watch at once, with nothing in it, would otherwise be asked
        # again in a tight loop; its empty watches are spaced out like failures.
        empty = Backoff(0.5, self._max_backoff)
        getter = self._getter()
        while not self._stop.is_set():
            stream = WatchStream.open(
                getter, path, what, selector, version, self._watch_timeout, self._stall_grace
            )
            self._refresh(synced_field)
            if synced_on_open:
                self._update(**{synced_field: True})
            started, delivered = self._clock.monotonic(), False
            try:
                with getter.holding(stream.response):
                    for kind, obj in stream.events():
                        delivered = True
                        self._refresh(synced_field)
                        on_event(kind, obj)
                        if self._stop.is_set():
                            break
            finally:
                stream.close()
            self._refresh(synced_field)
            version = stream.resource_version or version
            if delivered or self._clock.monotonic() - started >= EMPTY_WATCH_SECONDS:
                empty.succeeded()
            else:
                self._clock.wait(self._stop, empty.failed())

    # ---- pods of this node ----

    def _pods_round(self) -> None:
        selector = f"spec.nodeName={self._node}"
        # Each pod is cut down to what the exporter keeps as soon as it is parsed.
        items, version = self._list(
            PODS_PATH,
            selector,
            "the pods LIST",
            MAX_POD_LIST_BYTES,
            lambda obj: pod_metadata(obj, self._selection),
            "pods_synced",
        )
        pods: dict[tuple[str, str], PodMetadata] = {}
        dropped = 0
        series_dropped: Counter[str] = Counter()
        for meta, cut, left_out in items:
            pods[(meta.namespace, meta.name)] = meta
            dropped += cut
            series_dropped += left_out
        self._count("labels_dropped", dropped)
        self._count_series_drops(series_dropped)
        # Synced once the watch from this list is answered (_watch), not before: a LIST whose
        # watch then fails left a view that nothing keeps current.
        self._update(pods=MappingProxyType(pods), pods_updated_at=self._clock.time())
        self._progressed()

        def on_event(kind: str, obj: dict) -> None:
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                meta, cut, left_out = pod_metadata(obj, self._selection)
                key = (meta.namespace, meta.name)
                current = dict(self._view.pods)
                if kind == "DELETED":
                    current.pop(key, None)
                else:
                    if current.get(key) is None:
                        self._count("labels_dropped", cut)
                        self._count_series_drops(left_out)
                    current[key] = meta
                self._update(pods=MappingProxyType(current))
            self._update(pods_synced=True, pods_updated_at=self._clock.time())

        self._watch(PODS_PATH, selector, version, on_event, "the pods watch", "pods_synced")

    # ---- this node ----

    def _node_round(self) -> None:
        selector = f"metadata.name={self._node}"
        items, version = self._list(
            NODES_PATH, selector, "the node LIST", MAX_NODE_LIST_BYTES, _as_is, "node_synced"
        )
        labels = node_gpu_labels(items[0]) if items else ()
        self._update(node_labels=labels, node_updated_at=self._clock.time())
        if not items:
            self._update(node_synced=False)
        self._node_watch._progressed()

        def on_event(kind: str, obj: dict) -> None:
            if kind in ("ADDED", "MODIFIED"):
                self._update(node_labels=node_gpu_labels(obj), node_synced=True)
            elif kind == "DELETED":
                self._update(node_labels=(), node_synced=False)
            self._update(node_updated_at=self._clock.time())

        self._watch(
            NODES_PATH,
            selector,
            version,
            on_event,
            "the node watch",
            "node_synced",
            synced_on_open=bool(items),
        )

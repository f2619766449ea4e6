"""An HTTP fake of the Kubernetes API: pods, nodes and ResourceSlices (resource.k8s.io v1, v1beta2
and v1beta1), LIST and chunked WATCH streams with bookmarks and 410 Gone, on a real socket. It
records every query it gets.

The enrichment tests drive it, and `--simulate --kubernetes` serves the simulated node's cluster
state from it (kube_gpu_exporter/exporter/simulator/cluster_state.py), so enrichment shows without a
cluster."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self
from urllib.parse import parse_qs, urlparse

SLICES = "resourceslices"
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")
_PATHS = {
    "/api/v1/pods": ("pods", ""),
    "/api/v1/nodes": ("nodes", ""),
    **{f"/apis/resource.k8s.io/{v}/resourceslices": (SLICES, v) for v in SLICE_VERSIONS},
}
_BOOKMARK_KINDS = {"pods": "Pod", "nodes": "Node", SLICES: "ResourceSlice"}


def slice_device(name: str, **attributes: str) -> dict:
    """A device as resource.k8s.io/v1 writes it, every attribute a string under its bare name."""
    return {"name": name, "attributes": {k: {"string": v} for k, v in attributes.items()}}


def as_v1beta1(obj: dict) -> dict:
    """A v1 ResourceSlice as v1beta1 serves it: each device's fields nested under `basic`."""
    out = json.loads(json.dumps(obj))
    out["apiVersion"] = "resource.k8s.io/v1beta1"
    spec = out.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("devices"), list):
        spec["devices"] = [
            {"name": d.get("name"), "basic": {k: v for k, v in d.items() if k != "name"}}
            if isinstance(d, dict)
            else d
            for d in spec["devices"]
        ]
    return out


class FakeKubeApi:
    def __init__(self, node: str) -> None:
        self.node = node
        self.version = 100
        self.pods: dict[tuple[str, str], dict] = {}
        self.node_labels: dict[str, str] = {}
        # ResourceSlices by name, stored as v1 writes them; served converted for v1beta1.
        self.slices: dict[str, dict] = {}
        # The resource.k8s.io versions served; any other answers 404, like a cluster without them.
        self.slice_versions: set[str] = set(SLICE_VERSIONS)
        self.forbidden: set[str] = set()  # resources answered 403, as without RBAC for them
        # (resource, resourceVersion, type, object): the history watches replay from.
        self.events: list[tuple[str, int, str, dict]] = []
        self.expired_before = 0  # watches from an older version get 410 Gone
        self.list_delay_seconds = 0.0  # an overloaded API server: LISTs answer this late
        self.stall_watches = False  # watches send headers, then nothing until this is cleared
        self.stalled: Counter[str] = Counter()  # watches stalled so far, by resource
        self.requests: list[tuple[str, dict[str, list[str]]]] = []
        self.cond = threading.Condition()
        self.connections: set[socket.socket] = set()
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    # ---- state changes ----

    def _bump(self) -> int:
        self.version += 1
        return self.version

    def pod(
        self,
        namespace: str,
        name: str,
        *,
        node: str | None = None,
        uid: str = "",
        labels: dict[str, str] | None = None,
        owner: tuple[str, str] | None = None,
    ) -> dict:
        metadata: dict[str, Any] = {
            "namespace": namespace,
            "name": name,
            "uid": uid or f"uid-{name}",
            "labels": labels or {},
        }
        if owner:
            metadata["ownerReferences"] = [
                {
                    "kind": owner[0],
                    "name": owner[1],
                    "controller": True,
                    "apiVersion": "v1",
                    "uid": "owner-uid",
                }
            ]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {"nodeName": node or self.node, "containers": []},
        }

    def put_pod(self, obj: dict, event: str | None = None) -> None:
        with self.cond:
            version = self._bump()
            obj["metadata"]["resourceVersion"] = str(version)
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            kind = event or ("MODIFIED" if key in self.pods else "ADDED")
            self.pods[key] = obj
            self.events.append(("pods", version, kind, obj))
            self.cond.notify_all()

    def delete_pod(self, namespace: str, name: str) -> None:
        with self.cond:
            obj = self.pods.pop((namespace, name))
            version = self._bump()
            self.events.append(("pods", version, "DELETED", obj))
            self.cond.notify_all()

    def resource_slice(
        self,
        name: str,
        devices: list[dict],
        *,
        pool: str | None = None,
        generation: int = 1,
        driver: str = "gpu.nvidia.com",
        node: str | None = None,
    ) -> dict:
        """A resource.k8s.io/v1 ResourceSlice of this node; the pool is named after the node, as
        NVIDIA's driver names it."""
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node or self.node,
                "pool": {
                    "name": pool or node or self.node,
                    "generation": generation,
                    "resourceSliceCount": 1,
                },
                "devices": devices,
            },
        }

    def put_slice(self, obj: dict) -> None:
        with self.cond:
            version = self._bump()
            obj["metadata"]["resourceVersion"] = str(version)
            name = obj["metadata"]["name"]
            kind = "MODIFIED" if name in self.slices else "ADDED"
            self.slices[name] = obj
            self.events.append((SLICES, version, kind, obj))
            self.cond.notify_all()

    def delete_slice(self, name: str) -> None:
        with self.cond:
            obj = self.slices.pop(name)
            version = self._bump()
            self.events.append((SLICES, version, "DELETED", obj))
            self.cond.notify_all()

    def slice_requests(self) -> list[tuple[str, dict[str, list[str]]]]:
        return [(p, q) for p, q in list(self.requests) if p.endswith("/resourceslices")]

    def bookmark(self, resource: str = "pods") -> int:
        with self.cond:
            version = self._bump()
            self.events.append(
                (
                    resource,
                    version,
                    "BOOKMARK",
                    {
                        "kind": _BOOKMARK_KINDS.get(resource, "Pod"),
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": str(version)},
                    },
                )
            )
            self.cond.notify_all()
            return version

    def set_node_labels(self, labels: dict[str, str]) -> None:
        with self.cond:
            self.node_labels = dict(labels)
            version = self._bump()
            self.events.append(("nodes", version, "MODIFIED", self.node_object()))
            self.cond.notify_all()

    def unstall(self) -> None:
        with self.cond:
            self.stall_watches = False
            self.cond.notify_all()

    def expire_history(self) -> None:
        """Compact: every watch from a version older than now answers 410 Gone.

        The version moves on as it does with any write, so a list made afterwards gives one that
        can be watched from, as a real server's does (without that, each relist would 410 again).
        """
        with self.cond:
            self.expired_before = self._bump()
            self.cond.notify_all()

    def node_object(self) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.node,
                "labels": dict(self.node_labels),
                "resourceVersion": str(self.version),
            },
        }

    # ---- serving ----

    def start(self, port: int = 0) -> Self:
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def setup(self) -> None:
                super().setup()
                # An answer goes out in two writes, its headers and then its body: with Nagle's
                # algorithm the second waits for the client's delayed ACK, 40 ms an answer.
                with contextlib.suppress(OSError):
                    self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with api.cond:
                    api.connections.add(self.connection)

            def finish(self) -> None:
                with api.cond:
                    api.connections.discard(self.connection)
                with contextlib.suppress(OSError):
                    super().finish()

            def do_GET(self) -> None:
                api.handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        # serve_forever notices a stop only when its poll wakes: every 0.5 s by default, which
        # every stop (each test's end, each simulated restart) would wait out.
        server = self._server
        threading.Thread(target=lambda: server.serve_forever(0.02), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        # A restarted API server drops every connection, kept-alive ones included.
        with self.cond:
            for connection in list(self.connections):
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
        with self.cond:
            self.cond.notify_all()

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        url = urlparse(handler.path)
        query = parse_qs(url.query)
        self.requests.append((url.path, query))
        resource, version = _PATHS.get(url.path, ("", ""))
        if not resource or (resource == SLICES and version not in self.slice_versions):
            self._json(handler, 404, {"kind": "Status", "code": 404, "reason": "NotFound"})
            return
        if resource in self.forbidden:
            self._json(handler, 403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
            return
        shape = as_v1beta1 if version == "v1beta1" else _as_is
        selector = query.get("fieldSelector", [""])[0]
        if query.get("watch", ["false"])[0].lower() == "true":
            self._stream(handler, resource, selector, query, shape)
        else:
            time.sleep(self.list_delay_seconds)
            self._json(handler, 200, self._listing(resource, selector, shape))

    def _matches(self, resource: str, obj: dict, selector: str) -> bool:
        # Every requirement of a field selector holds, as on the real server
        # (`spec.nodeName=n,spec.driver=d`); without a selector, everything matches.
        return all(_field(obj, f) == v for f, v in field_requirements(selector))

    def _listing(self, resource: str, selector: str, shape: Callable[[dict], dict]) -> dict:
        with self.cond:
            if resource == "pods":
                objects, kind, api_version = list(self.pods.values()), "PodList", "v1"
            elif resource == SLICES:
                objects, kind = list(self.slices.values()), "ResourceSliceList"
                api_version = shape({"apiVersion": "resource.k8s.io/v1"})["apiVersion"]
            else:
                objects, kind, api_version = [self.node_object()], "NodeList", "v1"
            items = [shape(o) for o in objects if self._matches(resource, o, selector)]
            return {
                "kind": kind,
                "apiVersion": api_version,
                "metadata": {"resourceVersion": str(self.version)},
                "items": items,
            }

    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client gave up
            handler.wfile.write(data)

    def _stream(
        self,
        handler: BaseHTTPRequestHandler,
        resource: str,
        selector: str,
        query: dict[str, list[str]],
        shape: Callable[[dict], dict],
    ) -> None:
        since = int(query.get("resourceVersion", ["0"])[0] or 0)
        timeout = float(query.get("timeoutSeconds", ["30"])[0])
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()

        def chunk(payload: bytes) -> None:
            handler.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            handler.wfile.flush()

        deadline = time.monotonic() + timeout
        try:
            with self.cond:
                if self.stall_watches:
                    self.stalled[resource] += 1
                while self.stall_watches and self._server is not None:
                    self.cond.wait(0.2)
                if since < self.expired_before:
                    gone = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "code": 410,
                        "reason": "Expired",
                        "message": f"too old resource version: {since}",
                    }
                    chunk(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
                else:
                    sent = since
                    while self._server is not None and time.monotonic() < deadline:
                        pending = [e for e in self.events if e[0] == resource and e[1] > sent]
                        for _, version, kind, obj in pending:
                            sent = version
                            if kind == "BOOKMARK" or self._matches(resource, obj, selector):
                                event = {"type": kind, "object": shape(obj)}
                                chunk(json.dumps(event).encode() + b"\n")
                        if since < self.expired_before:
                            break
                        self.cond.wait(min(0.2, max(0.0, deadline - time.monotonic())))
            chunk(b"")
        except (BrokenPipeError, ConnectionResetError):
            pass


def field_requirements(selector: str) -> list[tuple[str, str]]:
    """(field, value) of each `field=value` or `field==value` in a field selector."""
    out = []
    for part in filter(None, selector.split(",")):
        field, _, value = part.partition("=")
        out.append((field, value.removeprefix("=")))
    return out


def _field(obj: dict, path: str) -> str:
    value: object = obj
    for key in path.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return "" if value is None else str(value)


def _as_is(obj: dict) -> dict:
    return obj


def write_kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose one context points the real kubernetes client at `server`."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        f"clusters: [{{name: fake, cluster: {{server: '{server}'}}}}]\n"
        "users: [{name: fake, user: {token: test}}]\n"
        "contexts: [{name: fake, context: {cluster: fake, user: fake}}]\n"
    )
    return path

"""Synthetic kube-state-metrics: the few series the bundle reads, for the pods of the simulated
node plus one Pending GPU pod, served over HTTP for Prometheus to scrape as job
`kube-state-metrics`. It starts switched off (an empty but valid exposition), so a test can
show which panels have data only with kube-state-metrics."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PENDING_POD = ("ml-training", "llm-finetune-pending-0", "trainer", 4)


def ksm_exposition(node: str, gpus: list[dict[str, Any]]) -> str:
    lines = [
        "# TYPE kube_pod_container_resource_requests gauge",
        "# TYPE kube_pod_status_phase gauge",
        "# TYPE kube_node_spec_unschedulable gauge",
        f'kube_node_spec_unschedulable{{node="{node}"}} 0',
    ]
    running = sorted({pod for gpu in gpus for pod in gpu["pods"]})
    for ref in running:
        namespace, pod = ref.split("/", 1)
        count = sum(ref in gpu["pods"] for gpu in gpus)
        lines.append(
            f'kube_pod_container_resource_requests{{namespace="{namespace}",pod="{pod}",'
            f'container="main",node="{node}",resource="nvidia_com_gpu",unit="integer"}} {count}'
        )
        lines += [_phase(namespace, pod, "Running", 1), _phase(namespace, pod, "Pending", 0)]
    namespace, pod, container, count = PENDING_POD
    lines += [
        f'kube_pod_container_resource_requests{{namespace="{namespace}",pod="{pod}",'
        f'container="{container}",node="",resource="nvidia_com_gpu",unit="integer"}} {count}',
        _phase(namespace, pod, "Pending", 1),
        _phase(namespace, pod, "Running", 0),
    ]
    return "\n".join(lines) + "\n"


def _phase(namespace: str, pod: str, phase: str, value: int) -> str:
    return f'kube_pod_status_phase{{namespace="{namespace}",pod="{pod}",phase="{phase}"}} {value}'


class FakeKubeStateMetrics:
    def __init__(self, host: str) -> None:
        self._body = b""
        ksm = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = ksm._body
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def serve(self, exposition: str) -> None:
        self._body = exposition.encode()

    @property
    def address(self) -> str:
        # The bound address, as server_address holds it, but typed as a TCP socket's (host, port).
        host, port = self._server.socket.getsockname()[:2]
        return f"{host}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

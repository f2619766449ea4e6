"""Scrapes the simulated node in-process, wired as `kube-gpu-exporter --simulate` wires it, and
reduces the exposition to its shape: what the golden files hold and review diffs.

No family may come and go with timing. The poller's PCIe and GPM samplers get no threads of
their own: one sweep gives them their targets, two sampling rounds fill GPM's pair of buffers
(PCIe needs one), and the next sweep reports both. The pod-resources and Kubernetes watchers run
as the exporter runs them, and the scrape waits, with a deadline that raises, until the kubelet
has answered and both watches have synced.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from kube_gpu_exporter.exporter.app import attribution_sources, exposition_store, with_node_name
from kube_gpu_exporter.exporter.config import Config
from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_VERSION, PROFILES, DcgmVersion, Profile
from kube_gpu_exporter.exporter.flags.settings import parse_config
from kube_gpu_exporter.exporter.nvml.source import NvmlSource
from kube_gpu_exporter.exporter.poller import Poller
from kube_gpu_exporter.exporter.server import build_app
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.node import simulated_fleet, simulated_node
from kube_gpu_exporter.exporter.simulator.resource_slices import resource_slices
from kube_gpu_exporter.exporter.simulator.stepped_time import SteppedHelpers
from tests.conftest import quiet
from tests.support.fake_kube_api import FakeKubeApi, write_kubeconfig

GOLDEN_DIR = Path(__file__).resolve().parent
REPO = GOLDEN_DIR.parent.parent
SYNC_DEADLINE_SECONDS = 10.0

# Label values that change with the release or the environment, not with what is scraped.
VOLATILE_LABELS = frozenset({"version", "python_version", "nvml_binding_version"})

_SAMPLE = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})? \S+")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


@dataclass(frozen=True, slots=True)
class Golden:
    file: str
    flags: tuple[str, ...] = ()
    # Serve a fake Kubernetes API with the kubelet's pods and this node's GPU labels.
    kubernetes: bool = False
    # The --compat.dcgm-exporter release the scrape imitates.
    dcgm: DcgmVersion = DEFAULT_VERSION
    # A built-in fleet other than the default node.
    fleet: str = ""

    @property
    def path(self) -> Path:
        return GOLDEN_DIR / self.file

    @property
    def profile(self) -> Profile:
        return PROFILES[self.dcgm]


GOLDENS: tuple[Golden, ...] = (
    Golden("default_node.prom"),
    Golden("default_node_dcgm_4.8.2.prom", dcgm=DcgmVersion.V4_8_2),
    # The default's scrape (docs/dcgm-exporter-compatibility.md, 'What 4.8.4 changed'), in a
    # file of its own so that a difference shows as a golden diff.
    Golden("default_node_dcgm_4.8.4.prom", dcgm=DcgmVersion.V4_8_4),
    Golden("default_node_dcgm_4.9.prom", dcgm=DcgmVersion.V4_9),
    Golden(
        "kubernetes_node.prom",
        (
            "--kubernetes",
            "--kubernetes.pod-label-allowlist=team",
            # dcgm-exporter's opt-ins, so the golden pins pod_uid and pod labels on DCGM series.
            "--kubernetes.enable-pod-uid",
            "--kubernetes.enable-pod-labels",
        ),
        kubernetes=True,
    ),
    # NVIDIA's DRA driver hands out the GPUs; the fake API serves its ResourceSlices.
    Golden("dra_node.prom", ("--kubernetes",), kubernetes=True, fleet="dra"),
    # A GB200 tray with its own collectors file: the NVLink error, fabric and C2C families, the
    # fabric cluster UUID label, and the NVLink domain info.
    Golden("gb200_node.prom", fleet="gb200"),
)


def scrape(golden: Golden) -> str:
    """The plain-text body a GET of the telemetry path answers."""
    with contextlib.ExitStack() as stack:
        flags = [
            *golden.flags,
            f"--compat.dcgm-exporter={golden.dcgm.value}",
            # Every field in each of the scrape's few sweeps, so that rates such as NVLink's
            # (two reads apart) are in the golden as on a node that has run for a while.
            "--collector.field-interval=slow-fields=0s",
            "--collector.field-interval=energy-counter=0s",
        ]
        api = None
        if golden.kubernetes:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="golden-")))
            api = stack.enter_context(_fake_api())
            flags.append(
                f"--kubernetes.kubeconfig={write_kubeconfig(tmp / 'kubeconfig', api.host)}"
            )
        simulate = ["--simulate", golden.fleet] if golden.fleet else ["--simulate"]
        config = parse_config([*simulate, *flags], environ={})
        # Without simulated call costs: what is compared is the shape, never a duration, and the
        # PCIe windows and per-call latencies alone cost over half a second a golden.
        node = stack.enter_context(simulated_node(config, quiet(simulated_fleet(config))))
        nvml, kubelet, config = node.nvml, node.kubelet, node.config
        config = with_node_name(config, nvml.fleet.node_name)
        if api is not None:
            _publish_cluster_state(api, kubelet, config.labels.node_name)
            for obj in resource_slices(nvml):
                api.put_slice(obj)
        return _scrape_wired(config, node.backend.nvml)


def _scrape_wired(config: Config, nvml: NvmlSource) -> str:
    pods, kube = attribution_sources(config)
    store = exposition_store(config, pods, kube)
    stepped = SteppedHelpers()
    poller = Poller(config.collection, store.publish, nvml, runner=stepped)
    try:
        for source in (pods, kube):
            if source is not None:
                source.start()
        _wait_until(lambda: pods is None or pods.status.up, "the fake kubelet answered")
        _wait_until(
            lambda: (
                kube is None
                or (
                    kube.view().pods_synced
                    and kube.view().node_synced
                    and kube.view().slices_synced is not False
                )
            ),
            "the Kubernetes watches synced",
        )
        poller.sweep()
        stepped.run_once()
        stepped.run_once()
        store.publish(poller.sweep())
        app = build_app(store, config.web, lambda: None)
        return asyncio.run(_get(app, config.web.telemetry_path))
    finally:
        poller.stop()
        for source in (pods, kube):
            if source is not None:
                source.stop(timeout=3.0)


async def _get(app: web.Application, path: str) -> str:
    async with TestClient(TestServer(app)) as client:
        response = await client.get(path, headers={"Accept-Encoding": "identity"})
        if response.status != 200:
            raise RuntimeError(f"GET {path} answered {response.status}: {await response.text()}")
        return await response.text()


def _wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + SYNC_DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not done after {SYNC_DEADLINE_SECONDS}s: {what}")
        time.sleep(0.005)


@contextlib.contextmanager
def _fake_api() -> Iterator[FakeKubeApi]:
    import kubernetes

    # The node is named once the fleet is loaded, after the kubeconfig must already point here.
    api = FakeKubeApi(node="").start()
    try:
        yield api
    finally:
        api.stop()
        # load_kube_config() set the client's process-wide default; later tests must not inherit it.
        kubernetes.client.Configuration.set_default(None)


def _publish_cluster_state(api: FakeKubeApi, kubelet: FakeKubelet, node_name: str) -> None:
    """Every pod the fake kubelet lists, with a team label and, for some, an owner; the node's
    GPU labels as gpu-feature-discovery sets them."""
    api.node = node_name
    for pod in kubelet.pods:
        owner = None
        if pod.namespace == "ml-training":
            owner = ("Job", "llm-pretrain")
        elif pod.name.startswith("chat-api-"):
            owner = ("ReplicaSet", pod.name.rsplit("-", 1)[0])  # reported as its Deployment
        api.put_pod(api.pod(pod.namespace, pod.name, labels={"team": pod.namespace}, owner=owner))
    api.set_node_labels(
        {
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "nvidia.com/gpu.count": "8",
            "nvidia.com/mig.config": "all-balanced",
        }
    )


def samples(text: str) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """(metric name, [(label name, escaped label value)]) per sample line, in order."""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None:
            raise ValueError(f"not a sample line: {line!r}")
        yield match["name"], _LABEL.findall(match["labels"] or "")


def shape(text: str) -> str:
    """HELP, TYPE and label sets, family by family in name order; sample values dropped, and
    volatile label values (VOLATILE_LABELS) replaced by `*`."""
    headers: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")):
            headers.setdefault(line.split(" ", 3)[2], []).append(line)
    series: dict[str, set[str]] = {}
    for name, labels in samples(text):
        body = ",".join(
            f'{key}="*"' if key in VOLATILE_LABELS else f'{key}="{value}"' for key, value in labels
        )
        series.setdefault(name, set()).add(f"{name}{{{body}}}" if body else name)
    lines: list[str] = []
    for name in sorted(headers.keys() | series.keys()):
        lines += headers.get(name, [])
        lines += sorted(series.get(name, ()))
    return "\n".join(lines) + "\n"


def write(goldens: Sequence[Golden] = GOLDENS) -> list[Path]:
    written = []
    for golden in goldens:
        golden.path.write_text(shape(scrape(golden)))
        written.append(golden.path)
    return written

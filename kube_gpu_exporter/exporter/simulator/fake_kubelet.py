"""A fake kubelet: a real gRPC server on a unix socket speaking pod-resources v1 with the
production stubs, whose pods hold devices of the simulated GPU node.

Allocations follow the node's workloads: training pods hold whole GPUs (two per pod), the first
inference GPU is time-sliced among three pods (four replicas, one free), other inference and batch
GPUs have a pod each, idle GPUs are free, and every MIG instance but the second on each GPU is held
by a pod. Pods without devices are listed too, as the real kubelet does.

GPUs the fleet gives to NVIDIA's DRA driver (`allocation: dra`) are never device-plugin devices:
pods hold them through ResourceClaims, reported in `dynamic_resources`, and the allocatable list
leaves them out. Their layout: training GPUs two to a claim (the first such pod also holds an IMEX
channel of the ComputeDomain driver), the first whole inference GPU in two claims of two pods, each
with a share ID, the next one in a claim that two containers of one pod use, other inference and
batch GPUs one claim each, idle GPUs free, and every MIG instance but the second claimed.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import zlib
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER
from kube_gpu_exporter.exporter.podresources.allocations import DraAllocation
from kube_gpu_exporter.exporter.podresources.v1 import api_pb2, api_pb2_grpc
from kube_gpu_exporter.exporter.simulator import resource_slices
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.sim_gpu import SimGpu, SimMigInstance, stable_uuid

SHARED_REPLICAS = 4
DRA_SHARED_CLAIMS = 2
# NVIDIA's ComputeDomain DRA driver: its devices are IMEX channels, not GPUs.
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
_NAMESPACES = {"training": "ml-training", "inference": "inference", "batch": "batch"}


@dataclass(frozen=True, slots=True)
class FakeClaimDevice:
    driver: str
    pool: str
    device: str
    # Set when the device is in several claims at once (Kubernetes 1.35+ consumable capacity).
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class FakeClaim:
    namespace: str
    name: str
    devices: tuple[FakeClaimDevice, ...]

    @property
    def uid(self) -> str:
        return stable_uuid(0, "claim", self.namespace, self.name)


@dataclass
class FakePod:
    namespace: str
    name: str
    # container name -> [(resource name, [device ids])]; every container is here, with or
    # without devices.
    containers: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)
    # container name -> the ResourceClaims it uses (one claim may serve several containers).
    claims: dict[str, list[FakeClaim]] = field(default_factory=dict)


@dataclass
class KubeletFaults:
    rate_limited_calls: int = 0  # the next N calls fail with RESOURCE_EXHAUSTED
    get_enabled: bool = False  # KubeletPodResourcesGet gate (beta, on from 1.34)
    allocatable_implemented: bool = True  # False: a kubelet before 1.21
    delay_seconds: float = 0.0
    padding_pods: int = 0  # extra device-less pods, to make List responses large
    # GPU UUIDs the device plugin reports unhealthy: NVML still sees them, the kubelet no longer
    # offers them (e.g. after XID 48 or 79 the plugin's health check marks the device).
    unhealthy_gpus: set[str] = field(default_factory=set)


# CPU IDs of padding pods: 1,000 numbers of four varint bytes each, so a pod is about 4 KB on the
# wire and a 16 MiB answer stays inside the exporter's answer bounds (5,000 pods, 4 Mi numbers).
_PADDING_CPU_IDS = tuple(range(1 << 21, (1 << 21) + 1000))


@functools.lru_cache(maxsize=2)
def _padding(count: int) -> tuple[api_pb2.PodResources, ...]:
    """Device-less pods, about 4 KB each on the wire; built once per count because a 16 MiB
    response takes over 4,000 of them."""
    return tuple(
        api_pb2.PodResources(
            name=f"padding-pod-{i:06d}-" + "x" * 40,
            namespace="padding",
            containers=[api_pb2.ContainerResources(name="c" * 30, cpu_ids=_PADDING_CPU_IDS)],
        )
        for i in range(count)
    )


def _suffix(seed: int, *parts: object) -> str:
    """A stable pod-name suffix (Python's hash() of strings changes per process)."""
    value = zlib.crc32(repr((seed, *parts)).encode()) % 36**5
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    for _ in range(5):
        value, rest = divmod(value, 36)
        out += digits[rest]
    return out


class FakeKubelet:
    def __init__(
        self,
        nvml: FakeNvml,
        socket_path: str | Path,
        mig_strategy: str = "mixed",
        mig_id_format: str = "uuid",
        dra_name_format: str = "current",
    ) -> None:
        if mig_strategy not in ("mixed", "single", "none"):
            raise ValueError(f"unknown MIG strategy {mig_strategy!r}")
        if dra_name_format not in resource_slices.NAME_FORMATS:
            raise ValueError(f"unknown DRA device name format {dra_name_format!r}")
        self.nvml = nvml
        self.socket_path = Path(socket_path)
        self.mig_strategy = mig_strategy
        self.mig_id_format = mig_id_format
        self.dra_name_format = dra_name_format
        self.faults = KubeletFaults()
        self.calls: dict[str, int] = {"List": 0, "GetAllocatableResources": 0, "Get": 0}
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.pods, self.shared = self._allocate()

    # ---- Allocation model ----

    def _mig_resource(self, instance: SimMigInstance) -> str:
        if self.mig_strategy == "mixed":
            return "nvidia.com/mig-" + instance.profile_name.replace("+", ".")
        return "nvidia.com/gpu"

    def mig_device_id(self, gpu: SimGpu, instance: SimMigInstance) -> str:
        if self.mig_id_format == "legacy":
            return f"MIG-{gpu.uuid}/{instance.gpu_instance_id}/{instance.compute_instance_id}"
        return instance.uuid

    def _allocate(self) -> tuple[list[FakePod], set[str]]:
        seed = self.nvml.fleet.seed
        pods: list[FakePod] = []
        shared: set[str] = set()
        training: list[SimGpu] = []
        time_sliced = False
        for gpu in self.nvml.gpus:
            if resource_slices.is_dra(gpu):
                continue
            kind = gpu.spec.workload
            if gpu.mig_enabled and self.mig_strategy != "none":
                for position, inst in enumerate(gpu.live_instances()):
                    if position == 1:
                        continue  # left free
                    profile = inst.profile_name.replace(".", "-")
                    name = f"{kind}-{profile}-{_suffix(seed, gpu.index, position)}"
                    pods.append(
                        FakePod(
                            _NAMESPACES.get(kind, "default"),
                            name,
                            {
                                "worker": [
                                    (self._mig_resource(inst), [self.mig_device_id(gpu, inst)])
                                ]
                            },
                        )
                    )
                continue
            if kind == "training":
                training.append(gpu)
            elif kind == "inference" and not time_sliced:
                time_sliced = True
                shared.add(gpu.uuid)
                for replica in range(SHARED_REPLICAS - 1):
                    pods.append(
                        FakePod(
                            "inference",
                            f"chat-api-{_suffix(seed, 'chat')}-{_suffix(seed, replica)}",
                            {"server": [("nvidia.com/gpu.shared", [f"{gpu.uuid}::{replica}"])]},
                        )
                    )
            elif kind in ("inference", "batch"):
                pods.append(
                    FakePod(
                        _NAMESPACES[kind],
                        f"{kind}-{_suffix(seed, gpu.index)}",
                        {"main": [("nvidia.com/gpu", [gpu.uuid])]},
                    )
                )
        for start in range(0, len(training), 2):
            group = training[start : start + 2]
            pods.append(
                FakePod(
                    "ml-training",
                    f"llm-pretrain-worker-{start // 2}",
                    {"trainer": [("nvidia.com/gpu", [g.uuid for g in group])]},
                )
            )
        pods.extend(self._claiming_pods())
        pods.append(FakePod("monitoring", "node-exporter-" + _suffix(seed, "ne"), {"exporter": []}))
        pods.append(FakePod("kube-system", "kube-proxy-" + _suffix(seed, "kp"), {"kube-proxy": []}))
        return pods, shared

    def dra_device_name(self, gpu: SimGpu, instance: SimMigInstance | None = None) -> str:
        return resource_slices.device_name(gpu, instance, self.dra_name_format)

    def _claim(
        self, pod: str, namespace: str, reference: str, devices: list[str], shared: bool = False
    ) -> FakeClaim:
        """A claim generated from the pod's ResourceClaimTemplate: "<pod>-<claim ref>-<5 chars>"."""
        seed = self.nvml.fleet.seed
        name = f"{pod}-{reference}-{_suffix(seed, 'claim', pod, reference)}"
        share_id = stable_uuid(seed, "share", namespace, name) if shared else None
        node = self.nvml.fleet.node_name
        return FakeClaim(
            namespace,
            name,
            tuple(FakeClaimDevice(NVIDIA_GPU_DRIVER, node, d, share_id) for d in devices),
        )

    def _claiming_pods(self) -> list[FakePod]:
        seed = self.nvml.fleet.seed
        node = self.nvml.fleet.node_name
        shared = set(resource_slices.multi_allocation_gpus(self.nvml))
        pods: list[FakePod] = []
        training: list[SimGpu] = []
        two_containers = False

        def single(namespace: str, name: str, container: str, devices: list[str]) -> FakePod:
            return FakePod(
                namespace,
                name,
                {container: []},
                {container: [self._claim(name, namespace, "gpu", devices)]},
            )

        for gpu in self.nvml.gpus:
            if not resource_slices.is_dra(gpu):
                continue
            kind = gpu.spec.workload
            namespace = _NAMESPACES.get(kind, "default")
            if gpu.mig_enabled:
                for position, inst in enumerate(gpu.live_instances()):
                    if position == 1:
                        continue  # left free
                    profile = inst.profile_name.replace(".", "-").replace("+", "-")
                    name = f"{kind}-{profile}-{_suffix(seed, 'dra', gpu.index, position)}"
                    pods.append(
                        single(namespace, name, "worker", [self.dra_device_name(gpu, inst)])
                    )
                continue
            device = self.dra_device_name(gpu)
            if kind == "training":
                training.append(gpu)
            elif gpu in shared:
                for replica in range(DRA_SHARED_CLAIMS):
                    name = f"embed-api-{_suffix(seed, 'embed')}-{_suffix(seed, 'embed', replica)}"
                    claim = self._claim(name, namespace, "gpu", [device], shared=True)
                    pods.append(FakePod(namespace, name, {"server": []}, {"server": [claim]}))
            elif kind == "inference" and not two_containers:
                two_containers = True
                name = f"rag-pipeline-{_suffix(seed, 'rag', gpu.index)}"
                claim = self._claim(name, namespace, "gpu", [device])
                pods.append(
                    FakePod(
                        namespace,
                        name,
                        {"retriever": [], "generator": []},
                        {"retriever": [claim], "generator": [claim]},
                    )
                )
            elif kind in ("inference", "batch"):
                pods.append(
                    single(namespace, f"{kind}-{_suffix(seed, 'dra', gpu.index)}", "main", [device])
                )
        for start in range(0, len(training), 2):
            name = f"llm-finetune-worker-{start // 2}"
            devices = [self.dra_device_name(g) for g in training[start : start + 2]]
            claims = [self._claim(name, "ml-training", "gpus", devices)]
            if start == 0:
                # Multi-node NVLink jobs also claim an IMEX channel; that device is no GPU.
                channel = FakeClaim(
                    "ml-training",
                    f"{name}-imex-channel-{_suffix(seed, 'claim', name, 'imex')}",
                    (FakeClaimDevice(COMPUTE_DOMAIN_DRIVER, node, "channel-0"),),
                )
                claims.append(channel)
            pods.append(FakePod("ml-training", name, {"trainer": []}, {"trainer": claims}))
        return pods

    def dra_holders(self) -> tuple[DraAllocation, ...]:
        """Every (container, claim, device) the List answer reports, in its order, as the
        exporter parses it."""
        return tuple(
            DraAllocation(
                pod.namespace,
                pod.name,
                container,
                claim.name,
                claim.namespace,
                device.driver,
                device.pool,
                device.device,
                device.share_id,
            )
            for pod in self.pods
            for container in pod.containers
            for claim in pod.claims.get(container, ())
            for device in claim.devices
        )

    def dra_devices(self) -> dict[str, tuple[SimGpu, SimMigInstance | None]]:
        """The node's DRA devices by name: the GPU, and the MIG instance for a MIG device."""
        return resource_slices.offered_devices(self.nvml, self.dra_name_format)

    def allocatable_devices(self) -> dict[str, list[str]]:
        """Healthy devices by resource, as the kubelet reports them (lost GPUs excluded)."""
        devices: dict[str, list[str]] = {}
        for gpu in self.nvml.gpus:
            # The kubelet's allocatable list has device-plugin devices only: DRA devices are
            # offered through ResourceSlices.
            if gpu.lost or gpu.uuid in self.faults.unhealthy_gpus or resource_slices.is_dra(gpu):
                continue
            if gpu.mig_enabled and self.mig_strategy != "none":
                for inst in gpu.live_instances():
                    devices.setdefault(self._mig_resource(inst), []).append(
                        self.mig_device_id(gpu, inst)
                    )
            elif gpu.uuid in self.shared:
                devices.setdefault("nvidia.com/gpu.shared", []).extend(
                    f"{gpu.uuid}::{r}" for r in range(SHARED_REPLICAS)
                )
            else:
                devices.setdefault("nvidia.com/gpu", []).append(gpu.uuid)
        return devices

    def pods_using(self, gpu: SimGpu) -> list[str]:
        """ "namespace/name" of the pods holding the GPU, a replica of it, or one of its MIG
        instances."""
        ids = {gpu.uuid, *(f"{gpu.uuid}::{r}" for r in range(SHARED_REPLICAS))}
        ids.update(self.mig_device_id(gpu, inst) for inst in gpu.live_instances())
        node = self.nvml.fleet.node_name
        names = {self.dra_device_name(gpu)}
        names.update(self.dra_device_name(gpu, inst) for inst in gpu.live_instances())
        return sorted(
            f"{pod.namespace}/{pod.name}"
            for pod in self.pods
            if any(
                ids.intersection(device_ids)
                for devices in pod.containers.values()
                for _resource, device_ids in devices
            )
            or any(
                device.driver == NVIDIA_GPU_DRIVER
                and device.pool == node
                and device.device in names
                for claims in pod.claims.values()
                for claim in claims
                for device in claim.devices
            )
        )

    # ---- Responses ----

    def _pod_message(self, pod: FakePod) -> api_pb2.PodResources:
        return api_pb2.PodResources(
            name=pod.name,
            namespace=pod.namespace,
            containers=[
                api_pb2.ContainerResources(
                    name=container,
                    devices=[
                        api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                        for resource, ids in devices
                    ],
                    dynamic_resources=[
                        _claim_message(claim) for claim in pod.claims.get(container, ())
                    ],
                )
                for container, devices in pod.containers.items()
            ],
        )

    def list_response(self) -> api_pb2.ListPodResourcesResponse:
        pods = [self._pod_message(p) for p in self.pods]
        pods.extend(_padding(self.faults.padding_pods))
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)

    def allocatable_response(self) -> api_pb2.AllocatableResourcesResponse:
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)
                for resource, ids in sorted(self.allocatable_devices().items())
            ],
            cpu_ids=list(range(64)),
        )

    # ---- Server lifecycle ----

    def start(self) -> FakeKubelet:
        if self._server is not None:
            # Already serving. Starting again would unlink the live socket and bind a new one;
            # the dropped server, when gRPC reaps it about a second later, deletes that path.
            return self
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        if self.socket_path.exists():
            self.socket_path.unlink()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-kubelet"),
            options=[("grpc.max_send_message_length", 64 * 1024 * 1024)],
        )
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Servicer(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None
        if self.socket_path.exists():
            os.unlink(self.socket_path)

    def restart(self, downtime_seconds: float = 0.0) -> None:
        """What a kubelet restart looks like from a client: the socket disappears, then a new
        one appears at the same path."""
        self.stop()
        time.sleep(downtime_seconds)
        self.start()


def _claim_message(claim: FakeClaim) -> api_pb2.DynamicResource:
    resources = []
    for device in claim.devices:
        message = api_pb2.ClaimResource(
            driver_name=device.driver,
            pool_name=device.pool,
            device_name=device.device,
            # NVIDIA's drivers name a claim's devices in a per-claim CDI spec ("k8s.<driver>",
            # class "claim"), keyed by the claim's UID.
            cdi_devices=[
                api_pb2.CDIDevice(name=f"k8s.{device.driver}/claim={claim.uid}-{device.device}")
            ],
        )
        if device.share_id is not None:
            message.share_id = device.share_id
        resources.append(message)
    return api_pb2.DynamicResource(
        claim_name=claim.name, claim_namespace=claim.namespace, claim_resources=resources
    )


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def _enter(self, method: str, context: grpc.ServicerContext) -> None:
        k = self._kubelet
        with k._lock:
            k.calls[method] += 1
            k.in_flight += 1
            k.max_in_flight = max(k.max_in_flight, k.in_flight)
            limited = k.faults.rate_limited_calls > 0
            if limited:
                k.faults.rate_limited_calls -= 1
        try:
            if k.faults.delay_seconds:
                time.sleep(k.faults.delay_seconds)
            if limited:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")
        finally:
            with k._lock:
                k.in_flight -= 1

    def List(self, request, context):
        self._enter("List", context)
        return self._kubelet.list_response()

    def GetAllocatableResources(self, request, context):
        self._enter("GetAllocatableResources", context)
        if not self._kubelet.faults.allocatable_implemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method GetAllocatableResources")
        return self._kubelet.allocatable_response()

    def Get(self, request, context):
        self._enter("Get", context)
        if not self._kubelet.faults.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self._kubelet.pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(
                    pod_resources=self._kubelet._pod_message(pod)
                )
        context.abort(
            grpc.StatusCode.UNKNOWN,
            f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
        )

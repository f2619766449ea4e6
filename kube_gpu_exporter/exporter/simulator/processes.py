"""The simulated node's GPU processes: who runs what on which device, and how much of it they use.

Built from the fake NVML's GPUs and the fake kubelet's pods (device plugin and DRA alike): every
container that holds a GPU or a MIG device runs a process on each device it holds, and a container
with a single device may run a second, lighter one. Two processes break the pattern on purpose, so
that attribution has something to reject: a tool started on the host (outside any pod), and a
process of a pod on a GPU that pod does not hold (as when an image sets NVIDIA_VISIBLE_DEVICES=all).

Process memory is a share of the device's used memory; a few percent stay with the driver. SM,
memory and video utilization are shares of the device's own figures at the same instant, so the
processes of a whole GPU add up to what nvmlDeviceGetUtilizationRates reports. Shares drift with
the workload wave, PIDs stay fixed. Tests make processes exit and PIDs come back in another
container (`exit`, `reuse_pid`).
"""

from __future__ import annotations

import hashlib
import math
import threading
import zlib
from dataclasses import replace
from typing import TYPE_CHECKING

from kube_gpu_exporter.exporter.dra.names import NVIDIA_GPU_DRIVER
from kube_gpu_exporter.exporter.simulator.sim_gpu import MIB, SimGpu, SimMigInstance, stable_uuid
from kube_gpu_exporter.exporter.simulator.sim_process import ProcessUse, SimContainer, SimProcess

if TYPE_CHECKING:
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet, FakePod
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml

# Linux reports process start times in clock ticks since boot (USER_HZ, 100 on every
# mainstream architecture).
CLOCK_TICKS_PER_S = 100
# How long the node has been up when the simulated clock reads 0.
BOOT_AGE_S = 3 * 86400.0
FIRST_PID = 1000
# The driver keeps a few percent of what a device shows as used for itself (contexts, page
# tables), so the processes' own figures add up to a little less.
PROCESS_MEMORY_SHARE = 0.97
# How far a process's share of its device swings with the workload wave, either way.
SHARE_SWING = 0.08
# Each further holder of a shared device gets this fraction of the previous one's weight, so
# time-sliced pods show distinct shares that keep their order through the swing.
RANK_FALLOFF = 0.7
HELPER_SM_WEIGHT = 0.12
HELPER_MEMORY_WEIGHT = 0.05
HOST_SM_WEIGHT = 0.03
HOST_MEMORY_WEIGHT = 0.008
STRAY_SM_WEIGHT = 0.05
STRAY_MEMORY_WEIGHT = 0.02
HOST_UNIT = "gpu-node-check.service"
# A name with a space and a closing parenthesis: /proc/<pid>/stat parsers must cut at the last ')'.
HOST_COMM = "node check (v2)"
_COMMS = {"training": "pt_main_thread", "inference": "tritonserver", "batch": "python3"}
HELPER_COMM = "python3"
# Kubernetes QoS class of the pods per kind of work: it decides the pod's cgroup parent.
_QOS = {"training": "guaranteed", "inference": "burstable", "batch": "besteffort"}


def _unit(seed: int, *parts: object) -> float:
    """A stable number in [0, 1) (Python's hash() of strings changes per process)."""
    return zlib.crc32(repr((seed, *parts)).encode()) / 2**32


def pod_uid(seed: int, namespace: str, pod: str) -> str:
    """The simulated pod's metadata.uid, the same wherever the simulator needs it."""
    return stable_uuid(seed, "pod", namespace, pod)


def container_id(seed: int, namespace: str, pod: str, container: str) -> str:
    """A CRI container ID: 64 lower-case hex digits."""
    return hashlib.sha256(f"{seed}/{namespace}/{pod}/{container}".encode()).hexdigest()


def ticks_at(t: float) -> int:
    """Clock ticks since boot at simulated time t (the unit of /proc/<pid>/stat's field 22)."""
    return int((t + BOOT_AGE_S) * CLOCK_TICKS_PER_S)


_DeviceKey = tuple[int, int | None]  # (gpu index, GPU-instance id or None)


class ProcessTable:
    def __init__(self, nvml: FakeNvml, kubelet: FakeKubelet) -> None:
        self._nvml = nvml
        self.seed = nvml.fleet.seed
        self.cgroup_layout = nvml.fleet.cgroup_layout
        self._lock = threading.Lock()
        self._live: dict[int, SimProcess] = {}
        self._next_pid = FIRST_PID + 1 + int(_unit(self.seed, "first pid") * 4000)
        pods = list(kubelet.pods)
        held = self._held(nvml, kubelet, pods)
        self.containers: tuple[SimContainer, ...] = tuple(
            self._container(nvml, pod, name, held.get((pod.namespace, pod.name, name), []))
            for pod in pods
            for name in pod.containers
        )
        holders = {
            c: held[(c.namespace, c.pod, c.name)]
            for c in self.containers
            if (c.namespace, c.pod, c.name) in held
        }
        for process in self._build(nvml, holders):
            self._live[process.pid] = process

    # ---- Who holds what ----

    def _container(
        self, nvml: FakeNvml, pod: FakePod, name: str, keys: list[_DeviceKey]
    ) -> SimContainer:
        workload = nvml.gpus[keys[0][0]].spec.workload if keys else ""
        return SimContainer(
            namespace=pod.namespace,
            pod=pod.name,
            pod_uid=pod_uid(self.seed, pod.namespace, pod.name),
            name=name,
            container_id=container_id(self.seed, pod.namespace, pod.name, name),
            qos=_QOS.get(workload, "burstable"),
        )

    def container(self, namespace: str, pod: str, name: str) -> SimContainer:
        for container in self.containers:
            if (container.namespace, container.pod, container.name) == (namespace, pod, name):
                return container
        raise KeyError(f"{namespace}/{pod}/{name}")

    @staticmethod
    def _held(
        nvml: FakeNvml, kubelet: FakeKubelet, pods: list[FakePod]
    ) -> dict[tuple[str, str, str], list[_DeviceKey]]:
        """The devices each container holds, in the order pod-resources lists them."""
        by_id: dict[str, _DeviceKey] = {}
        for gpu in nvml.gpus:
            by_id[gpu.uuid] = (gpu.index, None)
            # Time-slicing replicas ("<uuid>::<n>") name the GPU they slice.
            for instance in gpu.live_instances():
                by_id[kubelet.mig_device_id(gpu, instance)] = (gpu.index, instance.gpu_instance_id)
        dra = {
            name: (gpu.index, None if instance is None else instance.gpu_instance_id)
            for name, (gpu, instance) in kubelet.dra_devices().items()
        }
        node = nvml.fleet.node_name
        held: dict[tuple[str, str, str], list[_DeviceKey]] = {}
        for pod in pods:
            for name, devices in pod.containers.items():
                keys: list[_DeviceKey] = []
                for _resource, ids in devices:
                    for device_id in ids:
                        key = by_id.get(device_id.split("::", 1)[0])
                        if key is not None and key not in keys:
                            keys.append(key)
                for claim in pod.claims.get(name, ()):
                    for device in claim.devices:
                        if device.driver != NVIDIA_GPU_DRIVER or device.pool != node:
                            continue
                        key = dra.get(device.device)
                        if key is not None and key not in keys:
                            keys.append(key)
                if keys:
                    held[(pod.namespace, pod.name, name)] = keys
        return held

    # ---- Building the table ----

    def _pid(self) -> int:
        pid = self._next_pid
        self._next_pid += 1 + int(_unit(self.seed, "pid gap", pid) * 1500)
        return pid

    def _process(
        self,
        gpu: SimGpu,
        gpu_instance_id: int | None,
        container: SimContainer | None,
        comm: str,
        started_s: float,
        sm_weight: float,
        memory_weight: float,
        holds_device: bool = True,
    ) -> SimProcess:
        pid = self._pid()
        return SimProcess(
            pid=pid,
            comm=comm,
            start_ticks=ticks_at(started_s),
            gpu_index=gpu.index,
            gpu_instance_id=gpu_instance_id,
            container=container,
            sm_weight=sm_weight,
            memory_weight=memory_weight,
            phase=2 * math.pi * _unit(self.seed, "phase", pid),
            holds_device=holds_device,
        )

    def _build(
        self, nvml: FakeNvml, holders: dict[SimContainer, list[_DeviceKey]]
    ) -> list[SimProcess]:
        seed = self.seed
        rank: dict[_DeviceKey, int] = {}
        processes: list[SimProcess] = []
        for container, keys in holders.items():
            # Pods started at different times over the last two days, before the simulation.
            started = -600 - _unit(seed, "start", container.container_id) * 2 * 86400
            comm = self._comm(nvml, keys[0])
            for position, key in enumerate(keys):
                weight = RANK_FALLOFF ** rank.setdefault(key, 0)
                rank[key] += 1
                gpu = nvml.gpus[key[0]]
                processes.append(
                    self._process(
                        gpu, key[1], container, comm, started + 0.4 * position, weight, weight
                    )
                )
                # A one-device container may run a second, lighter process (a tokenizer or a
                # data loader with its own CUDA context).
                if len(keys) == 1 and _unit(seed, "helper", container.container_id) < 0.5:
                    processes.append(
                        self._process(
                            gpu,
                            key[1],
                            container,
                            HELPER_COMM,
                            started + 5.0,
                            weight * HELPER_SM_WEIGHT,
                            weight * HELPER_MEMORY_WEIGHT,
                        )
                    )
        host_gpu = self._host_device(nvml)
        if host_gpu is not None:
            started = -_unit(seed, "host start") * 86400
            gpu = nvml.gpus[host_gpu[0]]
            processes.append(
                self._process(
                    gpu, host_gpu[1], None, HOST_COMM, started, HOST_SM_WEIGHT, HOST_MEMORY_WEIGHT
                )
            )
        stray = self._stray(nvml, holders, host_gpu)
        if stray is not None:
            container, key = stray
            started = -300 - _unit(seed, "stray start") * 3600
            processes.append(
                self._process(
                    nvml.gpus[key[0]],
                    key[1],
                    container,
                    self._comm(nvml, holders[container][0]),
                    started,
                    STRAY_SM_WEIGHT,
                    STRAY_MEMORY_WEIGHT,
                    holds_device=False,
                )
            )
        return processes

    @staticmethod
    def _comm(nvml: FakeNvml, key: _DeviceKey) -> str:
        return _COMMS.get(nvml.gpus[key[0]].spec.workload, "python3")

    @staticmethod
    def _busy_whole_gpus(nvml: FakeNvml) -> list[SimGpu]:
        return [g for g in nvml.gpus if not g.mig_enabled and g.shape.memory_fraction > 0]

    def _host_device(self, nvml: FakeNvml) -> _DeviceKey | None:
        """Where the host's tool runs: the first busy whole GPU, else the first MIG instance of a
        busy GPU."""
        whole = self._busy_whole_gpus(nvml)
        if whole:
            return (whole[0].index, None)
        for gpu in nvml.gpus:
            instances = gpu.live_instances() if gpu.mig_enabled else []
            if instances and gpu.shape.memory_fraction > 0:
                return (gpu.index, instances[0].gpu_instance_id)
        return None

    def _stray(
        self,
        nvml: FakeNvml,
        holders: dict[SimContainer, list[_DeviceKey]],
        host: _DeviceKey | None,
    ) -> tuple[SimContainer, _DeviceKey] | None:
        """A container of the pod holding the last busy whole GPU, running on the first other busy
        whole GPU its pod does not hold (not the host tool's GPU when there is a choice)."""
        busy = [(g.index, None) for g in self._busy_whole_gpus(nvml)]
        held = [key for key in busy if any(key in keys for keys in holders.values())]
        if len(held) < 2:
            return None
        container = next(c for c, keys in holders.items() if held[-1] in keys)
        pod_holds = {
            key
            for other, keys in holders.items()
            if (other.namespace, other.pod) == (container.namespace, container.pod)
            for key in keys
        }
        targets = [key for key in busy if key not in pod_holds]
        preferred = [key for key in targets if key != host] or targets
        return (container, preferred[0]) if preferred else None

    # ---- Reading ----

    def processes(self) -> tuple[SimProcess, ...]:
        """The live processes, in the order they were started."""
        with self._lock:
            return tuple(self._live.values())

    def get(self, pid: int) -> SimProcess | None:
        with self._lock:
            return self._live.get(pid)

    def _on(self, gpu: SimGpu, gpu_instance_id: int | None) -> list[SimProcess]:
        return [
            p
            for p in self.processes()
            if p.gpu_index == gpu.index and p.gpu_instance_id == gpu_instance_id
        ]

    def _device_used_bytes(self, gpu: SimGpu, instance: SimMigInstance | None, t: float) -> int:
        if instance is not None:
            return gpu.instance_memory(instance, t)[1]
        return gpu.memory(t)[2]

    def memory(
        self, gpu: SimGpu, instance: SimMigInstance | None, t: float
    ) -> list[tuple[SimProcess, int]]:
        """(process, used bytes) on one device, as the process lists report them. On a MIG-enabled
        GPU, `instance` None means every instance's processes (the parent handle's aggregate)."""
        if gpu.mig_enabled and instance is None:
            return [pair for live in gpu.live_instances() for pair in self.memory(gpu, live, t)]
        processes = self._on(gpu, None if instance is None else instance.gpu_instance_id)
        if not processes:
            return []
        budget_mib = int(self._device_used_bytes(gpu, instance, t) * PROCESS_MEMORY_SHARE) // MIB
        shares = apportion(budget_mib, [p.memory_weight for p in processes])
        return [(p, mib * MIB) for p, mib in zip(processes, shares, strict=True)]

    def sm_shares(self, gpu: SimGpu, t: float) -> list[tuple[SimProcess, float]]:
        """Each process's fraction of the whole GPU's activity at t; they add up to 1."""
        processes = self._on(gpu, None)
        period = gpu.shape.period_s
        weights = [
            p.sm_weight * (1 + SHARE_SWING * math.sin(2 * math.pi * t / period + p.phase))
            for p in processes
        ]
        total = sum(weights)
        return [(p, w / total) for p, w in zip(processes, weights, strict=True)]

    def utilization(self, gpu: SimGpu, t: float) -> list[ProcessUse]:
        """Each process's share of the whole GPU's utilization at t. The totals are the device's
        own figures at t, rounded as NVML rounds them, so the shares add up to them exactly."""
        shares = self.sm_shares(gpu, t)
        if gpu.mig_enabled or not shares:
            return []
        weights = [share for _, share in shares]
        sm_total = round(gpu.utilization(t) * 100)
        sm = apportion(sm_total, weights)
        if not sm_total:
            # What an idle board still shows as memory activity belongs to no process.
            return [ProcessUse(p, 0, 0, 0, 0) for p, _ in shares]
        memory = apportion(round(gpu.memory_copy_utilization(t) * 100), weights)
        decoder = apportion(round(gpu.decoder_utilization(t) * 100), weights)
        return [ProcessUse(p, sm[i], memory[i], 0, decoder[i]) for i, (p, _) in enumerate(shares)]

    # ---- Changes (tests and the simulator's control API) ----

    def exit(self, pid: int) -> SimProcess:
        """The process ends: NVML stops listing it, and the next host tree refresh removes its
        /proc entry."""
        with self._lock:
            process = self._live.pop(pid, None)
        if process is None:
            raise KeyError(f"no live simulated process {pid}")
        return process

    def reuse_pid(self, pid: int, like: int | None = None) -> SimProcess:
        """The process ends and the kernel hands its PID to a new process, started now in another
        container on that container's device: the one running process `like`, by default the
        first live process of another container."""
        with self._lock:
            old = self._live.get(pid)
            if old is None:
                raise KeyError(f"no live simulated process {pid}")
            if like is None:
                template = next(
                    (
                        p
                        for p in self._live.values()
                        if p.container is not None
                        and p.container != old.container
                        and p.holds_device
                    ),
                    None,
                )
            else:
                template = self._live.get(like)
            if template is None or template.container is None or template.pid == pid:
                raise KeyError(f"no other container to reuse PID {pid} in")
            new = replace(
                template,
                pid=pid,
                start_ticks=max(ticks_at(self._nvml.now()), old.start_ticks + 1),
                phase=old.phase,
            )
            del self._live[pid]
            self._live[pid] = new
        return new

    def uptime_s(self) -> float:
        return self._nvml.now() + BOOT_AGE_S


def apportion(total: int, weights: list[float]) -> list[int]:
    """Whole numbers in proportion to weights that add up to total exactly (largest remainder)."""
    if total <= 0 or not weights or sum(weights) <= 0:
        return [0] * len(weights)
    scale = total / sum(weights)
    exact = [w * scale for w in weights]
    whole = [math.floor(x) for x in exact]
    short = total - sum(whole)
    for i in sorted(range(len(weights)), key=lambda i: whole[i] - exact[i])[:short]:
        whole[i] += 1
    return whole

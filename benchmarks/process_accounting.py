"""What NVML process accounting costs per round on a busy node: one `ProcessSampler` round over
8 GPUs x 50 processes on the simulated NVML, with owners from a table (the sampler and NVML's
Python side alone) and from `HostPidOwners` over a proc root and kubelet logs in a temporary
directory (the whole round as deployed, the resolver's cache warm), beside what nvidia-ml-py's
own wrappers cost for the same answers (their share of either figure).

    python -m benchmarks.process_accounting [--gpus 8] [--processes 50]

The simulator's devices give the handles; the process calls are stand-ins that build their
answers as nvidia-ml-py does (a ctypes struct per process, made into a friendly object), with a
fresh utilization window each round, so no round is the cheap NOT_FOUND case.
"""

from __future__ import annotations

import argparse
import ctypes
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

import pynvml

from benchmarks.inprocess import median_ms
from kube_gpu_exporter.exporter.nvml.error_tally import ErrorTally
from kube_gpu_exporter.exporter.nvml.guarded_calls import GuardedNvml
from kube_gpu_exporter.exporter.nvml.helper import LiveGpu
from kube_gpu_exporter.exporter.nvml.mig_reader import MigReader
from kube_gpu_exporter.exporter.nvml.process_sampler import ProcessSampler
from kube_gpu_exporter.exporter.processes.host_pids import HostPidOwners
from kube_gpu_exporter.exporter.processes.owner import PidOwners
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.fleet import parse_fleet
from kube_gpu_exporter.exporter.snapshot import ProcessOwner

PROCESSES_PER_CONTAINER = 5
# One process in this many is also a graphics client, so the lists overlap as on a real node.
GRAPHICS_EVERY = 10
SAMPLES_PER_WINDOW = 2
NO_INSTANCE = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class Container:
    namespace: str
    pod: str
    pod_uid: str
    name: str
    container_id: str

    @property
    def owner(self) -> ProcessOwner:
        return ProcessOwner(self.pod_uid, self.container_id, self.namespace, self.pod, self.name)


@dataclass(frozen=True, slots=True)
class Node:
    gpus: int
    processes: int

    def pids(self, gpu: int) -> range:
        first = 10_000 + gpu * self.processes
        return range(first, first + self.processes)

    def container_of(self, pid: int) -> Container:
        number = (pid - 10_000) // PROCESSES_PER_CONTAINER
        uid = f"{number:08x}-0000-4000-8000-000000000000"
        return Container("bench", f"job-{number}", uid, "worker", f"{number:064x}")


def _address(handle: Any) -> int:
    return ctypes.cast(handle, ctypes.c_void_p).value or 0


class StandInProcesses:
    """The process calls for `node`, keyed by handle address (the fake's handles are stable)."""

    def __init__(self, node: Node, handles: list[Any]) -> None:
        self._pids = {_address(h): node.pids(i) for i, h in enumerate(handles)}
        self._clock = 0

    @contextmanager
    def installed(self, api: Any) -> Iterator[None]:
        """On the simulator's api object (`api`), for as long as the block runs."""
        replacements: dict[str, Callable[..., Any]] = {
            "nvmlDeviceGetComputeRunningProcesses": self._compute,
            "nvmlDeviceGetGraphicsRunningProcesses": self._graphics,
            "nvmlDeviceGetMPSComputeRunningProcesses": lambda handle: [],
            "nvmlDeviceGetProcessesUtilizationInfo": self._utilization,
        }
        with ExitStack() as stack:
            for name, function in replacements.items():
                stack.enter_context(mock.patch.object(api, name, function))
            yield

    def _rows(self, pids: Any) -> list[Any]:
        rows = (pynvml.c_nvmlProcessInfo_v3_t * len(pids))()
        for row, pid in zip(rows, pids, strict=True):
            row.pid, row.usedGpuMemory = pid, (pid % 64 + 1) << 26
            row.gpuInstanceId = row.computeInstanceId = NO_INSTANCE
        return [pynvml.nvmlStructToFriendlyObject(row) for row in rows]

    def _compute(self, handle: Any) -> list[Any]:
        return self._rows(self._pids[_address(handle)])

    def _graphics(self, handle: Any) -> list[Any]:
        return self._rows(self._pids[_address(handle)][::GRAPHICS_EVERY])

    def _utilization(self, handle: Any, since: int) -> list[Any]:
        pids = self._pids[_address(handle)]
        samples = (pynvml.c_nvmlProcessUtilizationInfo_v1_t * (len(pids) * SAMPLES_PER_WINDOW))()
        self._clock = max(self._clock, since)
        for i, sample in enumerate(samples):
            self._clock += 1
            sample.pid, sample.timeStamp = pids[i % len(pids)], self._clock
            sample.smUtil = sample.memUtil = i % 100
        return samples[:]


class TableOwners:
    """A `PidOwners` that answers from memory: the sampler's own cost, without /proc."""

    def __init__(self, node: Node) -> None:
        self._owners = {
            pid: node.container_of(pid).owner for g in range(node.gpus) for pid in node.pids(g)
        }

    def owner(self, pid: int) -> ProcessOwner | str:
        return self._owners[pid]

    def problem(self) -> str | None:
        return None


def write_host(node: Node, root: Path) -> tuple[Path, Path]:
    """A host's /proc (a systemd PID 1, every GPU process in a systemd-driver pod cgroup) and its
    kubelet log layout, for `node`."""
    proc, logs = root / "proc", root / "log"
    (proc / "1").mkdir(parents=True)
    (proc / "1" / "cgroup").write_text("0::/init.scope\n")
    for directory in ("containers", "pods"):
        (logs / directory).mkdir(parents=True)
    containers: set[Container] = set()
    for gpu in range(node.gpus):
        for pid in node.pids(gpu):
            container = node.container_of(pid)
            containers.add(container)
            slice_uid = container.pod_uid.replace("-", "_")
            (proc / str(pid)).mkdir()
            (proc / str(pid) / "cgroup").write_text(
                "0::/kubepods.slice/kubepods-burstable.slice/"
                f"kubepods-burstable-pod{slice_uid}.slice/"
                f"cri-containerd-{container.container_id}.scope\n"
            )
            fields = ["0"] * 50
            fields[19] = str(1_000 + pid)  # field 22, the start time
            (proc / str(pid) / "stat").write_text(f"{pid} (python3) S {' '.join(fields)}\n")
    for c in containers:
        log = f"{c.pod}_{c.namespace}_{c.name}-{c.container_id}.log"
        (logs / "containers" / log).touch()
        (logs / "pods" / f"{c.namespace}_{c.pod}_{c.pod_uid}").mkdir()
    return proc, logs


def _ask_everything(api: Any, handles: list[Any]) -> None:
    """The NVML calls of one round and nothing else."""
    for handle in handles:
        for kind in ("Compute", "Graphics", "MPSCompute"):
            getattr(api, f"nvmlDeviceGet{kind}RunningProcesses")(handle)
        api.nvmlDeviceGetProcessesUtilizationInfo(handle, 0)


def round_ms(sampler: ProcessSampler, repeat: int) -> float:
    sampler.sample_once()  # warms the resolver's cache and the fallbacks
    if not sampler.last_success:
        raise RuntimeError("the process accounting round failed; the figure would mean nothing")
    return median_ms(sampler.sample_once, repeat)


def measure(gpus: int = 8, processes: int = 50, repeat: int = 7) -> dict[str, float]:
    """Milliseconds per round: "table" and "host" by where the owners come from, "binding" for
    nvidia-ml-py's wrappers alone."""
    node = Node(gpus, processes)
    fleet = parse_fleet(
        "gpus:\n" + "  - {model: H100-80GB-HBM3, workload: training}\n" * gpus, "process bench"
    )
    # Process lists cost what a real one does (call_costs.py); no PCIe wait is involved.
    sim = FakeNvml(replace(fleet, pcie_window_ms=0.0))
    api = sim.api
    api.nvmlInit()
    try:
        handles = [api.nvmlDeviceGetHandleByIndex(i) for i in range(gpus)]
        live = [LiveGpu(i, api.nvmlDeviceGetUUID(h)) for i, h in enumerate(handles)]
        stand_ins = StandInProcesses(node, handles)
        with stand_ins.installed(api), tempfile.TemporaryDirectory() as tmp:
            proc, logs = write_host(node, Path(tmp))
            host = HostPidOwners(proc, logs)
            if (problem := host.problem()) is not None:
                raise RuntimeError(f"the benchmark's host tree is not accepted: {problem}")
            figures = {"binding": median_ms(lambda: _ask_everything(api, handles), repeat)}
            owners: dict[str, PidOwners] = {"table": TableOwners(node), "host": host}
            for name, pid_owners in owners.items():
                nvml = GuardedNvml(ErrorTally(), api)
                sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), pid_owners, 1.0)
                sampler.track(live)
                figures[name] = round_ms(sampler, repeat)
                found = sum(len(sampler.latest(gpu.uuid) or ()) for gpu in live)
                if found != gpus * processes:
                    raise RuntimeError(f"{found} processes found, {gpus * processes} expected")
        return figures
    finally:
        api.nvmlShutdown()
        sim.close()


def summary(gpus: int = 8, processes: int = 50) -> str:
    """One line for the report: what a round costs, measured now."""
    figures = measure(gpus, processes)
    return (
        f"process accounting, {gpus} GPUs x {processes} processes: "
        f"{figures['host']:.2f} ms per round with owners from /proc and the kubelet's logs, "
        f"{figures['table']:.2f} ms with owners from memory, of which nvidia-ml-py's wrappers "
        f"take {figures['binding']:.2f} ms"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.process_accounting")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--processes", type=int, default=50, help="per GPU")
    args = parser.parse_args(argv)
    print(summary(args.gpus, args.processes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

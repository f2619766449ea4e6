"""A pod's cgroup is accepted only where the kubelet makes it (resilience round 3, item A).

Any login user on a systemd cgroup-v2 host owns a delegated subtree
(`/user.slice/user-<uid>.slice/user@<uid>.service/...`) and may create cgroups named like a
kubelet's there, with a pod UID and a container ID read from /var/log/containers. Every case is
a real file in a fake proc root, read by `HostPidOwners`, the resolver the process sampler uses;
the last test runs the whole path (simulated NVML, the sampler, the join with pod-resources)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.nvml.error_tally import ErrorTally
from exporter.nvml.guarded_calls import GuardedNvml
from exporter.nvml.helper import LiveGpu
from exporter.nvml.mig_reader import MigReader
from exporter.nvml.process_sampler import ProcessSampler
from exporter.podresources.allocations import from_responses
from exporter.podresources.attribution import attribute
from exporter.processes.host_pids import HostPidOwners
from exporter.processes.owner import HOST
from exporter.processes.pod_usage import UNATTRIBUTED, pod_usage
from exporter.simulator.fake_kubelet import FakeKubelet
from exporter.simulator.fake_nvml import FakeNvml
from exporter.simulator.fleet import default_fleet
from exporter.simulator.host_tree import HostTree
from exporter.simulator.processes import ProcessTable
from exporter.snapshot import GpuIdentity, GpuSnapshot, NodeSnapshot, ProcessOwner
from tests import test_pid_owners as owners_tests
from tests.conftest import quiet

UID = owners_tests.UID
UID_ = owners_tests.UID_
CID = owners_tests.CID
NODE_ID = owners_tests.NODE_ID
OTHER_UID = owners_tests.OTHER_UID
OTHER_UID_ = OTHER_UID.replace("-", "_")
OTHER_CID = owners_tests.OTHER_CID
v1 = owners_tests.v1
USER = "/user.slice/user-1000.slice/user@1000.service"


def _systemd_pod(qos: str, uid_: str = UID_) -> str:
    if not qos:
        return f"/kubepods.slice/kubepods-pod{uid_}.slice"
    return f"/kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid_}.slice"


def _cgroupfs_pod(qos: str, uid: str = UID) -> str:
    return f"/kubepods/{qos}/pod{uid}" if qos else f"/kubepods/pod{uid}"


_SCOPES = {"containerd": "cri-containerd", "cri-o": "crio", "docker": "docker"}
_DIRS = {"containerd": CID, "cri-o": f"crio-{CID}", "docker": CID}


def _real_layouts() -> Iterator[tuple[str, str]]:
    """Every driver, QoS class, runtime and cgroup version the kubelet combines."""
    for driver, qos, runtime, version in itertools.product(
        ("systemd", "cgroupfs"),
        ("", "burstable", "besteffort"),
        ("containerd", "cri-o", "docker"),
        ("v1", "v2"),
    ):
        if driver == "systemd":
            path = f"{_systemd_pod(qos)}/{_SCOPES[runtime]}-{CID}.scope"
        else:
            path = f"{_cgroupfs_pod(qos)}/{_DIRS[runtime]}"
        text = f"0::{path}\n" if version == "v2" else v1(path)
        yield f"{driver} {qos or 'guaranteed'} {runtime} {version}", text


REAL_LAYOUTS = (
    dict(_real_layouts())
    | {
        # The forms docs/process-accounting.md lists beyond the plain ones, each kept working.
        f"documented: {name}": text
        for name, text in owners_tests.POD_LAYOUTS.items()
    }
    | {
        "kind on v1 (cgroupfs under its cgroup root)": v1(
            f"/docker/{NODE_ID}/kubelet/kubepods/burstable/pod{UID}/{CID}"
        ),
        "cgroup namespace, systemd, kubelet cgroup root hidden": (
            f"0::/../../../kubelet-kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
        ),
        "a pod nested in another pod's container is the outer pod's": (
            f"0::{_systemd_pod('burstable')}/cri-containerd-{CID}.scope"
            f"{_systemd_pod('', OTHER_UID_)}/cri-containerd-{OTHER_CID}.scope\n"
        ),
        "a cgroupfs pod nested in a cgroupfs pod's container": (
            f"0::{_cgroupfs_pod('besteffort')}/{CID}{_cgroupfs_pod('', OTHER_UID)}/{OTHER_CID}\n"
        ),
        "a nested pod seen through a cgroup namespace": (
            f"0::/../../burstable/pod{UID}/{CID}{_cgroupfs_pod('', OTHER_UID)}/{OTHER_CID}\n"
        ),
    }
)

# What any login user (or a delegated service, or a rootless container engine) can create:
# none is a pod of this node's kubelet.
LOOK_ALIKES = {
    "user subtree, the issue's reproduction": (
        f"0::{USER}/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, a whole systemd kubepods tree": (
        f"0::{USER}/app.slice{_systemd_pod('burstable')}/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, guaranteed slice": (
        f"0::{USER}/kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "user subtree, a cgroupfs kubepods tree": f"0::{USER}{_cgroupfs_pod('burstable')}/{CID}\n",
    "login session scope": (
        f"0::/user.slice/user-1000.slice/session-3.scope/kubepods/pod{UID}/{CID}\n"
    ),
    "user subtree on a hybrid host, v1 lines at the root": (
        f"0::{USER}/kubepods-besteffort-pod{UID_}.slice/crio-{CID}.scope\n" + v1("/")
    ),
    "a delegated system service": (
        f"0::/system.slice/batch.service{_systemd_pod('')}/cri-containerd-{CID}.scope\n"
    ),
    "a delegated system service, cgroupfs names": (
        f"0::/system.slice/batch.service{_cgroupfs_pod('besteffort')}/{CID}\n"
    ),
    "rootless podman's container with a pod tree inside": (
        f"0::{USER}/user.slice/libpod-{NODE_ID}.scope{_cgroupfs_pod('burstable')}/{CID}\n"
    ),
    "rootless k3s (kubelet in a user namespace), cgroupfs": (
        f"0::{USER}/k3s-rootless.service{_cgroupfs_pod('burstable')}/{CID}\n"
    ),
    "rootless kubelet, systemd driver": (
        f"0::{USER}/user.slice/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "rootless kind node seen from the host": (
        f"0::{USER}/user.slice/docker-{NODE_ID}.scope/kubelet.slice/kubelet-kubepods.slice/"
        f"kubelet-kubepods-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "a slice whose name does not extend its parent's": (
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-burstable-pod{UID_}.slice/"
        f"cri-containerd-{CID}.scope\n"
    ),
    "a slice chain broken by a scope": (
        f"0::/kubepods.slice/x.scope/kubepods-burstable-pod{UID_}.slice/cri-containerd-{CID}.scope\n"
    ),
    "a '..' that is not the namespace's prefix": f"0::/user.slice/x/../burstable/pod{UID}/{CID}\n",
}


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    return owners_tests.host_proc(tmp_path)


def _resolve(proc: Path, tmp_path: Path, cgroup: str) -> ProcessOwner | str:
    owners_tests.add_process(proc, 4242, 9000, cgroup)
    return HostPidOwners(proc, tmp_path / "no-logs", owners_tests.Clock()).owner(4242)


def _under_a_users_subtree(cgroup: str) -> str:
    """The same file with every hierarchy's path moved below a login user's delegated subtree,
    where that user may create exactly these names."""
    lines = []
    for line in cgroup.splitlines():
        hierarchy, controllers, path = line.split(":", 2)
        lines.append(f"{hierarchy}:{controllers}:{USER}{path.rstrip('/')}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("cgroup", REAL_LAYOUTS.values(), ids=REAL_LAYOUTS.keys())
def test_every_real_layout_resolves_and_its_copy_in_a_users_subtree_does_not(
    proc: Path, tmp_path: Path, cgroup: str
) -> None:
    assert _resolve(proc, tmp_path, cgroup) == ProcessOwner(UID, CID)
    assert _resolve(proc, tmp_path, _under_a_users_subtree(cgroup)) == HOST


@pytest.mark.parametrize("cgroup", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_look_alike_outside_the_kubelets_hierarchy_is_a_host_process(
    proc: Path, tmp_path: Path, cgroup: str
) -> None:
    assert _resolve(proc, tmp_path, cgroup) == HOST


# ---- the whole path: NVML's processes, the sampler, the join ----


def _usage_of_gpu0(tmp_path: Path, forge: bool) -> tuple[dict[str, int], dict[str, int], int]:
    """Per-pod memory on GPU 0 and its unattributed reasons, after one sampler round over the
    simulated node; with `forge`, its host process was first moved into a cgroup under a login
    user's subtree named after GPU 0's pod. Also returns the host process's memory."""
    fleet = quiet(replace(default_fleet(), cgroup_layout="systemd-containerd-v2"))
    # A frozen clock: both runs see the same workload, so their rows compare exactly.
    sim = FakeNvml(fleet, clock=lambda: 1000.0)
    sim.api.nvmlInit()
    try:
        kubelet = FakeKubelet(sim, tmp_path / "kubelet.sock")
        sim.processes = table = ProcessTable(sim, kubelet)
        tree = HostTree(table, tmp_path / "host").refresh()
        host = next(p for p in table.processes() if p.on_host)
        victim = next(
            p.container
            for p in table.processes()
            if p.container is not None and p.gpu_index == host.gpu_index and p.holds_device
        )
        if forge:
            (tree.proc_root / str(host.pid) / "cgroup").write_text(
                f"0::{USER}/kubepods-pod{victim.pod_uid.replace('-', '_')}.slice/"
                f"cri-containerd-{victim.container_id}.scope\n"
            )
        nvml = GuardedNvml(ErrorTally(), sim.api)
        owners = HostPidOwners(tree.proc_root, tree.log_root)
        sampler = ProcessSampler(nvml, MigReader(nvml, 60.0), owners, interval_seconds=1.0)
        gpu = sim.gpus[host.gpu_index]
        sampler.track([LiveGpu(gpu.index, gpu.uuid)])
        sampler.sample_once()
        assert sampler.last_success
        identity = GpuIdentity(gpu.index, gpu.uuid, "", "", mig_enabled=False)
        merged = sampler.merge(GpuSnapshot(identity, up=True, readings=None))
        node = NodeSnapshot(
            taken_at=0.0,
            monotonic_at=0.0,
            sweep_duration_seconds=0.0,
            nvml_up=True,
            driver_version="",
            gpus=(merged,),
            collectors=(),
        )
        pods = from_responses(kubelet.list_response(), None, frozenset(), 0.0)
        [(_key, device)] = pod_usage(node, attribute(node, pods)).items()
        host_memory = next(
            p.used_memory_bytes or 0 for p in merged.processes or () if p.pid == host.pid
        )
        memory = {
            key[1]: usage.memory_bytes or 0
            for key, usage in device.by_container.items()
            if key != UNATTRIBUTED
        }
        memory["(unattributed)"] = device.by_container[UNATTRIBUTED].memory_bytes or 0
        return memory, dict(device.unattributed), host_memory
    finally:
        sim.api.nvmlShutdown()
        sim.close()


def test_a_host_process_moved_under_a_users_look_alike_stays_on_the_host_row(
    tmp_path: Path,
) -> None:
    honest, honest_reasons, host_memory = _usage_of_gpu0(tmp_path / "honest", forge=False)
    forged, forged_reasons, _ = _usage_of_gpu0(tmp_path / "forged", forge=True)
    assert host_memory > 256 << 20, "the simulated host tool holds a few hundred MB"
    assert honest_reasons.get(HOST) == 1
    # The simulated workload moves between the two runs only through the host tree written,
    # which is the same: every row must match the honest run's.
    assert forged_reasons == honest_reasons
    assert forged == honest

"""The simulated node's description: parsed from a YAML fleet file and validated field by field,
so a mistake is reported as one line naming the offending field."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.config import NODE_NAME
from kube_gpu_exporter.exporter.errors import quoted_path
from kube_gpu_exporter.exporter.simulator.gpu_models import MODELS, GpuModel, find_model
from kube_gpu_exporter.exporter.simulator.mig_layout import MigLayoutError, PlacedInstance, place

WORKLOADS = ("training", "inference", "batch", "idle")
ALLOCATIONS = ("device-plugin", "dra")
VGPU_LICENSES = ("licensed", "unlicensed")
# How the simulated host's /proc/<pid>/cgroup names a container's cgroup: the kubelet's cgroup
# driver, the container runtime, and the cgroup version
# (kube_gpu_exporter/exporter/simulator/host_tree.py). How simulated NVML calls cost the caller
# (kube_gpu_exporter/exporter/simulator/call_costs.py): what a real GPU charged per call, or one
# flat sleep per call (`latency.call_us`).
CALL_COSTS = ("measured", "flat")
CGROUP_LAYOUTS = (
    "systemd-containerd-v2",
    "systemd-crio-v2",
    "cgroupfs-containerd-v1",
    "cgroupfs-containerd-v2",
)
MAX_GPUS = 64
MAX_FILE_BYTES = 1 << 20
SHOWN_KEY = 40
FLEETS_FOLDER = "fleets"
DEFAULT_FLEET = "default"
_DRIVER_VERSION = re.compile(r"^\d{3}\.\d{1,3}(\.\d{1,3})?$")


class FleetError(ValueError):
    """A fleet file problem; str() is the one-line message for the user."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    model: GpuModel
    workload: str
    ecc: bool
    # None: MIG disabled (or unsupported). A tuple, possibly empty: MIG enabled with these.
    mig: tuple[PlacedInstance, ...] | None
    # None: bare metal, no vGPU licensing. Else a vGPU guest whose licence is in this state.
    vgpu_license: str | None = None
    # How the node's kubelet hands this GPU (or its MIG devices) to pods: NVIDIA's device plugin,
    # or NVIDIA's DRA driver (gpu.nvidia.com).
    allocation: str = "device-plugin"
    # The multi-node NVLink fabric the GPU is registered with; None: none (NVML answers
    # NOT_SUPPORTED). Set from the fleet's `fabric` block on fabric-capable models only.
    fabric: FabricSpec | None = None


@dataclass(frozen=True, slots=True)
class FabricSpec:
    # The cluster UUID and clique ID the fabric manager gives every GPU of one NVLink domain.
    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class FleetSpec:
    node_name: str
    driver_version: str
    seed: int
    call_latency_us: float
    pcie_window_ms: float
    gpus: tuple[GpuSpec, ...]
    # NVML answers the calls it keeps for privileged callers (nvmlDeviceGetGpuInstanceById and
    # nvmlGpuInstanceGetInfo: MIG placements), as for an exporter run as root with CAP_SYS_ADMIN.
    nvml_privileged: bool = False
    cgroup_layout: str = CGROUP_LAYOUTS[0]
    # "measured": each call costs what it cost on a real GPU; "flat": call_latency_us each.
    call_costs: str = CALL_COSTS[0]

    @property
    def driver_major(self) -> int:
        return int(self.driver_version.split(".", 1)[0])


def builtin_fleets() -> tuple[str, ...]:
    """The names of the fleets shipped with the package, for `--simulate NAME`."""
    folder = resources.files("kube_gpu_exporter.exporter.simulator").joinpath(FLEETS_FOLDER)
    return tuple(
        sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if _is_fleet(entry.name))
    )


def builtin_fleet(name: str) -> FleetSpec:
    if name not in builtin_fleets():
        raise FleetError(
            f"unknown built-in fleet {small_yaml.shown(name)} "
            f"(built-in: {', '.join(builtin_fleets())}); "
            'a fleet file path needs a "/" or a .yaml suffix'
        )
    folder = resources.files("kube_gpu_exporter.exporter.simulator").joinpath(FLEETS_FOLDER)
    return parse_fleet(folder.joinpath(f"{name}.yaml").read_text(), f"built-in fleet {name}")


def builtin_collectors(name: str | None) -> str | None:
    """The dcgm-exporter CSV a built-in fleet ships beside its YAML (`<name>-collectors.csv`),
    for the fields its boards serve beyond the defaults (the gb200 tray's NVLink, fabric and C2C
    families); None for a fleet without one, and for a fleet file."""
    if name is None or name not in builtin_fleets():
        return None
    folder = resources.files("kube_gpu_exporter.exporter.simulator").joinpath(FLEETS_FOLDER)
    path = folder.joinpath(f"{name}-collectors.csv")
    return str(path) if path.is_file() else None


def default_fleet() -> FleetSpec:
    return builtin_fleet(DEFAULT_FLEET)


def resolve_fleet(name_or_path: str | None) -> FleetSpec:
    """What `--simulate` names: nothing for the default node, a built-in fleet's bare name, or
    a fleet file. A bare word is never read as a file, so a typo of a built-in name is not
    looked for in the working directory."""
    if not name_or_path:
        return default_fleet()
    if "/" in name_or_path or name_or_path.endswith((".yaml", ".yml")):
        return load_fleet(name_or_path)
    return builtin_fleet(name_or_path)


def load_fleet(path: str | Path) -> FleetSpec:
    source = f"fleet file {quoted_path(path)}"
    try:
        text = small_yaml.read_text(Path(path), MAX_FILE_BYTES)
    except small_yaml.YamlRefused as exc:
        raise FleetError(f"{source}: {exc}") from None
    return parse_fleet(text, source)


def parse_fleet(text: str, source: str) -> FleetSpec:
    try:
        doc = small_yaml.load(text)
    except small_yaml.YamlRefused as exc:
        raise FleetError(f"{source}: {exc}") from None
    return _Parser(source).fleet(doc)


class _Parser:
    def __init__(self, source: str) -> None:
        self._source = source

    def _fail(self, path: str, message: str) -> FleetError:
        return FleetError(f"{self._source}: {path}: {message}")

    def _mapping(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self._fail(path, f"expected a mapping, got {_kind(value)}")
        for key in value:
            if key not in allowed:
                # repr's escapes keep a key with a newline in it on the error's one line.
                name = repr(str(key))[1:-1][:SHOWN_KEY]
                raise self._fail(
                    name if path == "(top level)" else f"{path}.{name}",
                    f"unknown field (allowed: {', '.join(sorted(allowed))})",
                )
        return value

    def _number(self, value: Any, path: str, low: float, high: float) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(path, f"expected a number, got {_kind(value)}")
        if not low <= value <= high:
            raise self._fail(path, f"{small_yaml.shown(value)} is out of range [{low}, {high}]")
        return float(value)

    def _whole(self, value: Any, path: str, low: int, high: int) -> int:
        number = self._number(value, path, low, high)
        if isinstance(value, float):
            raise self._fail(path, f"expected a whole number, got {small_yaml.shown(value)}")
        return int(number)

    def fleet(self, doc: Any) -> FleetSpec:
        if doc is None:
            raise FleetError(f"{self._source}: the file is empty")
        top = self._mapping(
            doc,
            "(top level)",
            {
                "node_name",
                "driver_version",
                "seed",
                "latency",
                "allocation",
                "nvml_privileged",
                "cgroup_layout",
                "gpus",
                "fabric",
            },
        )
        node_name = top.get("node_name", "sim-gpu-node-0")
        if not isinstance(node_name, str) or not NODE_NAME.match(node_name):
            raise self._fail(
                "node_name", f"{small_yaml.shown(node_name)} is not a valid Kubernetes node name"
            )
        driver = top.get("driver_version", "550.54.15")
        if not isinstance(driver, str) or not _DRIVER_VERSION.match(driver):
            raise self._fail(
                "driver_version",
                f'{small_yaml.shown(driver)} is not a driver version like "550.54.15" (quote it)',
            )
        seed = self._whole(top.get("seed", 1), "seed", 0, 2**31 - 1)
        latency = self._mapping(
            top.get("latency", {}), "latency", {"costs", "call_us", "pcie_window_ms"}
        )
        costs = latency.get("costs", "flat" if "call_us" in latency else CALL_COSTS[0])
        if costs not in CALL_COSTS:
            raise self._fail(
                "latency.costs",
                f"{small_yaml.shown(costs)} is not one of {', '.join(CALL_COSTS)}",
            )
        if costs != "flat" and "call_us" in latency:
            raise self._fail("latency.call_us", "applies only with costs: flat")
        call_us = self._number(latency.get("call_us", 100), "latency.call_us", 0, 1_000_000)
        pcie_ms = self._number(
            latency.get("pcie_window_ms", 20), "latency.pcie_window_ms", 0, 10_000
        )
        allocation = self._allocation(top.get("allocation", "device-plugin"), "allocation")
        privileged = top.get("nvml_privileged", False)
        if not isinstance(privileged, bool):
            raise self._fail("nvml_privileged", f"expected true or false, got {_kind(privileged)}")
        layout = top.get("cgroup_layout", CGROUP_LAYOUTS[0])
        if layout not in CGROUP_LAYOUTS:
            raise self._fail(
                "cgroup_layout",
                f"{small_yaml.shown(layout)} is not one of {', '.join(CGROUP_LAYOUTS)}",
            )
        gpus_doc = top.get("gpus")
        if not isinstance(gpus_doc, list):
            raise self._fail("gpus", f"expected a list of GPUs, got {_kind(gpus_doc)}")
        if not gpus_doc:
            raise self._fail("gpus", "is empty; a node needs at least one GPU")
        gpus: list[GpuSpec] = []
        for i, entry in enumerate(gpus_doc):
            spec, count = self._gpu(entry, f"gpus[{i}]", driver, allocation)
            if len(gpus) + count > MAX_GPUS:
                raise self._fail(f"gpus[{i}].count", f"the node would exceed {MAX_GPUS} GPUs")
            gpus.extend([spec] * count)
        fabric = self._fabric(top.get("fabric"))
        if fabric is not None:
            gpus = [replace(g, fabric=fabric) if g.model.fabric_capable else g for g in gpus]
        return FleetSpec(
            node_name,
            driver,
            seed,
            call_us,
            pcie_ms,
            tuple(gpus),
            privileged,
            cgroup_layout=str(layout),
            call_costs=str(costs),
        )

    def _fabric(self, value: Any) -> FabricSpec | None:
        if value is None:
            return None
        doc = self._mapping(value, "fabric", {"cluster_uuid", "clique_id"})
        text = doc.get("cluster_uuid")
        try:
            parsed = uuid.UUID(str(text)) if isinstance(text, str) else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise self._fail(
                "fabric.cluster_uuid", f"{small_yaml.shown(text)} is not a UUID (quote it)"
            )
        clique = self._whole(doc.get("clique_id", 0), "fabric.clique_id", 0, 2**32 - 1)
        return FabricSpec(str(parsed), clique)

    def _allocation(self, value: Any, path: str) -> str:
        if value not in ALLOCATIONS:
            raise self._fail(
                path, f"{small_yaml.shown(value)} is not one of {', '.join(ALLOCATIONS)}"
            )
        return str(value)

    def _gpu(self, entry: Any, path: str, driver: str, node_allocation: str) -> tuple[GpuSpec, int]:
        gpu = self._mapping(
            entry,
            path,
            {"model", "count", "workload", "ecc", "mig", "vgpu_license", "allocation", "nvlink"},
        )
        model_name = gpu.get("model")
        model = find_model(model_name) if isinstance(model_name, str) else None
        if model is None:
            raise self._fail(
                f"{path}.model",
                f"unknown GPU model {small_yaml.shown(model_name)} (known: {', '.join(MODELS)})",
            )
        count = self._whole(gpu.get("count", 1), f"{path}.count", 1, MAX_GPUS)
        workload = gpu.get("workload", "training")
        if workload not in WORKLOADS:
            raise self._fail(
                f"{path}.workload",
                f"unknown workload {small_yaml.shown(workload)} (known: {', '.join(WORKLOADS)})",
            )
        ecc = gpu.get("ecc", True)
        if not isinstance(ecc, bool):
            raise self._fail(f"{path}.ecc", f"expected true or false, got {_kind(ecc)}")
        nvlink = gpu.get("nvlink", True)
        if not isinstance(nvlink, bool):
            raise self._fail(f"{path}.nvlink", f"expected true or false, got {_kind(nvlink)}")
        if not nvlink:
            # A board on its own (one GPU passed through to a virtual machine): NVML answers
            # NOT_SUPPORTED for the link count and every link's counters.
            model = replace(model, nvlink_links=0)
        vgpu_license = gpu.get("vgpu_license")
        if vgpu_license is not None and vgpu_license not in VGPU_LICENSES:
            raise self._fail(
                f"{path}.vgpu_license",
                f"{small_yaml.shown(vgpu_license)} is not one of {', '.join(VGPU_LICENSES)}",
            )
        allocation = self._allocation(gpu.get("allocation", node_allocation), f"{path}.allocation")
        mig = gpu.get("mig")
        placed: tuple[PlacedInstance, ...] | None = None
        if mig is not None:
            if not model.mig_capable:
                raise self._fail(f"{path}.mig", f"{model.name} does not support MIG")
            if not isinstance(mig, list) or not all(isinstance(p, str) for p in mig):
                raise self._fail(f"{path}.mig", "expected a list of MIG profile names")
            minimum = 525 if model.architecture >= 9 else 450
            if int(driver.split(".")[0]) < minimum:
                raise self._fail(
                    f"{path}.mig", f"MIG on {model.name} needs driver R{minimum} or newer"
                )
            for i, name in enumerate(mig):
                # Checked here rather than left to place(), whose message would echo it whole.
                if model.profile(name) is None:
                    valid = ", ".join(p.name for p in model.mig_profiles)
                    raise self._fail(
                        f"{path}.mig[{i}]",
                        f"unknown MIG profile {small_yaml.shown(name)} for {model.name} "
                        f"(valid: {valid})",
                    )
            try:
                placed = place(model, mig)
            except MigLayoutError as exc:
                message = str(exc)
                suffix = message.split(":", 1) if message.startswith("[") else None
                if suffix:
                    raise self._fail(f"{path}.mig{suffix[0]}", suffix[1].strip()) from None
                raise self._fail(f"{path}.mig", message) from None
        return GpuSpec(model, workload, ecc, placed, vgpu_license, allocation), count


def _is_fleet(file_name: str) -> bool:
    return file_name.endswith(".yaml") and not file_name.startswith(".")


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__
    )

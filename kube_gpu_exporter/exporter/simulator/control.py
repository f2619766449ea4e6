"""The simulator's fault-injection API, served beside /metrics only under `--simulate`, so that
end-to-end tests and `make demo` users can break a running simulated node with curl:

    GET  /-/simulator/gpus                       every GPU, its state, MIG instances and pods
    POST /-/simulator/gpus/{index}/xid           {"xid": 79, "gpu_instance_id": null}
    POST /-/simulator/gpus/{index}/ecc           {"double_bit": true, "count": 1}
    POST /-/simulator/gpus/{index}/temperature   {"offset_celsius": 25}   (0 clears)
    POST /-/simulator/gpus/{index}/power-glitch  {"milliwatts": 4294967295, "seconds": 2}
    POST /-/simulator/gpus/{index}/workload      {"workload": "idle"}
    POST /-/simulator/gpus/{index}/unhealthy     {"unhealthy": true}      (device plugin view)
    POST /-/simulator/gpus/{index}/nvlink-errors {"kind": "replay", "link": 3, "count": 10}
    POST /-/simulator/gpus/{index}/fabric        {"state": "completed", "degraded_bandwidth": true}
    POST /-/simulator/gpus/{index}/recovery-action {"action": "reset"}
    POST /-/simulator/gpus/{index}/row-remap     {"pending": true, "failure": false}
    POST /-/simulator/gpus/{index}/thermal-brake {"active": true}
    POST /-/simulator/gpus/{index}/retired-page  {"cause": "sbe"}          (pre-Ampere, pending)
    POST /-/simulator/gpus/{index}/pcie-downtrain {"generation": 3, "width": 8} (null restores)
    POST /-/simulator/gpus/{index}/lose | restore | reset
    POST /-/simulator/driver/unload | load        every NVML call fails / works again
    POST /-/simulator/kubelet/stop | start        the pod-resources socket goes away / returns

Every POST answers with the GPU's state after the change; a bad request gets one line naming
what is wrong: the field, or the body as a whole.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kube_gpu_exporter.exporter import fabric_health
from kube_gpu_exporter.exporter.server import INDEX_LINKS_KEY
from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
from kube_gpu_exporter.exporter.simulator.nvlink_health import (
    FABRIC_STATES,
    KINDS,
    RECOVERY_ACTIONS,
)
from kube_gpu_exporter.exporter.simulator.sim_gpu import HW_THERMAL_SLOWDOWN, SimGpu, SimMigInstance
from kube_gpu_exporter.exporter.simulator.workload import SHAPES
from kube_gpu_exporter.exporter.small_yaml import SHOWN_CHARS, shown

PREFIX = "/-/simulator"
# ASCII only: str.isdigit() and int() also take "²" (int() then fails) and "٣" (read as 3).
_GPU_INDEX = re.compile(r"[0-9]{1,4}")


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class Field:
    kind: type | tuple[type, ...]
    default: Any = None
    low: float | None = None
    high: float | None = None
    required: bool = False
    nullable: bool = False


Action = Callable[[FakeNvml, FakeKubelet, SimGpu, dict[str, Any]], None]


def _xid(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    instance = body["gpu_instance_id"]
    if instance is not None and instance not in {m.gpu_instance_id for m in gpu.live_instances()}:
        raise BadRequest(f"gpu_instance_id: GPU {gpu.index} has no MIG instance {instance}")
    nvml.inject_xid(gpu.index, body["xid"], instance)


def _unhealthy(_n: FakeNvml, kubelet: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    if body["unhealthy"]:
        kubelet.faults.unhealthy_gpus.add(gpu.uuid)
    else:
        kubelet.faults.unhealthy_gpus.discard(gpu.uuid)


def _workload(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    if body["workload"] not in SHAPES:
        workload = shown(body["workload"])
        raise BadRequest(f"workload: {workload} is not one of {', '.join(SHAPES)}")
    nvml.set_workload(gpu.index, body["workload"])


def _nvlink_errors(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    kind, link = body["kind"], body["link"]
    if kind not in KINDS:
        raise BadRequest(f"kind: {shown(kind)} is not one of {', '.join(KINDS)}")
    links = gpu.model.nvlink_links
    if not links:
        raise BadRequest(f"link: GPU {gpu.index} has no NVLink")
    if link >= links:
        raise BadRequest(f"link: GPU {gpu.index} has links 0-{links - 1}")
    nvml.inject_nvlink_errors(gpu.index, kind, link, body["count"])


def _fabric(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    state = body["state"]
    if state is not None and state not in FABRIC_STATES:
        raise BadRequest(f"state: {shown(state)} is not one of {', '.join(FABRIC_STATES)}")
    if gpu.nvlink_health.fabric is None:
        raise BadRequest(f"GPU {gpu.index} is registered with no NVLink fabric")
    # Every condition the body leaves out is false: the body describes the whole mask.
    mask = fabric_health.mask_with({name: bool(body[name]) for name in fabric_health.BY_NAME})
    nvml.set_fabric(gpu.index, None if state is None else FABRIC_STATES[state], mask)


def _recovery_action(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    action = body["action"]
    if action not in RECOVERY_ACTIONS:
        raise BadRequest(f"action: {shown(action)} is not one of {', '.join(RECOVERY_ACTIONS)}")
    nvml.set_recovery_action(gpu.index, RECOVERY_ACTIONS[action])


def _reset(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, _b: dict[str, Any]) -> None:
    # The driver drops the recovery action it asked for once the reset is done.
    nvml.reset_gpu(gpu.index)
    nvml.set_recovery_action(gpu.index, RECOVERY_ACTIONS["none"])


def _thermal_brake(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    # HW thermal slowdown forced on (the clock-event model ORs it into the board's own
    # reasons); inactive drops the override, back to what the board's state gives.
    nvml.set_clock_event_override(gpu.index, HW_THERMAL_SLOWDOWN if body["active"] else None)


def _retired_page(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    # One more page retired and pending until reset; boards that remap rows retire none.
    try:
        nvml.retire_page(gpu.index, body["cause"])
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


def _pcie_downtrain(nvml: FakeNvml, _k: FakeKubelet, gpu: SimGpu, body: dict[str, Any]) -> None:
    # null (or absent) restores that one to the slot's maximum.
    try:
        nvml.set_pcie_downtrain(gpu.index, body["generation"], body["width"])
    except ValueError as exc:
        raise BadRequest(str(exc)) from None


ACTIONS: dict[str, tuple[dict[str, Field], Action]] = {
    "row-remap": (
        {"pending": Field(bool, default=True), "failure": Field(bool, default=False)},
        lambda n, _k, g, b: n.set_row_remap(g.index, b["pending"], b["failure"]),
    ),
    "thermal-brake": ({"active": Field(bool, default=True)}, _thermal_brake),
    "retired-page": ({"cause": Field(str, default="sbe")}, _retired_page),
    "pcie-downtrain": (
        {
            "generation": Field(int, low=1, high=6, nullable=True),
            "width": Field(int, low=1, high=16, nullable=True),
        },
        _pcie_downtrain,
    ),
    "nvlink-errors": (
        {
            "kind": Field(str, required=True),
            "link": Field(int, low=0, high=17, required=True),
            "count": Field(int, default=1, low=1, high=1_000_000_000),
        },
        _nvlink_errors,
    ),
    "fabric": (
        {
            "state": Field(str, nullable=True),
            **{name: Field(bool, default=False) for name in fabric_health.BY_NAME},
        },
        _fabric,
    ),
    "recovery-action": ({"action": Field(str, required=True)}, _recovery_action),
    "xid": (
        {
            "xid": Field(int, low=1, high=999, required=True),
            "gpu_instance_id": Field(int, low=0, high=14, nullable=True),
        },
        _xid,
    ),
    "ecc": (
        {
            "double_bit": Field(bool, default=True),
            "count": Field(int, default=1, low=1, high=1_000_000),
        },
        lambda n, _k, g, b: n.inject_ecc_error(g.index, b["double_bit"], b["count"]),
    ),
    "temperature": (
        {"offset_celsius": Field((int, float), low=-50, high=150, required=True)},
        lambda n, _k, g, b: n.set_temperature_offset(g.index, float(b["offset_celsius"])),
    ),
    "power-glitch": (
        {
            # Up to NVML's uint32 ceiling, the value a real board's glitch gave.
            "milliwatts": Field(int, low=0, high=0xFFFFFFFF, required=True),
            "seconds": Field((int, float), default=2.0, low=0.001, high=3600),
        },
        lambda n, _k, g, b: n.glitch_power(g.index, b["milliwatts"], float(b["seconds"])),
    ),
    "workload": ({"workload": Field(str, required=True)}, _workload),
    "unhealthy": ({"unhealthy": Field(bool, required=True)}, _unhealthy),
    "lose": ({}, lambda n, _k, g, _b: n.lose_gpu(g.index)),
    "restore": ({}, lambda n, _k, g, _b: n.restore_gpu(g.index)),
    "reset": ({}, _reset),
}


def parse_body(raw: bytes, fields: dict[str, Field]) -> dict[str, Any]:
    """The JSON object of a request, checked against `fields` and completed with defaults."""
    if not raw.strip():
        doc: Any = {}
    else:
        try:
            doc = json.loads(raw)
        except ValueError as exc:
            raise BadRequest(f"body is not valid JSON: {str(exc)[:200]}") from None
        except RecursionError:
            raise BadRequest("body is not valid JSON: nested too deeply") from None
    if not isinstance(doc, dict):
        raise BadRequest("body must be a JSON object")
    unknown = sorted(set(doc) - set(fields))
    if unknown:
        allowed = f"allowed: {', '.join(fields)}" if fields else "this action takes no fields"
        raise BadRequest(f"unknown field {shown(unknown[0])} ({allowed})")
    values: dict[str, Any] = {}
    for name, spec in fields.items():
        if name not in doc:
            if spec.required:
                raise BadRequest(f"{name} is required")
            values[name] = spec.default
            continue
        value = doc[name]
        if value is None and spec.nullable:
            values[name] = None
            continue
        # bool is an int in Python; JSON true must not pass for a number (nor 1 for a bool).
        if isinstance(value, bool) != (spec.kind is bool) or not isinstance(value, spec.kind):
            got = _shown_json(value)
            raise BadRequest(f"{name}: expected {_kind_name(spec.kind)}, got {got}")
        low, high = spec.low, spec.high
        # Only numeric fields have a range.
        if (
            low is not None
            and high is not None
            and isinstance(value, int | float)
            and not low <= value <= high
        ):
            raise BadRequest(f"{name}: {shown(value)} is out of range [{low:g}, {high:g}]")
        values[name] = value
    return values


def _shown_json(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}..."


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return names[float] if float in kinds else names[kinds[0]]


def gpu_state(gpu: SimGpu, kubelet: FakeKubelet) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "model": gpu.model.name,
        "workload": gpu.workload,
        "lost": gpu.lost,
        "mig_enabled": gpu.mig_enabled,
        "mig_instances": [_instance_state(m) for m in gpu.live_instances()],
        "temperature_offset_celsius": gpu.temperature_offset_c,
        "unhealthy": gpu.uuid in kubelet.faults.unhealthy_gpus,
        "nvlink_errors": {k: gpu.nvlink_health.total(k) for k in KINDS if gpu.model.nvlink_links},
        "fabric": _fabric_state(gpu),
        "recovery_action": gpu.nvlink_health.recovery_action,
        "pods": kubelet.pods_using(gpu),
    }


def _fabric_state(gpu: SimGpu) -> dict[str, Any] | None:
    fabric = gpu.nvlink_health.fabric
    if fabric is None:
        return None
    names = {number: name for name, number in FABRIC_STATES.items()}
    return {
        "state": names.get(fabric.state, str(fabric.state)),
        "clique_id": fabric.clique_id,
        "health_mask": fabric.health_mask,
    }


def _instance_state(instance: SimMigInstance) -> dict[str, Any]:
    # The ids an XID body's gpu_instance_id takes, and the uuid the exporter's series carry.
    return {
        "gpu_instance_id": instance.gpu_instance_id,
        "compute_instance_id": instance.compute_instance_id,
        "profile": instance.profile_name,
        "uuid": instance.uuid,
        "memory_mib": instance.memory_mib,
    }


def add_control_routes(app: web.Application, nvml: FakeNvml, kubelet: FakeKubelet) -> None:
    def find_gpu(request: web.Request) -> SimGpu:
        text = request.match_info["index"]
        count = len(nvml.gpus)
        if not _GPU_INDEX.fullmatch(text) or int(text) >= count:
            raise web.HTTPNotFound(
                text=f"no simulated GPU {shown(text)} (the node has GPUs 0-{count - 1})\n"
            )
        return nvml.gpus[int(text)]

    async def list_gpus(request: web.Request) -> web.Response:
        return web.json_response([gpu_state(g, kubelet) for g in nvml.gpus])

    async def act(request: web.Request) -> web.Response:
        gpu = find_gpu(request)
        name = request.match_info["action"]
        if name not in ACTIONS:
            known = ", ".join(ACTIONS)
            raise web.HTTPNotFound(text=f"unknown action {shown(name)} (known: {known})\n")
        fields, action = ACTIONS[name]
        try:
            action(nvml, kubelet, gpu, parse_body(await request.read(), fields))
        except BadRequest as exc:
            # The message names the field, or the body; the caller knows which action it posted.
            raise web.HTTPBadRequest(text=f"{exc}\n") from None
        return web.json_response(gpu_state(gpu, kubelet))

    # What an action returns (kubelet/stop's FakeKubelet) is not used.
    node_actions: dict[str, Callable[[], object]] = {
        "driver/unload": nvml.unload_driver,
        "driver/load": nvml.load_driver,
        # The fake kubelet's gRPC server waits out a grace period on stop: off the event loop.
        "kubelet/stop": kubelet.stop,
        "kubelet/start": kubelet.start,
    }

    # Two overlapping kubelet/start calls would each see it stopped and start a server on the
    # same socket path; the loser's server, dropped, would later delete the winner's socket.
    node_lock = threading.Lock()

    def run_node_action(action: Callable[[], object]) -> None:
        with node_lock:
            action()

    def node_state() -> dict[str, bool]:
        return {
            "driver_loaded": nvml.driver_loaded,
            "kubelet_running": kubelet.socket_path.exists(),
        }

    async def act_on_node(request: web.Request) -> web.Response:
        name = f"{request.match_info['part']}/{request.match_info['action']}"
        if name not in node_actions:
            known = ", ".join(node_actions)
            raise web.HTTPNotFound(text=f"unknown action {shown(name)} (known: {known})\n")
        await asyncio.to_thread(run_node_action, node_actions[name])
        return web.json_response(node_state())

    app.router.add_get(f"{PREFIX}/gpus", list_gpus)
    # setdefault: an app not made by build_app (a test's) has no index page to list it on.
    app.setdefault(INDEX_LINKS_KEY, []).append(
        (f"{PREFIX}/gpus", "the simulated GPUs, and the fault-injection API under it")
    )
    app.router.add_post(PREFIX + "/gpus/{index}/{action}", act)
    app.router.add_post(PREFIX + "/{part:driver|kubelet}/{action}", act_on_node)

"""The baseline: a GPU exporter written the common way, to measure ours against.

It is what most Python GPU exporters look like: registered prometheus_client Gauges with labels,
a poll loop that makes one NVML call per exported field and sets each series with
`.labels(...).set(...)`, pod labels from a kubelet pod-resources `List` per poll (a new gRPC channel
each time, as dcgm-exporter does), and `start_http_server`, which renders the whole registry on
every scrape. It exports the same DCGM names and labels as the exporter, so series counts and
bodies are comparable; it leaves out what the common way usually leaves out (XID events, GPM
profiling, PCIe throughput, self-metrics), so it has fewer series than ours, never more.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from kube_gpu_exporter.exporter.dcgm_compat import DEFAULT_PROFILE
from kube_gpu_exporter.exporter.nvml.device_reader import field_value

log = logging.getLogger(__name__)
# The exporter's default host label, so both serve the same label names.
HOST_LABEL = DEFAULT_PROFILE.host_label

LABELS = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    HOST_LABEL,
    "container",
    "namespace",
    "pod",
)
MIB = 1 << 20


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# A reader: (the NVML it is handed, a device handle) -> the value.
Read = Callable[[Any, Any], Any]


def _field(field_id: int) -> Read:
    def read(nvml: Any, handle: Any) -> Any:
        [entry] = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
        value = field_value(entry)
        if value is None:
            raise pynvml.NVMLError_NotSupported()
        return value

    return read


def _nvlink_total(nvml: Any, handle: Any) -> float:
    links = _field(pynvml.NVML_FI_DEV_NVLINK_LINK_COUNT)(nvml, handle)
    if not links:
        raise pynvml.NVMLError_NotSupported()
    request = [
        (field, link)
        for link in range(links)
        for field in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        )
    ]
    entries = nvml.nvmlDeviceGetFieldValues(handle, request)
    return sum(v for v in map(field_value, entries) if v is not None)


# (metric, help, reads the MIG instance's own handle?, one NVML call giving the value)
FIELDS: tuple[tuple[str, str, bool, Read], ...] = (
    (
        "DCGM_FI_DEV_GPU_TEMP",
        "GPU temperature (in C).",
        False,
        lambda n, h: n.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
    ),
    (
        "DCGM_FI_DEV_MEMORY_TEMP",
        "Memory temperature (in C).",
        False,
        _field(pynvml.NVML_FI_DEV_MEMORY_TEMP),
    ),
    (
        "DCGM_FI_DEV_GPU_UTIL",
        "GPU utilization (in %).",
        True,
        lambda n, h: n.nvmlDeviceGetUtilizationRates(h).gpu,
    ),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        True,
        lambda n, h: n.nvmlDeviceGetUtilizationRates(h).memory,
    ),
    (
        "DCGM_FI_DEV_ENC_UTIL",
        "Encoder utilization (in %).",
        True,
        lambda n, h: n.nvmlDeviceGetEncoderUtilization(h)[0],
    ),
    (
        "DCGM_FI_DEV_DEC_UTIL",
        "Decoder utilization (in %).",
        True,
        lambda n, h: n.nvmlDeviceGetDecoderUtilization(h)[0],
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        True,
        lambda n, h: n.nvmlDeviceGetMemoryInfo(h).free // MIB,
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        True,
        lambda n, h: n.nvmlDeviceGetMemoryInfo(h).used // MIB,
    ),
    (
        "DCGM_FI_DEV_FB_TOTAL",
        "Framebuffer memory total (in MiB).",
        True,
        lambda n, h: n.nvmlDeviceGetMemoryInfo(h).total // MIB,
    ),
    (
        "DCGM_FI_DEV_POWER_USAGE",
        "Power draw (in W).",
        False,
        lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000,
    ),
    (
        "DCGM_FI_DEV_POWER_MGMT_LIMIT",
        "Power management limit (in W).",
        False,
        lambda n, h: n.nvmlDeviceGetPowerManagementLimit(h) / 1000,
    ),
    (
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        "Enforced power limit (in W).",
        False,
        lambda n, h: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
    ),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        False,
        lambda n, h: n.nvmlDeviceGetTotalEnergyConsumption(h),
    ),
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        False,
        lambda n, h: n.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        False,
        lambda n, h: n.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons.",
        False,
        lambda n, h: n.nvmlDeviceGetCurrentClocksThrottleReasons(h),
    ),
    *(
        (
            f"DCGM_FI_DEV_ECC_{kind}_{scope}_TOTAL",
            f"Total {kind} ECC errors, {scope.lower()}.",
            False,
            lambda n, h, e=error, c=counter: n.nvmlDeviceGetTotalEccErrors(h, e, c),
        )
        for kind, error in (
            ("SBE", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("DBE", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        )
        for scope, counter in (
            ("VOL", pynvml.NVML_VOLATILE_ECC),
            ("AGG", pynvml.NVML_AGGREGATE_ECC),
        )
    ),
    *(
        (metric, help_, False, lambda n, h, i=i: n.nvmlDeviceGetRemappedRows(h)[i])
        for i, (metric, help_) in enumerate(
            (
                ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Rows remapped for correctable errors."),
                (
                    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                    "Rows remapped for uncorrectable errors.",
                ),
                ("DCGM_FI_DEV_ROW_REMAP_PENDING", "Whether a row remap is pending."),
                ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether row remapping has failed."),
            )
        )
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        False,
        lambda n, h: n.nvmlDeviceGetPcieReplayCounter(h),
    ),
    (
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
        "Total NVLink bandwidth (in KiB).",
        False,
        _nvlink_total,
    ),
)


@dataclass(frozen=True)
class _Entity:
    labels: dict[str, str]
    own: Any  # the handle asked for per-entity values (the MIG handle on MIG instances)
    board: Any  # the handle asked for board-level values


class BaselineExporter:
    def __init__(
        self,
        nvml: Any,
        node_name: str,
        kubelet_socket: str | None,
        registry: CollectorRegistry,
    ) -> None:
        # The `pynvml` module on a GPU host, the simulator's api object in the benchmarks.
        self._nvml = nvml
        self._node = node_name
        self._socket = kubelet_socket
        self._gauges = {
            name: Gauge(name, help_, LABELS, registry=registry) for name, help_, _, _ in FIELDS
        }

    def _pods(self) -> dict[tuple[str, str], tuple[str, str, str]]:
        """(GPU uuid, GPU-instance id or "") -> (container, namespace, pod), from the kubelet."""
        if not self._socket:
            return {}
        import grpc

        from kube_gpu_exporter.exporter.podresources.v1 import api_pb2, api_pb2_grpc

        owners: dict[tuple[str, str], tuple[str, str, str]] = {}
        try:
            with grpc.insecure_channel(f"unix://{self._socket}") as channel:
                response = api_pb2_grpc.PodResourcesListerStub(channel).List(
                    api_pb2.ListPodResourcesRequest(), timeout=10
                )
        except grpc.RpcError as exc:
            log.warning("kubelet List failed: %s", exc.code())
            return {}
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    for device_id in devices.device_ids:
                        key = self._device_key(device_id.split("::")[0])
                        if key is not None:
                            owners[key] = (container.name, pod.namespace, pod.name)
        return owners

    def _device_key(self, device_id: str) -> tuple[str, str] | None:
        nvml = self._nvml
        if device_id.startswith("GPU-"):
            return device_id, ""
        if device_id.startswith("MIG-"):
            try:
                mig = nvml.nvmlDeviceGetHandleByUUID(device_id)
                parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
                return _text(nvml.nvmlDeviceGetUUID(parent)), str(
                    nvml.nvmlDeviceGetGpuInstanceId(mig)
                )
            except pynvml.NVMLError:
                return None
        return None

    def _entities(self) -> list[_Entity]:
        nvml = self._nvml
        entities = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            base = {
                "gpu": str(index),
                "UUID": _text(nvml.nvmlDeviceGetUUID(handle)),
                "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
                "device": f"nvidia{index}",
                "modelName": _text(nvml.nvmlDeviceGetName(handle)),
                "GPU_I_PROFILE": "",
                "GPU_I_ID": "",
                HOST_LABEL: self._node,
            }
            try:
                mig_enabled = nvml.nvmlDeviceGetMigMode(handle)[0] == 1
            except pynvml.NVMLError:
                mig_enabled = False
            if not mig_enabled:
                entities.append(_Entity(base, handle, handle))
                continue
            for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except pynvml.NVMLError:
                    continue
                labels = {
                    **base,
                    "GPU_I_PROFILE": _text(nvml.nvmlDeviceGetName(mig)).rsplit(" MIG ", 1)[-1],
                    "GPU_I_ID": str(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                }
                entities.append(_Entity(labels, mig, handle))
        return entities

    def poll(self) -> None:
        owners = self._pods()
        for entity in self._entities():
            container, namespace, pod = owners.get(
                (entity.labels["UUID"], entity.labels["GPU_I_ID"]), ("", "", "")
            )
            labels = {**entity.labels, "container": container, "namespace": namespace, "pod": pod}
            for name, _, per_instance, read in FIELDS:
                try:
                    value = read(self._nvml, entity.own if per_instance else entity.board)
                except pynvml.NVMLError:
                    continue
                self._gauges[name].labels(**labels).set(value)

    def run(self, interval_seconds: float) -> None:
        while True:
            started = time.monotonic()
            try:
                self.poll()
            except pynvml.NVMLError as exc:
                log.warning("poll failed: %s", exc)
            time.sleep(max(0.0, interval_seconds - (time.monotonic() - started)))


def serve(
    nvml: Any, node_name: str, kubelet_socket: str | None, port: int, interval_seconds: float
) -> None:
    """Poll `nvml` in a thread and serve with prometheus_client's own HTTP server, until
    killed."""
    nvml.nvmlInit()
    registry = CollectorRegistry()
    exporter = BaselineExporter(nvml, node_name, kubelet_socket, registry)
    exporter.poll()
    start_http_server(port, addr="127.0.0.1", registry=registry)
    thread = threading.Thread(target=exporter.run, args=(interval_seconds,), daemon=True)
    thread.start()
    thread.join()

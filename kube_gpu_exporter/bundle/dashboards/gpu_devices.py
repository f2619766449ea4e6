"""GPU Devices: one node's GPUs and MIG instances in detail, with the pod using each.

Series come in the dcgm-exporter profile's units (classic MiB, MHz, mJ, MB/s, percent; 4.9's
bytes, hertz, joules, B/s, ratios); queries scale them to units Grafana formats (bytes, hertz,
watts, B/s), and utilization panels show percent or a ratio as the profile publishes it."""

from __future__ import annotations

from fractions import Fraction

import pynvml

from kube_gpu_exporter.bundle.alerts import gpu_health as gh
from kube_gpu_exporter.bundle.alerts import nvlink_fabric as nf
from kube_gpu_exporter.bundle.config import BundleConfig
from kube_gpu_exporter.bundle.dashboards import variables
from kube_gpu_exporter.bundle.dashboards.panels import (
    Cell,
    TableQuery,
    gauge,
    row,
    state_timeline,
    table,
    target,
    timeseries,
)
from kube_gpu_exporter.bundle.dcgm_units import plain, scaled, unit_factor
from kube_gpu_exporter.bundle.promql import QueryBuilder

TITLE = "Devices"
FILE = "gpu-devices"
DEVICE_LEGEND = "GPU {{gpu}}{{GPU_I_PROFILE}} {{GPU_I_ID}}"
# The per-pod series of processes no pod holding the device accounts for carry an empty pod.
UNATTRIBUTED = "unattributed"


def cells(config: BundleConfig) -> list[Cell]:
    q = QueryBuilder(config, dashboard=True)
    d = q.device
    rate = q.rate_interval
    fb_total = (
        f"({d('DCGM_FI_DEV_FB_USED')} + {d('DCGM_FI_DEV_FB_FREE')} + "
        f"{d('DCGM_FI_DEV_FB_RESERVED')})"
    )
    fb_used, fb_unit = q.display("DCGM_FI_DEV_FB_USED")
    fb_total, _ = q.display("DCGM_FI_DEV_FB_USED", fb_total)
    util_unit = q.display("DCGM_FI_DEV_GPU_UTIL")[1]
    # 100 % in the profile's utilization unit: a gauge's and a graph's full scale.
    full = plain(q.utilization(100))
    th = config.thresholds

    def per_gpu(metric: str, fn: str = "") -> tuple[str, str]:
        """`max by (gpu)` of a metric (or of `fn` over it), in the unit its panel shows."""
        inner = f"{fn}({d(metric)}[{rate}])" if fn else d(metric)
        return q.display(metric, f"max by (gpu) ({inner})")

    energy, energy_unit = per_gpu("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "rate")
    sm_clock, clock_unit = per_gpu("DCGM_FI_DEV_SM_CLOCK")
    mem_clock, _ = per_gpu("DCGM_FI_DEV_MEM_CLOCK")
    # A rate already: DCGM publishes the throughput since its previous sample.
    nvlink, nvlink_unit = per_gpu("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL")

    def this_exporter(metric: str) -> str:
        """The exporter's own series carry no node label; build_info names the node."""
        return (
            f"{q.exporter(metric)} and {q.on('instance')} "
            f"{q.on_nodes('kube_gpu_exporter_build_info')}"
        )

    temperature_steps = (
        (None, "green"),
        (th.temperature_warning_celsius, "orange"),
        (th.temperature_critical_celsius, "red"),
    )
    return [
        row("Inventory"),
        table(
            "GPUs",
            "Each GPU on the node: model, driver, MIG mode and whether NVML answers.",
            "none",
            [
                # An info series: only its labels are of interest.
                TableQuery(None, d("kube_gpu_exporter_device_info")),
                TableQuery("Answering", d("kube_gpu_exporter_device_up")),
            ],
            hide=("job", "instance", "pci_bus_id", q.host, q.cluster, "node"),
            labels={
                "gpu": "GPU",
                "model_name": "Model",
                "driver_version": "Driver",
                "mig_mode": "MIG",
                "device": "Device",
            },
            sort_by="GPU",
        ),
        table(
            "Pods using each device",
            "Which container holds each GPU or MIG instance, from the kubelet pod-resources "
            "API. A time-sliced GPU lists every pod sharing it, and a DRA device every claim "
            "holding it.",
            "none",
            [TableQuery(None, d("kube_gpu_exporter_pod_device_allocation"))],
            # The DRA driver, pool and MIG profile repeat the resource, node and MIG columns.
            hide=(
                "job",
                "instance",
                "device_id",
                q.host,
                q.cluster,
                "node",
                "UUID",
                "dra_driver_name",
                "dra_pool_name",
                "dra_mig_profile",
                "dra_mig_device_uuid",
            ),
            labels={
                "gpu": "GPU",
                "GPU_I_PROFILE": "MIG profile",
                "GPU_I_ID": "Instance",
                q.namespace: "Namespace",
                q.pod: "Pod",
                "container": "Container",
                "resource": "Resource",
                "dra_claim_namespace": "Claim namespace",
                "dra_claim_name": "Claim",
                "dra_device_name": "DRA device",
                "dra_share_id": "Share",
            },
            sort_by="GPU",
        ),
        gauge(
            "Utilization now",
            "Current GPU utilization per whole GPU. MIG instances have none in NVML; see "
            "Profiling for their GPM engine activity.",
            util_unit,
            [target(d("DCGM_FI_DEV_GPU_UTIL"), "GPU {{gpu}}")],
            max_value=full,
            steps=((None, "blue"), (plain(q.utilization(50)), "green")),
            width=12,
        ),
        gauge(
            "Temperature now",
            "Current GPU temperature, with the alert thresholds as colours.",
            "celsius",
            [target(f"max by (gpu) ({d('DCGM_FI_DEV_GPU_TEMP')})", "GPU {{gpu}}")],
            max_value=100,
            steps=temperature_steps,
            width=12,
        ),
        row("Utilization and memory"),
        timeseries(
            "GPU utilization",
            "Share of time one or more kernels ran, per whole GPU (NVML utilization.gpu).",
            util_unit,
            [target(d("DCGM_FI_DEV_GPU_UTIL"), "GPU {{gpu}} {{" + q.pod + "}}")],
            max_value=full,
        ),
        timeseries(
            "Memory bandwidth utilization",
            "Share of time device memory was read or written (NVML utilization.memory).",
            q.display("DCGM_FI_DEV_MEM_COPY_UTIL")[1],
            [target(d("DCGM_FI_DEV_MEM_COPY_UTIL"), "GPU {{gpu}}")],
            max_value=full,
        ),
        timeseries(
            "Framebuffer memory",
            "Memory used against total (used + free + reserved), per GPU or MIG instance.",
            fb_unit,
            [
                target(fb_used, "used " + DEVICE_LEGEND),
                target(fb_total, "total " + DEVICE_LEGEND),
            ],
        ),
        timeseries(
            "Encoder and decoder utilization",
            "Video encoder (NVENC) and decoder (NVDEC) utilization.",
            q.display("DCGM_FI_DEV_ENC_UTIL")[1],
            [
                target(d("DCGM_FI_DEV_ENC_UTIL"), "encoder GPU {{gpu}}"),
                target(d("DCGM_FI_DEV_DEC_UTIL"), "decoder GPU {{gpu}}"),
            ],
            max_value=full,
        ),
        *per_pod_use(config),
        row("Profiling (NVML GPM, Hopper and newer)"),
        timeseries(
            "Engine and SM activity",
            "From NVML GPU Performance Monitoring, per whole GPU and per MIG instance, where "
            "plain utilization does not exist: share of time the graphics/compute engine was "
            "active, share of cycles SMs had a warp, and warp occupancy. Empty before Hopper.",
            "percentunit",
            [
                target(d("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), "engine " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_SM_ACTIVE"), "SM " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_SM_OCCUPANCY"), "occupancy " + DEVICE_LEGEND),
            ],
            max_value=1,
        ),
        timeseries(
            "Pipe and DRAM activity",
            "Share of cycles any tensor pipe, the FP64, FP32 and FP16 pipes and the memory "
            "interface were active (NVML GPM). Tensor-heavy means training "
            "or inference is using the hardware it pays for.",
            "percentunit",
            [
                target(d("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), "tensor " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_PIPE_FP64_ACTIVE"), "fp64 " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_PIPE_FP32_ACTIVE"), "fp32 " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_PIPE_FP16_ACTIVE"), "fp16 " + DEVICE_LEGEND),
                target(d("DCGM_FI_PROF_DRAM_ACTIVE"), "dram " + DEVICE_LEGEND),
            ],
            max_value=1,
        ),
        row("Temperature, power and clocks"),
        timeseries(
            "Temperature",
            "GPU core and HBM memory temperature.",
            "celsius",
            [
                target(f"max by (gpu) ({d('DCGM_FI_DEV_GPU_TEMP')})", "core GPU {{gpu}}"),
                target(f"max by (gpu) ({d('DCGM_FI_DEV_MEMORY_TEMP')})", "memory GPU {{gpu}}"),
            ],
        ),
        timeseries(
            "Power against limit",
            "Power draw, and the limit the GPU enforces; a draw pinned at the limit means "
            "power-capped clocks.",
            "watt",
            [
                target(f"max by (gpu) ({d('DCGM_FI_DEV_POWER_USAGE')})", "draw GPU {{gpu}}"),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_ENFORCED_POWER_LIMIT')})",
                    "limit GPU {{gpu}}",
                ),
            ],
        ),
        timeseries(
            "Energy-based average power",
            "Average power over each interval from the energy counter "
            f"({q.spelled('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION').unit}), which unlike the "
            "instantaneous draw misses no spikes.",
            energy_unit,
            [target(energy, "GPU {{gpu}}")],
        ),
        timeseries(
            "Clocks",
            "SM and memory clocks.",
            clock_unit,
            [
                target(sm_clock, "SM GPU {{gpu}}"),
                target(mem_clock, "memory GPU {{gpu}}"),
            ],
        ),
        row("Throttling"),
        state_timeline(
            "Clock event (throttle) reasons",
            "Each NVML clock event reason per GPU over time. hw_thermal, sw_thermal and "
            "hw_power_brake cut performance; gpu_idle and sync_boost are benign.",
            [
                target(
                    d("kube_gpu_exporter_clock_event_active"),
                    "GPU {{gpu}} {{clock_event}}",
                )
            ],
            states={0: ("inactive", "transparent"), 1: ("active", "red")},
        ),
        row("Errors"),
        table(
            "Last XID per device",
            "The most recent XID error of each GPU or MIG instance (0: none since the exporter "
            "started), with NVIDIA's description.",
            "none",
            [TableQuery(None, d("DCGM_FI_DEV_XID_ERRORS"))],
            hide=(
                "job",
                "instance",
                "pci_bus_id",
                "device",
                "modelName",
                "container",
                q.host,
                q.cluster,
                "node",
            ),
            labels={"gpu": "GPU", "err_code": "XID", "err_msg": "Meaning", q.pod: "Pod"},
            sort_by="XID",
            descending=True,
        ),
        timeseries(
            "XID events",
            "XID errors per code in each interval, from the XID counter.",
            "none",
            [
                target(
                    f"sum by (gpu, xid) (increase({d('DCGM_EXP_XID_ERRORS_TOTAL')}[{rate}]))",
                    "GPU {{gpu}} XID {{xid}}",
                )
            ],
        ),
        timeseries(
            "ECC errors",
            "Volatile ECC error counts since the driver loaded: single-bit (corrected) and "
            "double-bit (uncorrectable).",
            "none",
            [
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL')})",
                    "single-bit GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_ECC_DBE_VOL_TOTAL')})",
                    "double-bit GPU {{gpu}}",
                ),
            ],
        ),
        timeseries(
            "Row remapping",
            "Rows remapped for correctable and uncorrectable errors, and remaps pending a reset "
            "or failed.",
            "none",
            [
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS')})",
                    "correctable GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS')})",
                    "uncorrectable GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_ROW_REMAP_PENDING')})",
                    "pending GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_ROW_REMAP_FAILURE')})",
                    "failed GPU {{gpu}}",
                ),
            ],
        ),
        row("Interconnect"),
        timeseries(
            "PCIe throughput",
            "PCIe transmit and receive throughput, sampled by NVML over 20 ms windows.",
            "Bps",
            [
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_PCIE_TX_THROUGHPUT')}) * 1024",
                    "TX GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) ({d('DCGM_FI_DEV_PCIE_RX_THROUGHPUT')}) * 1024",
                    "RX GPU {{gpu}}",
                ),
            ],
        ),
        timeseries(
            "PCIe replays",
            "PCIe link-level retries per second; a steady rate points at a bad riser or slot.",
            "ops",
            [
                target(
                    f"max by (gpu) (rate({d('DCGM_FI_DEV_PCIE_REPLAY_COUNTER')}[{rate}]))",
                    "GPU {{gpu}}",
                )
            ],
        ),
        timeseries(
            "NVLink throughput",
            "Data over all NVLink links of each GPU, both directions, as DCGM rates it between "
            "two samples.",
            nvlink_unit,
            [target(nvlink, "GPU {{gpu}}")],
            width=24,
        ),
        row("Exporter"),
        table(
            "Collectors",
            "Whether each collector of the exporter on this node succeeded, and how long it "
            "took (node_exporter style).",
            "s",
            [
                TableQuery("Succeeded", this_exporter("kube_gpu_exporter_collector_success")),
                TableQuery(
                    "Duration", this_exporter("kube_gpu_exporter_collector_duration_seconds")
                ),
            ],
            hide=("job", "instance", q.cluster),
            labels={"collector": "Collector"},
        ),
        timeseries(
            "Sweep duration",
            "Duration of each NVML sweep over all GPUs of the node.",
            "s",
            [
                target(
                    this_exporter("kube_gpu_exporter_collection_duration_seconds"),
                    "{{instance}}",
                )
            ],
        ),
        # Last, so the panels above keep their ids (links to one panel name it by id).
        *nvlink_fabric(config),
        *health(config),
    ]


# The classic per-link NVLink error families: one family per counter and link, as DCGM names
# them (`..._ERROR_COUNT_L0` to `_L11`).
PER_LINK_KINDS = ("CRC_FLIT", "CRC_DATA", "REPLAY", "RECOVERY")
PER_LINK_COUNT = 12


def _per_link_families() -> tuple[str, ...]:
    return tuple(
        f"DCGM_FI_DEV_NVLINK_{kind}_ERROR_COUNT_L{link}"
        for kind in PER_LINK_KINDS
        for link in range(PER_LINK_COUNT)
    )


def _by_name(
    q: QueryBuilder, families: tuple[str, ...], regex: str, *labels: tuple[str, str]
) -> str:
    """Counter families matched by name as one instant vector, with labels cut out of the name
    (`labels`: (label, regex with one group over the name)). rate() drops the name, and with it
    what tells the families apart, so the labels are copied from it first, and the rate is taken
    over a subquery at the scrape interval."""
    # The regex is written against the classic names; a profile spelling them otherwise would
    # leave the panel empty without a word, so refuse to generate it.
    renamed = [name for name in families if q.name(name) != name]
    if renamed:
        raise ValueError(f"the {q.profile.version} profile renames {renamed[0]}: update {regex}")
    expr = q.device("", f'__name__=~"{regex}"')
    for label, pattern in labels:
        expr = f'label_replace({expr}, "{label}", "$1", "__name__", "{pattern}")'
    return f"rate({expr}[{q.rate_interval}:{q.config.scrape.interval}])"


def nvlink_fabric(config: BundleConfig) -> list[Cell]:
    """NVLink errors, the NVLink fabric, NVLink-C2C and the driver's recovery action (Hopper,
    Blackwell and Grace boards). Every family here is off by default in the exporter: on nodes
    without a collectors file turning them on, this row is empty."""
    q = QueryBuilder(config, dashboard=True)
    d = q.device
    rate = q.rate_interval
    kinds = "|".join(PER_LINK_KINDS)
    per_link = _by_name(
        q,
        _per_link_families(),
        f"DCGM_FI_DEV_NVLINK_({kinds})_ERROR_COUNT_L[0-9]+",
        ("counter", "DCGM_FI_DEV_NVLINK_(.+)_ERROR_COUNT_L[0-9]+"),
        ("link", ".+_L([0-9]+)"),
    )
    counters = nf.NVLINK_ERROR_COUNTERS
    by_counter = _by_name(
        q,
        counters,
        "|".join(counters),
        ("counter", "DCGM_FI_DEV_NVLINK_(.+)"),
    )
    mask = d(nf.FABRIC_HEALTH_MASK)
    conditions = (
        ("degraded bandwidth", "DEGRADED_BW"),
        ("route recovery", "ROUTE_RECOVERY"),
        ("route unhealthy", "ROUTE_UNHEALTHY"),
        ("access timeout recovery", "ACCESS_TIMEOUT_RECOVERY"),
    )
    # Each condition of the health mask as 0/1 per GPU (the alerts read the same fields).
    condition_targets = [
        target(
            f"max by (gpu) ({nf.mask_field(mask, field)} == bool {nf.mask_true(field)})",
            f"GPU {{{{gpu}}}} {words}",
        )
        for words, field in conditions
    ]
    incorrect = nf.mask_field(mask, "INCORRECT_CONFIGURATION")
    none = pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NONE
    condition_targets.append(
        target(f"max by (gpu) ({incorrect} > bool {none})", "GPU {{gpu}} incorrect configuration")
    )
    actions = {0: ("none", "green")} | {
        value: (words, "red") for value, words in nf.known_actions()
    }
    return [
        row("NVLink, fabric and C2C (Hopper, Blackwell, Grace)"),
        timeseries(
            "NVLink errors per link",
            "Errors per second on each NVLink link of the selected GPUs, all four classic "
            "counters (CRC flit, CRC data, replay, recovery) added up; links 0-11, as NVML "
            "counts them per link. Off by default: a collectors file turns the per-link "
            "families on.",
            "ops",
            [target(f"sum by (gpu, link) ({per_link})", "GPU {{gpu}} link {{link}}")],
        ),
        timeseries(
            "NVLink errors per counter",
            "Errors per second of each NVLink error counter, over all links: the classic totals "
            "(Hopper and earlier) and Blackwell's error counts. GPUNvlinkErrors fires on the "
            f"same counters, past {config.thresholds.nvlink_error_threshold:g} in "
            f"{config.thresholds.nvlink_error_window}.",
            "ops",
            [target(f"sum by (gpu, counter) ({by_counter})", "GPU {{gpu}} {{counter}}")],
        ),
        timeseries(
            "NVLink traffic (Blackwell counters)",
            "Bytes sent and received per second over all NVLink links, from Blackwell's counters.",
            "Bps",
            [
                target(
                    f"max by (gpu) (rate({d('DCGM_FI_DEV_NVLINK_COUNT_TX_BYTES')}[{rate}]))",
                    "TX GPU {{gpu}}",
                ),
                target(
                    f"max by (gpu) (rate({d('DCGM_FI_DEV_NVLINK_COUNT_RX_BYTES')}[{rate}]))",
                    "RX GPU {{gpu}}",
                ),
            ],
        ),
        state_timeline(
            "Fabric registration",
            "The fabric manager's registration of each GPU in its NVLink domain. Anything but "
            "completed past the start-up grace "
            f"({config.thresholds.fabric_startup_grace}) raises GPUFabricUnhealthy.",
            [target(f"max by (gpu) ({d(nf.FABRIC_STATUS)})", "GPU {{gpu}}")],
            states={
                1: ("not started", "orange"),
                2: ("in progress", "yellow"),
                3: ("completed", "green"),
                4: ("completed with an error", "red"),
            },
            width=12,
            height=8,
        ),
        state_timeline(
            "Fabric health",
            "The fabric's health summary per GPU: limited capacity raises GPUFabricDegraded, "
            "unhealthy GPUFabricUnhealthy.",
            [target(f"max by (gpu) ({d(nf.FABRIC_HEALTH_SUMMARY)})", "GPU {{gpu}}")],
            states={
                0: ("not supported", "transparent"),
                1: ("healthy", "green"),
                2: ("unhealthy", "red"),
                3: ("limited capacity", "orange"),
            },
            width=12,
            height=8,
        ),
        state_timeline(
            "Fabric health conditions",
            "Each condition of the fabric's health mask per GPU: degraded bandwidth, route "
            "recovery and access timeout recovery raise GPUFabricDegraded; an unhealthy route "
            "and an incorrect configuration GPUFabricUnhealthy.",
            condition_targets,
            states={0: ("no", "transparent"), 1: ("yes", "red")},
            width=12,
            height=8,
        ),
        state_timeline(
            "C2C link",
            "The NVLink-C2C link between each GPU and its Grace CPU; inactive raises "
            "GPUC2CLinkInactive.",
            [target(f"max by (gpu) ({d(nf.C2C_LINK_STATUS)})", "GPU {{gpu}}")],
            states={0: ("inactive", "red"), 1: ("active", "green")},
            width=12,
            height=8,
        ),
        state_timeline(
            "Recovery action",
            "The recovery the driver asks for on each GPU; anything but none raises "
            "GPURecoveryActionRequired.",
            [target(f"max by (gpu) ({d(nf.RECOVERY_ACTION)})", "GPU {{gpu}}")],
            states=actions,
            width=12,
            height=8,
        ),
    ]


def per_pod_use(config: BundleConfig) -> list[Cell]:
    """Each container's share of the selected GPUs from process accounting, stacked under the
    devices' own figures. The series of processes no pod holding the device accounts for (empty
    pod) is drawn too, as "unattributed": without it the stack would look short for no reason."""
    q = QueryBuilder(config, dashboard=True)
    d = q.device
    ns, pod = q.namespace, q.pod
    per_container = f"gpu, GPU_I_PROFILE, GPU_I_ID, {ns}, {pod}, container"
    memory = d("kube_gpu_exporter_pod_gpu_memory_used_bytes")
    sm = d("kube_gpu_exporter_pod_gpu_sm_utilization_ratio")
    processes = d("kube_gpu_exporter_pod_gpu_processes")

    def by_user(expr: str) -> str:
        # `max by`: a replaced exporter pod's last scrape can overlap the new one's.
        joined = (
            f'label_join(max by ({per_container}) ({expr}), "user", "/", "{ns}", "{pod}", '
            '"container")'
        )
        return f'label_replace({joined}, "user", "{UNATTRIBUTED}", "user", "//")'

    def by_row(expr: str) -> str:
        grouped = f"max by ({per_container}) ({expr})"
        return f'label_replace({grouped}, "{pod}", "{UNATTRIBUTED}", "{pod}", "")'

    # The devices' totals once each: shared devices may carry one copy of a DCGM series per pod
    # (--attribution.shared-devices=per-pod). MIG instances have FB_USED series of their own and
    # their parent none, so summing does not count memory twice.
    device_memory, memory_unit = q.display(
        "DCGM_FI_DEV_FB_USED", f"sum(max by (gpu, GPU_I_ID) ({d('DCGM_FI_DEV_FB_USED')}))"
    )
    device_util = scaled(
        f"sum(max by (gpu) ({d('DCGM_FI_DEV_GPU_UTIL')}))",
        unit_factor("%", q.utilization_unit, "ratio"),
    )
    legend = DEVICE_LEGEND + " {{user}}"
    source = (
        "From NVML's per-process accounting mapped to containers through /proc "
        "(--collector.processes); processes of pods that do not hold the device, of the host, "
        f"or in another PID namespace are {UNATTRIBUTED}. "
    )
    # dcgm-exporter's virtual-GPU mode replaces the device's figures on the per-pod copies.
    own_use_caveat = (
        " With --attribution.per-pod-usage the DCGM series carry each pod's own use instead, "
        "so the dashed line then shows the largest pod's."
    )
    return [
        row("Per-pod use (process accounting)"),
        timeseries(
            "GPU memory per pod",
            source + "Stacked per container, against the device memory used on the selected "
            "GPUs (dashed): the gap is memory no process holds, the driver's own. Select one GPU "
            "to read a shared GPU's split." + own_use_caveat,
            memory_unit,
            [
                target(by_user(memory), legend),
                target(device_memory, "device memory used, selected GPUs"),
            ],
            stack=True,
            totals=(1,),
        ),
        timeseries(
            "SM utilization per pod",
            source + "Stacked per container, against the utilization of the selected whole GPUs "
            "(dashed); NVML samples processes and devices separately, so the two need not "
            "match exactly. NVML has no per-process utilization on MIG instances." + own_use_caveat,
            "percentunit",
            [
                target(by_user(sm), legend),
                target(device_util, "device utilization, selected GPUs"),
            ],
            stack=True,
            totals=(1,),
        ),
        table(
            "Per-pod use now",
            source + "One row per container and device: its processes, the device memory they "
            "hold, and their SM utilization (whole GPUs only).",
            "bytes",
            [
                TableQuery("Processes", by_row(processes)),
                TableQuery("Memory", by_row(memory)),
                TableQuery("SM utilization", by_row(sm)),
            ],
            labels={
                "gpu": "GPU",
                "GPU_I_PROFILE": "MIG profile",
                "GPU_I_ID": "Instance",
                ns: "Namespace",
                pod: "Pod",
                "container": "Container",
            },
            sort_by="Memory",
            descending=True,
            column_units={"Processes": "none", "SM utilization": "percentunit"},
            width=24,
        ),
    ]


# DCGM's violation counters: how long each limit held the clocks down.
VIOLATIONS = (
    ("power", "DCGM_FI_DEV_POWER_VIOLATION"),
    ("thermal", "DCGM_FI_DEV_THERMAL_VIOLATION"),
    ("sync_boost", "DCGM_FI_DEV_SYNC_BOOST_VIOLATION"),
    ("board_limit", "DCGM_FI_DEV_BOARD_LIMIT_VIOLATION"),
    ("low_util", "DCGM_FI_DEV_LOW_UTIL_VIOLATION"),
    ("reliability", "DCGM_FI_DEV_RELIABILITY_VIOLATION"),
    ("app_clocks", "DCGM_FI_DEV_TOTAL_APP_CLOCKS_VIOLATION"),
    ("base_clocks", "DCGM_FI_DEV_TOTAL_BASE_CLOCKS_VIOLATION"),
)
# The verdict's actions and severities, weakest first, with the colour each state shows in.
ACTION_STATES = (
    ("none", "green"),
    ("watch", "blue"),
    ("reset", "yellow"),
    ("reboot", "orange"),
    ("drain", "red"),
)
SEVERITY_STATES = (("none", "green"), ("warning", "orange"), ("critical", "red"))


def _fraction_of_time(q: QueryBuilder, metric: str) -> Fraction:
    """What a violation counter's rate is multiplied by to be a fraction of time: the counters
    count nanoseconds, or seconds where a profile publishes base units."""
    return Fraction(1) if q.spelled(metric).unit == "s" else Fraction(1, 10**9)


def health(config: BundleConfig) -> list[Cell]:
    """The exporter's health verdict per GPU and the violation counters' throttle time."""
    q = QueryBuilder(config, dashboard=True)
    d = q.device
    rate = q.rate_interval

    def ranked(label: str, states: tuple[tuple[str, str], ...], by: str) -> str:
        """Per `by`, the rank of the strongest `label` value among its verdict series: each
        value's series scaled to its rank (`or` keeps them apart by that label), then `max`."""
        parts = " or ".join(
            f"{rank} * {d(gh.HEALTH_REASON, label + '=' + chr(34) + value + chr(34))}"
            for rank, (value, _colour) in enumerate(states)
        )
        return f"max by ({by}) ({parts})"

    throttled = " or ".join(
        f"label_replace("
        f"{scaled(f'rate({d(metric)}[{rate}])', _fraction_of_time(q, metric))}, "
        f'"violation", "{name}", "", "")'
        for name, metric in VIOLATIONS
    )
    return [
        row("Health"),
        table(
            "Health verdict per GPU",
            "The exporter's health verdict: each reason a GPU has now, its severity and the "
            "action it asks for (one healthy row when there is none). MIG instances inherit "
            "their GPU's reasons and are not repeated. An action of reset, reboot or drain "
            "raises GPUNeedsReset, GPUNeedsReboot or GPUNeedsDrain.",
            "none",
            [TableQuery(None, f"max by (gpu, reason, severity, action) ({d(gh.HEALTH_REASON)})")],
            labels={"gpu": "GPU", "reason": "Reason", "severity": "Severity", "action": "Action"},
            sort_by="GPU",
        ),
        state_timeline(
            "Action needed per GPU",
            "The strongest action the health verdict asks for on each GPU over time.",
            [target(ranked("action", ACTION_STATES, "gpu"), "GPU {{gpu}}")],
            states=dict(enumerate(ACTION_STATES)),
            width=12,
            height=8,
        ),
        state_timeline(
            "Health reasons over time",
            "Each reason of each GPU while it holds, coloured by its severity.",
            [target(ranked("severity", SEVERITY_STATES, "gpu, reason"), "GPU {{gpu}} {{reason}}")],
            states=dict(enumerate(SEVERITY_STATES)),
        ),
        timeseries(
            "Throttle time per violation counter",
            "The share of time each limit held the GPU's clocks down, from the violation "
            "counters: power and thermal limits, sync boost, the board's limit, low "
            "utilization, reliability, and below the application or base clocks. 100 % is "
            "the whole interval.",
            "percentunit",
            [target(f"max by (gpu, violation) ({throttled})", "GPU {{gpu}} {{violation}}")],
            max_value=1,
            width=24,
        ),
    ]


def variable_list(config: BundleConfig) -> list:
    return [
        variables.datasource(config),
        variables.cluster(config),
        variables.node(config, multi=False),
        variables.gpu(config),
    ]

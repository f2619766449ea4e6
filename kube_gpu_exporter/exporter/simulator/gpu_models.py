"""Reference GPU models the simulator can be: real NVML names, PCI ids, memory sizes, TDPs, MIG
profile tables. Facts from docs/nvml.md, 'Device table' and 'MIG profiles'."""

from __future__ import annotations

from dataclasses import dataclass

ARCH_TURING = 6
ARCH_AMPERE = 7
ARCH_ADA = 8
ARCH_HOPPER = 9
# NVML_DEVICE_ARCH_BLACKWELL in nvml.h (nvidia-ml-py names it too).
ARCH_BLACKWELL = 10


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    # The driver's GI profile id (what `nvidia-smi mig -lgip` prints), not the enum index.
    profile_id: int
    # NVML_GPU_INSTANCE_PROFILE_* enum index, the argument to GetGpuInstanceProfileInfo.
    enum_index: int
    max_count: int
    memory_mib: int
    multiprocessors: int
    placement_starts: tuple[int, ...]
    placement_size: int

    @property
    def compute_slices(self) -> int:
        return int(self.name.split("g.", 1)[0])


@dataclass(frozen=True, slots=True)
class GpuModel:
    key: str
    name: str
    pci_device_id: int
    memory_mib: int
    reserved_mib: int
    tdp_mw: int
    idle_power_mw: int
    architecture: int
    compute_capability: tuple[int, int]
    max_sm_clock_mhz: int
    idle_sm_clock_mhz: int
    mem_clock_mhz: int
    nvlink_links: int
    hbm: bool  # HBM parts report a memory temperature; GDDR parts do not.
    mig_profiles: tuple[MigProfile, ...] = ()
    slowdown_temp_c: int = 87
    shutdown_temp_c: int = 92
    # What nvmlDeviceGetPowerManagementLimitConstraints answers; None where no published
    # `nvidia-smi -q` gives it for the board, so nothing may compare against a guess.
    power_limit_min_mw: int | None = None
    power_limit_max_mw: int | None = None
    # NVLink-C2C links to a Grace CPU (NVML_FI_DEV_C2C_LINK_COUNT); 0 off Grace, where NVML
    # answers NOT_SUPPORTED for the C2C fields.
    c2c_links: int = 0
    # Whether the board can join a multi-node NVLink fabric (NVL72 trays), so that
    # nvmlDeviceGetGpuFabricInfoV answers once the fleet gives it a fabric; elsewhere it is
    # NOT_SUPPORTED (docs/nvml.md, 'NOT_SUPPORTED matrix').
    fabric_capable: bool = False

    @property
    def nvlink_counts(self) -> bool:
        """The per-link NVML_FI_DEV_NVLINK_COUNT_* fields: Blackwell and newer only."""
        return self.architecture >= ARCH_BLACKWELL and self.nvlink_links > 0

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def row_remapping(self) -> bool:
        return self.architecture >= ARCH_AMPERE

    @property
    def averaged_power(self) -> bool:
        """Whether the board reports a 1 s power average (field 185, and what
        nvmlDeviceGetPowerUsage returns): Ampere and newer, except GA100, the only compute
        capability 8.0 chip. The others report the instantaneous draw."""
        return self.architecture >= ARCH_AMPERE and self.compute_capability != (8, 0)

    @property
    def gpm_supported(self) -> bool:
        """NVML GPU Performance Monitoring exists from Hopper on; Ada, Ampere and older say no."""
        return self.architecture >= ARCH_HOPPER

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)


def _profiles(
    rows: list[tuple[str, int, int, int, int, int, tuple[int, ...], int]],
) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(*row) for row in rows)


_ALL7 = (0, 1, 2, 3, 4, 5, 6)

H100_80GB = GpuModel(
    key="H100-80GB-HBM3",
    name="NVIDIA H100 80GB HBM3",
    pci_device_id=0x233010DE,
    memory_mib=81559,
    reserved_mib=328,
    tdp_mw=700_000,
    idle_power_mw=68_000,
    architecture=ARCH_HOPPER,
    compute_capability=(9, 0),
    max_sm_clock_mhz=1980,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=2619,
    nvlink_links=18,
    hbm=True,
    mig_profiles=_profiles(
        [
            ("1g.10gb", 19, 0, 7, 9984, 16, _ALL7, 1),
            ("1g.10gb+me", 20, 7, 1, 9984, 16, _ALL7, 1),
            ("1g.20gb", 15, 9, 4, 20096, 26, (0, 2, 4, 6), 2),
            ("2g.20gb", 14, 1, 3, 20096, 32, (0, 2, 4), 2),
            ("3g.40gb", 9, 2, 2, 40448, 60, (0, 4), 4),
            ("4g.40gb", 5, 3, 1, 40448, 64, (0,), 4),
            ("7g.80gb", 0, 4, 1, 81152, 132, (0,), 8),
        ]
    ),
)

# Same GH100 die and slice geometry as the H100 SXM, with 141 GB of HBM3e: the SM counts and
# placements match the H100's. Memory per profile, the reservation and the idle draw are what a
# real H200 answered (driver 580.159.04; benchmarks/results/device-record-nvidia-h200.yaml).
H200 = GpuModel(
    key="H200-141GB-HBM3e",
    name="NVIDIA H200",
    pci_device_id=0x233510DE,
    memory_mib=143771,
    reserved_mib=615,
    tdp_mw=700_000,
    idle_power_mw=82_000,
    architecture=ARCH_HOPPER,
    compute_capability=(9, 0),
    max_sm_clock_mhz=1980,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3201,
    nvlink_links=18,
    hbm=True,
    power_limit_min_mw=200_000,
    power_limit_max_mw=700_000,
    mig_profiles=_profiles(
        [
            ("1g.18gb", 19, 0, 7, 16384, 16, _ALL7, 1),
            ("1g.18gb+me", 20, 7, 1, 16384, 16, _ALL7, 1),
            ("1g.35gb", 15, 9, 4, 33280, 26, (0, 2, 4, 6), 2),
            ("2g.35gb", 14, 1, 3, 33280, 32, (0, 2, 4), 2),
            ("3g.71gb", 9, 2, 2, 71424, 60, (0, 4), 4),
            ("4g.71gb", 5, 3, 1, 71424, 64, (0,), 4),
            ("7g.141gb", 0, 4, 1, 143360, 132, (0,), 8),
        ]
    ),
)

A100_80GB = GpuModel(
    key="A100-SXM4-80GB",
    name="NVIDIA A100-SXM4-80GB",
    pci_device_id=0x20B210DE,
    memory_mib=81920,
    reserved_mib=562,
    tdp_mw=400_000,
    idle_power_mw=60_000,
    architecture=ARCH_AMPERE,
    compute_capability=(8, 0),
    max_sm_clock_mhz=1410,
    idle_sm_clock_mhz=210,
    mem_clock_mhz=1593,
    nvlink_links=12,
    hbm=True,
    mig_profiles=_profiles(
        [
            ("1g.10gb", 19, 0, 7, 9856, 14, _ALL7, 1),
            ("1g.10gb+me", 20, 7, 1, 9856, 14, _ALL7, 1),
            ("1g.20gb", 15, 9, 4, 19968, 14, (0, 2, 4, 6), 2),
            ("2g.20gb", 14, 1, 3, 19968, 28, (0, 2, 4), 2),
            ("3g.40gb", 9, 2, 2, 40192, 42, (0, 4), 4),
            ("4g.40gb", 5, 3, 1, 40192, 56, (0,), 4),
            ("7g.80gb", 0, 4, 1, 80384, 98, (0,), 8),
        ]
    ),
)

A100_40GB = GpuModel(
    key="A100-SXM4-40GB",
    name="NVIDIA A100-SXM4-40GB",
    pci_device_id=0x20B010DE,
    memory_mib=40960,
    reserved_mib=421,
    tdp_mw=400_000,
    idle_power_mw=55_000,
    architecture=ARCH_AMPERE,
    compute_capability=(8, 0),
    max_sm_clock_mhz=1410,
    idle_sm_clock_mhz=210,
    mem_clock_mhz=1215,
    nvlink_links=12,
    hbm=True,
    mig_profiles=_profiles(
        [
            ("1g.5gb", 19, 0, 7, 4864, 14, _ALL7, 1),
            ("1g.5gb+me", 20, 7, 1, 4864, 14, _ALL7, 1),
            ("1g.10gb", 15, 9, 4, 9856, 14, (0, 2, 4, 6), 2),
            ("2g.10gb", 14, 1, 3, 9856, 28, (0, 2, 4), 2),
            ("3g.20gb", 9, 2, 2, 19968, 42, (0, 4), 4),
            ("4g.20gb", 5, 3, 1, 19968, 56, (0,), 4),
            ("7g.40gb", 0, 4, 1, 40192, 98, (0,), 8),
        ]
    ),
)

T4 = GpuModel(
    key="T4",
    name="Tesla T4",
    pci_device_id=0x1EB810DE,
    memory_mib=15360,
    reserved_mib=250,
    tdp_mw=70_000,
    idle_power_mw=10_000,
    architecture=ARCH_TURING,
    compute_capability=(7, 5),
    max_sm_clock_mhz=1590,
    idle_sm_clock_mhz=300,
    mem_clock_mhz=5001,
    nvlink_links=0,
    hbm=False,
    slowdown_temp_c=82,
    shutdown_temp_c=90,
)

L4 = GpuModel(
    key="L4",
    name="NVIDIA L4",
    pci_device_id=0x27B810DE,
    memory_mib=23034,
    reserved_mib=380,
    tdp_mw=72_000,
    idle_power_mw=16_000,
    architecture=ARCH_ADA,
    compute_capability=(8, 9),
    max_sm_clock_mhz=2040,
    idle_sm_clock_mhz=210,
    mem_clock_mhz=6251,
    nvlink_links=0,
    hbm=False,
)

L40S = GpuModel(
    key="L40S",
    name="NVIDIA L40S",
    pci_device_id=0x26B910DE,
    memory_mib=46068,
    reserved_mib=520,
    tdp_mw=350_000,
    idle_power_mw=35_000,
    architecture=ARCH_ADA,
    compute_capability=(8, 9),
    max_sm_clock_mhz=2520,
    idle_sm_clock_mhz=210,
    mem_clock_mhz=9001,
    nvlink_links=0,
    hbm=False,
)


# Blackwell boards (docs/nvml.md, 'Device table' and 'MIG profiles' give each value's source and
# say which are the simulator's own choices). The MIG tables reuse Hopper's GI profile ids and
# placements: the profile names and counts are published, the ids and SM counts per profile are
# not (see docs/nvml.md).
_B200_PROFILES = _profiles(
    [
        ("1g.23gb", 19, 0, 7, 20992, 18, _ALL7, 1),
        ("1g.23gb+me", 20, 7, 1, 20992, 18, _ALL7, 1),
        ("1g.45gb", 15, 9, 4, 45312, 18, (0, 2, 4, 6), 2),
        ("2g.45gb", 14, 1, 3, 45312, 36, (0, 2, 4), 2),
        ("3g.90gb", 9, 2, 2, 91136, 54, (0, 4), 4),
        ("4g.90gb", 5, 3, 1, 91136, 72, (0,), 4),
        ("7g.180gb", 0, 4, 1, 182784, 126, (0,), 8),
    ]
)

B200 = GpuModel(
    key="B200",
    name="NVIDIA B200",
    pci_device_id=0x290110DE,
    memory_mib=183359,
    reserved_mib=575,
    tdp_mw=1_000_000,
    idle_power_mw=140_000,
    architecture=ARCH_BLACKWELL,
    compute_capability=(10, 0),
    max_sm_clock_mhz=1965,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3996,
    nvlink_links=18,
    hbm=True,
    power_limit_max_mw=1_000_000,
    mig_profiles=_B200_PROFILES,
)

GB200 = GpuModel(
    key="GB200",
    name="NVIDIA GB200",
    pci_device_id=0x294110DE,
    memory_mib=189471,
    reserved_mib=575,
    tdp_mw=1_200_000,
    idle_power_mw=160_000,
    architecture=ARCH_BLACKWELL,
    compute_capability=(10, 0),
    max_sm_clock_mhz=1965,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3996,
    nvlink_links=18,
    hbm=True,
    power_limit_max_mw=1_200_000,
    c2c_links=10,
    fabric_capable=True,
    mig_profiles=_profiles(
        [
            ("1g.23gb", 19, 0, 7, 20992, 18, _ALL7, 1),
            ("1g.23gb+me", 20, 7, 1, 20992, 18, _ALL7, 1),
            ("1g.47gb", 15, 9, 4, 46848, 18, (0, 2, 4, 6), 2),
            ("2g.47gb", 14, 1, 3, 46848, 36, (0, 2, 4), 2),
            ("3g.93gb", 9, 2, 2, 94208, 54, (0, 4), 4),
            ("4g.93gb", 5, 3, 1, 94208, 72, (0,), 4),
            ("7g.186gb", 0, 4, 1, 188416, 126, (0,), 8),
        ]
    ),
)

_B300_PROFILES = _profiles(
    [
        ("1g.34gb", 19, 0, 7, 33792, 18, _ALL7, 1),
        ("1g.34gb+me", 20, 7, 1, 33792, 18, _ALL7, 1),
        ("1g.67gb", 15, 9, 4, 67584, 18, (0, 2, 4, 6), 2),
        ("2g.67gb", 14, 1, 3, 67584, 36, (0, 2, 4), 2),
        ("3g.135gb", 9, 2, 2, 135168, 54, (0, 4), 4),
        ("4g.135gb", 5, 3, 1, 135168, 72, (0,), 4),
        ("7g.269gb", 0, 4, 1, 270336, 126, (0,), 8),
    ]
)

B300 = GpuModel(
    key="B300",
    name="NVIDIA B300 SXM6 AC",
    pci_device_id=0x318210DE,
    memory_mib=275040,
    reserved_mib=575,
    tdp_mw=1_100_000,
    idle_power_mw=150_000,
    architecture=ARCH_BLACKWELL,
    compute_capability=(10, 3),
    max_sm_clock_mhz=1920,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3996,
    nvlink_links=18,
    hbm=True,
    mig_profiles=_B300_PROFILES,
)

GB300 = GpuModel(
    key="GB300",
    name="NVIDIA GB300",
    # No published capture gives the GB300's device id: a placeholder beside the B300's, which
    # nothing may match on (docs/nvml.md, 'Device table').
    pci_device_id=0x31C210DE,
    memory_mib=284672,
    reserved_mib=575,
    tdp_mw=1_400_000,
    idle_power_mw=170_000,
    architecture=ARCH_BLACKWELL,
    compute_capability=(10, 3),
    max_sm_clock_mhz=1920,
    idle_sm_clock_mhz=345,
    mem_clock_mhz=3996,
    nvlink_links=18,
    hbm=True,
    c2c_links=10,
    fabric_capable=True,
    mig_profiles=_B300_PROFILES,
)

MODELS: dict[str, GpuModel] = {
    m.key: m
    for m in (H100_80GB, H200, A100_80GB, A100_40GB, T4, L4, L40S, B200, GB200, B300, GB300)
}


def find_model(name: str) -> GpuModel | None:
    """Look a model up by its short key or by its exact NVML name."""
    return MODELS.get(name) or next((m for m in MODELS.values() if m.name == name), None)

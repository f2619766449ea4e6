"""The load phase: a matrix-multiply loop on every GPU in a child process, and the checks that the
exported utilization, power, SM clock, temperature and GPM activity answered it.

    python -m benchmarks.real_gpu.load SECONDS

The child is started with the idle phase: it imports PyTorch (or CuPy), which can take a minute,
without touching a GPU, then waits for a line on stdin. On that line it allocates its matrices,
prints `backend=<torch|cupy|none> gpus=<n> note=<why>`, so the harness knows what load (if any)
it got before it starts measuring, and multiplies for SECONDS.
"""

from __future__ import annotations

import os
import selectors
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from benchmarks.processes import stop as stop_process

# Big enough to keep the tensor cores of an H200 busy between two synchronisations.
MATRIX = 8192
SYNC_EVERY = 20

UTIL = "DCGM_FI_DEV_GPU_UTIL"
POWER = "DCGM_FI_DEV_POWER_USAGE"
SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
TEMPERATURE = "DCGM_FI_DEV_GPU_TEMP"
GPM_FAMILIES = (
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
)
WATCHED = (UTIL, POWER, SM_CLOCK, TEMPERATURE, *GPM_FAMILIES)

UTIL_RISE_POINTS = 30.0
POWER_RISE_FRACTION = 0.20
TEMPERATURE_RISE_C = 2.0
GPM_IDLE_MAX = 0.05
GPM_RISE = 0.10

# One scrape: family -> GPU (PCI bus id, lowercase) -> value, board-level series only.
Scrape = dict[str, dict[str, float]]


def board_values(exposition: str, families: Iterable[str] = WATCHED) -> Scrape:
    """The board-level series of `families` in one exposition; MIG instances' series (with a
    GPU_I_ID label) are left out, since the load runs on whole GPUs."""
    wanted = set(families)
    out: Scrape = {}
    for family in text_string_to_metric_families(exposition):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            if "GPU_I_ID" in sample.labels or "pci_bus_id" not in sample.labels:
                continue
            gpu = sample.labels["pci_bus_id"].lower()
            out.setdefault(family.name, {})[gpu] = float(sample.value)
    return out


@dataclass(frozen=True, slots=True)
class Response:
    family: str
    gpu: str
    idle_mean: float | None
    load_mean: float | None
    rule: str
    ok: bool | None  # None: not judged (no load ran, or the family was not exported)
    note: str = ""


def _series(scrapes: Sequence[Scrape], family: str, gpu: str) -> list[float]:
    return [s[family][gpu] for s in scrapes if gpu in s.get(family, {})]


def _judge(family: str, idle: list[float], load: list[float]) -> tuple[str, bool, str]:
    idle_mean, load_mean = statistics.fmean(idle), statistics.fmean(load)
    rise = load_mean - idle_mean
    if family == UTIL:
        return f"load - idle >= {UTIL_RISE_POINTS:g} points", rise >= UTIL_RISE_POINTS, ""
    if family == POWER:
        ok = load_mean >= idle_mean * (1 + POWER_RISE_FRACTION)
        return f"load >= idle + {POWER_RISE_FRACTION:.0%}", ok, ""
    if family == TEMPERATURE:
        # A well-cooled board may warm by less than 2 C in a short run; any rise still answers.
        if rise >= TEMPERATURE_RISE_C:
            return f"load - idle >= {TEMPERATURE_RISE_C:g} C, or any rise", True, ""
        ok = max(load) > max(idle)
        note = f"rose by only {rise:.1f} C" if ok else ""
        return f"load - idle >= {TEMPERATURE_RISE_C:g} C, or any rise", ok, note
    if family == SM_CLOCK:
        note = "" if rise > 0 else "unchanged: clocks may be locked (nvidia-smi -lgc)"
        return "load > idle", rise > 0, note
    rule = f"idle < {GPM_IDLE_MAX:g} and load - idle >= {GPM_RISE:g}"
    quiet = idle_mean < GPM_IDLE_MAX
    rose = rise >= GPM_RISE
    note = "" if quiet else "busy while idle: another process on the GPU?"
    return rule, quiet and rose, note


def load_response(
    idle: Sequence[Scrape],
    load: Sequence[Scrape],
    load_ran: bool,
    families: Sequence[str] = WATCHED,
) -> list[Response]:
    """One verdict per family and GPU seen in both phases."""
    responses: list[Response] = []
    for family in families:
        gpus = sorted({g for s in (*idle, *load) for g in s.get(family, {})})
        if not gpus:
            note = "GPM not exported" if family in GPM_FAMILIES else "not exported"
            responses.append(Response(family, "-", None, None, "", None, note))
            continue
        for gpu in gpus:
            idle_values, load_values = _series(idle, family, gpu), _series(load, family, gpu)
            idle_mean = statistics.fmean(idle_values) if idle_values else None
            load_mean = statistics.fmean(load_values) if load_values else None
            if not load_ran:
                responses.append(
                    Response(family, gpu, idle_mean, load_mean, "", None, "no load generator")
                )
                continue
            if not idle_values or not load_values:
                responses.append(
                    Response(family, gpu, idle_mean, load_mean, "", None, "missing in a phase")
                )
                continue
            rule, ok, note = _judge(family, idle_values, load_values)
            responses.append(Response(family, gpu, idle_mean, load_mean, rule, ok, note))
    return responses


# The harness side


PENDING = "pending"


@dataclass
class LoadGenerator:
    process: subprocess.Popen[str] | None
    backend: str
    gpus: int
    note: str

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15.0) -> None:
        if self.process is not None:
            stop_process(self.process, timeout)


def parse_banner(line: str) -> tuple[str, int, str]:
    """(backend, gpus, note) from the child's first line."""
    fields: dict[str, str] = {}
    rest = line.strip()
    head, _, note = rest.partition(" note=")
    for part in head.split():
        key, _, value = part.partition("=")
        fields[key] = value
    if "backend" not in fields:
        raise ValueError(f"load generator said {line.strip()[:120]!r}, not its backend")
    return fields["backend"], int(fields.get("gpus", "0") or 0), note.strip()


def prepare_load(seconds: float) -> LoadGenerator:
    """Start the child importing its backend; `go` starts the load."""
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.real_gpu.load", f"{seconds:.1f}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    return LoadGenerator(process, PENDING, 0, "not started")


def go(generator: LoadGenerator, startup_timeout: float = 120.0) -> LoadGenerator:
    """Tell the prepared child to start, and wait for its banner: what it loads, or why not."""
    process = generator.process
    if process is None or process.stdin is None or process.stdout is None:
        return generator
    try:
        process.stdin.write("go\n")
        process.stdin.close()
    except OSError:
        pass  # it exited already; its banner, if any, says why
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(startup_timeout):
            generator.stop()
            return LoadGenerator(process, "none", 0, "load generator did not start in time")
    line = process.stdout.readline()
    try:
        backend, gpus, note = parse_banner(line)
    except ValueError as exc:
        generator.stop()
        return LoadGenerator(process, "none", 0, str(exc))
    if backend == "none":
        process.wait(10)
        return LoadGenerator(None, backend, 0, note)
    return LoadGenerator(process, backend, gpus, note)


# The child


def _torch_loop(deadline: float) -> None:
    import torch

    count = torch.cuda.device_count()
    pairs = []
    for index in range(count):
        device = torch.device("cuda", index)
        a = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.float16)
        b = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.float16)
        pairs.append((a, b))
    _banner("torch", count, f"float16 {MATRIX}x{MATRIX} matmul, torch {torch.__version__}")
    while time.monotonic() < deadline:
        # Launches are asynchronous: queue work on every GPU, then wait for all of it.
        for _ in range(SYNC_EVERY):
            for a, b in pairs:
                a @ b
        for index in range(count):
            torch.cuda.synchronize(index)


def _cupy_loop(deadline: float) -> None:
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    pairs: list[tuple[int, Any, Any]] = []
    for index in range(count):
        with cupy.cuda.Device(index):
            a = cupy.random.random((MATRIX, MATRIX), dtype=cupy.float32).astype(cupy.float16)
            b = cupy.random.random((MATRIX, MATRIX), dtype=cupy.float32).astype(cupy.float16)
            pairs.append((index, a, b))
    _banner("cupy", count, f"float16 {MATRIX}x{MATRIX} matmul, cupy {cupy.__version__}")
    while time.monotonic() < deadline:
        for _ in range(SYNC_EVERY):
            for index, a, b in pairs:
                with cupy.cuda.Device(index):
                    a @ b
        for index, _a, _b in pairs:
            cupy.cuda.Device(index).synchronize()


def _banner(backend: str, gpus: int, note: str) -> None:
    sys.stdout.write(f"backend={backend} gpus={gpus} note={note}\n")
    sys.stdout.flush()


def _torch_usable() -> str | None:
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return "PyTorch sees no CUDA device"
    return None


def _cupy_usable() -> str | None:
    try:
        import cupy
    except ImportError:
        return "CuPy is not installed"
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            return "CuPy sees no CUDA device"
    except Exception as exc:  # CUDA runtime errors have no common base class in CuPy
        return f"CuPy cannot reach CUDA: {type(exc).__name__}"
    return None


def _wait_for_go() -> bool:
    """False when the harness went away without saying go."""
    return bool(sys.stdin.readline())


def child_main(argv: Sequence[str]) -> int:
    seconds = float(argv[0]) if argv else 60.0
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    torch_problem = _torch_usable()
    cupy_problem = None if torch_problem is None else _cupy_usable()
    if not _wait_for_go():
        return 0
    deadline = time.monotonic() + seconds
    if torch_problem is None:
        _torch_loop(deadline)
    elif cupy_problem is None:
        _cupy_loop(deadline)
    else:
        _banner("none", 0, f"{torch_problem}; {cupy_problem}")
    return 0


def describe(generator: LoadGenerator) -> str:
    if generator.backend == "none":
        return f"no load: {generator.note}"
    return f"{generator.backend} on {generator.gpus} GPU(s): {generator.note}"


if __name__ == "__main__":
    raise SystemExit(child_main(sys.argv[1:]))

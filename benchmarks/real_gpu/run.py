"""One validation run: the production exporter (with process accounting on) as a child process,
nvitop-exporter beside it where installed, half the time idle and half under a matrix-multiply
load, the exporter's expositions held against pynvml and nvidia-smi read at the same moments;
then NVML call and field timings on GPU 0, the report, the device record and the cost table.

    python -m benchmarks.real_gpu [--minutes 3] [--out benchmarks/results] [--simulate]

The default run takes under 5 minutes on 1 to 8 GPUs: the phases, plus at most about a minute to
start, stop and time the calls. Under --simulate the exporter runs its simulated node and the
harness reads an in-process simulator of the same fleet, so the whole pipeline runs on a machine
without a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NoReturn

import pynvml

from benchmarks.processes import REPO, ProcSample, proc_sample
from benchmarks.real_gpu import accounting, neighbour
from benchmarks.real_gpu.costs import cost_header, cost_table, cost_yaml
from benchmarks.real_gpu.independent import GpuProcesses
from benchmarks.real_gpu.latency import (
    CallTiming,
    sweep_estimate,
    time_fields,
    time_nvml_calls,
)
from benchmarks.real_gpu.load import (
    LoadGenerator,
    Scrape,
    board_values,
    describe,
    go,
    load_response,
    prepare_load,
)
from benchmarks.real_gpu.report import (
    ErrorGrowth,
    RunReport,
    device_record,
    exported_families,
    failures,
    nvml_errors,
    unsupported_handling,
    write_outputs,
)
from benchmarks.real_gpu.usage import ProcessUsage, usage_between
from kube_gpu_exporter.exporter.nvml.binding import NVMLError, error_name

PROG = "python -m benchmarks.real_gpu"
DURATION_FAMILY = "kube_gpu_exporter_collection_duration_seconds"
READY_TIMEOUT_S = 90.0
DEFAULT_MINUTES = 3.0
PROCESS_ROWS_TIMEOUT_S = 10.0
# The load runs this long past the phase, so a slow start cannot end it early.
LOAD_MARGIN_S = 60.0


class UsageError(Exception):
    """A start-up mistake; str() is the one line the user sees (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _minutes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of minutes: {text[:40]!r}") from None
    if not 0.05 <= value <= 120:
        raise argparse.ArgumentTypeError(f"{value:g} is outside 0.05..120 minutes")
    return value


@dataclass(frozen=True, slots=True)
class Options:
    minutes: float
    out: Path
    simulate: bool
    repeats: int


def parse_args(argv: Sequence[str]) -> Options:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes",
        type=_minutes,
        default=DEFAULT_MINUTES,
        help=f"idle and load phases together (default {DEFAULT_MINUTES:g})",
    )
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--simulate", action="store_true", help="run on the simulated node")
    parser.add_argument(
        "--repeats",
        type=int,
        default=300,
        help="timed calls per NVML function and per field (default 300)",
    )
    args = parser.parse_args(list(argv))
    if not 10 <= args.repeats <= 100_000:
        raise UsageError(f"argument --repeats: {args.repeats} is outside 10..100000")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"argument --out: {args.out} is not a directory")
    return Options(args.minutes, args.out, args.simulate, args.repeats)


# NVML in this process


@contextlib.contextmanager
def nvml_session(simulate: bool) -> Iterator[Any]:
    """NVML initialised for the harness's own reads: the `pynvml` module on a GPU host, the
    simulator's api object under --simulate."""
    fake = _simulated_node() if simulate else None
    nvml = pynvml if fake is None else fake.api
    try:
        try:
            nvml.nvmlInit()
        except NVMLError as exc:
            raise UsageError(
                f"NVML did not initialise ({error_name(exc)}): no NVIDIA driver here? "
                "--simulate runs on the simulator"
            ) from None
        try:
            yield nvml
        finally:
            nvml.nvmlShutdown()
    finally:
        if fake is not None:
            fake.close()


def _simulated_node() -> Any:
    """The default fleet with its pods' processes, as the exporter's --simulate builds it: the
    same seed gives the same GPUs, pods and PIDs. The fake kubelet is only asked for its pods;
    it serves nothing."""
    from kube_gpu_exporter.exporter.simulator.fake_kubelet import FakeKubelet
    from kube_gpu_exporter.exporter.simulator.fake_nvml import FakeNvml
    from kube_gpu_exporter.exporter.simulator.fleet import default_fleet
    from kube_gpu_exporter.exporter.simulator.processes import ProcessTable

    fake = FakeNvml(default_fleet())
    fake.processes = ProcessTable(fake, FakeKubelet(fake, "/nonexistent/kubelet.sock"))
    return fake


# The exporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exporter_argv(port: int, simulate: bool) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "kube_gpu_exporter",
        f"--web.listen-address=127.0.0.1:{port}",
        "--collector.interval=1s",
        "--no-podresources",
        # No pod holds anything without pod-resources: every process lands on its GPU's
        # unattributed row, which the process check reads.
        "--collector.processes",
    ]
    return [*argv, "--simulate"] if simulate else argv


def get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read().decode()


def wait_ready(process: subprocess.Popen[bytes], port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the exporter exited with status {process.returncode}")
        with contextlib.suppress(OSError):
            if get(f"http://127.0.0.1:{port}/readyz", timeout=2)[0] == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the exporter was not ready within {timeout:g} s")


def wait_for_family(port: int, family: str, timeout: float) -> bool:
    """Until the exposition shows `family`: /readyz answers after the first sweep, and the
    process collector's first rows come a sweep or so later. False if they never came."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            status, body = get(f"http://127.0.0.1:{port}/metrics", timeout=5)
            if status == 200 and f"\n{family}{{" in body:
                return True
        time.sleep(0.5)
    return False


def stop(process: subprocess.Popen[Any], timeout: float = 15.0) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _log_tail(path: Path) -> list[str]:
    return path.read_text(errors="replace").strip().splitlines()[-5:]


# Sampling


@dataclass
class Snapshot:
    phase: str
    exposition: str
    scrape_seconds: float
    nvml: dict[str, Any]
    smi: dict[str, Any] | None
    proc: ProcSample | None
    processes: Mapping[str, GpuProcesses] = field(default_factory=dict)
    # nvidia-smi's compute apps, (bus id key, pid) -> MiB; None where not read.
    smi_apps: Mapping[tuple[str, int], float | None] | None = None
    nvitop_proc: ProcSample | None = None
    taken: float = 0.0  # time.monotonic() when the exporter was scraped


@dataclass
class Sampler:
    nvml: Any  # the harness's own NVML (nvml_session)
    port: int
    pid: int
    smi_path: str | None
    nvitop: neighbour.Neighbour | None = None
    support: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def take(self, phase: str) -> Snapshot:
        from benchmarks.real_gpu.independent import nvml_facts, nvml_processes

        taken = time.monotonic()
        start = time.perf_counter()
        status, body = get(f"http://127.0.0.1:{self.port}/metrics")
        elapsed = time.perf_counter() - start
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        nvml = nvml_facts(self.nvml, self.support)
        processes = nvml_processes(self.nvml)
        smi = self._smi()
        apps = self._smi_apps() if phase == "load" else None
        return Snapshot(
            phase,
            body,
            elapsed,
            nvml,
            smi,
            _proc(self.pid),
            processes,
            apps,
            self._nvitop_reading(),
            taken,
        )

    def _nvitop_reading(self) -> ProcSample | None:
        """Its reading, after a scrape like the one ours just served, so both do the same
        work for the harness."""
        if self.nvitop is None or not self.nvitop.running or self.nvitop.process is None:
            return None
        with contextlib.suppress(OSError):
            get(f"http://127.0.0.1:{self.nvitop.port}/metrics")
        return _proc(self.nvitop.process.pid)

    def _note_once(self, note: str) -> None:
        if note not in self.notes:
            self.notes.append(note)

    def _smi(self) -> dict[str, Any] | None:
        if self.smi_path is None:
            return None
        from benchmarks.real_gpu.smi_xml import SmiXmlError, smi_facts

        try:
            done = subprocess.run(
                [self.smi_path, "-q", "-x"], capture_output=True, text=True, timeout=60, check=True
            )
            return smi_facts(done.stdout)
        except (subprocess.SubprocessError, OSError, SmiXmlError) as exc:
            self._note_once(f"nvidia-smi -q -x failed: {type(exc).__name__}")
            return None

    def _smi_apps(self) -> dict[tuple[str, int], float | None] | None:
        if self.smi_path is None:
            return None
        try:
            done = subprocess.run(
                [self.smi_path, *accounting.SMI_QUERY],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            )
            return accounting.parse_compute_apps(done.stdout)
        except (subprocess.SubprocessError, OSError, ValueError) as exc:
            self._note_once(f"nvidia-smi --query-compute-apps failed: {type(exc).__name__}")
            return None

    def phase(self, name: str, seconds: float, every: float) -> list[Snapshot]:
        """Snapshots every `every` seconds for `seconds`, at least one. A snapshot slower than
        `every` (nvidia-smi on eight GPUs can be) delays the next instead of stretching the
        phase."""
        snapshots: list[Snapshot] = []
        end = time.monotonic() + seconds
        due = time.monotonic()
        while True:
            snapshots.append(self.take(name))
            due = max(due + every, time.monotonic())
            if due >= end:
                return snapshots
            time.sleep(due - time.monotonic())


def _proc(pid: int) -> ProcSample | None:
    try:
        return proc_sample(pid)
    except (OSError, ValueError, IndexError):
        return None  # it exited between two readings


def scrape_interval(phase_seconds: float) -> float:
    """Every 5 s on a run of minutes; often enough for five snapshots a phase on a short one."""
    return min(5.0, max(1.0, phase_seconds / 5))


def sweep_seconds(expositions: Sequence[str]) -> list[float]:
    values = []
    for text in expositions:
        for line in text.splitlines():
            if line.startswith(DURATION_FAMILY + " "):
                values.append(float(line.split()[1]))
    return values


def merge_checks(rounds: Sequence[Sequence[Any]]) -> list[Any]:
    """One row per (family, GPU) over all snapshots: the first failure if any failed (noting
    in how many), else the last snapshot's row."""
    grouped: dict[tuple[str, str], list[Any]] = {}
    for checks in rounds:
        for check in checks:
            grouped.setdefault((check.family, check.gpu), []).append(check)
    merged = []
    for rows in grouped.values():
        failed = [c for c in rows if c.ok is False]
        if failed:
            note = f"failed in {len(failed)} of {len(rows)} snapshots"
            first = failed[0]
            merged.append(replace(first, note=f"{first.note}; {note}" if first.note else note))
        else:
            merged.append(rows[-1])
    return merged


def side_by_side(
    snapshots: Sequence[Snapshot],
) -> tuple[ProcessUsage | None, ProcessUsage | None]:
    """(ours, nvitop-exporter's) usage. Where nvitop-exporter ran, both are taken over the
    snapshots that read both, so the two windows are one."""
    both = [s for s in snapshots if s.proc is not None and s.nvitop_proc is not None]
    if len(both) >= 2:
        return _usage(both, "proc"), _usage(both, "nvitop_proc")
    return _usage([s for s in snapshots if s.proc is not None], "proc"), None


def _usage(snapshots: Sequence[Snapshot], attribute: str) -> ProcessUsage | None:
    """Usage from the `attribute` reading of each snapshot, over the time from the first
    snapshot to the last."""
    readings = [getattr(s, attribute) for s in snapshots]
    if len(readings) < 2:
        return None
    return usage_between(readings, snapshots[-1].taken - snapshots[0].taken)


def process_checks(
    snapshots: Sequence[Snapshot], simulate: bool, generator: LoadGenerator
) -> tuple[list[accounting.ProcessCheck], str]:
    """(rows, note): the note says why there are no rows, or what to know about them."""
    if simulate:
        rounds = [accounting.check_simulated(_observation(s)) for s in snapshots]
        return accounting.merge(rounds), ""
    if generator.backend == "none" or generator.process is None:
        return [], f"no load ran ({generator.note})"
    loaded = [s for s in snapshots if s.phase == "load"]
    if not loaded:
        return [], "no snapshot was taken under load"
    pid, gpus = generator.process.pid, generator.gpus
    rounds = [accounting.check_load(_observation(s), pid, gpus) for s in loaded]
    note = "" if any(s.smi_apps is not None for s in loaded) else "nvidia-smi was not read"
    return accounting.merge(rounds), note


def _observation(snapshot: Snapshot) -> accounting.Observation:
    return accounting.Observation(snapshot.exposition, snapshot.processes, snapshot.smi_apps)


def _simulated_load() -> LoadGenerator:
    # A real GPU loaded under a simulated exporter would prove nothing.
    return LoadGenerator(None, "none", 0, "simulated node, whose own workloads run instead")


@dataclass
class Phases:
    snapshots: list[Snapshot]
    generator: LoadGenerator


def run_phases(sampler: Sampler, options: Options) -> Phases:
    """Idle, then load; the load generator imports its backend during the idle phase."""
    phase_seconds = options.minutes * 60 / 2
    every = scrape_interval(phase_seconds)
    prepared = None if options.simulate else prepare_load(phase_seconds + LOAD_MARGIN_S)
    generator = _simulated_load()
    try:
        idle = sampler.phase("idle", phase_seconds, every)
        if prepared is not None:
            generator = go(prepared)
        settle = min(15.0, phase_seconds / 5) if generator.running else 0.0
        time.sleep(settle)
        loaded = sampler.phase("load", phase_seconds - settle, every)
        if generator.process is not None and not generator.running:
            sampler.notes.append("the load generator exited before the phase ended")
        return Phases([*idle, *loaded], generator)
    finally:
        (prepared or generator).stop()


class RunFailed(Exception):
    """The run cannot go on; str() is printed with the exporter's last log lines (status 1)."""

    def __init__(self, message: str, log_path: Path) -> None:
        super().__init__(message)
        self.log_tail = _log_tail(log_path)


@dataclass
class Observed:
    """What the phases saw, and what the exporters' start-up said."""

    phases: Phases
    notes: list[str]
    support: dict[str, str]
    nvitop_note: str


def observe(nvml: Any, options: Options, scratch: Path) -> Observed:
    """Start our exporter and nvitop-exporter, run the phases, stop them."""
    smi_path = None if options.simulate else shutil.which("nvidia-smi")
    port = free_port()
    log_path = scratch / "exporter.log"
    with log_path.open("wb") as log:
        exporter = subprocess.Popen(
            exporter_argv(port, options.simulate), cwd=REPO, stdout=log, stderr=log
        )
    nvitop_log = scratch / "nvitop-exporter.log"
    nvitop = neighbour.start(free_port(), options.simulate, REPO, nvitop_log)
    try:
        try:
            wait_ready(exporter, port, READY_TIMEOUT_S)
        except RuntimeError as exc:
            raise RunFailed(str(exc), log_path) from None
        neighbour.wait_ready(nvitop, get, nvitop_log)
        sampler = Sampler(nvml, port, exporter.pid, smi_path, nvitop)
        if not wait_for_family(port, accounting.MEMORY_FAMILY, PROCESS_ROWS_TIMEOUT_S):
            sampler.notes.append(
                f"the exporter showed no {accounting.MEMORY_FAMILY} within "
                f"{PROCESS_ROWS_TIMEOUT_S:g} s of starting"
            )
        try:
            phases = run_phases(sampler, options)
        except (OSError, RuntimeError) as exc:
            raise RunFailed(f"scraping the exporter failed: {exc}", log_path) from None
    finally:
        stop(exporter)
        nvitop.stop()
    return Observed(phases, sampler.notes, sampler.support, nvitop.note)


def _support_seen(support: dict[str, str], timings: Sequence[CallTiming]) -> dict[str, str]:
    """Each function's outcome in the fact reads and the timings: "ok" once it answered."""
    seen = dict(support)
    for timing in timings:
        if timing.error is None:
            seen[timing.function] = "ok"
        else:
            seen.setdefault(timing.function, timing.error)
    return seen


def run(options: Options) -> int:
    began = time.monotonic()
    source = "simulated" if options.simulate else "real"
    with nvml_session(options.simulate) as nvml, tempfile.TemporaryDirectory() as scratch:
        observed = observe(nvml, options, Path(scratch))
        # Timed with the exporters stopped, so no other caller shares the driver.
        timings = time_nvml_calls(nvml, options.repeats)
        fields = time_fields(nvml, options.repeats)
        record = device_record(nvml, source, _support_seen(observed.support, timings))
        gpus = nvml.nvmlDeviceGetCount()

    report = build_report(options, record, gpus, observed)
    report.timings = timings
    report.fields = fields
    report.sweep_estimate_us = sweep_estimate(timings)
    report.run_seconds = time.monotonic() - began
    costs = cost_yaml(
        cost_table(record, timings, fields), cost_header(source, record["captured"], PROG)
    )
    header = record_header(source, record["captured"])
    written = write_outputs(options.out, report, record, header, costs)
    failed = len(failures(report))
    print(
        f"{PROG}: wrote {written.report}, {written.record} and {written.costs}; "
        f"{failed} failed check(s), {report.run_seconds:.0f} s"
    )
    if options.simulate:
        return 0  # the two simulators drift apart: only the pipeline is judged
    return 1 if failed else 0


def build_report(
    options: Options, record: dict[str, Any], gpus: int, observed: Observed
) -> RunReport:
    from benchmarks.real_gpu.compare import compare

    snapshots, generator = observed.phases.snapshots, observed.phases.generator
    notes = observed.notes
    checks: dict[str, Sequence[Any]] = {}
    checks["pynvml"] = merge_checks([compare(s.exposition, s.nvml, "pynvml") for s in snapshots])
    with_smi = [s for s in snapshots if s.smi is not None]
    if with_smi:
        rounds = [compare(s.exposition, s.smi or {}, "nvidia-smi") for s in with_smi]
        checks["nvidia-smi"] = merge_checks(rounds)
    elif not options.simulate:
        notes.append("nvidia-smi not found: no XML comparison")
    idle: list[Scrape] = [board_values(s.exposition) for s in snapshots if s.phase == "idle"]
    loaded: list[Scrape] = [board_values(s.exposition) for s in snapshots if s.phase == "load"]
    errors = ErrorGrowth(
        nvml_errors(snapshots[0].exposition), nvml_errors(snapshots[-1].exposition)
    )
    processes, processes_note = process_checks(snapshots, options.simulate, generator)
    ours, theirs = side_by_side(snapshots)
    return RunReport(
        model_name=record["model_name"] or "unknown GPU",
        simulate=options.simulate,
        minutes=options.minutes,
        driver_version=record["driver_version"],
        gpus=gpus,
        load_description=describe(generator),
        checks=checks,
        responses=load_response(idle, loaded, load_ran=generator.backend != "none"),
        unsupported=unsupported_handling(
            record["nvml_support"], exported_families(snapshots[-1].exposition), errors
        ),
        processes=processes,
        processes_note=processes_note,
        sweep_seconds=sweep_seconds([s.exposition for s in snapshots]),
        scrape_seconds=[s.scrape_seconds for s in snapshots],
        usage=ours,
        nvitop=theirs,
        nvitop_note=observed.nvitop_note,
        notes=notes,
    )


def record_header(source: str, captured: str) -> str:
    if source == "real":
        return (
            f"Device record captured on a real GPU by `{PROG}` on {captured}.\n"
            "Schema: benchmarks/real_gpu/report.py, RECORD_KEYS."
        )
    return (
        f"Device record of a SIMULATED GPU, written by `{PROG} --simulate` on {captured}.\n"
        "It checks the harness's pipeline only; do not commit it as a model's record."
    )


def main(argv: Sequence[str] | None = None) -> int:
    try:
        options = parse_args(sys.argv[1:] if argv is None else argv)
        return run(options)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except RunFailed as exc:
        print(f"{PROG}: {exc}", *exc.log_tail, sep="\n", file=sys.stderr)
        return 1

"""What /readyz answers, and the log line that says why while the answer is no (docs/health.md).

Ready means the pod does the job it is on the node for: the latest sweep found NVML answering
(`kube_gpu_exporter_nvml_up 1`) and, with --kubernetes, the API has answered this node's pod LIST
at least once. A DaemonSet's readiness gates its rolling updates, so a node whose driver is
missing, or a release that cannot reach NVML anywhere, shows as unavailable and stops a rollout;
liveness (/healthz) stays out of it, since a restart cannot install a driver.

The Kubernetes condition latches: once the first LIST proved the address, credentials and RBAC, a
later API outage (a control-plane upgrade) leaves readiness alone. It hits every node at once,
restarting or un-readying nothing fixes it, and the GPU metrics go on meanwhile. NVML does not
latch: it is this node's own state, and a driver that goes away is worth showing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from kube_gpu_exporter.exporter.snapshot import NodeSnapshot

log = logging.getLogger(__name__)

Problem = Callable[[], str | None]
NO_SWEEP_YET = "no NVML sweep has finished yet"
NO_GPUS = "NVML answers but lists no GPU (--health.require-gpus)"


def node_readiness(
    latest: Callable[[], NodeSnapshot | None],
    nvml_problem: Problem | None = None,
    kubernetes_problem: Problem | None = None,
    require_gpus: bool = False,
) -> Problem:
    """Why the node is not ready, or None; every reason, "; "-joined, so that fixing one does not
    reveal the next. `latest` is the newest published snapshot, which decides about NVML;
    `nvml_problem` (the poller's) only explains a snapshot with NVML down."""

    def problem() -> str | None:
        reasons = []
        snapshot = latest()
        if snapshot is None:
            reasons.append(NO_SWEEP_YET)
        elif not snapshot.nvml_up:
            why = nvml_problem() if nvml_problem else None
            # None: NVML answered a sweep newer than the published one; the next publish says so.
            reasons.append(f"NVML does not answer (nvml_up 0): {why or 'see the log'}")
        elif require_gpus and not snapshot.gpus:
            # dcgm-exporter's --health-require-gpus: a GPU node whose GPUs NVML does not list.
            reasons.append(NO_GPUS)
        if kubernetes_problem is not None and (why := kubernetes_problem()) is not None:
            reasons.append(why)
        return "; ".join(reasons) or None

    return problem


def first_sync(synced: Callable[[], bool], why_not: Problem) -> Problem:
    """A problem that holds until `synced()` is first seen true, then never again: `why_not`
    says what stands in the way until then."""
    seen = False

    def problem() -> str | None:
        nonlocal seen
        seen = seen or synced()
        return None if seen else why_not()

    return problem


class ReadinessLog:
    """Logs why the exporter is not ready: when the reason changes (so no reason holds a counter
    that ticks) and once every `repeat_seconds` while it holds, and once when it turns ready
    after that. Nothing within `grace_seconds` of the start: the first sweep and the first LIST
    take a moment on any node."""

    def __init__(
        self,
        problem: Problem,
        *,
        repeat_seconds: float = 60.0,
        grace_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._problem = problem
        self._repeat = repeat_seconds
        self._clock = clock
        self._started = clock()
        self._grace_until = self._started + grace_seconds
        # The reason last logged and when; None while ready or nothing logged yet.
        self._logged: str | None = None
        self._logged_at = 0.0
        # When the current stretch of not being ready began.
        self._since = self._started
        self._ready = False

    @property
    def ready(self) -> bool:
        """Whether the last look found the exporter ready."""
        return self._ready

    def step(self) -> None:
        self.observe(self._problem())

    def observe(self, why: str | None) -> None:
        """What a look at readiness found just now (a probe's answer, or the log's own look)."""
        now = self._clock()
        self._ready = why is None
        if why is None:
            if self._logged is not None:
                log.info("ready after %.0fs (was: %s)", now - self._since, self._logged)
            self._logged = None
            self._since = now
            return
        if now < self._grace_until:
            return
        if why != self._logged or now - self._logged_at >= self._repeat:
            log.warning(
                "not ready for %.0fs: %s (said again every %.0fs until ready)",
                now - self._since,
                why,
                self._repeat,
            )
            self._logged, self._logged_at = why, now

    def context(self, check_seconds: float = 5.0, ready_check_seconds: float = 30.0):
        """An aiohttp cleanup context that looks at readiness every `check_seconds` while the
        exporter is not ready, and every `ready_check_seconds` once it is. Each wake-up of an
        idle process costs CPU (on a small VM, some 150-300 µs of it, the scheduler's and the
        interpreter's): looking every 5 s once ready cost the event loop's thread about 0.2 of
        its 0.5 CPU-s/h at the default poll (docs/performance.md). Once ready, the kubelet's
        readiness probes (every 10 s by default) are the looks that matter, and each is
        observed (Handlers.readyz): the first probe that fails is logged as it answers, and
        without probes a change is logged within `ready_check_seconds`."""

        async def run(_app: web.Application) -> AsyncIterator[None]:
            async def loop() -> None:
                failed = False
                while True:
                    await asyncio.sleep(ready_check_seconds if self.ready else check_seconds)
                    try:
                        self.step()
                    except Exception:  # a broken check must end neither the log nor the server
                        if not failed:
                            log.exception("readiness check failed")
                        failed = True

            task = asyncio.create_task(loop())
            try:
                yield
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

        return run

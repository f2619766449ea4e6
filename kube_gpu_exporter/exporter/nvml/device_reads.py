"""Who runs a sweep's per-GPU reads: daemon worker threads, taking the GPUs in turn.

A thread per GPU costs, every sweep, a wake-up per GPU and a GIL hand-off at nearly every NVML
call: ctypes releases the GIL for the call and another reader takes it. On the simulated 8-GPU
node, with each answer behind a call that releases the GIL as a driver call does, that was a
tenth to a quarter more CPU per sweep (the longer the calls, the more) and twice the context
switches of reading the GPUs one after another. So one worker reads them in turn, and the
others stand by: when no read starts for `stall_seconds`, the current one is taken to be stuck
in the driver, and every GPU not started yet gets a worker of its own. A hung GPU thus delays
the others by at most two stall windows. A GPU still not started at the deadline is cancelled,
so it is read again next sweep instead of waiting behind the stuck call.

Workers are daemon threads: a call hung inside the driver must never keep the process from
exiting on SIGTERM.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class DaemonWorkers:
    """A minimal executor whose threads never block interpreter exit."""

    def __init__(self, size: int, name: str) -> None:
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue()
        )
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self._queue.put((future, fn))
        return future

    def shutdown(self) -> None:
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        while (item := self._queue.get()) is not None:
            future, fn = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)


class TurnTakingReads:
    """Reads devices one after another on one worker, spreading out when a read stalls."""

    def __init__(self, workers: DaemonWorkers, stall_seconds: float) -> None:
        self._workers = workers
        self._stall_seconds = stall_seconds

    def run(
        self, indexes: Sequence[int], read: Callable[[int], T], deadline: float
    ) -> dict[int, Future[T]]:
        """Read every index with `read` and return their futures once all are done or at
        `deadline` (time.monotonic()); the ones not started by then come back cancelled."""
        round_: _Round[T] = _Round(indexes, read)
        if not indexes:
            return round_.futures
        self._workers.submit(round_.take_turns)
        started = -1
        while not round_.finished.wait(min(self._stall_seconds, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                round_.close()
                break
            waiting = round_.waiting
            if waiting and round_.started == started:
                for _ in range(waiting):  # the reader is stuck: each GPU left gets a worker
                    self._workers.submit(round_.take_turns)
            started = round_.started
        return round_.futures


class _Round(Generic[T]):
    """One sweep's reads: which have started, which are done, and a signal when all are."""

    def __init__(self, indexes: Sequence[int], read: Callable[[int], T]) -> None:
        self.futures: dict[int, Future[T]] = {index: Future() for index in indexes}
        self._order = tuple(indexes)
        self._read = read
        self._lock = threading.Lock()
        self.started = 0
        self._done = 0
        self._closed = False
        self.finished = threading.Event()

    @property
    def waiting(self) -> int:
        return 0 if self._closed else len(self._order) - self.started

    def take_turns(self) -> None:
        while (index := self._next()) is not None:
            future = self.futures[index]
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(self._read(index))
                except BaseException as exc:
                    future.set_exception(exc)
            with self._lock:
                self._done += 1
                if self._done == len(self._order):
                    self.finished.set()

    def close(self) -> None:
        """The deadline passed: nobody starts another read of this round."""
        with self._lock:
            self._closed = True
            for index in self._order[self.started :]:
                self.futures[index].cancel()

    def _next(self) -> int | None:
        with self._lock:
            if self._closed or self.started == len(self._order):
                return None
            self.started += 1
            return self._order[self.started - 1]

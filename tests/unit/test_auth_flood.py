"""A flood of wrong passwords, over real HTTP on loopback from several source addresses (Linux
routes all of 127.0.0.0/8 to lo), must not starve the first check of a correct password: the
state after every restart, when no success is cached yet."""

from __future__ import annotations

import asyncio
import base64
import collections
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import bcrypt
import pytest
from aiohttp import web

from kube_gpu_exporter.exporter.webconfig.basic_auth import BasicAuth, client_key
from tests.support.exporter_process import free_port

PASSWORD = b"correct horse"
HASH = bcrypt.hashpw(PASSWORD, bcrypt.gensalt(4))
PROMETHEUS = "127.0.0.1"
ATTACKER = "127.0.0.2"


class Progress:
    """What a test waits for (requests reaching basic auth, checks getting a thread, answers)
    says when it may have changed, from any thread; `until` looks again only then."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()

    def note(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._changed.set)

    async def until(self, what: str, condition: Callable[[], bool], timeout: float = 10.0) -> None:
        try:
            async with asyncio.timeout(timeout):
                while True:
                    # Cleared before the look, on the loop's thread: a change after it sets it.
                    self._changed.clear()
                    if condition():
                        return
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not reached within {timeout}s: {what}") from None

    def watch(self, tasks: list[asyncio.Task]) -> list[asyncio.Task]:
        for task in tasks:
            task.add_done_callback(self.note)
        return tasks


class Gate:
    """A bcrypt stand-in that records the order checks get a thread in, and holds every check
    while closed, so a queue builds up behind the running ones deterministically."""

    def __init__(self, progress: Progress) -> None:
        self.open = threading.Event()
        self.open.set()
        self.order: list[bytes] = []
        self._progress = progress

    def checkpw(self, password: bytes, hashed: bytes) -> bool:
        self.order.append(password)
        self._progress.note()
        if not self.open.wait(10):
            raise TimeoutError("the test never opened the gate")
        return bcrypt.checkpw(password, hashed)


class Served:
    def __init__(self, port: int) -> None:
        self.port = port
        self.arrived = 0  # requests that reached basic auth

    async def get(self, password: bytes, source: str) -> tuple[int, str]:
        """Status line and headers of GET /metrics with `password`, sent from `source`."""
        token = base64.b64encode(b"prometheus:" + password).decode()
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", self.port, local_addr=(source, 0)
        )
        try:
            writer.write(
                f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n"
                "Connection: close\r\n\r\n".encode()
            )
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            return int(head.split()[1]), head
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[BasicAuth, Progress], Awaitable[Served]]]:
    runners: list[web.AppRunner] = []

    async def start(auth: BasicAuth, progress: Progress) -> Served:
        served = Served(free_port())

        @web.middleware
        async def count(request: web.Request, handler):
            served.arrived += 1
            progress.note()
            return await handler(request)

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(text="DCGM_FI_DEV_GPU_TEMP 40\n")

        app = web.Application(middlewares=[count, auth.middleware])
        app.router.add_get("/metrics", metrics)

        async def close(_app: web.Application) -> None:
            auth.close()

        app.on_cleanup.append(close)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.1", served.port).start()
        return served

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_a_flood_from_elsewhere_does_not_delay_a_correct_first_check(serve, tmp_path):
    progress = Progress()
    gate = Gate(progress)
    auth = BasicAuth({"prometheus": HASH}, checkpw=gate.checkpw)
    served = await serve(auth, progress)
    # The attacker has been at it for a while: its earlier guesses failed.
    for guess in range(5):
        assert (await served.get(b"warm-up %d" % guess, ATTACKER))[0] == 401
    gate.order.clear()
    gate.open.clear()
    flood = [asyncio.create_task(served.get(b"guess %d" % i, ATTACKER)) for i in range(100)]
    await progress.until("100 flood requests at basic auth", lambda: served.arrived == 105)
    await progress.until("both bcrypt threads busy", lambda: len(gate.order) == 2)
    right = asyncio.create_task(served.get(PASSWORD, PROMETHEUS))
    await progress.until("the correct password at basic auth", lambda: served.arrived == 106)
    gate.open.set()
    assert (await right)[0] == 200
    # Checked as soon as one of the two running checks ended, before any queued guess. Before,
    # it waited for all 98 queued ones: 14 s at bcrypt cost 10 with 450 of them.
    assert gate.order.index(PASSWORD) == 2, gate.order[:5]
    answers = await asyncio.gather(*flood)
    statuses = collections.Counter(status for status, _ in answers)
    # Two running and 30 waiting: the rest were refused at once, without bcrypt.
    assert statuses == {401: 32, 429: 68}
    refused = next(head for status, head in answers if status == 429)
    assert "Retry-After: 1" in refused
    assert auth.bcrypt_checks == 5 + 32 + 1


async def test_a_full_queue_makes_room_for_an_address_without_failures(serve):
    progress = Progress()
    gate = Gate(progress)
    auth = BasicAuth({"prometheus": HASH}, per_client=4, max_waiting=4, checkpw=gate.checkpw)
    served = await serve(auth, progress)
    others = ("127.0.0.2", "127.0.0.3")
    for source in others:
        assert (await served.get(b"warm-up", source))[0] == 401
    gate.order.clear()
    gate.open.clear()
    first = [asyncio.create_task(served.get(b"a %d" % i, others[0])) for i in range(4)]
    await progress.until("first address queued", lambda: served.arrived == 6)
    second = progress.watch(
        [asyncio.create_task(served.get(b"b %d" % i, others[1])) for i in range(4)]
    )
    # Two of the second address's requests fill the queue; its other two find it full and, with
    # no fewer failures than any waiter, are refused.
    await progress.until("queue full", lambda: sum(task.done() for task in second) == 2)
    right = asyncio.create_task(served.get(PASSWORD, PROMETHEUS))
    # No room, but every waiter's address has failed: the newest of them makes way.
    await progress.until("a waiter displaced", lambda: sum(task.done() for task in second) == 3)
    gate.open.set()
    assert (await right)[0] == 200
    assert gate.order.index(PASSWORD) == 2, gate.order
    assert [status for status, _ in await asyncio.gather(*first)] == [401] * 4
    statuses = collections.Counter(status for status, _ in await asyncio.gather(*second))
    assert statuses == {401: 1, 429: 3}


def test_an_ipv6_client_is_accounted_by_its_slash_64():
    assert (
        client_key("2001:db8:1:2::1") == client_key("2001:db8:1:2:ffff::7") == "2001:db8:1:2::/64"
    )
    assert client_key("2001:db8:1:3::1") != client_key("2001:db8:1:2::1")
    assert client_key("::ffff:10.0.0.1") == client_key("10.0.0.1") == "10.0.0.1"
    assert client_key(None) == ""


async def test_bcrypt_never_blocks_the_event_loop():
    """Every bcrypt check runs while the event loop goes on: before it hashes, each check asks
    the loop for an answer and waits for it, which only a loop that the check does not block can
    give. A condition, not a time: the version in test_web_config.py measured the loop's lag
    against a limit and failed with four test workers on two cores."""
    loop = asyncio.get_running_loop()
    answered: list[bool] = []

    def checkpw(password: bytes, hashed: bytes) -> bool:
        turned = threading.Event()
        loop.call_soon_threadsafe(turned.set)
        # Run on the loop's own thread, this could never be answered: the loop would be in here.
        # The timeout only ends that failure; a free loop answers at its next turn.
        answered.append(turned.wait(10))
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth({"prometheus": HASH}, checkpw=checkpw)
    try:
        results = await asyncio.gather(
            *(auth.verify("prometheus", f"wrong {i}") for i in range(4)),
            auth.verify("prometheus", PASSWORD.decode()),
        )
    finally:
        auth.close()
    assert results == [False] * 4 + [True]
    assert answered == [True] * 5 and auth.bcrypt_checks == 5

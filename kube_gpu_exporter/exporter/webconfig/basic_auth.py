"""HTTP basic auth against bcrypt hashes, as an aiohttp middleware.

bcrypt is slow on purpose (about 70 ms at cost 10), so checks run on a small thread pool, never
on the event loop, and at most `max_concurrent` at a time (a slot is held until its check really
ends, even if the client hung up, so hanging up cannot let more work in). A successful check is
remembered by a SHA-256 digest of user and password (never the password), so a Prometheus
scraping every 15 s pays bcrypt once. An unknown user costs the same bcrypt check as a known one,
against the costliest configured hash, and the user name is compared in constant time, so timing
tells nothing about who exists.

A flood of wrong passwords must not starve the first check of a correct one, which after every
restart is not cached yet. So checks that must wait are not served first come, first served:

- one client address (an IPv6 /64 counts as one) may have at most `per_client` checks waiting
  or running; more get 429 at once, without bcrypt;
- waiting checks are served fewest failures first: an address whose passwords have failed goes
  behind every address that has not (ties in arrival order), so a flood from elsewhere delays a
  legitimate first check by at most the checks already running;
- at most `max_waiting` checks wait in all; when full, a newcomer from an address with fewer
  failures displaces the worst-placed waiter (which gets 429), and otherwise gets 429 itself.

The user name plays no part in the order: precedence for existing users would tell a flooding
client which names exist.

The users are those of the last good web config (live_users.py): a user removed or a password
changed by a reload is refused from the next request on, remembered successes included, and a
check still running at the reload counts only if its user and hash are still there. Without any
user, every request is let through, as exporter-toolkit does.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import heapq
import hmac
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor

import bcrypt
from aiohttp import web

from kube_gpu_exporter.exporter.client_address import client_key
from kube_gpu_exporter.exporter.webconfig.live_users import LiveUsers

REALM = "kube-gpu-exporter"
# bcrypt only reads 72 bytes; longer passwords are refused rather than silently truncated.
MAX_PASSWORD_BYTES = 72
# Past this, an address's failures all rank the same; it only has to sort behind clean ones.
MAX_SCORE = 1_000

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class TooManyChecks(Exception):
    """This client address has its share of password checks waiting, or the queue is full."""


def parse_authorization(header: str) -> tuple[str, str] | None:
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic" or not token:
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


class BasicAuth:
    def __init__(
        self,
        users: Mapping[str, bytes] | LiveUsers,
        *,
        max_concurrent: int = 2,
        per_client: int = 32,
        max_waiting: int = 64,
        cache_size: int = 256,
        clients_remembered: int = 4096,
        checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw,
    ) -> None:
        # Read again whenever the web config is re-read; none means no authentication.
        self._live = users if isinstance(users, LiveUsers) else LiveUsers(users)
        self._generation = -1
        self._users: list[tuple[bytes, bytes]] = []
        self._dummy = b""
        self._checkpw = checkpw
        self._pool = ThreadPoolExecutor(max_concurrent, thread_name_prefix="bcrypt")
        self._max_concurrent = max_concurrent
        self._per_client = per_client
        self._max_waiting = max_waiting
        self._running = 0
        # (failures of the client when it arrived, arrival number, woken when a slot is its own)
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()
        self._pending: dict[str, int] = {}
        # Failed checks per client address since its last success, least recently failed first;
        # bounded, and forgetting an address only moves it forward, never blocks it.
        self._failures: OrderedDict[str, int] = OrderedDict()
        self._clients_remembered = clients_remembered
        # Digest of user and password -> (user, the hash they matched), so that a password
        # changed or a user removed by a reload is dropped from it.
        self._verified: OrderedDict[bytes, tuple[bytes, bytes]] = OrderedDict()
        self._cache_size = cache_size
        self.bcrypt_checks = 0
        self.refused = 0
        self._follow()

    @property
    def enabled(self) -> bool:
        """Whether any user is configured now; without one every request is let through, as
        exporter-toolkit does for a web config without basic_auth_users."""
        self._follow()
        return bool(self._users)

    def _follow(self) -> None:
        """Take up the users as the last good web config has them, once per change."""
        if self._live.generation == self._generation:
            return
        self._generation = self._live.generation
        users = self._live.users
        self._users = [(name.encode(), hashed) for name, hashed in users.items()]
        # What an unknown user's password is checked against: a real hash, the slowest one, so no
        # user answers more slowly than a name that does not exist ("$2b$12$..." -> cost 12).
        self._dummy = max((hashed for _, hashed in self._users), key=lambda h: h[4:6], default=b"")
        for digest, (user, hashed) in list(self._verified.items()):
            if users.get(user.decode()) != hashed:
                del self._verified[digest]

    def _lookup(self, user: bytes) -> bytes | None:
        # Every name is compared, each in constant time, whatever matches.
        found = None
        for name, hashed in self._users:
            if hmac.compare_digest(name, user):
                found = hashed
        return found

    async def verify(self, user: str, password: str, client: str = "") -> bool:
        """Whether `user` and `password` match; raises TooManyChecks instead of queueing more
        checks for `client` (a key from client_key) than its share."""
        self._follow()
        if not self._users:
            return False
        user_bytes, secret = user.encode(), password.encode()
        digest = hashlib.sha256(user_bytes + b"\0" + secret).digest()
        if digest in self._verified:
            self._verified.move_to_end(digest)
            return True
        stored = self._lookup(user_bytes)
        # An unknown user still pays one real bcrypt check.
        against = stored if stored is not None else self._dummy
        if self._pending.get(client, 0) >= self._per_client:
            self.refused += 1
            raise TooManyChecks
        self._pending[client] = self._pending.get(client, 0) + 1
        try:
            await self._take_slot(client)
        except BaseException:
            self._forget(client)
            raise
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._pool, self._checkpw, secret[:MAX_PASSWORD_BYTES], against
            )
        except BaseException:
            self._give_back_slot()
            self._forget(client)
            raise
        self.bcrypt_checks += 1
        long_enough = len(secret) <= MAX_PASSWORD_BYTES and stored is not None

        def finished(done: asyncio.Future[bool] | Future[bool]) -> None:
            # Here, not after the await below: a client that hangs up mid-check still holds its
            # slot until the thread is done, and its failure still counts against its address.
            self._give_back_slot()
            self._forget(client)
            if done.cancelled() or done.exception() is not None:
                return
            self._record(client, bool(done.result()) and long_enough)

        future.add_done_callback(finished)
        matches = await asyncio.shield(future)
        # The users may have been re-read while bcrypt ran: a password changed or a user removed
        # meanwhile no longer lets this request in.
        self._follow()
        ok = matches and long_enough and self._lookup(user_bytes) == against
        if ok:
            self._verified[digest] = (user_bytes, against)
            if len(self._verified) > self._cache_size:
                self._verified.popitem(last=False)
        return ok

    async def _take_slot(self, client: str) -> None:
        if self._running < self._max_concurrent and not self._live_waiters():
            self._running += 1
            return
        entry = (min(self._failures.get(client, 0), MAX_SCORE), next(self._arrivals))
        if self._live_waiters() >= self._max_waiting:
            worst = max(self._waiting)
            if worst[:2] <= entry:
                self.refused += 1
                raise TooManyChecks
            self._waiting.remove(worst)
            heapq.heapify(self._waiting)
            self.refused += 1
            worst[2].set_exception(TooManyChecks())
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (*entry, woken))
        try:
            await woken
        except asyncio.CancelledError:
            if woken.done() and not woken.cancelled() and woken.exception() is None:
                # The slot was handed over just as this request was cancelled: pass it on.
                self._give_back_slot()
            raise

    def _live_waiters(self) -> int:
        if any(woken.done() for _, _, woken in self._waiting):
            self._waiting = [entry for entry in self._waiting if not entry[2].done()]
            heapq.heapify(self._waiting)
        return len(self._waiting)

    def _give_back_slot(self) -> None:
        self._running -= 1
        while self._waiting and self._running < self._max_concurrent:
            _, _, woken = heapq.heappop(self._waiting)
            if not woken.done():
                self._running += 1
                woken.set_result(None)

    def _forget(self, client: str) -> None:
        left = self._pending[client] - 1
        if left:
            self._pending[client] = left
        else:
            del self._pending[client]

    def _record(self, client: str, ok: bool) -> None:
        if ok:
            self._failures.pop(client, None)
            return
        self._failures[client] = self._failures.get(client, 0) + 1
        self._failures.move_to_end(client)
        if len(self._failures) > self._clients_remembered:
            self._failures.popitem(last=False)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if not self.enabled:
            return await handler(request)
        credentials = parse_authorization(request.headers.get("Authorization", ""))
        try:
            ok = credentials is not None and await self.verify(
                *credentials, client=client_key(request.remote)
            )
        except TooManyChecks:
            raise web.HTTPTooManyRequests(
                text="429 Too Many Requests: too many password checks from this address at "
                "once; retry in a second\n",
                headers={"Retry-After": "1"},
            ) from None
        if not ok:
            raise web.HTTPUnauthorized(
                text="401 Unauthorized\n",
                headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
            )
        return await handler(request)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

"""HTTP basic auth against bcrypt hashes, as an aiohttp middleware.

bcrypt is slow on purpose (about 70 ms at cost 10), so checks run on a small thread pool, never
on the event loop, and at most `max_concurrent` at a time: a flood of wrong passwords queues
instead of starving scrapes or piling up threads (a slot is held until its check really ends,
even if the client hung up). A successful check is remembered by a SHA-256
digest of user and password (never the password), so a Prometheus scraping every 15 s pays
bcrypt once. An unknown user costs the same bcrypt check as a known one, against the costliest
configured hash, and the user name is compared in constant time, so timing tells nothing about
who exists.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import bcrypt
from aiohttp import web

REALM = "kube-gpu-exporter"
# bcrypt only reads 72 bytes; longer passwords are refused rather than silently truncated.
MAX_PASSWORD_BYTES = 72

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
        users: Mapping[str, bytes],
        *,
        max_concurrent: int = 2,
        cache_size: int = 256,
        checkpw: Callable[[bytes, bytes], bool] = bcrypt.checkpw,
    ) -> None:
        if not users:
            raise ValueError("BasicAuth needs at least one user")
        self._users = [(name.encode(), hashed) for name, hashed in users.items()]
        # What an unknown user's password is checked against: a real hash, the slowest one, so no
        # user answers more slowly than a name that does not exist ("$2b$12$..." -> cost 12).
        self._dummy = max(self._users, key=lambda entry: entry[1][4:6])[1]
        self._checkpw = checkpw
        self._pool = ThreadPoolExecutor(max_concurrent, thread_name_prefix="bcrypt")
        self._slots = asyncio.Semaphore(max_concurrent)
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._cache_size = cache_size
        self.bcrypt_checks = 0

    def _lookup(self, user: bytes) -> bytes | None:
        # Every name is compared, each in constant time, whatever matches.
        found = None
        for name, hashed in self._users:
            if hmac.compare_digest(name, user):
                found = hashed
        return found

    async def verify(self, user: str, password: str) -> bool:
        user_bytes, secret = user.encode(), password.encode()
        digest = hashlib.sha256(user_bytes + b"\0" + secret).digest()
        if digest in self._verified:
            self._verified.move_to_end(digest)
            return True
        stored = self._lookup(user_bytes)
        # An unknown user still pays one real bcrypt check.
        against = stored if stored is not None else self._dummy
        await self._slots.acquire()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._pool, self._checkpw, secret[:MAX_PASSWORD_BYTES], against
            )
        except BaseException:
            self._slots.release()
            raise
        self.bcrypt_checks += 1
        # The slot frees when the thread is done, not when this request is: a client that hangs
        # up mid-check must not let more work into the pool's queue.
        future.add_done_callback(lambda _: self._slots.release())
        matches = await asyncio.shield(future)
        ok = matches and stored is not None and len(secret) <= MAX_PASSWORD_BYTES
        if ok:
            self._verified[digest] = None
            if len(self._verified) > self._cache_size:
                self._verified.popitem(last=False)
        return ok

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        credentials = parse_authorization(request.headers.get("Authorization", ""))
        if credentials is None or not await self.verify(*credentials):
            raise web.HTTPUnauthorized(
                text="401 Unauthorized\n",
                headers={"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'},
            )
        return await handler(request)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

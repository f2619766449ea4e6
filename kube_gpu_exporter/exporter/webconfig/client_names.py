"""`client_allowed_sans`: beyond a certificate signed by the client CA, only listed names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def allowed_sans_middleware(allowed: tuple[str, ...]) -> Callable:
    """Refuse a verified client certificate whose DNS, IP or URI SANs are not listed."""
    wanted = set(allowed)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        cert = transport.get_extra_info("peercert") if transport else None
        names = {value for _kind, value in (cert or {}).get("subjectAltName", ())}
        if not names & wanted:
            raise web.HTTPForbidden(text="403 Forbidden: client certificate name not allowed\n")
        return await handler(request)

    return check

"""The address a client is accounted under, wherever the exporter limits what one client may
hold: connections (connection_guard.py) and password checks (webconfig/basic_auth.py)."""

from __future__ import annotations

import ipaddress


def client_key(remote: str | None) -> str:
    """`remote` (an address as the socket gives it), with an IPv6 address reduced to its /64:
    an IPv6 client can pick any of the 2^64 addresses of its /64, so the /64 is one client. An
    IPv4-mapped IPv6 address is the IPv4 client it maps, as a dual-stack listener sees IPv4."""
    if not remote:
        return ""
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return remote
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)

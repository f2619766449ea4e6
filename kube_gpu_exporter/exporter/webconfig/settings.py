"""What a --web.config.file says, once read and checked (parse.py reads it, tls.py turns its TLS
part into a context)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from pathlib import Path

from kube_gpu_exporter.exporter.webconfig.live_users import LiveUsers


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    client_auth_type: str = "NoClientCert"
    client_ca_file: Path | None = None
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str | None = None


@dataclass(frozen=True, slots=True)
class WebSecurity:
    source: Path
    tls: TlsSettings | None
    ssl_context: ssl.SSLContext | None
    # user -> bcrypt hash
    basic_auth_users: dict[str, bytes]
    headers: tuple[tuple[str, str], ...] = ()
    # Keys accepted but ignored, one sentence each, for the caller to log.
    warnings: tuple[str, ...] = ()
    # The users a server started with this config checks passwords against now: the reloader
    # replaces them when the file is re-read. State, not what the file says, so not compared.
    live_users: LiveUsers = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "live_users", LiveUsers(self.basic_auth_users))

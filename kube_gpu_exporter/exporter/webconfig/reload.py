"""Certificate rotation: new TLS connections get the certificate, key and client CA that the web
config's files hold now, without a restart, as exporter-toolkit does for cert-manager users.

The server keeps the one SSLContext it started with; its SNI callback, which OpenSSL runs on every
ClientHello (with or without a server name), moves each new connection onto the context built
from the newest good files. At most once per CHECK_INTERVAL_SECONDS, and at once on SIGHUP
(`reload`), the web config file and the files it names are stat()ed; a changed inode, size or
time means the whole web config is read again and checked as at startup. Kubernetes' symlink
swap of a mounted Secret changes the inode, so it is seen. A file that does not load keeps the
last good certificate serving and is logged once, until the files change again.

The certificate, key and client CA apply to new connections, and basic_auth_users to the next
request, as in exporter-toolkit: a removed user or a changed password is refused at once, and the
passwords remembered as checked are forgotten for them (live_users.py). OpenSSL fixes the
client-auth mode and TLS versions of a connection when it is created, and the extra headers are
set up with the HTTP app: a change to any of those is logged once as needing a restart, and the
rest of the file applies meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted_path
from kube_gpu_exporter.exporter.webconfig.parse import PEM, load_web_config
from kube_gpu_exporter.exporter.webconfig.settings import WebSecurity

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0

# What stat() says about one file; any difference means it may hold something new.
Signature = tuple[tuple[str, tuple[int, ...] | str], ...]


def _files(security: WebSecurity) -> tuple[Path, ...]:
    tls = security.tls
    named = (tls.cert_file, tls.key_file, tls.client_ca_file) if tls else ()
    return (security.source, *(path for path in named if path is not None))


def _signature(files: tuple[Path, ...]) -> Signature:
    def one(path: Path) -> tuple[int, ...] | str:
        try:
            st = os.stat(path)
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    return tuple((str(path), one(path)) for path in files)


def fingerprint(cert_file: Path) -> str:
    """The first 16 hex digits of the SHA-256 of the file's first certificate, for the log."""
    try:
        match = PEM["certificate"].search(cert_file.read_bytes())
        der = ssl.PEM_cert_to_DER_cert(match.group(0).decode()) if match else b""
    except (OSError, ValueError):
        return "unreadable"
    return hashlib.sha256(der).hexdigest()[:16]


def restart_needed(running: WebSecurity, new: WebSecurity) -> list[str]:
    """The settings of `new` that differ from what the server runs with and cannot be applied
    to it live."""
    changed = []
    if (running.tls is None) != (new.tls is None):
        changed.append("tls_server_config (TLS on or off)")
    elif running.tls is not None and new.tls is not None:
        for key in ("client_auth_type", "client_allowed_sans", "min_version", "max_version"):
            if getattr(running.tls, key) != getattr(new.tls, key):
                changed.append(f"tls_server_config.{key}")
    if running.headers != new.headers:
        changed.append("http_server_config.headers")
    return changed


class WebConfigReloader:
    """Owns the SSLContext the server is given and keeps new connections on the newest good
    certificate. Runs on the event loop thread only (SNI callback and SIGHUP handler)."""

    def __init__(
        self,
        security: WebSecurity,
        *,
        check_interval: float = CHECK_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._running = security
        self._live = security
        self._served = security.ssl_context
        self._current = security.ssl_context
        self._interval = check_interval
        self._clock = clock
        self._next_check = clock() + check_interval
        self._signature = _signature(_files(security))
        # Files that did not load, or a restart already asked for: each is logged once.
        self._refused: Signature | None = None
        self._restart_asked: list[str] = []
        self.reloads = 0
        if self._served is not None:
            self._served.sni_callback = self._on_client_hello

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The context to serve with (None without TLS)."""
        return self._served

    def _on_client_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: object
    ) -> None:
        try:
            self.check()
            if self._current is not None and self._current is not self._served:
                connection.context = self._current
        except Exception:
            # A problem here must not fail the handshake: the last good certificate still serves.
            log.exception(
                "checking web config %s for new certificates failed",
                quoted_path(self._live.source),
            )

    def check(self) -> None:
        """Re-read the web config if one of its files changed, at most once per interval."""
        now = self._clock()
        if now < self._next_check:
            return
        self._next_check = now + self._interval
        signature = _signature(_files(self._live))
        if signature in (self._signature, self._refused):
            return
        self._load(signature, "its files changed", always_log=False)

    def reload(self, why: str = "SIGHUP") -> bool:
        """Re-read the web config now, whatever stat() says; True if it loaded."""
        self._next_check = self._clock() + self._interval
        return self._load(_signature(_files(self._live)), why, always_log=True)

    def _load(self, signature: Signature, why: str, *, always_log: bool) -> bool:
        try:
            new = load_web_config(self._live.source)
        except ConfigurationError as exc:
            if always_log or signature != self._refused:
                log.error("%s (re-read as %s); still serving the last good one", exc, why)
            self._refused = signature
            return False
        self._refused = None
        source = quoted_path(self._live.source)
        # Stat()ed before reading, so a change made while reading is seen at the next check; only
        # files the old config did not name are stat()ed after.
        files = _files(new)
        self._signature = signature if files == _files(self._live) else _signature(files)
        self._live = new
        self.reloads += 1
        users = self._running.live_users.replace(new.basic_auth_users)
        later = restart_needed(self._running, new)
        if later and (always_log or later != self._restart_asked):
            log.warning(
                "web config %s: %s changed; that takes effect at the next restart",
                source,
                ", ".join(later),
            )
        self._restart_asked = later
        applied = f"; basic_auth_users: {users}" if users else ""
        if users and not new.basic_auth_users:
            log.warning(
                "web config %s has no basic_auth_users now: requests are served without a password",
                source,
            )
        if self._served is not None and new.ssl_context is not None and new.tls is not None:
            self._current = new.ssl_context
            log.info(
                "web config %s re-read (%s): new TLS connections get certificate %s (sha256 %s)%s",
                source,
                why,
                quoted_path(new.tls.cert_file),
                fingerprint(new.tls.cert_file),
                applied,
            )
        else:
            log.info("web config %s re-read (%s)%s", source, why, applied)
        return True

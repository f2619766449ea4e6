"""Reads a web config file in the Prometheus exporter-toolkit format, strictly: an unknown key, a
wrong type, a missing file or a password that is not a bcrypt hash is one line naming the file
and the key, at startup, never a surprise at the first scrape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted, quoted_path
from kube_gpu_exporter.exporter.webconfig.settings import TlsSettings, WebSecurity
from kube_gpu_exporter.exporter.webconfig.tls import ssl_context

MAX_FILE_BYTES = 1 << 20
# Modular crypt format of bcrypt: $2a$/$2b$/$2y$, a two-digit cost, 53 characters of salt+hash.
BCRYPT_HASH = re.compile(r"^\$2[aby]\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# The response headers exporter-toolkit lets a web config set, spelled as it wants them, with the
# values it accepts where it checks them (empty: any one-line value). Anything else, such as
# Content-Type, Content-Length or Content-Encoding, would corrupt the responses it is set on.
SETTABLE_HEADERS: dict[str, tuple[str, ...]] = {
    "Content-Security-Policy": (),
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
}

TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "client_allowed_sans",
    "min_version",
    "max_version",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    # Inline PEM (newer exporter-toolkit): known, refused with a pointer to the file keys.
    "cert",
    "key",
    "client_ca",
}
# Accepted so that existing files load, but Python's ssl module cannot honour them: OpenSSL's
# defaults (modern AEAD suites, X25519/P-256) apply instead, and a warning says so once logging
# is set up (WebSecurity.warnings), so that a bad file still makes exactly one line on stderr.
IGNORED_TLS_KEYS = ("cipher_suites", "curve_preferences", "prefer_server_cipher_suites")
HTTP_KEYS = {"http2", "headers"}
TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"}
# Known, so they get their own reason, but never accepted: an "allowed:" hint must not offer them.
REFUSED_KEYS = {"rate_limit", "cert", "key", "client_ca"}


class _Reader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.shown = quoted_path(path)
        self.warnings: list[str] = []

    def warn(self, message: str) -> None:
        self.warnings.append(f"web config {self.shown}: {message}")

    def fail(self, key: str, message: str) -> ConfigurationError:
        where = f"{key}: " if key else ""
        return ConfigurationError(f"web config {self.shown}: {where}{message}")

    def mapping(self, value: Any, key: str, allowed: set[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        for name in value:
            if name not in allowed:
                dotted = f"{key}.{quoted(str(name))}" if key else quoted(str(name))
                offered = ", ".join(sorted(allowed - REFUSED_KEYS))
                raise self.fail(dotted, f"unknown key (allowed: {offered})")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a non-empty string, got {small_yaml.shown(value)}")
        return value

    def file(self, value: Any, key: str, kind: str) -> Path:
        """A readable file holding a PEM `kind` ("certificate" or "private key"), so a bad file is
        named here rather than in OpenSSL's one error for the certificate and key together."""
        # Relative paths are relative to the web config file, as in exporter-toolkit.
        path = self.path.parent / self.string(value, key)
        shown = quoted_path(path)
        if not path.exists():
            raise self.fail(key, f"{shown} does not exist")
        try:
            # Bounded, and a regular file only: a FIFO or /dev/zero here would hang or fill memory.
            data = small_yaml.read_bytes(path, MAX_PEM_BYTES)
        except small_yaml.YamlRefused as exc:
            raise self.fail(key, f"{shown}: {exc}") from None
        if not PEM[kind].search(data):
            raise self.fail(key, f"{shown} holds no PEM {kind}")
        if kind == "private key" and b"ENCRYPTED" in data:
            raise self.fail(key, f"{shown}: encrypted private keys are not supported")
        return path


# A certificate chain with its CA bundle is a few tens of KB; 1 MiB leaves room for large bundles.
MAX_PEM_BYTES = 1 << 20

PEM = {
    "certificate": re.compile(
        rb"-----BEGIN CERTIFICATE-----\s+[A-Za-z0-9+/=\s]+-----END CERTIFICATE-----"
    ),
    "private key": re.compile(
        rb"-----BEGIN ([A-Z]+ )?PRIVATE KEY-----\s+[A-Za-z0-9+/=\s:,-]+"
        rb"-----END ([A-Z]+ )?PRIVATE KEY-----"
    ),
}


def load_web_config(path: str | Path) -> WebSecurity:
    path = Path(path)
    reader = _Reader(path)
    try:
        doc = small_yaml.load(small_yaml.read_text(path, MAX_FILE_BYTES))
    except small_yaml.YamlRefused as exc:
        raise reader.fail("", str(exc)) from None
    top = reader.mapping(doc, "", TOP_KEYS)
    if "rate_limit" in top:
        raise reader.fail("rate_limit", "not supported; limit scrapers at the network instead")
    tls = _tls(reader, top.get("tls_server_config"))
    return WebSecurity(
        source=path,
        tls=tls,
        ssl_context=ssl_context(tls, reader.fail) if tls else None,
        basic_auth_users=_users(reader, top.get("basic_auth_users")),
        headers=_headers(reader, top.get("http_server_config")),
        warnings=tuple(reader.warnings),
    )


def _tls(reader: _Reader, value: Any) -> TlsSettings | None:
    section = "tls_server_config"
    doc = reader.mapping(value, section, TLS_KEYS)
    if not doc:
        return None
    for inline in ("cert", "key", "client_ca"):
        if inline in doc:
            raise reader.fail(
                f"{section}.{inline}", f"inline PEM is not supported; use {inline}_file"
            )
    ignored = [k for k in IGNORED_TLS_KEYS if k in doc]
    if ignored:
        names = ", ".join(f"{section}.{k}" for k in ignored)
        reader.warn(f"{names} ignored: Python's TLS uses OpenSSL's default suites and curves")
    for required in ("cert_file", "key_file"):
        if required not in doc:
            raise reader.fail(f"{section}.{required}", "is required for TLS")
    sans = doc.get("client_allowed_sans") or []
    if not isinstance(sans, list) or not all(isinstance(s, str) and s for s in sans):
        raise reader.fail(f"{section}.client_allowed_sans", "expected a list of names")
    ca = doc.get("client_ca_file")
    return TlsSettings(
        cert_file=reader.file(doc["cert_file"], f"{section}.cert_file", "certificate"),
        key_file=reader.file(doc["key_file"], f"{section}.key_file", "private key"),
        client_auth_type=reader.string(
            doc.get("client_auth_type", "NoClientCert"), f"{section}.client_auth_type"
        ),
        client_ca_file=(
            reader.file(ca, f"{section}.client_ca_file", "certificate") if ca is not None else None
        ),
        client_allowed_sans=tuple(sans),
        min_version=reader.string(doc.get("min_version", "TLS12"), f"{section}.min_version"),
        max_version=(
            reader.string(doc["max_version"], f"{section}.max_version")
            if "max_version" in doc
            else None
        ),
    )


def _users(reader: _Reader, value: Any) -> dict[str, bytes]:
    section = "basic_auth_users"
    if value is None:
        return {}
    if not isinstance(value, dict):
        got = small_yaml.shown(value)
        raise reader.fail(section, f"expected a mapping of user: bcrypt hash, got {got}")
    users: dict[str, bytes] = {}
    for user, hashed in value.items():
        key = f"{section}.{quoted(str(user))}"
        if not isinstance(user, str) or not user or ":" in user:
            raise reader.fail(key, "a user name must be a non-empty string without ':'")
        if not isinstance(hashed, str) or not BCRYPT_HASH.match(hashed):
            raise reader.fail(
                key,
                "is not a bcrypt hash ($2y$10$... with 53 more characters); plain-text "
                "passwords are not accepted. Make one with: kube-gpu-exporter hash-password",
            )
        users[user] = hashed.encode()
    return users


def _headers(reader: _Reader, value: Any) -> tuple[tuple[str, str], ...]:
    section = "http_server_config"
    doc = reader.mapping(value, section, HTTP_KEYS)
    if doc.get("http2") is not None:
        if not isinstance(doc["http2"], bool):
            raise reader.fail(f"{section}.http2", "expected true or false")
        reader.warn(f"{section}.http2 ignored: the exporter serves HTTP/1.1")
    headers = doc.get("headers") or {}
    if not isinstance(headers, dict):
        raise reader.fail(f"{section}.headers", "expected a mapping of header: value")
    pairs = []
    for name, text in headers.items():
        key = (
            f"{section}.headers.{quoted(name) if isinstance(name, str) else small_yaml.shown(name)}"
        )
        if not isinstance(name, str) or not HEADER_NAME.match(name):
            raise reader.fail(key, "is not a valid HTTP header name")
        if name not in SETTABLE_HEADERS:
            spelled = {allowed.lower(): allowed for allowed in SETTABLE_HEADERS}.get(name.lower())
            hint = f"write it {spelled}" if spelled else f"allowed: {', '.join(SETTABLE_HEADERS)}"
            raise reader.fail(key, f"this header cannot be configured ({hint})")
        if not isinstance(text, str) or any(c in text for c in "\r\n"):
            raise reader.fail(key, "expected a one-line string")
        values = SETTABLE_HEADERS[name]
        if values and text not in values:
            raise reader.fail(
                key, f"{small_yaml.shown(text)} is not one of {', '.join(map(repr, values))}"
            )
        pairs.append((name, text))
    return tuple(pairs)

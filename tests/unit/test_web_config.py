"""--web.config.file over real TLS on loopback, with certificates made in the test: basic auth,
mutual TLS, TLS versions, client names, and a clear one-line error for every bad file."""

from __future__ import annotations

import asyncio
import base64
import ssl
import threading
from pathlib import Path

import aiohttp
import bcrypt
import pytest
import yaml
from aiohttp import web
from cryptography.hazmat.primitives import serialization

from kube_gpu_exporter.exporter.config import WebConfig
from kube_gpu_exporter.exporter.errors import ConfigurationError
from kube_gpu_exporter.exporter.server import build_app
from kube_gpu_exporter.exporter.webconfig.basic_auth import BasicAuth
from kube_gpu_exporter.exporter.webconfig.parse import load_web_config
from tests.conftest import store_for
from tests.support.exporter_process import free_port
from tests.support.tls_certs import Certificates, make_certificates

PASSWORD = "correct horse"
# Cost 4 keeps the suite fast; one test below measures with a realistic cost.
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


def write(tmp_path: Path, doc: dict | str, name: str = "web.yml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def tls_section(certs: Certificates, **extra) -> dict:
    return {"cert_file": str(certs.server.cert), "key_file": str(certs.server.key), **extra}


def client_auth(certs: Certificates, mode: str, **extra) -> dict:
    section = tls_section(certs, client_auth_type=mode, client_ca_file=str(certs.ca.cert), **extra)
    return {"tls_server_config": section}


def client_context(certs: Certificates, pair=None, max_version=None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(certs.ca.cert))
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key)
    if max_version is not None:
        context.maximum_version = max_version
    return context


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


class Served:
    def __init__(self, runner: web.AppRunner, port: int, scheme: str) -> None:
        self.runner, self.url = runner, f"{scheme}://127.0.0.1:{port}"

    async def get(self, path: str = "/metrics", **kwargs) -> tuple[int, str, dict]:
        async with (
            aiohttp.ClientSession() as session,
            session.get(self.url + path, **kwargs) as response,
        ):
            return response.status, await response.text(), dict(response.headers)


@pytest.fixture
async def serve(sim, make_poller):
    runners: list[web.AppRunner] = []

    async def start(config_path: Path) -> Served:
        security = load_web_config(config_path)
        store = store_for()
        store.publish(make_poller(sim).sweep())
        app = build_app(store, WebConfig(security=security), lambda: None)
        runner = web.AppRunner(app)
        await runner.setup()
        runners.append(runner)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port, ssl_context=security.ssl_context).start()
        return Served(runner, port, "https" if security.ssl_context else "http")

    yield start
    for runner in runners:
        await runner.cleanup()


async def test_https_with_basic_auth(serve, certs, tmp_path):
    served = await serve(
        write(
            tmp_path,
            {
                "tls_server_config": tls_section(certs),
                "basic_auth_users": {"prometheus": HASH},
                "http_server_config": {"headers": {"X-Frame-Options": "deny"}},
            },
        )
    )
    tls = client_context(certs)
    status, body, headers = await served.get(ssl=tls, headers=basic("prometheus", PASSWORD))
    assert status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in body
    assert headers["X-Frame-Options"] == "deny"
    for credentials in (basic("prometheus", "wrong"), basic("mallory", PASSWORD), {}):
        status, body, headers = await served.get(ssl=tls, headers=credentials)
        assert status == 401, credentials
        assert headers["WWW-Authenticate"].startswith('Basic realm="kube-gpu-exporter"')
        assert headers["X-Frame-Options"] == "deny"
        assert "DCGM" not in body
    # Every path is protected, probes included.
    assert (await served.get("/healthz", ssl=tls))[0] == 401


async def test_plain_http_to_the_tls_port_fails(serve, certs, tmp_path):
    served = await serve(write(tmp_path, {"tls_server_config": tls_section(certs)}))
    plain = Served(served.runner, int(served.url.rsplit(":", 1)[1]), "http")
    with pytest.raises(aiohttp.ClientError):
        await plain.get()


async def test_mutual_tls_requires_a_certificate_from_the_client_ca(serve, certs, tmp_path):
    served = await serve(write(tmp_path, client_auth(certs, "RequireAndVerifyClientCert")))
    status, _, _ = await served.get(ssl=client_context(certs, certs.client))
    assert status == 200
    for pair in (None, certs.stranger):
        with pytest.raises(aiohttp.ClientError):
            await served.get(ssl=client_context(certs, pair))


async def test_verify_if_given_accepts_none_but_refuses_a_stranger(serve, certs, tmp_path):
    served = await serve(write(tmp_path, client_auth(certs, "VerifyClientCertIfGiven")))
    assert (await served.get(ssl=client_context(certs)))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await served.get(ssl=client_context(certs, certs.stranger))


async def test_client_allowed_sans(serve, certs, tmp_path):
    def config(names: list[str]) -> Path:
        doc = client_auth(certs, "RequireAndVerifyClientCert", client_allowed_sans=names)
        return write(tmp_path, doc, f"web-{names[0]}.yml")

    tls = client_context(certs, certs.client)
    assert (await (await serve(config(["prometheus"]))).get(ssl=tls))[0] == 200
    status, body, _ = await (await serve(config(["thanos"]))).get(ssl=tls)
    assert status == 403 and "client certificate name not allowed" in body


async def test_min_version_is_enforced(serve, certs, tmp_path):
    served = await serve(
        write(tmp_path, {"tls_server_config": tls_section(certs, min_version="TLS13")})
    )
    assert (await served.get(ssl=client_context(certs)))[0] == 200
    with pytest.raises(aiohttp.ClientError):
        await served.get(ssl=client_context(certs, max_version=ssl.TLSVersion.TLSv1_2))


def bad_files(certs: Certificates) -> list[tuple[str, dict | str, str]]:
    tls = tls_section(certs)
    directory = certs.ca.cert.parent
    garbage = directory / "garbage.pem"
    garbage.write_text("not a certificate\n")
    encrypted = directory / "encrypted.key"
    key = serialization.load_pem_private_key(certs.server.key.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    return [
        (
            # An ignored key beside the error: still exactly one line.
            "missing cert",
            {
                "tls_server_config": {
                    **tls,
                    "cert_file": "/nonexistent/x.crt",
                    "cipher_suites": ["TLS_AES_128_GCM_SHA256"],
                }
            },
            "tls_server_config.cert_file: /nonexistent/x.crt does not exist",
        ),
        (
            "cert not PEM",
            {"tls_server_config": {**tls, "cert_file": str(garbage)}},
            f"tls_server_config.cert_file: {garbage} holds no PEM certificate",
        ),
        (
            "key is a certificate",
            {"tls_server_config": {**tls, "key_file": str(certs.server.cert)}},
            f"tls_server_config.key_file: {certs.server.cert} holds no PEM private key",
        ),
        (
            "encrypted key",
            {"tls_server_config": {**tls, "key_file": str(encrypted)}},
            "tls_server_config.key_file: " + f"{encrypted}: encrypted private keys are not",
        ),
        (
            "CA not PEM",
            {
                "tls_server_config": tls_section(
                    certs, client_auth_type="VerifyClientCertIfGiven", client_ca_file=str(garbage)
                )
            },
            "tls_server_config.client_ca_file: " + f"{garbage} holds no PEM certificate",
        ),
        (
            "unknown key in headers section",
            {"http_server_config": {"header": {"X-A": "b"}}},
            "http_server_config.header: unknown key",
        ),
        ("malformed YAML", "tls_server_config: [unclosed\n", "not valid YAML at line"),
        # The allowed lists leave out the keys known only to be refused (rate_limit, inline PEM).
        (
            "unknown top key",
            {"tls_config": tls},
            "tls_config: unknown key (allowed: basic_auth_users, http_server_config, "
            "tls_server_config)",
        ),
        (
            "unknown nested key",
            {"tls_server_config": {**tls, "certfile": "x"}},
            "tls_server_config.certfile: unknown key (allowed: cert_file, cipher_suites, "
            "client_allowed_sans, client_auth_type, client_ca_file, curve_preferences, key_file, "
            "max_version, min_version, prefer_server_cipher_suites)",
        ),
        (
            "plain-text password",
            {"basic_auth_users": {"prometheus": "hunter2"}},
            "basic_auth_users.prometheus: is not a bcrypt hash",
        ),
        (
            "request client cert",
            {"tls_server_config": {**tls, "client_auth_type": "RequestClientCert"}},
            "RequestClientCert (a certificate taken without verification) is not supported",
        ),
        (
            "client auth without CA",
            {"tls_server_config": {**tls, "client_auth_type": "RequireAndVerifyClientCert"}},
            "client_ca_file: is required with client_auth_type RequireAndVerifyClientCert",
        ),
        (
            "bad version",
            {"tls_server_config": {**tls, "min_version": "TLS1.2"}},
            "min_version: 'TLS1.2' is not one of TLS10, TLS11, TLS12, TLS13",
        ),
        (
            "key does not match",
            {"tls_server_config": {**tls, "key_file": str(certs.client.key)}},
            "do not load",
        ),
        ("rate limit", {"rate_limit": {"interval": "1s", "burst": 5}}, "rate_limit: not supported"),
        (
            "client auth type refused",
            {"tls_server_config": {**tls, "client_auth_type": "RequireAnyClientCert"}},
            "use VerifyClientCertIfGiven or RequireAndVerifyClientCert",
        ),
        ("users not a map", {"basic_auth_users": ["prometheus"]}, "expected a mapping"),
        # Only exporter-toolkit's security headers: these would corrupt /metrics.
        *(
            (
                f"header {name}",
                {"http_server_config": {"headers": {name: value}}},
                f"http_server_config.headers.{name}: this header cannot be configured (allowed: "
                "Content-Security-Policy, Strict-Transport-Security, X-Content-Type-Options, "
                "X-Frame-Options, X-XSS-Protection)",
            )
            for name, value in (
                ("Content-Type", "text/html"),
                ("Content-Length", "0"),
                ("Content-Encoding", "gzip"),
            )
        ),
        (
            "header spelled differently",
            {"http_server_config": {"headers": {"x-frame-options": "deny"}}},
            "headers.x-frame-options: this header cannot be configured (write it X-Frame-Options)",
        ),
        (
            "header value not allowed",
            {"http_server_config": {"headers": {"X-Frame-Options": "allow-from x"}}},
            "headers.X-Frame-Options: 'allow-from x' is not one of 'deny', 'sameorigin'",
        ),
        (
            "header nosniff only",
            {"http_server_config": {"headers": {"X-Content-Type-Options": "sniff"}}},
            "headers.X-Content-Type-Options: 'sniff' is not one of 'nosniff'",
        ),
    ]


def test_every_bad_file_is_one_line_naming_the_key(certs, tmp_path):
    for what, doc, message in bad_files(certs):
        path = write(tmp_path, doc, f"{what.replace(' ', '-')}.yml")
        with pytest.raises(ConfigurationError) as caught:
            load_web_config(path)
        text = str(caught.value)
        assert text.startswith(f"web config {path}: "), what
        assert message in text, f"{what}: {text}"
        assert "\n" not in text, what


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nbasic_auth_users: {}\n", "aliases"),
        ("basic_auth_users: " + "[" * 10_000 + "]" * 10_000, "nested deeper than 32"),
        ("tls_server_config: {cert_file: x", "not valid YAML"),
        ("basic_auth_users: !!python/object/apply:os.system [true]", "not valid YAML"),
        ("basic_auth_users: " + "u" * 100_000, "expected a mapping of user"),
    ],
)
def test_hostile_web_config_text_is_one_short_line(tmp_path, text, message):
    path = tmp_path / "web.yml"
    path.write_text(text)
    with pytest.raises(ConfigurationError) as caught:
        load_web_config(path)
    error = str(caught.value)
    assert message in error and "\n" not in error and len(error) < 300, error


def test_plain_text_password_message_says_how_to_hash(tmp_path):
    with pytest.raises(ConfigurationError) as caught:
        load_web_config(write(tmp_path, {"basic_auth_users": {"prometheus": "hunter2"}}))
    # The way that works wherever the exporter does: no htpasswd, no system Python with bcrypt.
    assert str(caught.value).endswith("Make one with: kube-gpu-exporter hash-password")


def test_relative_paths_are_relative_to_the_web_config_file(certs, tmp_path, monkeypatch):
    directory = certs.ca.cert.parent
    path = write(
        directory, {"tls_server_config": {"cert_file": "server.crt", "key_file": "server.key"}}
    )
    monkeypatch.chdir(tmp_path)  # somewhere else
    security = load_web_config(path)
    assert security.tls is not None and security.tls.cert_file == directory / "server.crt"
    assert security.ssl_context is not None and not security.warnings


def test_ignored_keys_load_with_a_warning_for_later(certs, tmp_path):
    doc = {
        "tls_server_config": tls_section(
            certs,
            cipher_suites=["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
            curve_preferences=["X25519"],
            prefer_server_cipher_suites=True,
        ),
        "http_server_config": {"http2": False},
    }
    security = load_web_config(write(tmp_path, doc))
    assert security.ssl_context is not None
    [tls_warning, http_warning] = security.warnings
    assert "cipher_suites, tls_server_config.curve_preferences" in tls_warning
    assert "http_server_config.http2 ignored" in http_warning


async def test_successful_checks_are_cached_and_unknown_users_cost_a_check():
    calls: list[bytes] = []

    def counting(password: bytes, hashed: bytes) -> bool:
        calls.append(hashed)
        return bcrypt.checkpw(password, hashed)

    auth = BasicAuth({"prometheus": HASH.encode()}, checkpw=counting)
    try:
        assert await auth.verify("prometheus", PASSWORD)
        assert await auth.verify("prometheus", PASSWORD)
        assert len(calls) == 1  # the second was served from the cache
        assert not await auth.verify("prometheus", "wrong")
        assert not await auth.verify("prometheus", "wrong")
        assert len(calls) == 3  # failures are never cached
        assert not await auth.verify("mallory", PASSWORD)
        assert len(calls) == 4 and calls[-1] == HASH.encode()  # same work for an unknown user
        assert not await auth.verify("prometheus", PASSWORD + "x" * 80)  # over bcrypt's 72 bytes
    finally:
        auth.close()


async def test_a_cancelled_check_keeps_its_slot_until_bcrypt_ends():
    release = threading.Event()
    started: list[bytes] = []
    loop = asyncio.get_running_loop()
    first_started = asyncio.Event()

    def blocking(password: bytes, hashed: bytes) -> bool:
        started.append(password)
        loop.call_soon_threadsafe(first_started.set)
        release.wait(5)
        return False

    auth = BasicAuth({"prometheus": HASH.encode()}, max_concurrent=1, checkpw=blocking)
    try:
        first = asyncio.create_task(auth.verify("prometheus", "one"))
        async with asyncio.timeout(5):
            await first_started.wait()
        first.cancel()  # the client hung up; its bcrypt check still runs
        second = asyncio.create_task(auth.verify("prometheus", "two"))
        # A free slot would let the second task count and submit its check in its first step,
        # without suspending; a few loop turns give it every chance to.
        for _ in range(5):
            await asyncio.sleep(0)
        assert not second.done()
        # No second check is let in, not even queued for the pool, while the first runs.
        assert started == [b"one"] and auth.bcrypt_checks == 1
        release.set()
        assert await second is False
        assert started == [b"one", b"two"]
    finally:
        release.set()
        auth.close()


async def test_concurrent_wrong_passwords_do_not_lock_out_the_right_one(serve, certs, tmp_path):
    served = await serve(
        write(
            tmp_path,
            {"tls_server_config": tls_section(certs), "basic_auth_users": {"prometheus": HASH}},
        )
    )
    tls = client_context(certs)
    wrong = [served.get(ssl=tls, headers=basic("prometheus", f"guess{i}")) for i in range(20)]
    right = served.get(ssl=tls, headers=basic("prometheus", PASSWORD))
    statuses = [status for status, _, _ in await asyncio.gather(*wrong, right)]
    assert statuses == [401] * 20 + [200]

"""The TLS part of a web config as an ssl.SSLContext, with exporter-toolkit's meanings."""

from __future__ import annotations

import ssl
from collections.abc import Callable

from kube_gpu_exporter.exporter import small_yaml
from kube_gpu_exporter.exporter.errors import ConfigurationError, quoted_path
from kube_gpu_exporter.exporter.webconfig.settings import TlsSettings

VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's client auth types. The two that ask for a certificate without verifying it cannot be
# expressed with OpenSSL through Python: it verifies whatever certificate it asks for.
VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_MODES = ("RequestClientCert", "RequireAnyClientCert")

Fail = Callable[[str, str], ConfigurationError]


def ssl_context(tls: TlsSettings, fail: Fail) -> ssl.SSLContext:
    key = "tls_server_config"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for name, value in (("min_version", tls.min_version), ("max_version", tls.max_version)):
        if value is None:
            continue
        if value not in VERSIONS:
            raise fail(
                f"{key}.{name}", f"{small_yaml.shown(value)} is not one of {', '.join(VERSIONS)}"
            )
        setattr(
            context,
            "minimum_version" if name == "min_version" else "maximum_version",
            VERSIONS[value],
        )
    if tls.max_version and VERSIONS[tls.max_version] < VERSIONS[tls.min_version]:
        raise fail(f"{key}.max_version", f"{tls.max_version} is below min_version")
    try:
        # A password, even empty, keeps OpenSSL from prompting on the terminal for one.
        context.load_cert_chain(tls.cert_file, tls.key_file, password=b"")
    except (ssl.SSLError, OSError) as exc:
        cert, private = quoted_path(tls.cert_file), quoted_path(tls.key_file)
        raise fail(f"{key}.cert_file", f"{cert} and {private} do not load: {exc}") from None
    mode = tls.client_auth_type
    if mode in UNVERIFIED_MODES:
        raise fail(
            f"{key}.client_auth_type",
            f"{mode} (a certificate taken without verification) is not supported; use "
            "VerifyClientCertIfGiven or RequireAndVerifyClientCert with client_ca_file",
        )
    if mode not in VERIFY_MODES:
        raise fail(
            f"{key}.client_auth_type",
            f"{small_yaml.shown(mode)} is not one of {', '.join(VERIFY_MODES)}",
        )
    if mode == "NoClientCert":
        if tls.client_ca_file:
            raise fail(f"{key}.client_ca_file", "is set but client_auth_type is NoClientCert")
        if tls.client_allowed_sans:
            raise fail(f"{key}.client_allowed_sans", "needs RequireAndVerifyClientCert")
        return context
    if tls.client_ca_file is None:
        raise fail(f"{key}.client_ca_file", f"is required with client_auth_type {mode}")
    if tls.client_allowed_sans and mode != "RequireAndVerifyClientCert":
        raise fail(f"{key}.client_allowed_sans", "needs RequireAndVerifyClientCert")
    try:
        context.load_verify_locations(cafile=tls.client_ca_file)
    except (ssl.SSLError, OSError) as exc:
        raise fail(
            f"{key}.client_ca_file", f"{quoted_path(tls.client_ca_file)} does not load: {exc}"
        ) from None
    context.verify_mode = VERIFY_MODES[mode]
    return context

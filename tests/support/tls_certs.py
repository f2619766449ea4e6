"""Certificates for the TLS tests, made on the spot: a CA, a server certificate for 127.0.0.1 and
localhost, a client certificate from the same CA, and one from a CA nobody trusts."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(directory: Path, name: str, cert: x509.Certificate, key) -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return pair


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )


def make_ca(
    directory: Path, name: str
) -> tuple[Pair, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return _write(directory, name, cert, key), cert, key


def make_leaf(
    directory: Path,
    name: str,
    ca: tuple[Pair, x509.Certificate, ec.EllipticCurvePrivateKey],
    sans: Sequence[x509.GeneralName],
    server: bool,
) -> Pair:
    _, ca_cert, ca_key = ca
    key = _key()
    usage = (
        x509.oid.ExtendedKeyUsageOID.SERVER_AUTH
        if server
        else (x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH)
    )
    cert = (
        _builder(name, ca_cert.subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return _write(directory, name, cert, key)


@dataclass(frozen=True)
class Certificates:
    ca: Pair
    server: Pair
    client: Pair
    stranger: Pair  # a client certificate from an untrusted CA


def make_certificates(directory: Path) -> Certificates:
    ca = make_ca(directory, "ca")
    other = make_ca(directory, "other-ca")
    server_names = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    return Certificates(
        ca=ca[0],
        server=make_leaf(directory, "server", ca, server_names, server=True),
        client=make_leaf(directory, "client", ca, [x509.DNSName("prometheus")], server=False),
        stranger=make_leaf(directory, "stranger", other, [x509.DNSName("prometheus")], False),
    )

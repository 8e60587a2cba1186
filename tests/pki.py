"""Certificates the TLS tests and benchmarks make for themselves (`cryptography`).

`make_pki(dir)` writes PEM files for: a cluster CA; a *node* certificate (used by
the coordinator and the workers, which serve and also dial: serverAuth +
clientAuth, SAN IP 127.0.0.1 and DNS localhost); a *client* certificate (clientAuth)
for drivers; and a second, unrelated CA with its own client certificate (the
"wrong CA" that an mTLS server must refuse).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca: str
    node_cert: str
    node_key: str
    client_cert: str
    client_key: str
    other_ca: str
    other_client_cert: str
    other_client_key: str


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "ftrl tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn)).issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                     content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(cn: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *, server: bool,
          ips: tuple[str, ...] = (), dns: tuple[str, ...] = ()
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    usages = [ExtendedKeyUsageOID.CLIENT_AUTH] + ([ExtendedKeyUsageOID.SERVER_AUTH] if server else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn)).issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                       critical=False)
    )
    sans: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    sans += [x509.DNSName(name) for name in dns]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make_pki(directory: str | Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> Pki:
    """Write a CA, node and client certificates (and a wrong CA) under `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("ftrl test CA")
    node, node_key = _leaf("ftrl node", ca, ca_key, server=True, ips=ips, dns=("localhost",))
    client, client_key = _leaf("ftrl driver", ca, ca_key, server=False)
    other, other_key = _ca("some other CA")
    stranger, stranger_key = _leaf("stranger", other, other_key, server=True, ips=ips)
    return Pki(
        ca=_write_cert(d / "ca.pem", ca),
        node_cert=_write_cert(d / "node.pem", node),
        node_key=_write_key(d / "node.key", node_key),
        client_cert=_write_cert(d / "client.pem", client),
        client_key=_write_key(d / "client.key", client_key),
        other_ca=_write_cert(d / "other-ca.pem", other),
        other_client_cert=_write_cert(d / "stranger.pem", stranger),
        other_client_key=_write_key(d / "stranger.key", stranger_key),
    )

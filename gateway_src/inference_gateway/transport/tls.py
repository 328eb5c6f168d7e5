"""Server credentials for the gRPC data planes: a mounted certificate, or a self-signed
one made at start.

Envoy Gateway talks to an ext_proc backend over TLS when asked to, and does not verify
the picker's certificate unless a BackendTLSPolicy says so, so a fresh self-signed key
per process (as the upstream picker does) encrypts the hop without any secret to manage.
A mounted certificate (cert-manager) is used when given.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import grpc

from inference_gateway.errors import ConfigError

__all__ = ["self_signed", "server_credentials"]


def self_signed(hostname: str = "igw-picker", days: int = 365) -> tuple[bytes, bytes]:
    """A PEM (certificate, private key) pair for `hostname`, ECDSA P-256."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(hostname), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def server_credentials(
    cert_file: str | Path | None = None, key_file: str | Path | None = None
) -> tuple[grpc.ServerCredentials, bytes]:
    """Credentials and the certificate PEM (for clients that pin it)."""
    if (cert_file is None) != (key_file is None):
        raise ConfigError("TLS", ["--tls-cert, --tls-key: give both or neither"])
    if cert_file is not None and key_file is not None:
        try:
            cert, key = Path(cert_file).read_bytes(), Path(key_file).read_bytes()
        except OSError as error:
            raise ConfigError("TLS", [f"{error.filename}: {error.strerror}"]) from None
    else:
        cert, key = self_signed()
    return grpc.ssl_server_credentials([(key, cert)]), cert

"""Throwaway TLS certificates and SuperNode keys for a Flower deployment on one machine.

:func:`write_tls_files` writes a certificate authority (CA) and a server certificate that the
CA signed for the SuperLink's loopback names (``127.0.0.1``, ``localhost``), as the PEM files
``flower-superlink --ssl-ca-certfile/--ssl-certfile/--ssl-keyfile`` reads; SuperNodes and the
``flwr`` CLI verify the server against the CA (``--root-certificates``, ``root-certificates``).
:func:`write_node_keys` writes a SuperNode's authentication key pair in the OpenSSH formats
that ``flower-supernode --auth-supernode-private-key`` and ``flwr supernode register`` read.
:func:`check_tls_files` verifies such files before a deployment starts, so that a missing,
expired or mismatched file is a :class:`~riemfl.adapters.flower.errors.CertificateError` that
names it rather than a SuperNode retrying forever.

Keys: ECDSA on NIST P-384 (secp384r1) for the CA, the server and the nodes (Flower's node
authentication accepts NIST curves only and documents P-384), certificates signed with
ECDSA-SHA384. The certificates are valid from five minutes before ``now`` (clock skew) for
``days`` days (default 1): they protect one local deployment, not a long-lived federation.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from riemfl.adapters.flower.errors import CertificateError

from riemfl.errors import ParameterError

__all__ = [
    "LOOPBACK_NAMES",
    "NodeKeys",
    "TlsFiles",
    "check_tls_files",
    "write_node_keys",
    "write_tls_files",
]

#: the names the server certificate is issued for: the SuperLink listens on 127.0.0.1
LOOPBACK_NAMES: tuple[str, ...] = ("127.0.0.1", "localhost")
CURVE = ec.SECP384R1
HASH = hashes.SHA384
CLOCK_SKEW = dt.timedelta(minutes=5)


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a SuperLink's TLS setup: ``ca_cert`` (what clients trust), ``server_cert``
    (signed by the CA, for the SuperLink's names) and ``server_key`` (its private key)."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


@dataclass(frozen=True)
class NodeKeys:
    """A SuperNode's authentication key pair: OpenSSH private key, OpenSSH public key."""

    private_key: Path
    public_key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "riemfl local deployment"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _san(hosts: Sequence[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write(path: Path, data: bytes, private: bool = False) -> Path:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)
    return path


def write_tls_files(
    directory: str | Path,
    hosts: Sequence[str] = LOOPBACK_NAMES,
    *,
    days: float = 1.0,
    now: dt.datetime | None = None,
) -> TlsFiles:
    """Write a fresh CA and a server certificate for ``hosts`` signed by it into ``directory``.

    Files: ``ca.crt``, ``ca.key`` (the CA's key, kept so that the directory is self-contained;
    nothing reads it), ``server.crt`` (subject alternative names = ``hosts``, IP addresses as
    ``iPAddress`` entries), ``server.key`` (PKCS#8, unencrypted, mode 0600). Both certificates
    hold P-384 keys, are signed with ECDSA-SHA384 and are valid from ``now - 5 min`` to
    ``now + days`` (``now`` defaults to the current UTC time; a ``now`` in the past writes an
    expired certificate, which is how the tests make one).

    Returns
    -------
    TlsFiles
        The paths of the CA certificate, the server certificate and the server key.
    """
    if not hosts:
        raise ParameterError("hosts must name at least one host the server is reached by")
    if not days > 0:
        raise ParameterError(f"days must be > 0, got {days!r}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = now or dt.datetime.now(dt.timezone.utc)
    start, end = now - CLOCK_SKEW, now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(CURVE())
    ca_name = _name("riemfl local CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, HASH())
    )

    server_key = ec.generate_private_key(CURVE())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, HASH())
    )

    pem = serialization.Encoding.PEM
    _write(directory / "ca.key", _pem_key(ca_key), private=True)
    return TlsFiles(
        ca_cert=_write(directory / "ca.crt", ca_cert.public_bytes(pem)),
        server_cert=_write(directory / "server.crt", server_cert.public_bytes(pem)),
        server_key=_write(directory / "server.key", _pem_key(server_key), private=True),
    )


def write_node_keys(directory: str | Path, name: str) -> NodeKeys:
    """Write a fresh P-384 key pair for SuperNode ``name``: ``<name>.key`` (OpenSSH private
    key, unencrypted, mode 0600; ``flower-supernode --auth-supernode-private-key``) and
    ``<name>.pub`` (OpenSSH public key; ``flwr supernode register``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(CURVE())
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return NodeKeys(
        private_key=_write(directory / f"{name}.key", private, private=True),
        public_key=_write(directory / f"{name}.pub", public + b"\n"),
    )


def _read(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise CertificateError(f"the {what} file {str(path)!r} does not exist")
    return path.read_bytes()


def _load_cert(path: Path, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(_read(path, what))
    except ValueError as exc:
        raise CertificateError(f"the {what} {str(path)!r} is not a PEM certificate: {exc}") from exc


def check_tls_files(
    files: TlsFiles, hosts: Sequence[str] = LOOPBACK_NAMES, now: dt.datetime | None = None
) -> None:
    """Check a SuperLink's TLS files as the server and its clients will, before starting it.

    Raises :class:`~riemfl.adapters.flower.errors.CertificateError` naming the file and the
    problem when a file is missing or not PEM; a certificate is not yet valid or has expired
    at ``now``; the server certificate is not signed by the CA; the server key is not the key
    of the server certificate; or the certificate does not name every host of ``hosts``.
    """
    now = now or dt.datetime.now(dt.timezone.utc)
    ca = _load_cert(files.ca_cert, "CA certificate")
    server = _load_cert(files.server_cert, "server certificate")
    try:
        key = serialization.load_pem_private_key(_read(files.server_key, "server key"), None)
    except (ValueError, TypeError) as exc:
        raise CertificateError(
            f"the server key {str(files.server_key)!r} is not an unencrypted PEM private key: {exc}"
        ) from exc
    for cert, path, what in (
        (ca, files.ca_cert, "CA certificate"),
        (server, files.server_cert, "server certificate"),
    ):
        start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
        if not start <= now <= end:
            fmt = "%Y-%m-%d %H:%M:%S UTC"
            state = f"expired on {end:{fmt}}" if now > end else f"is not valid before {start:{fmt}}"
            raise CertificateError(
                f"the {what} {str(path)!r} {state} (valid {start:{fmt}} to {end:{fmt}}; now "
                f"{now:{fmt}})"
            )
    try:
        server.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature) as exc:
        raise CertificateError(
            f"the server certificate {str(files.server_cert)!r} is not signed by the CA "
            f"{str(files.ca_cert)!r} ({exc or type(exc).__name__}): clients that trust this CA "
            "would refuse the server"
        ) from exc
    pem = serialization.Encoding.PEM
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(pem, spki) != server.public_key().public_bytes(pem, spki):
        raise CertificateError(
            f"the server key {str(files.server_key)!r} does not belong to the server "
            f"certificate {str(files.server_cert)!r}"
        )
    try:
        san = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        san = x509.SubjectAlternativeName([])
    named = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}
    named |= set(san.get_values_for_type(x509.DNSName))
    missing = [host for host in hosts if host not in named]
    if missing:
        raise CertificateError(
            f"the server certificate {str(files.server_cert)!r} does not name {missing} (its "
            f"subject alternative names: {sorted(named)}); clients reach the server there"
        )

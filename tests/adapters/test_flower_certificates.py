"""The throwaway TLS files and SuperNode keys of ``LocalDeployment`` (no Flower process).

The certificates are checked by what they are for: a TLS handshake over loopback succeeds for a
client that trusts the CA and fails for one that trusts another CA; every way of breaking the
files (missing, expired, not yet valid, signed by another CA, another key, another host) is a
``CertificateError`` naming the file, raised before any process starts.
"""

from __future__ import annotations

import datetime as dt
import shutil
import socket
import ssl
import threading

import pytest

pytest.importorskip("cryptography", reason="cryptography comes with Flower (riemfl[flower])")

from cryptography.hazmat.primitives import serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from riemfl.adapters.flower.certificates import (  # noqa: E402
    TlsFiles,
    check_tls_files,
    write_node_keys,
    write_tls_files,
)
from riemfl.adapters.flower.errors import CertificateError  # noqa: E402
from riemfl.adapters.flower.local import LocalDeployment  # noqa: E402

from riemfl.errors import ParameterError, RiemflError  # noqa: E402


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> TlsFiles:
    return write_tls_files(tmp_path_factory.mktemp("tls"))


def _handshake(files: TlsFiles, trusted_ca) -> str:
    """Serve one TLS connection on 127.0.0.1 with ``files``; a client trusting ``trusted_ca``
    connects to the IP address; returns the negotiated version or raises the client's error."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(files.server_cert, files.server_key)
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls_conn:
                    tls_conn.recv(1)
            except (ssl.SSLError, OSError):
                pass

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        client_ctx = ssl.create_default_context(cafile=str(trusted_ca))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
                with client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                    return str(conn.version())
        finally:
            thread.join(timeout=10)


def test_certificates_verify_over_loopback_only_against_their_ca(tls, tmp_path):
    check_tls_files(tls)
    assert _handshake(tls, tls.ca_cert).startswith("TLS")
    other = write_tls_files(tmp_path / "other")
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        _handshake(tls, other.ca_cert)
    # key sizes as documented: P-384 everywhere
    key = serialization.load_pem_private_key(tls.server_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
    assert oct(tls.server_key.stat().st_mode & 0o777) == "0o600"


def test_broken_tls_files_are_named(tls, tmp_path):
    other = write_tls_files(tmp_path / "other")
    now = dt.datetime.now(dt.timezone.utc)
    cases = {
        "does not exist": TlsFiles(tmp_path / "absent.crt", tls.server_cert, tls.server_key),
        "not signed by the CA": TlsFiles(tls.ca_cert, other.server_cert, other.server_key),
        "does not belong to the server certificate": TlsFiles(
            tls.ca_cert, tls.server_cert, other.server_key
        ),
        "is not a PEM certificate": TlsFiles(tls.server_key, tls.server_cert, tls.server_key),
    }
    for message, files in cases.items():
        with pytest.raises(CertificateError, match=message) as info:
            check_tls_files(files)
        assert isinstance(info.value, RiemflError)
    expired = write_tls_files(tmp_path / "old", now=now - dt.timedelta(days=3), days=1)
    with pytest.raises(CertificateError, match=r"ca\.crt' expired on"):
        check_tls_files(expired)
    with pytest.raises(CertificateError, match="is not valid before"):
        check_tls_files(tls, now=now - dt.timedelta(hours=1))
    with pytest.raises(CertificateError, match=r"does not name \['server.example'\]"):
        check_tls_files(tls, hosts=("127.0.0.1", "server.example"))


def test_node_keys_are_openssh_p384_pairs(tmp_path):
    keys = write_node_keys(tmp_path, "supernode-0")
    private = serialization.load_ssh_private_key(keys.private_key.read_bytes(), None)
    public = serialization.load_ssh_public_key(keys.public_key.read_bytes())
    assert isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp384r1"
    assert private.public_key().public_numbers() == public.public_numbers()
    assert write_node_keys(tmp_path, "supernode-1").public_key.read_bytes() != (
        keys.public_key.read_bytes()
    )


def test_deployment_refuses_bad_tls_before_starting_anything(tls, tmp_path):
    broken = tmp_path / "tls"
    shutil.copytree(tls.ca_cert.parent, broken)
    (broken / "server.key").unlink()
    files = TlsFiles(broken / "ca.crt", broken / "server.crt", broken / "server.key")
    deployment = LocalDeployment(1, tmp_path, tls=files)
    with pytest.raises(CertificateError, match=r"server key file '.*server\.key' does not exist"):
        with deployment:
            pass
    assert deployment.processes == []
    with pytest.raises(ParameterError, match="needs TLS"):
        LocalDeployment(1, tmp_path, tls=False, authenticate=True)
    with pytest.raises(ParameterError, match="tls must be"):
        LocalDeployment(1, tmp_path, tls="yes")

"""Certificates for TLS tests, made with the ``openssl`` command line: a self-signed CA,
a server certificate for 127.0.0.1 / localhost and a client certificate, both signed by
it. Nothing is downloaded; everything lives in the folder given."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Authority:
    """A CA and what it signed, as files."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


# The extensions RFC 5280 asks of a CA and of what it signs: Python 3.13 verifies
# strictly (ssl.VERIFY_X509_STRICT) and refuses a CA without keyUsage.
_CA_EXTENSIONS = (
    "basicConstraints=critical,CA:TRUE",
    "keyUsage=critical,keyCertSign,cRLSign",
    "subjectKeyIdentifier=hash",
)
_LEAF_EXTENSIONS = (
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
    "authorityKeyIdentifier=keyid,issuer\nsubjectKeyIdentifier=hash\n"
)


def _signed(folder: Path, name: str, ca: str, extensions: str) -> None:
    """A key and a certificate ``name`` signed by ``ca``, with ``extensions`` besides
    every leaf's own."""
    _openssl("genrsa", "-out", f"{name}.key", "2048", cwd=folder)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", f"/CN={name}", "-out",
             f"{name}.csr", cwd=folder)  # fmt: skip
    (folder / f"{name}.ext").write_text(_LEAF_EXTENSIONS + extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-days", "2", "-sha256", "-extfile", f"{name}.ext",
             "-out", f"{name}.crt", cwd=folder)  # fmt: skip


def make_authority(folder: Path, name: str = "ca") -> Authority:
    """A fresh CA named ``name`` in ``folder`` with a server and a client certificate."""
    if shutil.which("openssl") is None:
        message = "the openssl command is needed for TLS tests (apt-get install -y openssl)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    folder.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
             "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN=flo-redis test {name}",
             *(arg for ext in _CA_EXTENSIONS for arg in ("-addext", ext)),
             cwd=folder)  # fmt: skip
    _signed(
        folder,
        f"{name}-server",
        name,
        "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    _signed(folder, f"{name}-client", name, "extendedKeyUsage=clientAuth\n")
    return Authority(
        ca=folder / f"{name}.crt",
        server_cert=folder / f"{name}-server.crt",
        server_key=folder / f"{name}-server.key",
        client_cert=folder / f"{name}-client.crt",
        client_key=folder / f"{name}-client.key",
    )


def server_args(authority: Authority, tls_port: int, *, client_certs: bool) -> tuple[str, ...]:
    """redis-server arguments for a TLS port signed by ``authority``; with
    ``client_certs`` the server asks every client for a certificate from the CA."""
    return (
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(authority.server_cert),
        "--tls-key-file", str(authority.server_key),
        "--tls-ca-cert-file", str(authority.ca),
        "--tls-auth-clients", "yes" if client_certs else "no",
    )  # fmt: skip

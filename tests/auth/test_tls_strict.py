"""Issue 18 item 14: the test certificates pass strict X.509 verification (what Python 3.13's
default context does: VERIFY_X509_STRICT needs Subject/Authority Key Identifiers), on every
supported Python, in both directions (the server verifying a client certificate too)."""

from __future__ import annotations

import ssl

import pytest
import trio
from cryptography import x509

from tests.auth.test_tls import Certs, read_info, tls_roundtrip


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("strict-certs"))


def test_every_certificate_has_key_identifiers(certs):
    for path in (certs.ca, certs.server, certs.client, certs.rogue, certs.bob):
        with open(path, "rb") as f:
            cert = x509.load_pem_x509_certificate(f.read())
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
        if cert.issuer != cert.subject:
            cert.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier)


async def test_handshake_with_strict_verification(start_server, certs):
    server = await start_server(tls=certs.tls(ca_file=certs.ca, verify=True))
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await read_info(stream)
    context = certs.client_context(certs.client, certs.client_key)
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    tls = trio.SSLStream(stream, context, server_hostname="localhost")
    with trio.fail_after(5):
        await tls.do_handshake()
        assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)

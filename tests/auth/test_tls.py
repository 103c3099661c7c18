"""TLS: the tls {} block and --tls* flags, INFO fields, the plain-text INFO then handshake of
nats-server 2.9, client certificates, and nats-py over TLS.

Certificates (a CA, a server certificate for localhost/127.0.0.1, client certificates from
that CA and from another one) are generated here with ``cryptography``.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import json
import socket
import ssl
import subprocess
import time

import nats
import pytest
import trio
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import natserver
from natserver.auth.tls import TLSConfig
from natserver.config.flags import UsageError, build_options, parse_args
from natserver.config.mapping import ConfigFileError, options_from_file
from tests import reference

TIMEOUT = 20


def _name(cn: str, **extra) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if "org" in extra:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, extra["org"]))
    return x509.Name(attrs)


class Certs:
    """Files in ``directory``: ca.pem, server.pem/server-key.pem, client.pem/client-key.pem,
    rogue.pem/rogue-key.pem (a client certificate from another CA)."""

    def __init__(self, directory) -> None:
        self.dir = directory
        now = datetime.datetime.now(datetime.timezone.utc)
        self._now = now
        ca_key, ca = self._ca("Test CA")
        rogue_ca_key, rogue_ca = self._ca("Rogue CA")
        self.ca = self._write("ca.pem", ca)
        self.server, self.server_key = self._leaf("server", "localhost", ca, ca_key, server=True)
        self.client, self.client_key = self._leaf("client", "alice", ca, ca_key, email="alice@example.com")
        self.rogue, self.rogue_key = self._leaf("rogue", "alice", rogue_ca, rogue_ca_key)
        self.bob, self.bob_key = self._leaf("bob", "bob", ca, ca_key, org="Acme")

    def _ca(self, cn: str):
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(hours=1))
            .not_valid_after(self._now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            # Key identifiers: Python 3.13's default context (VERIFY_X509_STRICT) requires them.
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256())
        )  # fmt: skip
        return key, cert

    def _leaf(self, stem, cn, ca, ca_key, server=False, email=None, org=None):
        key = ec.generate_private_key(ec.SECP256R1())
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder().subject_name(_name(cn, **({"org": org} if org else {})))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self._now - datetime.timedelta(hours=1))
            .not_valid_after(self._now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        )  # fmt: skip
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        if email:
            builder = builder.add_extension(x509.SubjectAlternativeName([x509.RFC822Name(email)]), critical=False)
        cert = builder.sign(ca_key, hashes.SHA256())
        return self._write(f"{stem}.pem", cert), self._write(f"{stem}-key.pem", key)

    def _write(self, name, obj) -> str:
        path = self.dir / name
        if isinstance(obj, x509.Certificate):
            path.write_bytes(obj.public_bytes(serialization.Encoding.PEM))
        else:
            path.write_bytes(obj.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        return str(path)

    def tls(self, **changes) -> TLSConfig:
        return TLSConfig(cert_file=self.server, key_file=self.server_key, **changes)

    def client_context(self, cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=self.ca)
        if cert:
            context.load_cert_chain(cert, key)
        return context


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(tmp_path_factory.mktemp("certs"))


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, TIMEOUT))


# -- raw clients (trio) --------------------------------------------------------------------------


async def read_info(stream) -> tuple[bytes, dict]:
    data = b""
    with trio.fail_after(5):
        while b"\r\n" not in data:
            chunk = await stream.receive_some(4096)
            assert chunk, f"EOF before INFO: {data!r}"
            data += chunk
    line, _, rest = data.partition(b"\r\n")
    assert rest == b"", "nothing may follow the INFO before the handshake"
    return line + b"\r\n", json.loads(line[5:-1])


async def read_all(stream, timeout: float = 5.0) -> tuple[bytes, bool]:
    """(everything until EOF, True) or (what came, False) at the timeout."""
    data = b""
    with trio.move_on_after(timeout):
        while True:
            try:
                chunk = await stream.receive_some(4096)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return data, True
            if not chunk:
                return data, True
            data += chunk
    return data, False


async def tls_connect(server, context: ssl.SSLContext):
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    _, info = await read_info(stream)
    tls = trio.SSLStream(stream, context, server_hostname="localhost")
    with trio.fail_after(5):
        await tls.do_handshake()
    return tls, info


async def tls_roundtrip(tls) -> bytes:
    await tls.send_all(b'CONNECT {"verbose":false}\r\nSUB foo 1\r\nPUB foo 2\r\nhi\r\nPING\r\n')
    data = b""
    with trio.fail_after(5):
        while not data.endswith(b"PONG\r\n"):
            chunk = await tls.receive_some(4096)
            if not chunk:
                break
            data += chunk
    return data


# -- INFO and the handshake ----------------------------------------------------------------------


async def test_info_is_plain_text_then_tls(start_server, certs):
    server = await start_server(tls=certs.tls())
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    line, info = await read_info(stream)
    # Go's Info struct order: ... headers, auth_required, tls_required, tls_verify, tls_available, max_payload
    keys = list(info)
    assert keys[keys.index("headers") + 1 : keys.index("max_payload")] == ["tls_required"]
    assert info["tls_required"] is True and "tls_verify" not in info
    tls = trio.SSLStream(stream, certs.client_context(), server_hostname="localhost")
    with trio.fail_after(5):
        await tls.do_handshake()
    assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)


async def test_verify_info_and_client_certificates(start_server, certs):
    server = await start_server(tls=certs.tls(ca_file=certs.ca, verify=True))
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    _, info = await read_info(stream)
    assert list(info)[list(info).index("headers") + 1 : list(info).index("max_payload")] == [
        "tls_required", "tls_verify",
    ]  # fmt: skip
    await trio.aclose_forcefully(stream)
    # A certificate from the CA: in.
    tls, _ = await tls_connect(server, certs.client_context(certs.client, certs.client_key))
    assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)
    # No certificate, or one from another CA: the handshake (or the first read) fails.
    for cert, key in ((None, None), (certs.rogue, certs.rogue_key)):
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await read_info(stream)
        tls = trio.SSLStream(stream, certs.client_context(cert, key), server_hostname="localhost")
        with pytest.raises(trio.BrokenResourceError):
            with trio.fail_after(5):
                await tls.do_handshake()
                await tls.send_all(b"PING\r\n")
                assert await tls.receive_some(100) == b""
                raise trio.BrokenResourceError("closed")
        await trio.aclose_forcefully(tls)
    reasons = [r["reason"] for r in server.closed_clients]
    assert reasons.count("TLS Handshake Failure") >= 1


async def test_plain_text_client_gets_info_then_eof(start_server, certs):
    server = await start_server(tls=certs.tls())
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    await read_info(stream)
    await stream.send_all(b'CONNECT {"verbose":false}\r\nPING\r\n')
    data, eof = await read_all(stream)
    assert (data, eof) == (b"", True)
    await trio.aclose_forcefully(stream)
    assert server.closed_clients[-1]["reason"] == "TLS Handshake Failure"


async def test_idle_client_is_cut_at_the_tls_timeout(start_server, certs):
    server = await start_server(tls=certs.tls(timeout=0.3))
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    start = trio.current_time()
    await read_info(stream)
    data, eof = await read_all(stream, timeout=3)
    elapsed = trio.current_time() - start
    assert (data, eof) == (b"", True)
    assert 0.25 < elapsed < 1.5
    await trio.aclose_forcefully(stream)


async def test_auth_timeout_runs_after_the_handshake(start_server, certs):
    server = await start_server(tls=certs.tls(), authorization="tok", auth_timeout=0.3)
    tls, info = await tls_connect(server, certs.client_context())
    assert info["auth_required"] is True
    data = b""
    with trio.fail_after(3):
        while True:
            chunk = await tls.receive_some(4096)
            if not chunk:
                break
            data += chunk
    assert data == b"-ERR 'Authentication Timeout'\r\n"
    await trio.aclose_forcefully(tls)


async def test_allow_non_tls(start_server, certs):
    server = await start_server(tls=certs.tls(), allow_non_tls=True)
    stream = await trio.open_tcp_stream("127.0.0.1", server.port)
    _, info = await read_info(stream)
    assert "tls_required" not in info and info["tls_available"] is True
    await stream.send_all(b"PING\r\n")
    with trio.fail_after(5):
        assert await stream.receive_some(100) == b"PONG\r\n"
    await trio.aclose_forcefully(stream)
    tls, _ = await tls_connect(server, certs.client_context())
    assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)


async def test_verify_and_map_names_the_user(start_server, certs):
    from natserver.auth.users import Permissions, User

    users = [
        User("alice@example.com", permissions=Permissions({"publish": ["foo"]})),
        User("CN=bob,O=Acme"),
    ]
    server = await start_server(tls=certs.tls(ca_file=certs.ca, verify=True, verify_and_map=True), users=users)
    tls, _ = await tls_connect(server, certs.client_context(certs.client, certs.client_key))
    await tls.send_all(b'CONNECT {"verbose":false}\r\nPUB bar 0\r\n\r\nPING\r\n')
    data = b""
    with trio.fail_after(5):
        while not data.endswith(b"PONG\r\n"):
            data += await tls.receive_some(4096)
    assert data == b"-ERR 'Permissions Violation for Publish to \"bar\"'\r\nPONG\r\n"
    assert server.clients[max(server.clients)].user == "alice@example.com"
    await trio.aclose_forcefully(tls)
    tls, _ = await tls_connect(server, certs.client_context(certs.bob, certs.bob_key))
    assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)


async def test_pinned_certs(start_server, certs):
    import hashlib

    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    with open(certs.bob, "rb") as f:
        cert = x509.load_pem_x509_certificate(f.read())
    pin = hashlib.sha256(cert.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)).hexdigest()
    server = await start_server(tls=certs.tls(ca_file=certs.ca, verify=True, pinned_certs=frozenset({pin})))
    tls, _ = await tls_connect(server, certs.client_context(certs.bob, certs.bob_key))
    assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
    await trio.aclose_forcefully(tls)
    tls, _ = await tls_connect(server, certs.client_context(certs.client, certs.client_key))
    data, eof = await read_all(tls)
    assert (data, eof) == (b"", True)
    await trio.aclose_forcefully(tls)


# -- nats-py ----------------------------------------------------------------------------------------


def test_nats_py_over_tls_with_client_certificate(threaded_server, certs):
    handle = threaded_server(tls=certs.tls(ca_file=certs.ca, verify=True), authorization="s3cr3t")

    async def main():
        nc = await nats.connect(f"tls://127.0.0.1:{handle.port}", tls=certs.client_context(certs.client, certs.client_key),
                                token="s3cr3t", allow_reconnect=False, connect_timeout=5)
        sub = await nc.subscribe("greet")
        await nc.publish("greet", b"hello")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"hello"
        await nc.close()
        # Without a client certificate the server refuses the handshake.
        with pytest.raises(Exception):  # noqa: B017 (nats-py raises several kinds for a refused handshake)
            await nats.connect(f"tls://127.0.0.1:{handle.port}", tls=certs.client_context(), token="s3cr3t",
                               allow_reconnect=False, connect_timeout=2)

    run(main())


def test_nats_py_nats_url_upgrades_after_info(threaded_server, certs):
    handle = threaded_server(tls=certs.tls())

    async def main():
        # nats:// with a TLS context: nats-py reads the plain-text INFO, sees tls_required
        # and upgrades, as with nats-server 2.9.
        nc = await nats.connect(f"nats://127.0.0.1:{handle.port}", tls=certs.client_context(),
                                allow_reconnect=False, connect_timeout=5)
        async def respond(msg):
            await msg.respond(b"pong")

        response_sub = await nc.subscribe("svc", cb=respond)
        reply = await nc.request("svc", b"ping", timeout=5)
        assert reply.data == b"pong"
        await response_sub.unsubscribe()
        await nc.close()

    run(main())


# -- configuration --------------------------------------------------------------------------------


def test_tls_block_in_config_file(tmp_path, certs):
    path = tmp_path / "tls.conf"
    path.write_text(
        f'tls {{\n  cert_file: "{certs.server}"\n  key_file: "{certs.server_key}"\n  ca_file: "{certs.ca}"\n'
        f"  verify: true\n  timeout: 0.5\n}}\n"
    )
    options = options_from_file(path)
    assert options.tls == TLSConfig(cert_file=certs.server, key_file=certs.server_key, ca_file=certs.ca, verify=True,
                                    timeout=0.5)
    assert options.auth_timeout == 1.5  # the TLS timeout + 1 s, as nats-server
    path.write_text(f'tls {{ cert_file: "{certs.server}", key_file: "{certs.server_key}", timeout: "3s" }}\n'
                    "authorization { token: t, timeout: 5 }\n")
    options = options_from_file(path)
    assert (options.tls.timeout, options.auth_timeout) == (3.0, 5.0)


@pytest.mark.parametrize(
    "block, message",
    [
        ('cert_file: "{cert}"', "missing 'key_file' in TLS configuration"),
        ('key_file: "{key}"', "missing 'cert_file' in TLS configuration"),
        ('cert_file: "/nonexistent.pem", key_file: "{key}"',
         "error parsing X509 certificate/key pair: open /nonexistent.pem: no such file or directory"),
        ('cert_file: "{cert}", key_file: "{key}", verify: "yes"',
         "error parsing tls config, expected 'verify' to be a boolean"),
        ('cert_file: "{cert}", key_file: "{key}", bogus: 1', 'error parsing tls config, unknown field ["bogus"]'),
        ('cert_file: "{cert}", key_file: "{key}", timeout: true', "error parsing tls config, 'timeout' wrong type"),
        ('cert_file: "{cert}", key_file: "{key}", ca_file: "{key}"', "failed to parse root ca certificate"),
        ('cert_file: "{key}", key_file: "{key}"', "error parsing X509 certificate/key pair:"),
    ],
)
def test_tls_config_errors(tmp_path, certs, block, message):
    path = tmp_path / "bad.conf"
    path.write_text("tls { " + block.format(cert=certs.server, key=certs.server_key) + " }\n")
    with pytest.raises(ConfigFileError) as info:
        options_from_file(path)
    [error] = info.value.errors
    assert error.startswith(f"{path}:1:0: {message}")


def test_tls_flags(tmp_path, certs):
    options = build_options(parse_args(["--tlscert", certs.server, "--tlskey", certs.server_key]))
    assert options.tls == TLSConfig(cert_file=certs.server, key_file=certs.server_key)
    assert options.auth_timeout == 3.0  # TLS_TIMEOUT + 1 s
    options = build_options(parse_args(["--tlsverify", "--tlscert", certs.server, "--tlskey", certs.server_key,
                                        "--tlscacert", certs.ca]))
    assert options.tls.verify and options.tls.ca_file == certs.ca
    with pytest.raises(UsageError, match="TLS Server certificate must be present and valid"):
        build_options(parse_args(["--tls"]))
    with pytest.raises(UsageError, match="TLS Server private key must be present and valid"):
        build_options(parse_args(["--tls", "--tlscert", certs.server]))
    # The flags replace the file's block; --tls=false removes it.
    conf = tmp_path / "f.conf"
    conf.write_text(f'tls {{ cert_file: "{certs.server}", key_file: "{certs.server_key}", timeout: 4 }}\n')
    options = build_options(parse_args(["-c", str(conf), "--tlsverify", "--tlscert", certs.server, "--tlskey",
                                        certs.server_key, "--tlscacert", certs.ca]))
    assert options.tls.verify and options.tls.timeout == 4
    assert build_options(parse_args(["-c", str(conf), "--tls=false"])).tls is None


# -- against nats-server ------------------------------------------------------------------------------

NATS_SERVER = reference.NATS_SERVER  # nats-server 2.15.1 (tests/reference.py)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{argv[0]} did not start")


def sub_pub_roundtrip(tls) -> bytes:
    """CONNECT, SUB a, PUB a, PING over a blocking (TLS) socket: what came until the PONG."""
    tls.sendall(b'CONNECT {"verbose":false}\r\nSUB a 1\r\nPUB a 1\r\nx\r\nPING\r\n')
    got = b""
    while not got.endswith(b"PONG\r\n"):
        chunk = tls.recv(4096)
        if not chunk:
            break
        got += chunk
    return got


def _transcript(port: int, certs: Certs) -> dict:
    """What a client sees: the INFO keys; plain text after INFO; idle; TLS without/with cert."""
    out = {}

    def info_of(sock) -> dict:
        data = b""
        while not data.endswith(b"\r\n"):
            data += sock.recv(4096)
        return json.loads(data[5:-3])

    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        info = info_of(sock)
        out["info_keys"] = [k for k in info if k != "api_lvl"]  # natserver announces its own level
        out["info_tls"] = {k: info[k] for k in info if k.startswith("tls") or k == "auth_required"}
        sock.sendall(b'CONNECT {"verbose":false}\r\nPING\r\n')
        got = b""
        try:
            while chunk := sock.recv(4096):
                got += chunk
        except ConnectionResetError:
            pass
        out["plain_text"] = got
    with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
        info_of(sock)
        start = time.monotonic()
        got = sock.recv(4096)
        out["idle"] = (got, round(time.monotonic() - start, 1))
    for label, cert, key in (("no_cert", None, None), ("cert", certs.client, certs.client_key)):
        with socket.create_connection(("127.0.0.1", port), timeout=3) as sock:
            info_of(sock)
            try:
                with certs.client_context(cert, key).wrap_socket(sock, server_hostname="localhost") as tls:
                    out[label] = sub_pub_roundtrip(tls)
            except (ssl.SSLError, ConnectionResetError, BrokenPipeError, OSError):
                out[label] = "refused"
    return out


@pytest.mark.needs_nats_server
@pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not installed")
def test_same_answers_as_nats_server(tmp_path, certs):
    conf = tmp_path / "tls.conf"
    conf.write_text(
        f'tls {{\n  cert_file: "{certs.server}"\n  key_file: "{certs.server_key}"\n  ca_file: "{certs.ca}"\n'
        "  verify: true\n  timeout: 0.5\n}\n"
    )
    results = []
    for argv in ([NATS_SERVER], [__import__("sys").executable, "-m", "natserver"]):
        port = _free_port()
        proc = _start([*argv, "-a", "127.0.0.1", "-p", str(port), "-c", str(conf)], port)
        try:
            results.append(_transcript(port, certs))
        finally:
            proc.kill()
            proc.wait(5)
    reference, ours = results
    assert ours == reference
    assert reference["plain_text"] == b"" and reference["cert"] == b"MSG a 1 1\r\nx\r\nPONG\r\n"


async def test_reload_changes_tls_for_new_connections(tmp_path, certs):
    from natserver.cli import CommandLine
    from natserver.server import signals as _signals

    conf = tmp_path / "tls.conf"
    block = f'cert_file: "{certs.server}", key_file: "{certs.server_key}"'
    conf.write_text(f"listen: 127.0.0.1:-1\ntls {{ {block} }}\n")
    flags = {"config_file": str(conf)}
    options = build_options(flags).copy(quiet=True)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            server = await nursery.start(natserver.serve, options)
            server.command_line = CommandLine(flags)
            old, _ = await tls_connect(server, certs.client_context())
            conf.write_text(f'listen: 127.0.0.1:-1\ntls {{ {block}, ca_file: "{certs.ca}", verify: true }}\n')
            _signals.reload(server)
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            _, info = await read_info(stream)
            assert info["tls_verify"] is True
            await trio.aclose_forcefully(stream)
            tls, _ = await tls_connect(server, certs.client_context(certs.client, certs.client_key))
            assert await tls_roundtrip(tls) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"
            assert await tls_roundtrip(old) == b"MSG foo 1 2\r\nhi\r\nPONG\r\n"  # kept
            for s in (tls, old):
                await trio.aclose_forcefully(s)
            await server.shutdown()

"""Shared helpers for the cluster tests: in-process natserver clusters, nats-server peers,
raw clients and waiting for interest to propagate."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest
import trio

import natserver
from tests.conftest import RawClient, make_options

NATS_SERVER = os.environ.get("NATS_SERVER_BIN") or shutil.which("nats-server")
needs_nats_server = pytest.mark.needs_nats_server
skip_without_nats_server = pytest.mark.skipif(NATS_SERVER is None, reason="nats-server not installed")

# Limits for one cluster test step (interest to cross, a route to form).
STEP_TIMEOUT = 10.0
POLL = 0.01  # seconds between looks at another process's state (not a timing assertion)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def start_node(nursery, routes=(), **changes) -> natserver.Server:
    changes.setdefault("cluster_port", -1)
    changes.setdefault("cluster_name", "c1")
    changes.setdefault("cluster_host", "127.0.0.1")
    # The interest these tests count is their clients': the system account's own subscriptions
    # cross routes too (tests/system/test_system.py has a cluster answering $SYS requests).
    changes.setdefault("no_system_account", True)
    return await nursery.start(natserver.serve, make_options(routes=list(routes), **changes))


def route_url(server: natserver.Server) -> str:
    return f"nats://127.0.0.1:{server.cluster.port}"


async def wait_routes(servers, count: int) -> None:
    with trio.fail_after(STEP_TIMEOUT):
        while any(len(s.cluster.routes) < count for s in servers):
            await trio.sleep(POLL)


async def start_cluster(nursery, n: int, **changes) -> list:
    first = await start_node(nursery, **changes)
    servers = [first]
    for _ in range(n - 1):
        servers.append(await start_node(nursery, routes=[route_url(first)], **changes))
    await wait_routes(servers, n - 1)
    return servers


async def connect(port: int, name: str = "") -> RawClient:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    client = RawClient(stream)
    await client.read_info()
    await client.send(b'CONNECT {"verbose":false,"pedantic":false,"protocol":1,"headers":true,"name":"%s"}\r\n'
                      % name.encode())
    await client.ping()
    # nats-server 2.10+ (natserver too) answers a protocol-1 client's first PING with an INFO
    # after the PONG (connect_info), 2.9 does not: a second round trip takes it either way, so
    # that the next line a test reads is what it waits for.
    # An INFO about the cluster (connect_urls: a route that just formed) may come too.
    extra = await client.ping()
    for line in extra.split(b"\r\n"):
        if line:
            assert line.startswith(b"INFO "), extra
            info = json.loads(line[5:])
            assert info.get("connect_info") is True or "connect_urls" in info, extra
    return client


async def wait_interest(server: natserver.Server, subject: bytes, count: int = 1, account: bytes = b"$G") -> None:
    """Until ``count`` routes of ``server`` have told it of interest matching ``subject``."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            seen = 0
            for route in server.cluster.route_conns:  # (an account's interest: one of a pool)
                interest = route.interest.get(account)
                if interest is not None and len(interest.match(subject)):
                    seen += 1
            if seen >= count:
                return
            await trio.sleep(POLL)


async def read_msgs(client: RawClient, n: int) -> list[bytes]:
    """The next ``n`` MSG lines (with payloads) a client gets."""
    msgs = []
    with trio.fail_after(STEP_TIMEOUT):
        while len(msgs) < n:
            line = await client.read_line()
            if line.startswith(b"MSG ") or line.startswith(b"HMSG "):
                size = int(line.split()[-1])
                payload = await client.read_exactly(size + 2)
                msgs.append(line + payload)
            elif line == b"PING\r\n":
                await client.send(b"PONG\r\n")
            elif line.startswith(b"INFO "):
                continue
    return msgs


class NatsServerProcess:
    """A nats-server 2.9.10 child process on loopback ports, in a cluster."""

    def __init__(self, routes=(), cluster_name: str = "c1", extra=(), binary: str | None = None) -> None:
        self.port = free_port()
        self.cluster_port = free_port()
        self.http_port = free_port()
        args = [binary or NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-m", str(self.http_port),
                "--cluster", f"nats://127.0.0.1:{self.cluster_port}", "--cluster_name", cluster_name, *extra]
        if routes:
            args += ["--routes", ",".join(routes)]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    @property
    def route_url(self) -> str:
        return f"nats://127.0.0.1:{self.cluster_port}"

    async def wait_ready(self) -> None:
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", self.port)
                except OSError:
                    await trio.sleep(POLL)
                    continue
                await stream.aclose()
                return

    async def routez(self) -> dict:
        stream = await trio.open_tcp_stream("127.0.0.1", self.http_port)
        await stream.send_all(b"GET /routez?subs=1 HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while chunk := await stream.receive_some(65536):
            data += chunk
        await stream.aclose()
        return json.loads(data.split(b"\r\n\r\n", 1)[1])

    async def wait_routes(self, count: int) -> None:
        with trio.fail_after(STEP_TIMEOUT):
            while (await self.routez())["num_routes"] < count:
                await trio.sleep(POLL * 5)

    async def wait_remote_interest(self, subject: str, count: int = 1) -> None:
        """Until ``count`` routes told this nats-server of interest in ``subject`` (exact)."""
        with trio.fail_after(STEP_TIMEOUT):
            while True:
                routes = (await self.routez())["routes"] or []
                if sum(subject in (r.get("subscriptions_list") or []) for r in routes) >= count:
                    return
                await trio.sleep(POLL * 5)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ClusterCerts:
    """Test certificates (``cryptography``) in ``directory``: ca.pem; node.pem/node-key.pem,
    signed by it for localhost and 127.0.0.1 and usable both ways (a route or a leaf is a TLS
    client and a TLS server: serverAuth and clientAuth); rogue.pem/rogue-key.pem, the same
    from another CA."""

    def __init__(self, directory) -> None:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.timezone.utc)

        def name(cn: str) -> x509.Name:
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

        def write(stem: str, cert, key) -> tuple[str, str]:
            cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
            cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                   serialization.NoEncryption()))
            return str(cert_path), str(key_path)

        def base(subject: str, issuer: x509.Name, key) -> x509.CertificateBuilder:
            return (x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
                    .public_key(key.public_key()).serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(hours=1))
                    .not_valid_after(now + datetime.timedelta(days=1))
                    .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))

        def ca(cn: str):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (base(cn, name(cn), key)
                    .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                    .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                 content_commitment=False, key_encipherment=False,
                                                 data_encipherment=False, key_agreement=False,
                                                 encipher_only=False, decipher_only=False), critical=True)
                    .sign(key, hashes.SHA256()))
            return cert, key

        def node(stem: str, ca_cert, ca_key) -> tuple[str, str]:
            key = ec.generate_private_key(ec.SECP256R1())
            sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            cert = (base(stem, ca_cert.subject, key)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                          ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                    .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                                   critical=False)
                    .add_extension(x509.SubjectAlternativeName(sans), critical=False)
                    .sign(ca_key, hashes.SHA256()))
            return write(stem, cert, key)

        ca_cert, ca_key = ca("Cluster Test CA")
        (directory / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        self.ca = str(directory / "ca.pem")
        self.cert, self.key = node("node", ca_cert, ca_key)
        rogue_cert, rogue_key = ca("Rogue CA")
        self.rogue, self.rogue_key = node("rogue", rogue_cert, rogue_key)

    def tls(self, *, rogue: bool = False, **changes):
        """A natserver TLSConfig with this node's (or the rogue) certificate and the CA."""
        from natserver.auth.tls import TLSConfig

        cert, key = (self.rogue, self.rogue_key) if rogue else (self.cert, self.key)
        return TLSConfig(cert_file=cert, key_file=key, ca_file=self.ca, **changes)

    def block(self, *, rogue: bool = False, verify: bool = True) -> str:
        """The same as a nats-server tls {} block."""
        cert, key = (self.rogue, self.rogue_key) if rogue else (self.cert, self.key)
        return (f'tls {{ cert_file: "{cert}", key_file: "{key}", ca_file: "{self.ca}"'
                f'{", verify: true" if verify else ""} }}')


def nats_server_leaf(tmp_path, remote: str, stderr=subprocess.DEVNULL) -> tuple[subprocess.Popen, int]:
    """A nats-server 2.9.10 leaf (a child process, for the caller to stop) with one remote,
    ``remote`` being what goes inside its ``{ }`` (url, credentials...); and its client port."""
    port = free_port()
    conf = tmp_path / "leaf.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\nleafnodes {{ remotes [ {{ {remote} }} ] }}\n")
    return subprocess.Popen([NATS_SERVER, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=stderr), port


async def wait_leaf(hub: natserver.Server) -> None:
    """Until a leaf has connected to ``hub``."""
    with trio.fail_after(STEP_TIMEOUT):
        while not hub.cluster.leafs:
            await trio.sleep(POLL)

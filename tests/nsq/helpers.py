"""Shared helpers for the NSQ front-end tests: a running front-end and a raw V2 client."""

from __future__ import annotations

import struct

import orjson
import trio

from natserver.nsq.tcp import serve_nsq

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2


def nsq_options(tmp_path, **changes) -> dict:
    block = {"port": -1, "http_port": -1, "data_path": str(tmp_path / "nsqdata"), "host": "127.0.0.1"}
    block.update(changes)
    return block


async def start_nsq(nursery, tmp_path, server=None, **changes):
    return await nursery.start(serve_nsq, server, nsq_options(tmp_path, **changes))


class RawClient:
    """A byte-level V2 client: send commands, read frames."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.buf = bytearray()

    @classmethod
    async def connect(cls, port: int, magic: bool = True) -> "RawClient":
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        client = cls(stream)
        if magic:
            await stream.send_all(b"  V2")
        return client

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def cmd(self, line: bytes, body: bytes | None = None) -> None:
        data = line + b"\n"
        if body is not None:
            data += struct.pack(">i", len(body)) + body
        await self.stream.send_all(data)

    async def identify(self, **fields) -> tuple[int, bytes]:
        await self.cmd(b"IDENTIFY", orjson.dumps(fields))
        return await self.frame()

    async def frame(self) -> tuple[int, bytes]:
        """(frame type, data); (-1, b"") when the server closed the connection."""
        while True:
            if len(self.buf) >= 8:
                size, kind = struct.unpack_from(">ii", self.buf)
                if len(self.buf) >= 4 + size:
                    data = bytes(self.buf[8 : 4 + size])
                    del self.buf[: 4 + size]
                    return kind, data
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return -1, b""
            self.buf += chunk

    async def frame_skip_heartbeats(self) -> tuple[int, bytes]:
        while True:
            kind, data = await self.frame()
            if (kind, data) != (FRAME_RESPONSE, b"_heartbeat_"):
                return kind, data

    async def closed(self) -> bool:
        """True once the server has closed (after any frames still buffered)."""
        while True:
            kind, _ = await self.frame()
            if kind == -1:
                return True

    async def aclose(self) -> None:
        await self.stream.aclose()


def parse_message(data: bytes) -> tuple[int, int, bytes, bytes]:
    """(timestamp, attempts, id, body) of a message frame's data."""
    ts, attempts = struct.unpack_from(">qH", data)
    return ts, attempts, data[10:26], data[26:]


class ThreadedServer:
    """A natserver (NATS + NSQ) running in a background thread, for clients that bring
    their own event loop (pynsq on tornado, gnsq on gevent, ansq on asyncio)."""

    def __init__(self, tmp_path, **nsq_changes) -> None:
        import threading

        from natserver import Options

        self.options = Options(port=-1, quiet=True, nsq=nsq_options(tmp_path, **nsq_changes))
        self.server = None
        self.token = None
        self.error = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from natserver import serve

        async def main():
            self.token = trio.lowlevel.current_trio_token()
            async with trio.open_nursery() as nursery:
                self.server = await nursery.start(serve, self.options)
                self._ready.set()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by start()
            self.error = exc
            self._ready.set()

    def start(self) -> "ThreadedServer":
        self._thread.start()
        if not self._ready.wait(20) or self.error is not None:
            raise RuntimeError(f"natserver did not start: {self.error!r}")
        return self

    @property
    def tcp_port(self) -> int:
        return self.server.nsq.tcp_port

    @property
    def http_port(self) -> int:
        return self.server.nsq.http_port

    @property
    def nats_url(self) -> str:
        return f"nats://127.0.0.1:{self.server.port}"

    def call(self, fn, *args):
        """Run ``fn(*args)`` in the server's trio thread (engine state is not thread-safe)."""
        return trio.from_thread.run_sync(fn, *args, trio_token=self.token)

    def stop(self) -> None:
        if self.server is not None and self._thread.is_alive():
            try:
                self.call(self.server.stop)
            except (trio.RunFinishedError, RuntimeError):
                pass
        self._thread.join(20)


async def http_request(port: int, method: str, target: str, body: bytes = b"", headers=()) -> tuple[int, dict, bytes]:
    """One HTTP/1.1 request with h11; (status, headers as a dict of lowercase str, body)."""
    import h11

    conn = h11.Connection(h11.CLIENT)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        all_headers = [("Host", "127.0.0.1"), ("Content-Length", str(len(body))), *headers]
        data = conn.send(h11.Request(method=method, target=target, headers=all_headers))
        data += conn.send(h11.Data(data=body)) if body else b""
        data += conn.send(h11.EndOfMessage())
        try:
            await stream.send_all(data)
        except trio.BrokenResourceError:
            pass  # refused early: the answer is still there to read
        response, chunks = None, []
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                chunks.append(bytes(event.data))
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                break
        hdrs = {k.decode().lower(): v.decode() for k, v in response.headers}
        return response.status_code, hdrs, b"".join(chunks)
    finally:
        await stream.aclose()


def self_signed_cert(directory) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1/localhost; returns (cert path, key path)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = str(directory / "nsq-cert.pem"), str(directory / "nsq-key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    return cert_path, key_path

"""How the streaming engine reaches NATS: :class:`LocalTransport` (natserver's own router, in
process) or :class:`NatsTransport` (a NATS client connection to another server, as
nats-streaming-server's ``-ns``).

Both offer the engine the same four calls, with the router's callback signature
``callback(subject: bytes, reply: bytes | None, headers, payload: bytes)`` run synchronously:

* ``subscribe(subject, callback)`` returns a handle; ``unsubscribe(handle)``;
* ``publish(subject, payload, reply=None)`` queues a message;
* ``flush()`` sends what was queued (the engine calls it once per event, so replies go out in
  one write).

:class:`NatsTransport` connects as nats-streaming-server's ``createNatsClientConn`` does
(server.go): the servers of ``-ns`` (a comma-separated list; ``user:pass@`` and ``tls://``
allowed), user/password/token, an nkey seed file or a credentials file, TLS with a client
certificate, a CA, a server name or no verification; it reconnects for ever every 250 ms, to
the servers of the URL and those the server's INFO names in ``connect_urls`` (a cluster), and
buffers nothing while disconnected (``ReconnectBufSize = -1``): a message queued then is
dropped, and the STAN clients' own timeouts and redeliveries take over, as with the Go server.
Its subscriptions are sent again on every reconnect.
"""

from __future__ import annotations

import base64
import itertools
import logging
import ssl
from urllib.parse import unquote, urlsplit

import orjson
import trio

from .._version import __version__
from ..auth import nkeys
from ..config.stan import StanOptions

__all__ = ["LocalTransport", "NatsTransport", "NatsConnectError"]

log = logging.getLogger("natserver.stan")

DEFAULT_NATS_PORT = 4222  # nats.go DefaultPort
RECONNECT_WAIT = 0.25  # server.go createNatsClientConn: ncOpts.ReconnectWait = 250 ms
CONNECT_TIMEOUT = 2.0  # nats.go DefaultTimeout
PING_INTERVAL = 120.0  # nats.go DefaultPingInterval
MAX_PINGS_OUT = 2  # nats.go DefaultMaxPingOut
# The largest control line (MSG/INFO/-ERR) we accept from the server before calling it broken:
# nats-server's INFO grows with its connect_urls, so well above its 4 KB MAX_CONTROL_LINE_SIZE.
MAX_CONTROL_LINE = 1024 * 1024
MAX_PAYLOAD = 64 * 1024 * 1024  # nats-server's max_payload ceiling (MAX_PAYLOAD_MAX_SIZE)
READ_SIZE = 64 * 1024
# natserver's bound on the servers learnt from INFO connect_urls (nats.go keeps them all; a
# server that lies about its cluster must not grow the list for ever)
MAX_DISCOVERED_SERVERS = 64


class NatsConnectError(Exception):
    """The first connection to the NATS server failed (the server then does not start)."""

    fatal_startup = True  # natserver.cli prints the one line and exits 1, no traceback


class LocalTransport:
    """The engine on natserver's own router (``Server.subscribe_internal`` and ``publish``)."""

    def __init__(self, server) -> None:
        self.server = server

    def subscribe(self, subject: str, callback):
        return self.server.subscribe_internal(subject, callback)

    def unsubscribe(self, handle) -> None:
        self.server.unsubscribe_internal(handle)

    def publish(self, subject: str, payload: bytes, reply: str | None = None) -> bool:
        """Says whether anybody took it (False: no responders)."""
        return self.server.publish(subject, payload, reply=reply, flush=False)

    def flush(self) -> None:
        self.server.flush_touched()


def _server_urls(url_list: str) -> list[tuple[str, str, int, str, str]]:
    """(scheme, host, port, user, password) of each of ``-ns``'s URLs (server.go
    buildServerURLs: a comma-separated list; a bare host:port gets nats://)."""
    out = []
    for raw in url_list.split(","):
        raw = raw.strip()
        if not raw:
            continue
        if "://" not in raw:
            raw = "nats://" + raw
        parts = urlsplit(raw)
        if parts.scheme not in ("nats", "tls") or not parts.hostname:
            raise NatsConnectError(f"malformed url: {raw}")
        try:
            port = parts.port or DEFAULT_NATS_PORT
        except ValueError:
            raise NatsConnectError(f"malformed url: {raw}") from None
        out.append((parts.scheme, parts.hostname, port, unquote(parts.username or ""),
                    unquote(parts.password or "")))
    if not out:
        raise NatsConnectError("no NATS server URL")
    return out


def _read_credentials(path: str) -> tuple[str, str]:
    """The (JWT, nkey seed) of a NATS credentials file (nsc's format)."""
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f.read().splitlines()]
    jwt = seed = ""
    for i, line in enumerate(lines):
        if line.startswith("-----BEGIN"):
            value = next((c for c in lines[i + 1:] if c and not c.startswith("---")), "")
            if "JWT" in line:
                jwt = value
            elif "SEED" in line.upper():
                seed = value
    if not jwt or not seed:
        raise NatsConnectError(f"{path}: not a NATS credentials file (no JWT and seed blocks)")
    return jwt, seed


class _Sub:
    __slots__ = ("sid", "subject", "callback")

    def __init__(self, sid: int, subject: str, callback) -> None:
        self.sid = sid
        self.subject = subject
        self.callback = callback


class NatsTransport:
    """The engine as a client of an external NATS server. ``await nursery.start(t.run)``
    returns once the first connection is up (NatsConnectError if it cannot be made)."""

    def __init__(self, options: StanOptions, *, name: str, username: str = "", password: str = "",
                 token: str = "") -> None:
        self.options = options
        self.name = name  # nats-streaming-server names its connections "_NSS-<cluster id>-<role>"
        self.urls = _server_urls(options.nats_server_url)
        self.username = username or options.username
        self.password = password or options.password
        self.token = token or options.token
        self._subs: dict[int, _Sub] = {}
        self._sids = itertools.count(1)
        self._out = bytearray()
        self._wake = trio.Event()
        self._stream: trio.abc.Stream | None = None
        self._connected = trio.Event()
        self._pings_out = 0
        self._pending = bytearray()  # what the server sent after the handshake's PONG
        self.max_payload = MAX_PAYLOAD
        self.server_info: dict = {}
        self.reconnects = 0

    # -- the engine's calls -------------------------------------------------------------------

    def subscribe(self, subject: str, callback) -> _Sub:
        sub = _Sub(next(self._sids), subject, callback)
        self._subs[sub.sid] = sub
        if self._stream is not None:
            self._out += b"SUB %s %d\r\n" % (subject.encode(), sub.sid)
            self._wake.set()
        return sub

    def unsubscribe(self, handle: _Sub) -> None:
        if self._subs.pop(handle.sid, None) is not None and self._stream is not None:
            self._out += b"UNSUB %d\r\n" % handle.sid
            self._wake.set()

    def publish(self, subject: str, payload: bytes, reply: str | None = None) -> None:
        if self._stream is None:
            return  # ReconnectBufSize -1: nothing is kept for a connection that is not up
        if reply:
            self._out += b"PUB %s %s %d\r\n" % (subject.encode(), reply.encode(), len(payload))
        else:
            self._out += b"PUB %s %d\r\n" % (subject.encode(), len(payload))
        self._out += payload
        self._out += b"\r\n"

    def flush(self) -> None:
        if self._out:
            self._wake.set()

    # -- the connection -----------------------------------------------------------------------

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Connect, serve, and reconnect for ever (until cancelled)."""
        stream = await self._connect_any()
        task_status.started(self)
        while True:
            try:
                await self._serve(stream)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as exc:
                # server.go stanDisconnectedHandler / stanReconnectedHandler's lines
                log.error('STREAM: connection "%s" has been disconnected: %s', self.name, exc or type(exc).__name__)
            finally:
                self._stream = None
                self._out.clear()
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            while True:
                await trio.sleep(RECONNECT_WAIT)
                try:
                    stream = await self._connect_any()
                except NatsConnectError as exc:
                    log.debug("STREAM: reconnecting %r: %s", self.name, exc)
                    continue
                self.reconnects += 1
                log.info('STREAM: connection "%s" reconnected to NATS Server at "%s"', self.name,
                         self.server_info.get("_url", ""))
                break

    async def _connect_any(self) -> trio.abc.Stream:
        errors = []
        for url in self.urls:
            try:
                with trio.fail_after(CONNECT_TIMEOUT):
                    return await self._connect(*url)
            except (OSError, trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, ValueError,
                    NatsConnectError) as exc:
                errors.append(f"{url[1]}:{url[2]}: {exc or type(exc).__name__}")
        raise NatsConnectError("; ".join(errors))

    async def _connect(self, scheme: str, host: str, port: int, url_user: str, url_pass: str) -> trio.abc.Stream:
        stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
        try:
            buf = bytearray()
            line = await _read_line(stream, buf)
            if not line.startswith(b"INFO "):
                raise NatsConnectError(f"expected INFO, got {bytes(line[:64])!r}")
            info = orjson.loads(line[5:])
            opts = self.options
            want_tls = (scheme == "tls" or opts.secure or opts.tls_client_ca or opts.tls_client_cert
                        or opts.tls_skip_verify or opts.tls_server_name)
            if info.get("tls_required") or want_tls:
                if buf:
                    raise NatsConnectError("data after INFO before the TLS handshake")
                stream = trio.SSLStream(stream, self._ssl_context(), server_hostname=opts.tls_server_name or host)
                await stream.do_handshake()
            connect = {"verbose": False, "pedantic": False, "tls_required": bool(info.get("tls_required") or want_tls),
                       "name": self.name, "lang": "python-natserver", "version": __version__, "protocol": 1,
                       "headers": True, "no_responders": True}
            user, password, token = url_user or self.username, url_pass or self.password, self.token
            if url_user and not url_pass:  # nats://token@host
                user, token = "", url_user
            if user:
                connect["user"], connect["pass"] = user, password
            elif token:
                connect["auth_token"] = token
            nonce = info.get("nonce", "")
            if opts.credentials:
                jwt, seed = _read_credentials(opts.credentials)
                connect["jwt"] = jwt
                connect["sig"] = _sign(seed, nonce)[1]
            elif opts.nkey_seed_file:
                with open(opts.nkey_seed_file, encoding="utf-8") as f:
                    seed = next((w for w in f.read().split() if w.startswith("SU")), "")
                connect["nkey"], connect["sig"] = _sign(seed, nonce)
            out = bytearray(b"CONNECT " + orjson.dumps(connect) + b"\r\nPING\r\n")
            for sub in self._subs.values():
                out += b"SUB %s %d\r\n" % (sub.subject.encode(), sub.sid)
            await stream.send_all(out)
            while True:
                line = await _read_line(stream, buf)
                if line.startswith(b"-ERR"):
                    raise NatsConnectError(bytes(line[5:]).decode(errors="replace").strip().strip("'"))
                if line.startswith(b"PONG"):
                    break
                if line.startswith(b"PING"):
                    await stream.send_all(b"PONG\r\n")
            self.max_payload = min(int(info.get("max_payload") or MAX_PAYLOAD), MAX_PAYLOAD)
            self.server_info = dict(info, _url=f"{scheme}://{host}:{port}")
            self._discover(info, scheme, url_user, url_pass)
            self._pending = buf
            self._stream = stream
            return stream
        except BaseException:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            raise

    def _discover(self, info: dict, scheme: str, user: str, password: str) -> None:
        """Add the cluster's other servers (INFO ``connect_urls``) to the reconnect list, as
        nats.go does with the servers it discovers, bounded by MAX_DISCOVERED_SERVERS."""
        known = {(host, port) for _, host, port, _, _ in self.urls}
        for url in info.get("connect_urls") or ():
            if len(self.urls) >= MAX_DISCOVERED_SERVERS or not isinstance(url, str):
                break
            host, _, port = url.rpartition(":")
            host = host.strip("[]")
            if not host or not port.isdigit() or (host, int(port)) in known:
                continue
            known.add((host, int(port)))
            self.urls.append((scheme, host, int(port), user, password))

    def _ssl_context(self) -> ssl.SSLContext:
        opts = self.options
        context = ssl.create_default_context(cafile=opts.tls_client_ca or None)
        if opts.tls_client_cert:
            context.load_cert_chain(opts.tls_client_cert, opts.tls_client_key)
        if opts.tls_skip_verify or (opts.secure and not opts.tls_client_ca):
            # nats.Secure() without a CA: TLS without verification (the -secure flag's words)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    async def _serve(self, stream: trio.abc.Stream) -> None:
        """Read, write and ping until the connection fails; raises the first failure."""
        self._pings_out = 0
        failures: list[BaseException] = []
        async with trio.open_nursery() as nursery:

            async def until_failure(task, *args) -> None:
                try:
                    await task(*args)
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, ValueError) as exc:
                    failures.append(exc)
                    nursery.cancel_scope.cancel()

            nursery.start_soon(until_failure, self._writer, stream)
            nursery.start_soon(until_failure, self._pinger)
            nursery.start_soon(until_failure, self._reader, stream, self._pending)
        if failures:
            raise failures[0]

    async def _writer(self, stream: trio.abc.Stream) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self._out:
                data, self._out = bytes(self._out), bytearray()
                await stream.send_all(data)

    async def _pinger(self) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            if self._pings_out >= MAX_PINGS_OUT:
                raise ValueError("stale connection")
            self._pings_out += 1
            self._out += b"PING\r\n"
            self._wake.set()

    async def _reader(self, stream: trio.abc.Stream, buf: bytearray) -> None:
        """Parse what the server sends; MSG/HMSG go to their callbacks synchronously."""
        pos = 0
        while True:
            while True:
                end = buf.find(b"\r\n", pos)
                if end < 0:
                    if len(buf) - pos > MAX_CONTROL_LINE:
                        raise ValueError("control line too long")
                    break
                line = bytes(buf[pos:end])
                op = line[:4].upper()
                if op in (b"MSG ", b"HMSG"):
                    args = line.split()
                    if len(args) not in ((5, 6) if op == b"HMSG" else (4, 5)):
                        raise ValueError(f"bad {op.decode().strip()} line")
                    size = int(args[-1])
                    header_size = int(args[-2]) if op == b"HMSG" else 0
                    if size > self.max_payload + MAX_CONTROL_LINE or not 0 <= header_size <= size:
                        raise ValueError(f"message of {size} bytes")
                    if len(buf) < end + 2 + size + 2:
                        break  # wait for the whole payload
                    start = end + 2
                    payload = bytes(buf[start + header_size:start + size])
                    pos = start + size + 2
                    # MSG <subject> <sid> [reply] <size>; HMSG also has <header size>
                    reply = args[3] if len(args) == (6 if op == b"HMSG" else 5) else None
                    sub = self._subs.get(int(args[2]))
                    if sub is not None:
                        try:
                            headers = bytes(buf[start:start + header_size]) if header_size else None
                            sub.callback(args[1], reply, headers, payload)
                        except Exception:  # one bad message never takes the connection down
                            log.exception("STREAM: internal error handling a message on %r", args[1])
                    continue
                pos = end + 2
                if op == b"PING":
                    self._out += b"PONG\r\n"
                elif op == b"PONG":
                    self._pings_out = 0
                elif op == b"-ERR":
                    log.error("STREAM: Asynchronous error on connection %s: %s", self.name,
                              line[5:].decode(errors="replace"))
                elif op == b"INFO":
                    info = orjson.loads(line[5:])
                    self._discover(info, self.urls[0][0], self.urls[0][3], self.urls[0][4])
                    if info.get("ldm"):
                        log.info("STREAM: the NATS server is in lame duck mode")
            del buf[:pos]
            pos = 0
            if self._out:
                self._wake.set()
            data = await stream.receive_some(READ_SIZE)
            if not data:
                raise trio.BrokenResourceError("connection closed by the NATS server")
            buf += data


async def _read_line(stream: trio.abc.Stream, buf: bytearray) -> bytearray:
    while True:
        end = buf.find(b"\r\n")
        if end >= 0:
            line = buf[:end]
            del buf[:end + 2]
            return line
        if len(buf) > MAX_CONTROL_LINE:
            raise NatsConnectError("control line too long")
        data = await stream.receive_some(READ_SIZE)
        if not data:
            raise NatsConnectError("connection closed by the server")
        buf += data


def _sign(seed: str, nonce: str) -> tuple[str, str]:
    """(public key, base64url signature of the nonce) for an nkey seed."""
    try:
        pair = nkeys.from_seed(seed.encode())
    except ValueError as exc:
        raise NatsConnectError(f"bad nkey seed: {exc}") from None
    signature = base64.urlsafe_b64encode(pair.sign(nonce.encode())).rstrip(b"=").decode()
    return pair.public_key.decode(), signature
